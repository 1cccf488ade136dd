"""The trained model that ships with the package, and `load_trained_model` training one when none is there."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from annotated_transformer.data import load_multi30k
from annotated_transformer.evaluation import bleu
from annotated_transformer.pretrained import RECIPE, load_trained_model, pretrained_dir


@pytest.fixture(scope="module")
def translator():
    return load_trained_model(device="cpu")


def test_shipped_files_are_small_and_complete():
    folder = pretrained_dir()
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "src_vocab.json", "tgt_vocab.json", "results.json"} <= names
    total = sum(p.stat().st_size for p in folder.iterdir())
    assert total < 30e6, f"{total / 1e6:.1f} MB is over the 30 MB budget for committed weights"
    config = json.loads((folder / "config.json").read_text())["model"]
    assert (config["N"], config["d_model"], config["d_ff"], config["h"]) == (RECIPE.model.N, RECIPE.model.d_model, RECIPE.model.d_ff, RECIPE.model.h)


def test_translates_simple_sentences(translator):
    out = translator.translate(["Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball."], beam_size=4)
    assert "dog" in out[0].lower() and "snow" in out[0].lower(), out
    assert "two men" in out[1].lower(), out


def test_reproduces_recorded_bleu(translator):
    results = json.loads((pretrained_dir() / "results.json").read_text())
    pairs = load_multi30k("test")[:300]  # bundled with the package: no network needed
    score, _ = bleu(translator.translate([de for de, _ in pairs], beam_size=1), [en for _, en in pairs])
    # a subset scores differently from the whole set, but a broken model or vocabulary would score near 0
    assert abs(score - results["test2016"]["beam_1"]["bleu"]) < 6, (score, results["test2016"]["beam_1"]["bleu"])


def test_load_trained_model_trains_when_weights_are_missing(tmp_path, multi30k):
    tiny = replace(RECIPE, out_dir=str(tmp_path / "run"), model=replace(RECIPE.model, N=1, d_model=32, d_ff=64, h=2),
                   epochs=1, max_steps=2)
    translator = load_trained_model(tmp_path / "model", device="cpu", recipe=tiny)
    assert (tmp_path / "model" / "model.safetensors").exists()
    results = json.loads((tmp_path / "model" / "results.json").read_text())
    assert results["epochs"] == 1 and set(results["test2016"]) == {"beam_1", "beam_4"}
    assert translator.model.config.d_model == 32
    assert len(translator.translate(["Ein Hund."], beam_size=1)) == 1
