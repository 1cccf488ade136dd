"""The experiment records in results/experiments/ and the renderer of chapter 14a (annotated_transformer.experiments).

The records were converted from an older format without retraining. tests/data/figures_before_conversion.json holds
every BLEU and every per-epoch value the old records held, read by the old records' own keys: the renderer must show
exactly those figures from the new records, no more and no fewer."""
import json
import math
from pathlib import Path

import pytest

from annotated_transformer.experiments import history, read_record, runs_table, scores, spread_between_runs

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "experiments"
BEFORE = json.loads((ROOT / "tests" / "data" / "figures_before_conversion.json").read_text())
CONVERTED = sorted({row[0] for row in BEFORE["scores"]})


def no_nan(seed):
    return None if seed is None or (isinstance(seed, float) and math.isnan(seed)) else int(seed)


def test_every_converted_experiment_has_its_file_and_record():
    assert len(CONVERTED) == 9
    for name in CONVERTED:
        assert (ROOT / "experiments" / f"{name}.json").exists(), name
        record = read_record(name, RESULTS)
        spec = json.loads((ROOT / "experiments" / f"{name}.json").read_text())
        assert record["question"] == spec["question"]
        assert {run["name"] for run in record["runs"]} == set(spec["runs"]), name


@pytest.mark.parametrize("name", CONVERTED)
def test_the_renderer_shows_every_score_the_old_records_held(name):
    record = read_record(name, RESULTS)
    found = {(r.run, no_nan(r.seed), str(r.candidate), r.split, int(r.beam), float(r.bleu))
             for r in scores(record).itertuples()}
    expected = {(run, seed, str(candidate), split, beam, float(bleu))
                for experiment, run, seed, candidate, split, beam, bleu in BEFORE["scores"] if experiment == name}
    assert found == expected


@pytest.mark.parametrize("name", CONVERTED)
def test_the_renderer_shows_every_history_the_old_records_held(name):
    frame = history(read_record(name, RESULTS))
    expected = BEFORE["history"].get(name, {})
    found = {}
    for (run, seed), rows in frame.groupby(["run", "seed"], sort=False):
        for field in ("train_loss", "val_loss", "val_bleu"):
            values = [[int(e), float(v)] for e, v in zip(rows.epoch, rows[field]) if not math.isnan(v)]
            if values:
                found[f"{run}|{seed}|{field}"] = values
    assert found == expected


@pytest.mark.parametrize("name", CONVERTED)
def test_a_runs_table_cell_is_the_record_figure_of_its_run_and_candidate(name):
    record = read_record(name, RESULTS)
    table = runs_table(record)
    seeds = "seed" in table.index.names
    for run in record["runs"]:
        row = table.loc[(run["name"], run["seed"])] if seeds else table.loc[run["name"]]
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
    for name in CONVERTED:
        for run in read_record(name, RESULTS)["runs"]:
            greedy = {c: s["val"]["beam_1"]["bleu"] for c, s in run["candidates"].items()}
            assert greedy[run["chosen"]] == max(greedy.values()), (name, run["name"])


def test_the_spread_is_the_gap_the_old_records_gave():
    # the same two gaps, read from the old records' figures: the seeds' range of their runs' better candidate, and the
    # 14-epoch recipe's averaged candidate against the first 14 epochs of the same run on another CPU
    better = {}
    for experiment, run, seed, candidate, split, beam, bleu in BEFORE["scores"]:
        if experiment == "seeds" and split == "val" and beam == 1:
            better[seed] = max(better.get(seed, 0), bleu)
    spreads = spread_between_runs(RESULTS)
    assert spreads["other seeds, one CPU"] == round(max(better.values()) - min(better.values()), 2)
    assert 0 <= spreads["same seed, two CPUs"] < spreads["other seeds, one CPU"]
