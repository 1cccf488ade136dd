"""tools/precision_run.py: each comparison is the recipe it names, changed in nothing but the seed where it says so;
precision.json holds each finished bf16 run beside its fp32 run, and keeps what a collect with no runs at hand finds."""
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.pretrained import BEST_CANDIDATE, RECIPE, averaged_candidate  # noqa: E402
from precision_run import COMPARISONS, OUT, RECIPE_14, collect  # noqa: E402


def changes(cfg) -> set:
    recipe, other = asdict(RECIPE), asdict(cfg)
    return {k for k in recipe if k != "model" and recipe[k] != other[k]} | \
           {f"model.{k}" for k in recipe["model"] if recipe["model"][k] != other["model"][k]}


def test_the_comparisons_are_the_recipes_they_name():
    assert changes(COMPARISONS["recipe"][0]) == set()
    for seed in (1, 2):  # bf16 only, the seed changed
        recipe, fp32_results, _ = COMPARISONS[f"recipe_seed{seed}"]
        assert changes(recipe) == {"seed"} and recipe.seed == seed and fp32_results is None
    assert changes(RECIPE_14) == {"epochs", "cooldown", "model.dropout"}
    assert COMPARISONS["recipe"][1].name == "results_38_epochs.json"  # the recipe's fp32 run, the model shipped before the student
    assert len({folder for _, _, folder in COMPARISONS.values()}) == len(COMPARISONS)


def test_the_file_holds_finished_runs():
    precision = json.loads(OUT.read_text())
    for name, (recipe, fp32_results, _) in COMPARISONS.items():
        if name not in precision:
            continue
        pair = precision[name]
        assert (pair["epochs"], pair["dropout"], pair["cooldown"], pair["seed"]) == \
               (recipe.epochs, recipe.model.dropout, recipe.cooldown, recipe.seed), name
        assert [r["epoch"] for r in pair["bf16"]["history"]] == list(range(1, recipe.epochs + 1)), name
        assert averaged_candidate() in pair["candidates_val_bleu_greedy"]["bf16"], name
        if fp32_results:
            assert pair["epochs_compared"] == recipe.epochs == len(pair["fp32"]["history"]), name
            fp32_record = json.loads(fp32_results.read_text())
            assert pair["candidates_val_bleu_greedy"]["fp32"] == \
                   {k: fp32_record["candidates_val_bleu_greedy"][k] for k in (BEST_CANDIDATE, averaged_candidate())}, name
    assert {"recipe_14", "recipe"} <= set(precision)


def test_collect_without_runs_keeps_the_file(tmp_path, capsys):
    before = json.loads(OUT.read_text())
    assert collect(tmp_path / "no-runs") == before
    assert "kept from" in capsys.readouterr().out


def test_run_trains_only_what_the_file_lacks(tmp_path, monkeypatch):
    import precision_run
    trained = []
    monkeypatch.setattr(precision_run, "train", lambda cfg: trained.append(Path(cfg.out_dir).name))
    precision_run.run(tmp_path)
    held = set(json.loads(OUT.read_text()))
    assert trained == [folder for name, (_, _, folder) in COMPARISONS.items() if name not in held]
    assert "bf16-recipe" not in trained  # the 14-epoch pair is in the file: not trained again
