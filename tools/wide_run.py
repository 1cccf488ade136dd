"""The recipe, wider: the shipped recipe at d_model 384 instead of 256, on val, with two dropouts.

The shipped recipe (`RECIPE`: N=3, d_model 256, d_ff 1024, 8 heads, dropout 0.2, 38 epochs whose last 8 cool down)
was chosen among runs of one width. WIDE is the same recipe with two changes:

* d_model 384 (d_ff and the 8 heads kept, so each head has d_k = 48): 13.1M parameters against 7.6M, 26 MB in
  float16, within the 30 MB a shipped model may take (d_model 512 with d_ff 2048, the paper's base width, would take
  52 MB);
* dropout 0.3, as the paper's Table 3 gives its larger model more dropout: more parameters fit the 29,000 training
  pairs more easily, and in the recipe's own runs dropout 0.2 beat 0.1 (longer.json).

WIDE_02 keeps the recipe's dropout, 0.2, so that the width is the only change. Everything else (the BPE vocabulary,
batches, schedule, cooldown, seed, precision "auto") is RECIPE's; "auto" picks bf16 on a CPU with bf16 matrix units,
and wide.json records what it picked (from the runs' records; for runs older than records that log it, what "auto"
picks on the machine that collects). Like tools/longer_run.py, this script scores every average of AVERAGE_LAST
consecutive epoch checkpoints by greedy BLEU on the validation split, the way `build_pretrained` makes its averaged
candidate. The test sets are not used.

    python tools/wide_run.py run --runs-dir runs/wide       # trains both, or resumes after a stop
    python tools/wide_run.py collect --runs-dir runs/wide   # writes results/wide.json
"""
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ablation import finished, run_or_collect  # tools/ablation.py: a run's finished epochs; the command line
from longer_run import KEEP, averaged_curve  # tools/longer_run.py: the same scoring as the recipe's runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.checkpoint import model_config  # noqa: E402 (the package of this checkout)
from annotated_transformer.devices import resolve_precision  # noqa: E402
from annotated_transformer.model import ModelConfig, build_model  # noqa: E402
from annotated_transformer.pretrained import AVERAGE_LAST, hardware  # noqa: E402
from annotated_transformer.train import TrainConfig, train  # noqa: E402

AVERAGED = f"average_of_last_{AVERAGE_LAST}"

WIDE = TrainConfig(out_dir="d384", subwords=8000, model=ModelConfig(N=3, d_model=384, d_ff=1024, h=8, dropout=0.3),
                   min_freq=2, max_tokens=2500, epochs=38, cooldown=8, warmup=800, smoothing=0.1, seed=0)
WIDE_02 = replace(WIDE, out_dir="d384_dropout02", model=replace(WIDE.model, dropout=0.2))
RUNS = (WIDE, WIDE_02)  # out_dir: the run's folder under --runs-dir, and its name in wide.json
OUT = ROOT / "results" / "wide.json"


def run(runs_dir: Path) -> None:
    for cfg in RUNS:
        train(replace(cfg, out_dir=str(runs_dir / cfg.out_dir)))


def precision(records: list[dict], cfg: TrainConfig) -> str:
    "What the run trained in: as its records log it; for a run from before they did, what \"auto\" picks on this machine."
    logged = {r.get("precision") for r in records}
    if logged == {None}:
        return resolve_precision(torch.device("cpu"), cfg.precision)
    if len(logged) > 1:
        raise SystemExit(f"the run trained in more than one precision ({sorted(map(str, logged))}): give it a folder of its own")
    return logged.pop()


def collect(runs_dir: Path, out: Path = OUT,
            configs: tuple = RUNS,  # the runs to read: their out_dir under runs_dir
            script: str = "tools/wide_run.py",  # the script that trains them (named when one is unfinished)
            ) -> dict:
    """Each run's per-epoch scores and averaged-checkpoint curve on val, its size in float16. A run already in
    `out` with the same history keeps its curve: the averaging and greedy decoding are deterministic."""
    before = {r["name"]: r for r in json.loads(out.read_text())["runs"]} if out.exists() else {}
    runs = []
    for cfg in configs:
        folder = runs_dir / cfg.out_dir
        records = finished(folder)
        if len(records) < cfg.epochs:
            raise SystemExit(f"{folder} has {len(records)} of {cfg.epochs} epochs: run `python {script} run` first")
        saved = asdict(TrainConfig(**json.loads((folder / "train_config.json").read_text())))  # a setting added since: its default
        differ = sorted(k for k, v in asdict(cfg).items() if k not in ("out_dir", "data_dir") and saved[k] != v)
        if differ:
            raise SystemExit(f"{folder} was trained with other settings ({', '.join(differ)}): give it a folder of its own")
        model = build_model(model_config(folder / "last"))  # the run's architecture; its weights are not read
        parameters = sum(p.numel() for p in model.parameters())  # the tied matrix once
        history = [{k: r[k] for k in KEEP} for r in records]
        kept = before.get(cfg.out_dir, {})
        curve = kept[AVERAGED] if kept.get("history") == history else averaged_curve(folder, len(records))
        runs.append({"name": cfg.out_dir, "model": asdict(cfg.model), "parameters": parameters,
                     "float16_megabytes": round(2 * parameters / 1e6, 1), "epochs": len(records),
                     "cooldown": cfg.cooldown, "rdrop": cfg.rdrop, "precision": precision(records, cfg), "history": history,
                     AVERAGED: curve})
    return {"metric": "greedy sacreBLEU on the val split (1,014 sentences), after each epoch", "average_last": AVERAGE_LAST,
            "hardware": hardware(), "torch": torch.__version__, "runs": runs}


def main() -> None:
    run_or_collect(__doc__, run, collect, "runs/wide", OUT)


if __name__ == "__main__":
    main()
