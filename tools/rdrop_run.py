"""The recipe with R-Drop: two dropout passes of every batch pulled together, on val, against the recipe's own runs.

R-Drop (Liang et al., 2021; `TrainConfig.rdrop`, chapter 13) adds to the loss alpha/2 times the symmetric KL divergence
between two passes of each batch under independent dropout masks: a regularizer, where the recipe has only dropout
and label smoothing for its 29,000 training pairs. RDROP is
the shipped recipe (`RECIPE`: N=3, d_model 256, d_ff 1024, 8 heads, dropout 0.2, 38 epochs whose last 8 cool down,
seed 0, precision "auto", which picks bf16 on a CPU with bf16 matrix units) with one change, rdrop=5, Liang et al.'s
alpha for translation. Seed 0 gives it the batches, in the same order, of the recipe's bf16 seed-0 run (precision.json),
so the two compare epoch by epoch; each of its steps runs the model on twice the rows (the records' tokens_per_s
count both passes, so compare the runs' seconds per epoch instead). Like tools/wide_run.py, this
script scores every average of AVERAGE_LAST consecutive epoch checkpoints by greedy BLEU on the validation split, the
way `build_pretrained` makes its averaged candidate. The test sets are not used.

    python tools/rdrop_run.py run --runs-dir runs/rdrop       # trains, or resumes after a stop
    python tools/rdrop_run.py collect --runs-dir runs/rdrop   # writes results/rdrop.json
"""
import sys
from dataclasses import replace
from pathlib import Path

from ablation import run_or_collect  # tools/ablation.py: the command line
import wide_run  # tools/wide_run.py: the same record of each run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.pretrained import RECIPE  # noqa: E402 (the package of this checkout)
from annotated_transformer.train import train  # noqa: E402

RDROP = replace(RECIPE, out_dir="rdrop5", rdrop=5.0)
RUNS = (RDROP,)  # out_dir: the run's folder under --runs-dir, and its name in rdrop.json
OUT = ROOT / "results" / "rdrop.json"


def run(runs_dir: Path) -> None:
    for cfg in RUNS:
        train(replace(cfg, out_dir=str(runs_dir / cfg.out_dir)))


def collect(runs_dir: Path, out: Path = OUT) -> dict:
    return wide_run.collect(runs_dir, out, RUNS, "tools/rdrop_run.py")


def main() -> None:
    run_or_collect(__doc__, run, collect, "runs/rdrop", OUT)


if __name__ == "__main__":
    main()
