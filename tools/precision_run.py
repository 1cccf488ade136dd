"""Does bf16 train as well as fp32? Two recipes trained again under bf16 autocast, against their fp32 runs, and a second seed.

Each comparison pairs an fp32 run that logged every epoch's validation loss and greedy BLEU in its results.json
with a run of the same recipe and seed under CPU bf16 autocast (`precision="bf16"`; on a CPU with bf16 matrix units,
AMX or AVX512-BF16, that is also what `precision="auto"` picks):

* `recipe_14`: the recipe of 14 epochs with dropout 0.1 (`RECIPE_14`), whose fp32 model's results.json is kept as
  results/results_14_epochs.json;
* `recipe`: the recipe (`RECIPE`: 38 epochs, dropout 0.2, the last 8 cooling down), whose fp32 model's results.json
  is kept as results/results_38_epochs.json (it shipped before the distilled student);
* `recipe_seed1`, `recipe_seed2`: the recipe with seed 1 and seed 2, in bf16 only: more seeds, to tell a gap
  that the precision makes from one that the seed makes (fp32 runs of them would take three times as long on this CPU).

The learning-rate schedule depends on the step only, and the batches on the seed and the epoch, so epoch k of both
runs of a pair saw the same batches in the same order at the same learning rate: the two columns differ by the
precision (and by the machine's kernels). Each bf16 run's candidates for a shipped model (its best epoch, and its last
AVERAGE_LAST epoch checkpoints averaged) are scored on val as `build_pretrained` scores them; the test sets are not
used. The comparisons go into results/precision.json, which nbs/14a_experiments.ipynb reads,
each once its bf16 run has finished; one whose run is not there keeps what the file already holds for it.

    python tools/precision_run.py run --runs-dir runs/precision      # trains the runs precision.json lacks (resumes)
    python tools/precision_run.py collect --runs-dir runs/precision  # writes results/precision.json
"""
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from ablation import finished, run_or_collect  # tools/ablation.py: a run's finished epochs; the command line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.decoding import Translator  # noqa: E402 (the package of this checkout)
from annotated_transformer.evaluation import average_checkpoints, evaluate_translator, last_checkpoints  # noqa: E402
from annotated_transformer.devices import cpu_bf16_native  # noqa: E402
from annotated_transformer.pretrained import AVERAGE_LAST, BEST_CANDIDATE, RECIPE, averaged_candidate, hardware  # noqa: E402
from annotated_transformer.train import train  # noqa: E402

# the recipe as the first precision comparison and the placement experiment ran it (RECIPE trains longer: tools/longer_run.py)
RECIPE_14 = replace(RECIPE, epochs=14, cooldown=0, model=replace(RECIPE.model, dropout=0.1))
PRETRAINED = ROOT / "results"  # the experiments' records
COMPARISONS = {  # name in precision.json: (the recipe, its fp32 run's results.json, the bf16 run's folder under --runs-dir)
    "recipe_14": (RECIPE_14, PRETRAINED / "results_14_epochs.json", "bf16-recipe"),
    "recipe": (RECIPE, PRETRAINED / "results_38_epochs.json", "bf16-recipe-38"),
    **{f"recipe_seed{seed}": (replace(RECIPE, seed=seed), None, f"bf16-recipe-38-seed{seed}") for seed in (1, 2)},
}
OUT = PRETRAINED / "precision.json"
KEEP = ("epoch", "train_loss", "val_loss", "val_bleu", "tokens_per_s", "seconds")


def val_bleu(checkpoint: Path) -> float:
    "Greedy BLEU on val, as `choose_on_val` scores a run's candidates."
    return round(evaluate_translator(Translator.from_checkpoint(checkpoint, "cpu"), "val", beam_size=1)["bleu"], 2)


def averaged_val_bleu(run: Path) -> float:
    "Greedy val BLEU of a run's last AVERAGE_LAST epoch checkpoints averaged, as `choose_on_val` scores a run's candidates."
    name = f"avg{AVERAGE_LAST}"
    folder = run / name if (run / name / "model.safetensors").exists() else \
        average_checkpoints(last_checkpoints(run, AVERAGE_LAST), run / name)
    return val_bleu(folder)


def run(runs_dir: Path) -> None:
    "Train (or resume) every bf16 run whose comparison precision.json does not hold yet."
    done = json.loads(OUT.read_text()) if OUT.exists() else {}
    for name, (recipe, _, folder) in COMPARISONS.items():
        if name not in done:
            train(replace(recipe, out_dir=str(runs_dir / folder), precision="bf16"))


def compare(recipe, fp32_results: Path | None, bf16_run: Path, bf16: list[dict]) -> dict:
    """A recipe's finished bf16 run (its folder and its records), epoch by epoch, and its candidates; with an fp32 run,
    that run's records and candidates beside it, over the epochs both finished."""
    pair = {"epochs": recipe.epochs, "dropout": recipe.model.dropout, "cooldown": recipe.cooldown, "seed": recipe.seed,
            "bf16": {"precision": "bf16 autocast", "hardware": hardware(), "torch": torch.__version__,
                     "native_bf16": cpu_bf16_native(), "history": [{k: r[k] for k in KEEP} for r in bf16]},
            "candidates_val_bleu_greedy": {"bf16": {BEST_CANDIDATE: val_bleu(bf16_run / "best"),
                                                    averaged_candidate(): averaged_val_bleu(bf16_run)}}}
    if fp32_results:
        fp32_record = json.loads(fp32_results.read_text())
        fp32 = [r for r in fp32_record["history"] if not r.get("partial")]
        pair["fp32"] = {"precision": "fp32", "hardware": fp32_record["hardware"], "torch": fp32_record["torch"],
                        "history": [{k: r[k] for k in KEEP} for r in fp32]}
        pair["epochs_compared"] = min(len(fp32), len(bf16))
        pair["candidates_val_bleu_greedy"]["fp32"] = {k: fp32_record["candidates_val_bleu_greedy"][k] for k in (BEST_CANDIDATE, averaged_candidate())}
    return pair


def collect(runs_dir: Path, out: Path = OUT) -> dict:
    "Every comparison whose bf16 run has finished; the others as `out` already holds them, or left out until they finish."
    before = json.loads(out.read_text()) if out.exists() else {}
    comparisons = {"metric": "greedy sacreBLEU on the val split (1,014 sentences), after each epoch"}
    for name, (recipe, fp32_results, folder) in COMPARISONS.items():
        records = finished(runs_dir / folder)
        epochs = len(records)
        if epochs >= recipe.epochs:
            comparisons[name] = compare(recipe, fp32_results, runs_dir / folder, records)
        elif name in before:
            comparisons[name] = before[name]
            print(f"{name}: kept from {out} ({runs_dir / folder} has {epochs} of {recipe.epochs} epochs)")
        else:
            print(f"{name}: left out, {runs_dir / folder} has {epochs} of {recipe.epochs} epochs "
                  "(`python tools/precision_run.py run` trains it)")
    return comparisons


def main() -> None:
    run_or_collect(__doc__, run, collect, "runs/precision", OUT)


if __name__ == "__main__":
    main()
