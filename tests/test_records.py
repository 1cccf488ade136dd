"""The experiment records in results/experiments/ and their reader, tools/records.py, which the page
nbs/31_experiments.ipynb ("Experiments on the recipe") draws them with. Every experiment file has its record and a
section of that page, and every figure the reader shows is the figure its record holds."""
import json
import re

import pytest

from conftest import ROOT, cells, script

records = script("tools/records.py")
read_record, runs_table = records.read_record, records.runs_table
single_epoch_spread, spread_between_runs = records.single_epoch_spread, records.spread_between_runs

RESULTS = ROOT / "results" / "experiments"
PAGE = ROOT / "nbs" / "31_experiments.ipynb"
EXPERIMENTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.json"))


def test_every_experiment_file_has_its_record_and_its_section_and_every_record_its_file():
    assert EXPERIMENTS == sorted(p.stem for p in RESULTS.glob("*.json"))
    for name in EXPERIMENTS:
        record = read_record(name, RESULTS)
        spec = json.loads((ROOT / "experiments" / f"{name}.json").read_text())
        assert record["question"] == spec["question"], name
        assert {run["name"] for run in record["runs"]} == set(spec["runs"]), name
    # and a section of the page renders each record: one of its code cells reads it with read_record
    code = "\n".join(cell["source"] for cell in cells(PAGE, "code"))
    read = set(re.findall(r"""read_record\(\s*["']([\w-]+)["']""", code))
    assert read == set(EXPERIMENTS), sorted(read ^ set(EXPERIMENTS))


def rows(name: str, **options) -> tuple[dict, object, list]:
    "(record, its runs table, [(run, the run's row)]) of one experiment's record."
    record = read_record(name, RESULTS)
    table = runs_table(record, **options)
    seeds = "seed" in table.index.names
    return record, table, [(run, table.loc[(run["name"], run["seed"])] if seeds else table.loc[run["name"]])
                           for run in record["runs"]]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_a_runs_table_cell_is_the_record_figure_of_its_run_and_candidate(name):
    for run, row in rows(name)[2]:
        for candidate, by_split in run["candidates"].items():
            column = ("val greedy, best epoch" if candidate.startswith("best epoch")
                      else f"val greedy, last {candidate.split()[4]} averaged")
            assert row[column] == by_split["val"]["beam_1"]["bleu"], (run["name"], candidate)
        chosen = run["candidates"][run["chosen"]]
        for split, by_beam in chosen.items():
            for beam, score in by_beam.items():
                if (split, beam) != ("val", "beam_1"):
                    kind = "greedy" if beam == "beam_1" else f"beam {beam[5:]}"
                    assert row[f"choice: {split} {kind}"] == score["bleu"]


def test_a_run_chooses_its_candidate_with_the_best_greedy_val_bleu():
    for name in EXPERIMENTS:
        for run in read_record(name, RESULTS)["runs"]:
            greedy = {c: s["val"]["beam_1"]["bleu"] for c, s in run["candidates"].items()}
            assert greedy[run["chosen"]] == max(greedy.values()), (name, run["name"])


def val_bleu(experiment: str, run: str) -> dict[int, float]:
    "{epoch: greedy val BLEU} of one run of a record, as its history holds it."
    (found,) = [r for r in read_record(experiment, RESULTS)["runs"] if r["name"] == run]
    return {r["epoch"]: r["val_bleu"] for r in found["history"] if r.get("val_bleu") is not None}


def test_the_spread_between_runs_is_the_gap_between_the_seeds_choices():
    # the seeds' range of their runs' better candidate, read from the record; the same seed on two CPUs lands closer
    better = [max(c["val"]["beam_1"]["bleu"] for c in run["candidates"].values())
              for run in read_record("seeds", RESULTS)["runs"]]
    spreads = spread_between_runs(RESULTS)
    assert spreads["other seeds, one CPU"] == round(max(better) - min(better), 2)
    assert 0 <= spreads["same seed, two CPUs"] < spreads["other seeds, one CPU"]


