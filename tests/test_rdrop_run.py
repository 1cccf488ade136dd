"""tools/rdrop_run.py trains the shipped recipe with R-Drop: rdrop is the only setting that changes, so the run sees
the recipe's seed-0 batches in the recipe's order and compares with it epoch by epoch."""
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.pretrained import RECIPE  # noqa: E402
from rdrop_run import RDROP, RUNS  # noqa: E402


def test_only_rdrop_differs_from_the_recipe():
    recipe, rdrop = asdict(RECIPE), asdict(RDROP)
    assert {k for k in recipe if recipe[k] != rdrop[k]} == {"rdrop", "out_dir"}
    assert RECIPE.rdrop == 0 and RDROP.rdrop == 5.0
    assert RUNS == (RDROP,)


def test_an_rdrop_run_is_not_the_recipe_and_an_older_run_still_is():
    import recipe_on_gpu  # tools/recipe_on_gpu.py: judges a run of the recipe made elsewhere
    older = {k: v for k, v in asdict(RECIPE).items() if k != "rdrop"}  # a train_config.json from before the setting
    assert recipe_on_gpu.not_the_recipe(older) == []
    assert recipe_on_gpu.not_the_recipe(asdict(RDROP)) == ["rdrop"]


def test_collect_refuses_a_folder_trained_with_other_settings(tmp_path):
    import json
    from dataclasses import replace
    import pytest
    from rdrop_run import collect
    folder = tmp_path / RDROP.out_dir
    folder.mkdir()
    (folder / "history.jsonl").write_text("".join(json.dumps({"epoch": e}) + "\n" for e in range(1, RDROP.epochs + 1)))
    (folder / "train_config.json").write_text(json.dumps(asdict(replace(RDROP, rdrop=1.0))))
    with pytest.raises(SystemExit, match=r"trained with other settings \(rdrop\)"):
        collect(tmp_path, tmp_path / "rdrop.json")
    assert not (tmp_path / "rdrop.json").exists()


def test_a_stopped_run_ends_with_one_line_and_status_130(monkeypatch, capsys):
    "Ctrl-C or SIGTERM while an experiment script trains: the saved position is named in one line, no traceback."
    import pytest
    from ablation import run_or_collect  # tools/ablation.py: the command line of every experiment script
    from annotated_transformer.train import TrainingStopped

    def stopped_run(runs_dir):
        raise TrainingStopped(f"stopped at step 7 (3 batches into epoch 1); the checkpoint is in {runs_dir}/last")

    monkeypatch.setattr(sys, "argv", ["rdrop_run.py", "run", "--runs-dir", "runs/x"])
    with pytest.raises(SystemExit) as exit:
        run_or_collect(__doc__, stopped_run, None, "runs/rdrop", Path("unused.json"))
    assert exit.value.code == 130
    err = capsys.readouterr().err
    assert err == "rdrop_run.py: stopped at step 7 (3 batches into epoch 1); the checkpoint is in runs/x/last\n"


def test_the_file_holds_the_finished_run():
    """rdrop.json is one finished run of RDROP: every epoch scored, an averaged candidate for every five consecutive
    epochs, and the optimizer steps of the recipe's seed-0 run after each epoch (the same batches in the same order)."""
    import json
    pretrained = ROOT / "results"
    rdrop = json.loads((pretrained / "rdrop.json").read_text())
    (run,) = rdrop["runs"]
    assert run["name"] == RDROP.out_dir and run["rdrop"] == RDROP.rdrop and run["model"] == asdict(RDROP.model)
    assert (run["epochs"], run["cooldown"], run["precision"]) == (RDROP.epochs, RDROP.cooldown, "bf16")
    assert [r["epoch"] for r in run["history"]] == list(range(1, RDROP.epochs + 1))
    assert all(isinstance(r["val_bleu"], float) and 0 < r["val_bleu"] < 100 for r in run["history"])
    averaged = run[f"average_of_last_{rdrop['average_last']}"]
    assert [r["epoch"] for r in averaged] == list(range(rdrop["average_last"], RDROP.epochs + 1))
    recipe = json.loads((pretrained / "results_38_epochs.json").read_text())  # the recipe's seed-0 run (fp32)
    assert [r["step"] for r in run["history"]] == [r["step"] for r in recipe["history"]]
