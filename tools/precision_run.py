"""Does bf16 train as well as fp32? The recipe of 14 epochs, trained again under bf16 autocast, against its fp32 run.

The fp32 run of the recipe of 14 epochs with dropout 0.1 (`RECIPE_14`, seed 0) logged every epoch's validation
loss and greedy BLEU in its results.json, kept as annotated_transformer/pretrained/results_14_epochs.json. This
script trains the same recipe with the same seed under CPU bf16 autocast (`precision="bf16"`; on a CPU with bf16
matrix units, AMX or AVX512-BF16, that is also what `precision="auto"` picks) and puts both logs, epoch by epoch,
into annotated_transformer/pretrained/precision.json, which the trained-model chapter reads. The learning-rate
schedule depends on the step only, so epoch k of both runs saw the same batches in the same order at the same
learning rate: the two columns differ by the precision (and by the machine's kernels).

    python tools/precision_run.py run --runs-dir runs/precision      # trains, or resumes after a stop
    python tools/precision_run.py collect --runs-dir runs/precision  # writes annotated_transformer/pretrained/precision.json
"""
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from ablation import history, run_or_collect  # tools/ablation.py: a run's history.jsonl as records; the command line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.decoding import Translator  # noqa: E402 (the package of this checkout)
from annotated_transformer.evaluation import average_checkpoints, evaluate_translator, last_checkpoints  # noqa: E402
from annotated_transformer.fast import cpu_bf16_native  # noqa: E402
from annotated_transformer.pretrained import AVERAGE_LAST, RECIPE, hardware  # noqa: E402
from annotated_transformer.train import train  # noqa: E402

FOLDER = "bf16-recipe"
# the recipe as this experiment and the placement experiment ran it (RECIPE trains longer: tools/longer_run.py)
RECIPE_14 = replace(RECIPE, epochs=14, cooldown=0, model=replace(RECIPE.model, dropout=0.1))
FP32_RUN = ROOT / "annotated_transformer" / "pretrained" / "results_14_epochs.json"  # that length's fp32 run


def averaged_val_bleu(run: Path) -> float:
    "Greedy val BLEU of a run's last AVERAGE_LAST epoch checkpoints averaged, as the shipped model's candidates are scored."
    name = f"avg{AVERAGE_LAST}"
    folder = run / name if (run / name / "model.safetensors").exists() else \
        average_checkpoints(last_checkpoints(run, AVERAGE_LAST), run / name)
    return round(evaluate_translator(Translator.from_checkpoint(folder, "cpu"), "val", beam_size=1)["bleu"], 2)


def collect(runs_dir: Path) -> dict:
    "Both runs' per-epoch validation loss and BLEU, over the epochs both have finished."
    shipped = json.loads(FP32_RUN.read_text())
    fp32 = [r for r in shipped["history"] if not r.get("partial")]
    bf16 = [r for r in history(runs_dir / FOLDER) if not r.get("partial")]
    if not bf16:
        raise SystemExit(f"{runs_dir / FOLDER} has no finished epoch: run `python tools/precision_run.py run` first")
    keep = ("epoch", "train_loss", "val_loss", "val_bleu", "tokens_per_s", "seconds")
    averaged = None  # the shipped model's candidate averaged over the last epochs: the bf16 run's, scored the same way
    if len(bf16) >= RECIPE_14.epochs:
        averaged = {"bf16": averaged_val_bleu(runs_dir / FOLDER),
                    "fp32": shipped["candidates_val_bleu_greedy"][f"average of the last {AVERAGE_LAST} epochs"]}
    return {"metric": "greedy sacreBLEU on the val split (1,014 sentences), after each epoch",
            "fp32": {"precision": "fp32", "hardware": shipped["hardware"],
                     "torch": shipped["torch"], "history": [{k: r[k] for k in keep} for r in fp32]},
            "bf16": {"precision": "bf16 autocast", "hardware": hardware(), "torch": torch.__version__,
                     "native_bf16": cpu_bf16_native(), "history": [{k: r[k] for k in keep} for r in bf16]},
            "epochs_compared": min(len(fp32), len(bf16)), "average_of_last_5_val_bleu": averaged}


def main() -> None:
    run_or_collect(__doc__, lambda runs_dir: train(replace(RECIPE_14, out_dir=str(runs_dir / FOLDER), precision="bf16")),
                   collect, "runs/precision", ROOT / "annotated_transformer" / "pretrained" / "precision.json")


if __name__ == "__main__":
    main()
