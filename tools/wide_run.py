"""The recipe, wider: the shipped recipe at d_model 384 instead of 256, on val.

The shipped recipe (`RECIPE`: N=3, d_model 256, d_ff 1024, 8 heads, dropout 0.2, 38 epochs whose last 8 cool down)
was chosen among runs of one width. WIDE is the same recipe with two changes:

* d_model 384 (d_ff and the 8 heads kept, so each head has d_k = 48): 13.1M parameters against 7.6M, 26 MB in
  float16, within the 30 MB a shipped model may take (d_model 512 with d_ff 2048, the paper's base width, would take
  52 MB);
* dropout 0.3, as the paper's Table 3 gives its larger model more dropout: more parameters fit the 29,000 training
  pairs more easily, and in the recipe's own runs dropout 0.2 beat 0.1 (longer.json).

Everything else (the BPE vocabulary, batches, schedule, cooldown, seed, precision "auto") is RECIPE's; "auto" picks
bf16 on a CPU with bf16 matrix units, and wide.json records what it picked. Like tools/longer_run.py, this
script scores every average of AVERAGE_LAST consecutive epoch checkpoints by greedy BLEU on the validation split, the
way `build_pretrained` makes its averaged candidate. The test sets are not used.

    python tools/wide_run.py run --runs-dir runs/wide       # trains, or resumes after a stop
    python tools/wide_run.py collect --runs-dir runs/wide   # writes annotated_transformer/pretrained/wide.json
"""
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ablation import run_or_collect  # tools/ablation.py: the command line
from longer_run import KEEP, averaged_curve, finished  # tools/longer_run.py: the same scoring as the recipe's runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.checkpoint import load_model  # noqa: E402 (the package of this checkout)
from annotated_transformer.fast import resolve_precision  # noqa: E402
from annotated_transformer.model import ModelConfig  # noqa: E402
from annotated_transformer.pretrained import AVERAGE_LAST, hardware  # noqa: E402
from annotated_transformer.train import TrainConfig, train  # noqa: E402

FOLDER = "d384"
WIDE = TrainConfig(out_dir=FOLDER, subwords=8000, model=ModelConfig(N=3, d_model=384, d_ff=1024, h=8, dropout=0.3),
                   min_freq=2, max_tokens=2500, epochs=38, cooldown=8, warmup=800, smoothing=0.1, seed=0)


def run(runs_dir: Path) -> None:
    train(replace(WIDE, out_dir=str(runs_dir / FOLDER)))


def collect(runs_dir: Path) -> dict:
    "The wide run's per-epoch scores and averaged-checkpoint curve on val, its size in float16."
    folder = runs_dir / FOLDER
    records = finished(folder)
    if len(records) < WIDE.epochs:
        raise SystemExit(f"{folder} has {len(records)} of {WIDE.epochs} epochs: run `python tools/wide_run.py run` first")
    model = load_model(folder / "last")
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())  # tied weights counted once
    return {"metric": "greedy sacreBLEU on the val split (1,014 sentences), after each epoch", "average_last": AVERAGE_LAST,
            "model": asdict(WIDE.model), "parameters": parameters, "float16_megabytes": round(2 * parameters / 1e6, 1),
            "epochs": len(records), "cooldown": WIDE.cooldown, "hardware": hardware(), "torch": torch.__version__,
            "precision": resolve_precision(torch.device("cpu"), WIDE.precision),  # what "auto" trained in on this CPU
            "history": [{k: r[k] for k in KEEP} for r in records],
            f"average_of_last_{AVERAGE_LAST}": averaged_curve(folder, len(records))}


def main() -> None:
    run_or_collect(__doc__, run, collect, "runs/wide", ROOT / "annotated_transformer" / "pretrained" / "wide.json")


if __name__ == "__main__":
    main()
