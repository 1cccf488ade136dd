"""tools/finetune.py and tools/self_distill.py, two ways to spend more training on the shipped student: the
fine-tuning's schedule, a finished run kept as it is, and a second-round student that is `STUDENT` but for its
folders."""
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.pretrained import STUDENT  # noqa: E402
from finetune import AVERAGE_LAST, EPOCHS, LR, SEED, WARMUP, rate_factor, run  # noqa: E402
from self_distill import student  # noqa: E402


def test_the_rate_warms_up_then_falls_to_zero_in_straight_lines():
    total = 1000
    assert rate_factor(0, total) == 1 / WARMUP
    assert rate_factor(WARMUP - 1, total) == 1.0  # the peak: LR itself
    assert rate_factor(total, total) == 0.0 and rate_factor(total + 5, total) == 0.0
    assert abs(rate_factor((total + WARMUP) // 2, total) - 0.5) < 1e-9  # halfway down
    rates = [rate_factor(step, total) for step in range(total + 1)]
    assert rates[:WARMUP] == sorted(rates[:WARMUP]) and rates[WARMUP - 1:] == sorted(rates[WARMUP - 1:], reverse=True)


def test_a_finished_run_is_read_not_trained_again(tmp_path):
    record = {"lr": 2e-4, "epochs": 5, "history": [{"epoch": 0, "val_bleu": 43.41}]}
    (tmp_path / "results.json").write_text(json.dumps(record))
    assert run(tmp_path) == record  # nothing is loaded, trained or written
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_the_second_round_student_is_the_shipped_student_but_for_its_folders(tmp_path):
    again, shipped = asdict(student(tmp_path)), asdict(STUDENT)
    assert {k for k in shipped if again[k] != shipped[k]} == {"corpus_dir", "out_dir"}
    assert again["corpus_dir"] == str(tmp_path / "corpus") and again["out_dir"] == str(tmp_path / "student")


def test_the_record_is_a_run_of_these_settings():
    record = json.loads((ROOT / "results" / "finetune.json").read_text())
    assert (record["lr"], record["epochs"], record["warmup"], record["seed"]) == (LR, EPOCHS, WARMUP, SEED)
    assert [r["epoch"] for r in record["history"]] == list(range(EPOCHS + 1))  # epoch 0: the shipped weights
    assert list(record["averages"]) == [f"last {k}" for k in range(2, AVERAGE_LAST + 1)]


def test_the_rate_of_each_recorded_epoch_is_the_schedule_over_the_planned_steps():
    from annotated_transformer.data import TokenBucketSampler
    from annotated_transformer.decoding import Translator, shipped_model_dir
    from annotated_transformer.train import planned_steps
    from finetune import training_pairs
    record = json.loads((ROOT / "results" / "finetune.json").read_text())
    shipped = json.loads((shipped_model_dir() / "results.json").read_text())
    assert record["history"][0]["val_bleu"] == shipped["val"]["beam_1"]["bleu"]  # it started from the shipped weights
    pairs = training_pairs(Translator.from_checkpoint(shipped_model_dir(), "cpu"))
    sampler = TokenBucketSampler([max(len(s), len(t)) for s, t in pairs], record["max_tokens"], seed=record["seed"])
    steps = planned_steps(sampler, record["epochs"])
    done = [sum(steps[:epoch]) for epoch in range(1, record["epochs"] + 1)]  # optimizer steps at each epoch's end
    for r, step in zip(record["history"][1:], done):
        assert abs(r["lr"] - record["lr"] * rate_factor(step, sum(steps))) < 1e-12, (r, step)
