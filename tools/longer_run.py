"""How long to train, and with how much dropout: the recipe's runs on val, epoch by epoch, each epoch alone and averaged.

The recipe of 14 epochs with dropout 0.1 (`RECIPE_14`; the results.json of its model is kept as
results/results_14_epochs.json) was still gaining on val at its last epoch. Four runs of
the recipe with seed 0 say how much longer to train:

* dropout 0.1, trained on one epoch at a time until its validation loss has not improved for PATIENCE epochs;
* dropout 0.2, for 30 epochs: more regularisation for a longer run;
* the dropout-0.2 run continued for COOLDOWN more epochs in which the learning rate falls in a straight line to 0
  (`TrainConfig.cooldown`). It starts as a copy of the dropout-0.2 run at its last epoch: the schedule with a
  cooldown equals equation 3 until the cooldown starts, so its first 30 epochs are that run's;
* the control: the dropout-0.2 run continued for the same COOLDOWN epochs on equation 3 alone, so that the cooldown
  run is compared with a run of as many epochs, not only with a shorter one.

The schedule of section 5.3 depends on the step only, so the first k epochs of a run on it are a run of k epochs.
For every epoch e of each run from AVERAGE_LAST on (of the last two: from their first epoch after the copy), this script
averages the checkpoints of epochs e-AVERAGE_LAST+1 .. e, as `build_pretrained` makes its candidate, and scores the
average by greedy BLEU on the validation split: for every run but the cooldown, what would ship if the run stopped at
epoch e.
The test sets are not used.

    python tools/longer_run.py run --runs-dir runs/longer       # trains what is missing (resumes after a stop)
    python tools/longer_run.py collect --runs-dir runs/longer   # writes results/longer.json

RECIPE is one of the last three runs. The recipe's model (its results.json kept as results_38_epochs.json; it shipped
until a student distilled from four runs of the recipe replaced it) is `build_pretrained(RECIPE)` with out_dir set to
that run's folder (the trained-model chapter): build_pretrained resumes it (finding it finished), chooses between its
best epoch and its averaged last epochs on val, and writes the model.
"""
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ablation import finished, run_or_collect  # tools/ablation.py: a run's finished epochs; the command line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.decoding import Translator  # noqa: E402 (the package of this checkout)
from annotated_transformer.evaluation import average_checkpoints, evaluate_translator  # noqa: E402
from annotated_transformer.pretrained import AVERAGE_LAST, RECIPE, hardware  # noqa: E402
from annotated_transformer.train import TrainConfig, train  # noqa: E402
from precision_run import RECIPE_14  # noqa: E402 (tools/precision_run.py)

PATIENCE = 7  # the dropout-0.1 run stops once its validation loss has not improved for this many epochs
COOLDOWN = 8  # epochs added to the dropout-0.2 run by each continued run (the cooldown run's rate falls to 0 over them)
CONTINUED = ("dropout02_cooldown", "dropout02_control")  # copies of the finished dropout-0.2 run, then COOLDOWN more epochs
KEEP = ("epoch", "step", "train_loss", "val_loss", "val_bleu", "lr", "tokens_per_s", "seconds")


def configs(runs_dir: Path) -> dict:
    "{folder: TrainConfig} of the four runs (the dropout-0.1 run's epochs grow one at a time)."
    dropout02 = replace(RECIPE, epochs=RECIPE.epochs - RECIPE.cooldown, cooldown=0, out_dir=str(runs_dir / "dropout02"))
    return {"dropout01": replace(RECIPE_14, out_dir=str(runs_dir / "dropout01")),
            "dropout02": dropout02,
            "dropout02_cooldown": replace(dropout02, epochs=dropout02.epochs + COOLDOWN, cooldown=COOLDOWN,
                                          out_dir=str(runs_dir / "dropout02_cooldown")),
            "dropout02_control": replace(dropout02, epochs=dropout02.epochs + COOLDOWN,
                                         out_dir=str(runs_dir / "dropout02_control"))}


