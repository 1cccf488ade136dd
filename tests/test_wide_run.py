"""tools/wide_run.py trains the shipped recipe wider: only the width changes, and the dropout in one of the two runs;
the model still fits the 30 MB a shipped model may take; wide.json holds a finished run of each."""
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.model import build_model  # noqa: E402
from annotated_transformer.pretrained import RECIPE  # noqa: E402
from wide_run import RUNS, WIDE, WIDE_02  # noqa: E402


def model_changes(cfg) -> set:
    recipe, wide = asdict(RECIPE), asdict(cfg)
    assert {k for k in recipe if k not in ("model", "out_dir") and recipe[k] != wide[k]} == set()
    return {k for k in recipe["model"] if recipe["model"][k] != wide["model"][k]}


def test_only_width_and_dropout_differ():
    assert model_changes(WIDE) == {"d_model", "dropout"}
    assert model_changes(WIDE_02) == {"d_model"}  # the recipe's dropout: the width alone
    assert WIDE.model.d_model == WIDE_02.model.d_model > RECIPE.model.d_model
    assert len({cfg.out_dir for cfg in RUNS}) == len(RUNS)


def test_fits_the_size_limit_in_float16():
    vocab = RECIPE.subwords  # one shared BPE vocabulary of this many tokens (a few more or less in a trained run)
    model = build_model(WIDE.model_config(vocab, vocab, True))
    parameters = sum(p.numel() for p in model.parameters())  # the tied matrix once
    assert 2 * parameters <= 30e6, parameters


def test_the_file_holds_a_finished_run_of_each_configuration():
    wide = json.loads((ROOT / "results" / "wide.json").read_text())
    assert [run["name"] for run in wide["runs"]] == [cfg.out_dir for cfg in RUNS]
    for run, cfg in zip(wide["runs"], RUNS):
        assert run["model"] == asdict(cfg.model)
        assert (run["epochs"], run["cooldown"], len(run["history"])) == (cfg.epochs, cfg.cooldown, cfg.epochs)
