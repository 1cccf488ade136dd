"""tools/wide_run.py trains the shipped recipe wider: only the width and the dropout change, and the model still fits
the 30 MB a shipped model may take; wide.json is a finished run of it."""
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.model import build_model  # noqa: E402
from annotated_transformer.pretrained import RECIPE  # noqa: E402
from wide_run import WIDE  # noqa: E402


def test_only_width_and_dropout_differ():
    recipe, wide = asdict(RECIPE), asdict(WIDE)
    model_changes = {k for k in recipe["model"] if recipe["model"][k] != wide["model"][k]}
    assert model_changes == {"d_model", "dropout"}, model_changes
    assert wide["model"]["d_model"] > recipe["model"]["d_model"]
    assert {k for k in recipe if k not in ("model", "out_dir") and recipe[k] != wide[k]} == set()


def test_fits_the_size_limit_in_float16():
    vocab = RECIPE.subwords  # one shared BPE vocabulary of this many tokens (a few more or less in a trained run)
    model = build_model(WIDE.model_config(vocab, vocab, True))
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())  # tied weights once
    assert 2 * parameters <= 30e6, parameters


def test_the_file_is_a_finished_run_of_this_configuration():
    wide = json.loads((ROOT / "annotated_transformer" / "pretrained" / "wide.json").read_text())
    assert wide["model"] == asdict(WIDE.model)
    assert (wide["epochs"], wide["cooldown"], len(wide["history"])) == (WIDE.epochs, WIDE.cooldown, WIDE.epochs)
