"""Did the recipe train as well on this GPU as on the CPU? Step 1 of tools/gpu_check.sh runs the `#| slow` cell of
the training chapter, which trains `RECIPE` into runs/multi30k; this prints that run's epochs and compares its best
validation BLEU with the best epochs of the recipe's CPU runs (precision.json, read by nbs/14a_experiments.ipynb).

    python tools/recipe_on_gpu.py [runs/multi30k/history.jsonl]

Exits 1 when the run's best validation BLEU is more than MARGIN below the lowest of the CPU runs (their spread over
seeds and precisions is about half a point); 2, with one line, when the log is missing, unreadable, not a finished run
of `RECIPE` (its train_config.json beside it), or without a validation BLEU for every epoch.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.pretrained import RECIPE  # noqa: E402 (the package of this checkout)

CPU_RUNS = ROOT / "results" / "precision.json"
MARGIN = 1.0  # BLEU below the lowest CPU run that fails the check
SETTINGS = ("subwords", "min_freq", "max_tokens", "epochs", "cooldown", "warmup", "factor", "smoothing", "rdrop", "seed")
ADDED = {"rdrop": 0.0}  # settings newer than some runs: a train_config.json without one trained with this value


def cpu_best_epochs(path: Path = CPU_RUNS) -> list[float]:
    "The best-epoch validation BLEU of every CPU run of the recipe: seeds 0, 1, 2 in bf16 and seed 0 in fp32."
    runs = json.loads(path.read_text())
    return [scores["best epoch (validation BLEU)"] for name in ("recipe", "recipe_seed1", "recipe_seed2")
            for scores in runs[name]["candidates_val_bleu_greedy"].values()]


def judge(history: list[dict], cpu: list[float]) -> tuple[bool, str]:
    "(passed, the line that says why) for a run's epochs against the CPU runs' best epochs."
    best = max(r["val_bleu"] for r in history)
    line = (f"best validation BLEU {best} in {len(history)} epochs (the recipe's CPU runs: {min(cpu)} to {max(cpu)}; "
            f"the check asks at least {min(cpu) - MARGIN:.2f})")
    return best >= min(cpu) - MARGIN, line


def not_the_recipe(settings: dict) -> list[str]:
    "The settings of a run (train_config.json) that differ from `RECIPE`'s."
    settings = {**ADDED, **settings}
    differ = [k for k in SETTINGS if settings.get(k) != getattr(RECIPE, k)]
    model = settings.get("model") or {}
    return differ + [f"model.{k}" for k in ("N", "d_model", "d_ff", "h", "dropout") if model.get(k) != getattr(RECIPE.model, k)]


def read_run(log: Path) -> list[dict]:
    "The epochs of the run whose history.jsonl is `log`; SystemExit(one line) if it is not a finished run of RECIPE."
    config = log.parent / "train_config.json"
    if not log.is_file() or not config.is_file():
        raise SystemExit(f"recipe_on_gpu.py: no training run at {log.parent} (expected history.jsonl and train_config.json)")
    try:
        history = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        differ = not_the_recipe(json.loads(config.read_text()))
        epochs = [r["epoch"] for r in history]
        complete = all(isinstance(r["val_bleu"], (int, float)) for r in history)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise SystemExit(f"recipe_on_gpu.py: {log} or train_config.json beside it is not a training log ({e!r})")
    if differ:
        raise SystemExit(f"recipe_on_gpu.py: the run in {log.parent} is not the recipe (settings {', '.join(differ)} differ)")
    if epochs != list(range(1, RECIPE.epochs + 1)) or not complete:
        raise SystemExit(f"recipe_on_gpu.py: {log} is not a finished run: expected epochs 1 to {RECIPE.epochs}, each with "
                         f"a validation BLEU, found {len(epochs)} epoch records")
    return history


def main(argv: list[str]) -> int:
    try:
        history = read_run(Path(argv[0] if argv else ROOT / "runs" / "multi30k" / "history.jsonl"))
    except SystemExit as stop:
        print(stop, file=sys.stderr)
        return 2
    for r in history:
        print(f"epoch {r['epoch']:3d}  train loss {r['train_loss']:.3f}  val loss {r['val_loss']:.3f}  "
              f"val BLEU {r['val_bleu']:.2f}  {r['seconds']:.0f}s  {r.get('precision', '')}")
    passed, line = judge(history, cpu_best_epochs())
    print(line)
    if not passed:
        print(f"the recipe trained here scores more than {MARGIN:g} BLEU below every CPU run of it")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
