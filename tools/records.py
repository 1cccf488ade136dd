"""Read the records that tools/experiment.py writes (results/experiments/NAME.json), and draw them.

The page "Experiments on the recipe" (nbs/31_experiments.ipynb) renders every record with `runs_table` and `curves`,
and measures how far apart two runs of one recipe land (`spread_between_runs`, `single_epoch_spread`). The records
live in the repository, not in an installed package, so this reader lives beside the runner that writes them.
"""
import json
from pathlib import Path

import altair as alt
import pandas as pd

from annotated_transformer.files import read_json


def read_record(name: str,  # the experiment's name: its file is experiments/NAME.json
                folder: str | Path,  # where the records are (the repository's results/experiments)
                ) -> dict:
    "The record `tools/experiment.py` wrote for one experiment."
    return read_json(Path(folder) / f"{name}.json")  # a damaged record is named, not a JSON traceback


def val_greedy(scored: dict) -> float:
    "The greedy val BLEU of a scored candidate or ensemble: the score that chooses."
    return scored["val"]["beam_1"]["bleu"]


def chosen_bleu(run: dict) -> float:
    "The greedy val BLEU of the run's chosen candidate: the score that chose it."
    return val_greedy(run["candidates"][run["chosen"]])


def short(candidate: str) -> str:
    "A candidate's name in a table: 'best epoch' or 'last 5 averaged'."
    if candidate.startswith("average of the last"):
        return f"last {candidate.split()[4]} averaged"
    return "best epoch" if candidate.startswith("best epoch") else candidate


def epochs_done(run: dict,  # a run of a record
                ) -> list[dict]:
    "The run's finished epochs, from its history: a stop in the middle of an epoch logs a partial one, left out."
    return [r for r in run["history"] if not r.get("partial")]


def last_epoch(run: dict) -> int:
    "The last epoch the run finished: an average of its last N epochs ends there."
    return epochs_done(run)[-1]["epoch"]


def ended_on_budget(run: dict) -> bool:
    """Whether a budget stopped the run before the epochs its settings plan: its history ends early. (The runner
    records such a run only when `max_steps` stopped it; a converted record also says `stopped_after_budget`.)"""
    return last_epoch(run) < run["settings"]["epochs"]


def best_epoch(run: dict) -> int:
    """The epoch of the run's best checkpoint: the highest greedy val BLEU of its history (minus the val loss where
    none was measured), the later epoch on a tie, as `train` keeps it."""
    score = lambda r: r["val_bleu"] if r.get("val_bleu") is not None else -r["val_loss"]
    return max((score(r), r["epoch"]) for r in epochs_done(run))[1]


def machine(run: dict,  # a run of `record`
            record: dict) -> str:
    "The machine the run trained on: its own line, where it has one, else the record's."
    return run.get("hardware", record["hardware"])


def history(record: dict,
            key: str = "history",  # or "averaged_curve": greedy val BLEU of the last 5 epochs averaged, by the last
            ) -> pd.DataFrame:
    "Every run's records under `key`, one row an epoch: epoch, losses and greedy val BLEU (what it holds), run, seed."
    return pd.concat([pd.DataFrame(run[key]).assign(run=run["name"], seed=run["seed"])
                      for run in record["runs"] if key in run], ignore_index=True)


def _choice_columns(scored: dict,  # a candidate's or an ensemble's BLEU: {split: {"beam_K": {"bleu": ...}}}
                    skip: tuple = (),  # a (split, beam) the row shows elsewhere
                    ) -> dict[str, float]:
    "The scores of a row's choice, one column each: 'choice: val beam 4', 'choice: test greedy'."
    return {f"choice: {split} {'greedy' if beam == 'beam_1' else f'beam {beam[5:]}'}": s["bleu"]
            for split in ("val", "test") for beam, s in scored.get(split, {}).items() if (split, beam) != skip}


def runs_table(record: dict,
               at_epochs: list[int] = (),  # epochs whose greedy val BLEU each run shows (a dash: it stopped before)
               ) -> pd.DataFrame:
    """One row a run (and seed): its precision and machine where the runs differ in them, the last epoch it trained
    (and how it ended, where a budget stopped a run), its greedy val BLEU after each of `at_epochs`, the epoch of its
    best checkpoint, each candidate's greedy val BLEU, the choice, and the choice's other scores."""
    rows = []
    for run in record["runs"]:
        bleu_at = {r["epoch"]: r["val_bleu"] for r in epochs_done(run)}
        rows.append({"run": run["name"], "seed": run["seed"], "precision": run["settings"]["precision"],
                     "machine": machine(run, record), "epochs": last_epoch(run),
                     "ended": "on a budget" if ended_on_budget(run) else "as planned",
                     **{f"epoch {e}: val greedy": bleu_at.get(e) for e in at_epochs},
                     "best at epoch": best_epoch(run) if "best epoch" in map(short, run["candidates"]) else None,
                     **{f"val greedy, {short(c)}": val_greedy(s) for c, s in run["candidates"].items()},
                     "choice": short(run["chosen"]),
                     **_choice_columns(run["candidates"][run["chosen"]], skip=("val", "beam_1"))})
    rows += [{"run": e["name"], "choice": "ensemble", **_choice_columns(e)} for e in record.get("ensembles", [])]
    table = pd.DataFrame(rows).astype({"epochs": "Int64", "best at epoch": "Int64"})  # whole numbers, or none
    shown = [c for c in ("precision", "machine") if table[c].nunique() > 1]  # where the runs differ in them
    ended = ["ended"] if (table.ended == "on a budget").any() else []  # where a budget stopped a run
    table = table.set_index(["run", "seed"] if table.seed.nunique() > 1 else "run")
    candidates = sorted(c for c in table.columns if c.startswith("val greedy, "))  # best epoch, then averages
    chosen = sorted((c for c in table.columns if c.startswith("choice: ")),
                    key=lambda c: (" test " in c, " beam " in c))  # val before test, greedy before beams
    table = table[[*shown, "epochs", *ended, *(f"epoch {e}: val greedy" for e in at_epochs), "best at epoch",
                   *candidates, "choice", *chosen]].astype(object)
    return table.where(table.notna(), "–")


