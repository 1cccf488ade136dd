"""Did the recipe train as well on this GPU as on the CPU? Step 1 of tools/gpu_check.sh runs the `#| slow` cell of
the training chapter, which trains `RECIPE` into runs/multi30k; this prints that run's epochs and compares its best
validation BLEU with the best epochs of the recipe's CPU runs (precision.json of the trained-model chapter).

    python tools/recipe_on_gpu.py [runs/multi30k/history.jsonl]

Exits 1 when the run's best validation BLEU is more than 1.0 below the lowest of the CPU runs (their spread over seeds
and precisions is about half a point), 2 when the log is missing or holds no validation BLEU.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_RUNS = ROOT / "annotated_transformer" / "pretrained" / "precision.json"
MARGIN = 1.0  # BLEU below the lowest CPU run that fails the check


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


def main(argv: list[str]) -> int:
    log = Path(argv[0] if argv else ROOT / "runs" / "multi30k" / "history.jsonl")
    if not log.is_file():
        print(f"recipe_on_gpu.py: no training log at {log} (expected the history.jsonl of the run)", file=sys.stderr)
        return 2
    history = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    if not history or any(r.get("val_bleu") is None for r in history):
        print(f"recipe_on_gpu.py: {log} holds no validation BLEU for every epoch", file=sys.stderr)
        return 2
    for r in history:
        print(f"epoch {r['epoch']:3d}  train loss {r['train_loss']:.3f}  val loss {r['val_loss']:.3f}  "
              f"val BLEU {r['val_bleu']:.2f}  {r['seconds']:.0f}s  {r.get('precision', '')}")
    passed, line = judge(history, cpu_best_epochs())
    print(line)
    if not passed:
        print("the recipe trained here scores more than 1 BLEU below every CPU run of it")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