def continue_from(finished_run: Path, cfg: TrainConfig) -> None:
    "Start the run of `cfg` as a copy of `finished_run` (epoch folders hard-linked: checkpoints are replaced, never rewritten)."
    out = Path(cfg.out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    top_level = lambda folder, names: [n for n in names if folder == str(finished_run)  # last/, logs, averages, lock: not linked
                                       and (n in ("last", ".lock") or n.startswith("avg") or n.endswith((".json", ".jsonl")))]
    shutil.copytree(finished_run, tmp, copy_function=os.link, ignore=top_level)
    shutil.copytree(finished_run / "last", tmp / "last")
    shutil.copy(finished_run / "history.jsonl", tmp / "history.jsonl")  # appended to: a copy, not a link
    (tmp / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    os.replace(tmp, out)


def patience_left(records: list[dict]) -> bool:
    "Whether the validation loss has improved within the last PATIENCE epochs."
    best = min(range(len(records)), key=lambda i: records[i]["val_loss"])
    return len(records) - 1 - best < PATIENCE


def run(runs_dir: Path) -> None:
    "The dropout-0.2 run, its cooldown and its control; the dropout-0.1 run on, an epoch at a time, while its loss improves."
    cfgs = configs(runs_dir)
    train(cfgs["dropout02"])
    for name in CONTINUED:
        if not Path(cfgs[name].out_dir).exists():
            continue_from(Path(cfgs["dropout02"].out_dir), cfgs[name])
        train(cfgs[name])
    d01 = cfgs["dropout01"]
    while True:
        records = finished(Path(d01.out_dir))
        if len(records) >= RECIPE_14.epochs and not patience_left(records):
            break
        train(replace(d01, epochs=max(len(records) + 1, RECIPE_14.epochs)))


def averaged_curve(run: Path, epochs: int, first: int = AVERAGE_LAST) -> list[dict]:
    "Greedy val BLEU of the average of each AVERAGE_LAST consecutive epoch checkpoints, by the last epoch averaged."
    curve = []
    for last in range(max(first, AVERAGE_LAST), epochs + 1):
        folders = [run / f"epoch_{e:03d}" for e in range(last - AVERAGE_LAST + 1, last + 1)]
        with tempfile.TemporaryDirectory() as tmp:
            averaged = average_checkpoints(folders, Path(tmp) / "avg")
            bleu = evaluate_translator(Translator.from_checkpoint(averaged, "cpu"), "val", beam_size=1)["bleu"]
        curve.append({"epoch": last, "val_bleu": round(bleu, 2)})
        print(f"{run.name}: epochs {last - AVERAGE_LAST + 1}-{last} averaged, val BLEU {bleu:.2f}", flush=True)
    return curve


def collect(runs_dir: Path) -> dict:
    "Each run's per-epoch scores and averaged-checkpoint curve on val."
    runs = []
    for name, cfg in configs(runs_dir).items():
        folder, records = Path(cfg.out_dir), finished(Path(cfg.out_dir))
        settings = {**asdict(TrainConfig()), **json.loads((folder / "train_config.json").read_text())} if records else {}
        differ = sorted(k for k, v in asdict(cfg).items() if k not in ("out_dir", "epochs") and settings.get(k) != v)
        if differ or len(records) < cfg.epochs or (name == "dropout01" and patience_left(records)):
            raise SystemExit(f"{folder} is not a finished run of its configuration (differs in {differ or 'nothing'}, "
                             f"{len(records)} epochs): run `python tools/longer_run.py run` first")
        first = cfg.epochs - COOLDOWN + 1 if name in CONTINUED else AVERAGE_LAST  # a continued run: only its own epochs
        runs.append({"name": name, "continues": "dropout02" if name in CONTINUED else None,
                     "dropout": cfg.model.dropout, "epochs": len(records), "cooldown": cfg.cooldown,
                     "history": [{k: r[k] for k in KEEP} for r in records],
                     f"average_of_last_{AVERAGE_LAST}": averaged_curve(folder, len(records), first)})
    return {"metric": "greedy sacreBLEU on the val split (1,014 sentences), after each epoch", "average_last": AVERAGE_LAST,
            "patience": PATIENCE, "recipe_epochs": RECIPE.epochs, "recipe_dropout": RECIPE.model.dropout,
            "recipe_cooldown": RECIPE.cooldown,
            "hardware": hardware(), "torch": torch.__version__, "runs": runs}


def main() -> None:
    run_or_collect(__doc__, run, lambda runs_dir, out: collect(runs_dir), "runs/longer", ROOT / "results" / "longer.json")


if __name__ == "__main__":
    main()