def curves(record: dict,
           y: str = "val_bleu",  # a history column, or "averaged": greedy val BLEU of the last 5 epochs averaged
           runs: list[str] | None = None,  # the runs drawn (default: all)
           from_epoch: int = 1,  # the first epoch drawn
           title: str = "",
           ) -> alt.Chart:
    """A line a run: `y` after each epoch. The data travel as one small CSV table, a row an epoch of a run, the run
    by its number (a page carries many charts); the chart puts the runs' names back."""
    titles = {"val_bleu": "val BLEU (greedy)", "val_loss": "val loss", "train_loss": "training loss",
              "averaged": "val BLEU, last 5 epochs averaged"}
    frame, y_title = history(record, "averaged_curve" if y == "averaged" else "history"), titles[y]
    y = "val_bleu" if y == "averaged" else y  # an averaged curve holds its greedy val BLEU
    if len({run["seed"] for run in record["runs"]}) > 1:
        frame = frame.assign(run=frame.run + ", seed " + frame.seed.astype(str))
    frame = frame[(frame.epoch >= from_epoch) & (frame.run.isin(runs) if runs else True)].dropna(subset=[y])
    names = list(dict.fromkeys(frame.run))  # in the record's order
    rows = frame.assign(i=frame.run.map(names.index))[["epoch", "i", y]]  # a run lacking an epoch has no row there
    table = alt.InlineData(values=rows.to_csv(index=False, float_format="%.4g"), format=alt.DataFormat(type="csv"))
    return alt.Chart(table).transform_calculate(run=f"{json.dumps(names)}[datum.i]").mark_line(point=True).encode(
        x=alt.X("epoch:Q", axis=alt.Axis(tickMinStep=1)), y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(zero=False)),
        color=alt.Color("run:N", title=None, sort=names,
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=320)),
        tooltip=["run:N", "epoch:Q", f"{y}:Q"]).properties(width=420, height=220, title=title)


def one_run_on_two_cpus(folder: str | Path) -> tuple[dict, dict]:
    """The 14-epoch recipe in fp32 with seed 0 on one CPU, and a longer run of the same settings on another: its first
    14 epochs are a 14-epoch run, since equation 3 sets the rate from the step alone."""
    one = next(r for r in read_record("precision", folder)["runs"] if r["name"] == "fp32, 14 epochs, dropout 0.1")
    other = next(r for r in read_record("training_length", folder)["runs"] if r["name"] == "dropout 0.1")
    return one, other


def spread_between_runs(folder: str | Path,  # the experiments' records (the repository's results/experiments)
                        ) -> dict[str, float]:  # BLEU on val between two runs of one recipe, by what differed
    "How far apart two runs' choices land on val: across seeds on one CPU, and with the seed held on two CPUs."
    seeds = list(map(chosen_bleu, read_record("seeds", folder)["runs"]))
    one, other = one_run_on_two_cpus(folder)  # the 14-epoch run's last 5 epochs averaged, and the same of the other
    at_14 = next(r["val_bleu"] for r in other["averaged_curve"] if r["epoch"] == last_epoch(one))
    gaps = {"other seeds, one CPU": max(seeds) - min(seeds),
            "same seed, two CPUs": abs(val_greedy(one["candidates"]["average of the last 5 epochs"]) - at_14)}
    return {what: round(gap, 2) for what, gap in gaps.items()}


def single_epoch_spread(folder: str | Path,  # the experiments' records (the repository's results/experiments)
                        ) -> dict[str, float]:  # greedy val BLEU between the same epoch of two runs, by what differed
    "The largest gap between the same epoch of two runs of one recipe, over all epochs: the same two measurements."
    seeds = history(read_record("seeds", folder)).pivot(index="epoch", columns="seed", values="val_bleu")
    one, other = one_run_on_two_cpus(folder)
    theirs = {r["epoch"]: r["val_bleu"] for r in epochs_done(other)}
    gaps = {"other seeds, one CPU": float((seeds.max(axis=1) - seeds.min(axis=1)).max()),
            "same seed, two CPUs": max(abs(r["val_bleu"] - theirs[r["epoch"]]) for r in epochs_done(one))}
    return {what: round(gap, 2) for what, gap in gaps.items()}
