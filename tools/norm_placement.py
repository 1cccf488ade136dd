"""Pre-norm or post-norm? The 14-epoch recipe with each layer-norm placement, the warmup chosen for each on val.

Every run is the 14-epoch recipe (`RECIPE_14` of tools/precision_run.py: N=3, d_model=256, 2,500 tokens per batch,
dropout 0.1, label smoothing 0.1, seed 0) under CPU bf16 autocast, and differs from it in the placement of the
layer norm (`pre_norm`) and the number of warmup steps. Each placement tries every warmup of WARMUPS; the runs are
compared after the same BUDGET epochs by greedy BLEU on the validation split, which chooses the warmup of each
placement. The chosen run of each placement then goes on to the recipe's 14 epochs, and the average of its last
AVERAGE_LAST epoch checkpoints is scored as the shipped model's candidates are. The learning-rate schedule depends
on the step only, so the first BUDGET epochs of a longer run are a run of BUDGET epochs.

The pre-norm run with the recipe's own warmup is the recipe's bf16 run of the precision experiment
(`recipe_14` in tools/precision_run.py, read from results/precision.json): it is not trained again.

    python tools/norm_placement.py run --runs-dir runs/norm      # trains what is missing (resumes after a stop)
    python tools/norm_placement.py collect --runs-dir runs/norm  # writes results/norm_placement.json
"""
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from ablation import finished, run_or_collect  # tools/ablation.py: a run's finished epochs; the command line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.devices import cpu_bf16_native  # noqa: E402 (the package of this checkout)
from annotated_transformer.pretrained import AVERAGE_LAST, averaged_candidate, hardware  # noqa: E402
from annotated_transformer.train import train  # noqa: E402
from precision_run import RECIPE_14, averaged_val_bleu  # noqa: E402 (tools/precision_run.py)

BUDGET = 8  # epochs every (placement, warmup) gets before the warmups are compared
WARMUPS = (800, 1600)  # the recipe's warmup and twice as long (a peak learning rate 1/sqrt(2) as high)
PLACEMENTS = {"post-norm": False, "pre-norm": True}  # name -> ModelConfig.pre_norm (the paper's first)
PRECISION_JSON = ROOT / "results" / "precision.json"
KEEP = ("epoch", "train_loss", "val_loss", "val_bleu")


def folder(placement: str, warmup: int) -> str:
    return f"{placement}-warmup{warmup}"


def config(runs_dir: Path, placement: str, warmup: int, epochs: int):
    "The recipe with this placement and warmup, in bf16, for `epochs` epochs."
    return replace(RECIPE_14, out_dir=str(runs_dir / folder(placement, warmup)), precision="bf16", warmup=warmup,
                   epochs=epochs, model=replace(RECIPE_14.model, pre_norm=PLACEMENTS[placement]))


def is_recipe(placement: str, warmup: int) -> bool:
    "Whether this is the recipe itself, whose bf16 run the precision experiment made (read from precision.json)."
    return PLACEMENTS[placement] == RECIPE_14.model.pre_norm and warmup == RECIPE_14.warmup


def records(runs_dir: Path, placement: str, warmup: int) -> list[dict]:
    "A run's finished epochs (the recipe's own run comes from the precision experiment)."
    if is_recipe(placement, warmup):
        return json.loads(PRECISION_JSON.read_text())["recipe_14"]["bf16"]["history"]
    return finished(runs_dir / folder(placement, warmup))


def chosen(runs_dir: Path) -> dict[str, int]:
    "Each placement's warmup with the best validation BLEU at the budget (of those that reached it)."
    best = {}
    for placement in PLACEMENTS:
        at_budget = {w: rs[BUDGET - 1]["val_bleu"] for w in WARMUPS if len(rs := records(runs_dir, placement, w)) >= BUDGET}
        if at_budget:
            best[placement] = max(at_budget, key=at_budget.get)
    return best


def run(runs_dir: Path) -> None:
    "Every (placement, warmup) to the budget, then each placement's chosen warmup to the 14-epoch recipe's length."
    for placement in PLACEMENTS:
        for warmup in WARMUPS:
            if len(records(runs_dir, placement, warmup)) < BUDGET:
                train(config(runs_dir, placement, warmup, BUDGET))
    for placement, warmup in chosen(runs_dir).items():
        if len(records(runs_dir, placement, warmup)) < RECIPE_14.epochs:
            train(config(runs_dir, placement, warmup, RECIPE_14.epochs))


def collect(runs_dir: Path) -> dict:
    "The table at the budget and each placement's chosen run over every epoch it finished."
    rows = []
    for placement in PLACEMENTS:
        for warmup in WARMUPS:
            rs = records(runs_dir, placement, warmup)
            if len(rs) < BUDGET:
                raise SystemExit(f"{placement} with warmup {warmup} has {len(rs)} epochs, fewer than the budget of "
                                 f"{BUDGET}: run `python tools/norm_placement.py run` first")
            rows.append({"placement": placement, "warmup": warmup, "history": [{k: r[k] for k in KEEP} for r in rs]})
    picked, averaged = chosen(runs_dir), {}  # averaged: each chosen run that reached 14 epochs, its last
    for placement, warmup in picked.items():  # epochs' weights averaged and scored on val
        if len(records(runs_dir, placement, warmup)) >= RECIPE_14.epochs:
            averaged[placement] = json.loads(PRECISION_JSON.read_text())["recipe_14"]["candidates_val_bleu_greedy"]["bf16"][averaged_candidate()] \
                if is_recipe(placement, warmup) else averaged_val_bleu(runs_dir / folder(placement, warmup))
    return {"metric": "greedy sacreBLEU on the val split (1,014 sentences), after each epoch",
            "budget_epochs": BUDGET, "recipe_epochs": RECIPE_14.epochs, "warmups": list(WARMUPS), "chosen_warmup": picked,
            f"average_of_last_{AVERAGE_LAST}_val_bleu": averaged,
            "precision": "bf16 autocast", "hardware": hardware(), "torch": torch.__version__, "native_bf16": cpu_bf16_native(),
            "runs": rows}


def main() -> None:
    run_or_collect(__doc__, run, lambda runs_dir, out: collect(runs_dir), "runs/norm", ROOT / "results" / "norm_placement.json")


if __name__ == "__main__":
    main()
