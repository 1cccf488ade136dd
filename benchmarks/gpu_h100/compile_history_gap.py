"""Where the compiled run of the recipe parts from the eager one, read from their histories (no GPU needed).

Epoch by epoch: the learning rate of both runs (the compiled run's optimizer ran eagerly, so a stale or recompiled
learning rate would show here), the gap in training and validation loss, and the compiled run's epoch seconds (an
epoch that fell back to eager execution after too many recompilations would take the eager run's time, about 10 s).
Beside them, how far the recipe's three CPU runs (seeds 0, 1, 2, bf16) part from each other: the gap that chance makes.

    python benchmarks/gpu_h100/compile_history_gap.py > benchmarks/gpu_h100/compile_history_gap.txt
"""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def history(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def main() -> None:
    eager, compiled = history(HERE / "train_eager_history.jsonl"), history(HERE / "train_compile_history.jsonl")
    cpu = [run["history"] for run in json.loads((ROOT / "results/experiments/seeds.json").read_text())["runs"]]
    print("| epoch | lr equal | train loss: compiled - eager | CPU seeds' range | val loss: compiled - eager "
          "| CPU seeds' range | compiled epoch s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for i, (e, c) in enumerate(zip(eager, compiled)):
        spread = {k: max(h[i][k] for h in cpu) - min(h[i][k] for h in cpu) for k in ("train_loss", "val_loss")}
        print(f"| {e['epoch']} | {e['lr'] == c['lr']} | {c['train_loss'] - e['train_loss']:+.3f} | {spread['train_loss']:.3f} "
              f"| {c['val_loss'] - e['val_loss']:+.3f} | {spread['val_loss']:.3f} | {c['seconds']} |")
    later = [c["seconds"] for c in compiled[1:]]
    print(f"\nlearning rates equal in every epoch: {all(e['lr'] == c['lr'] for e, c in zip(eager, compiled))}")
    print(f"compiled epochs 2-{len(compiled)}: median {statistics.median(later)} s, slowest {max(later)} s "
          f"(epoch {compiled[1:][later.index(max(later))]['epoch']}); eager epochs: median "
          f"{statistics.median(e['seconds'] for e in eager)} s")
    print(f"last epoch: train loss compiled {compiled[-1]['train_loss']:.3f}, eager {eager[-1]['train_loss']:.3f}, "
          f"CPU seeds {min(h[-1]['train_loss'] for h in cpu):.3f}-{max(h[-1]['train_loss'] for h in cpu):.3f}")


if __name__ == "__main__":
    main()