def test_the_single_epoch_spread_is_the_largest_gap_of_one_epoch():
    # the seeds' widest epoch, and the 14-epoch run on one CPU against the same epochs of the longer run on the other
    curves = [{r["epoch"]: r["val_bleu"] for r in run["history"]} for run in read_record("seeds", RESULTS)["runs"]]
    widest = max(max(c[e] for c in curves) - min(c[e] for c in curves) for e in curves[0])
    one, other = val_bleu("precision", "fp32, 14 epochs, dropout 0.1"), val_bleu("training_length", "dropout 0.1")
    spreads = single_epoch_spread(RESULTS)
    assert spreads["other seeds, one CPU"] == round(widest, 2)
    assert spreads["same seed, two CPUs"] == round(max(abs(v - other[e]) for e, v in one.items()), 2)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_a_runs_table_says_where_each_run_stopped_and_why(name):
    record, table, runs = rows(name)
    stopped = {(run["name"], run["seed"]) for run in record["runs"] if run.get("stopped_after_budget")}
    assert ("ended" in table.columns) == bool(stopped)  # shown only where a budget stopped a run
    for run, row in runs:
        epochs = [r["epoch"] for r in run["history"]]
        assert row["epochs"] == epochs[-1], run["name"]  # the last epoch, not the number of epochs the record holds
        if (run["name"], run["seed"]) in stopped:  # the records say which runs a budget stopped
            assert row["ended"] == "on a budget" and epochs[-1] < run["settings"]["epochs"]
        else:
            assert epochs[-1] == run["settings"]["epochs"], run["name"]
            assert "ended" not in table.columns or row["ended"] == "as planned"


def test_the_records_name_the_runs_a_budget_stopped_and_the_machines_the_page_compares():
    stopped = {(name, run["name"]) for name in EXPERIMENTS for run in read_record(name, RESULTS)["runs"]
               if run.get("stopped_after_budget")}
    assert stopped == {("ablation", "words, untied"), ("ablation", "subwords, untied"),
                       ("norm_placement", "post-norm, warmup 800"), ("norm_placement", "pre-norm, warmup 1600")}
    # the two 14-epoch runs of different precision ran on different CPUs; the wider runs are bf16 beside an fp32 run
    precision = {run["name"]: run for run in read_record("precision", RESULTS)["runs"]}
    assert "Intel" in precision["fp32, 14 epochs, dropout 0.1"]["hardware"]
    assert "AMD" in precision["bf16, 14 epochs, dropout 0.1"]["hardware"]
    wider = read_record("wider", RESULTS)
    assert [run["settings"]["precision"] for run in wider["runs"]] == ["fp32", "bf16", "bf16"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_a_runs_table_names_the_epoch_of_each_number(name):
    at_epochs = [3, 8, 14]
    for run, row in rows(name, at_epochs=at_epochs)[2]:
        val_bleu = {r["epoch"]: r["val_bleu"] for r in run["history"]}
        for epoch in at_epochs:
            assert row[f"epoch {epoch}: val greedy"] == val_bleu.get(epoch, "–"), (run["name"], epoch)
        best = run["candidates"].get("best epoch (validation BLEU)")
        if best is None:
            assert row["best at epoch"] == "–"
        else:  # the best checkpoint's epoch: its BLEU is the candidate's, and no later epoch scores as high
            epoch = row["best at epoch"]
            assert val_bleu[epoch] == best["val"]["beam_1"]["bleu"], run["name"]
            assert all(bleu < val_bleu[epoch] for e, bleu in val_bleu.items() if e > epoch)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_a_runs_table_shows_precision_and_machine_where_runs_differ(name):
    record, table, runs = rows(name)
    precisions = {run["settings"]["precision"] for run in record["runs"]}
    machines = {run.get("hardware", record["hardware"]) for run in record["runs"]}
    assert ("precision" in table.columns) == (len(precisions) > 1)
    assert ("machine" in table.columns) == (len(machines) > 1)
    for run, row in runs:
        if "precision" in table.columns:
            assert row["precision"] == run["settings"]["precision"]
        if "machine" in table.columns:
            assert row["machine"] == run.get("hardware", record["hardware"])
