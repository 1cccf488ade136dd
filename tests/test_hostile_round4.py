"""Hostile input, round four: runs that must not mix, destinations checked before the first step, the runner's files
checked with the command's own checks, and smaller cases (one file as two inputs, a full disk, a huge --epochs, escape
codes from a file). Most cases call the command's `main` in this process; models are tiny."""
import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import command, corpus, one_line, script, snapshot, train

experiment = script("tools/experiment.py")


# ---------------------------------------------------------------- a run is one run

def test_a_run_without_last_is_not_trained_on(trained_copy, capsys, quiet):
    data, run = trained_copy
    shutil.rmtree(run / "last")  # a finished run whose last/ was deleted: its history and best/ are still there
    (run / ".lock.holder").write_text("pid 1 on \x1b[31mred")  # a dead run's name, with an escape code
    before = snapshot(run)
    status, out, err = train(capsys, run, data, "--epochs", "2")
    one_line((status, out, err), 2, "--out-dir")
    assert "\x1b" not in out + err
    assert {k: v for k, v in snapshot(run).items() if k != ".lock.holder"} == \
        {k: v for k, v in before.items() if k != ".lock.holder"}  # one epoch in its history, its best/ as it was


def test_a_run_folder_starts_over_only_when_asked(trained_copy, capsys, quiet):
    data, run = trained_copy
    for path in run.iterdir():  # as a run killed before its first epoch was saved leaves it
        if path.name not in ("train_config.json", "data.json") and not path.name.startswith("."):  # (the lock stays)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    before = snapshot(run)
    assert {"train_config.json", "data.json"} <= set(before)
    one_line(train(capsys, run, data, "--epochs", "1", "--smoothing", "0.2"), 2, "train_config.json", "--start-over")
    assert snapshot(run) == before
    one_line(train(capsys, run, data, "--start-over", "--max-len", "3"), 2, "--max-len")  # refused after the old run moved
    assert snapshot(run) == before
    assert train(capsys, run, data, "--epochs", "2", "--smoothing", "0.2", "--start-over")[0] == 0
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in history] == [1, 2]
    assert json.loads((run / "train_config.json").read_text())["smoothing"] == 0.2
    status, out, err = train(capsys, run, data, "--epochs", "1", "--start-over")  # a whole run removed too
    assert status == 0, err[-2000:]
    assert len((run / "history.jsonl").read_text().splitlines()) == 1 and not (run / "epoch_002").exists()


def test_a_resume_keeps_its_start(tmp_path, capsys, quiet):
    data = corpus(tmp_path / "corpus")
    assert train(capsys, tmp_path / "base", data, "--epochs", "2")[0] == 0
    start, other = tmp_path / "base" / "epoch_001", tmp_path / "base" / "epoch_002"
    tune = ["train", "--corpus-dir", str(data), "--N", "1", "--d-model", "16", "--d-ff", "32", "--h", "2",
            "--max-tokens", "200", "--warmup", "5", "--val-bleu-sentences", "2", "--device", "cpu", "--threads", "1"]
    # the vocabulary is the start's: options that make one cannot apply
    for option in (["--subwords", "0"], ["--min-freq", "1"], ["--subwords", "8000"], ["--min-freq", "2"]):  # defaults too
        one_line(command(capsys, *tune, "--out-dir", str(tmp_path / "x"), "--init-from", str(start), *option), 2,
                 option[0])
        assert not (tmp_path / "x").exists()
    run = tmp_path / "tuned"
    assert command(capsys, *tune, "--out-dir", str(run), "--init-from", str(start), "--epochs", "1")[0] == 0
    before = snapshot(run)
    for changed in (["--init-from", str(other)], []):  # another start, or none
        one_line(command(capsys, *tune, "--out-dir", str(run), "--epochs", "2", *changed), 2, "init_from")
        assert snapshot(run) == before
    status, out, err = command(capsys, *tune, "--out-dir", str(run), "--init-from", str(start), "--epochs", "2")
    assert status == 0 and "resuming" in out, err[-2000:]


def test_an_out_dir_in_a_checkpoint_is_refused_before_anything(trained_copy, capsys, quiet):
    data, run = trained_copy
    best = run / "best"
    before = snapshot(best)
    for out in (best, best / "inside"):
        one_line(train(capsys, out, data, "--epochs", "1"), 2, "checkpoint")
        assert snapshot(best) == before and not (best / ".lock").exists()


def test_a_huge_epochs_is_refused_at_once(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:  # by the option's parser, before any data is read
        command(capsys, "train", "--epochs", "10000000", "--out-dir", str(tmp_path / "run"))
    assert refused.value.code == 2 and "--epochs" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- smaller cases

def test_one_file_as_source_and_reference_is_refused(tmp_path, capsys):
    (tmp_path / "s.de").write_text("Ein Hund.\n")
    (tmp_path / "link.de").symlink_to(tmp_path / "s.de")
    for ref in ("s.de", "link.de"):
        one_line(command(capsys, "evaluate", "--src", str(tmp_path / "s.de"), "--ref", str(tmp_path / ref)), 2, "--ref")


def test_a_full_device_is_named(tmp_path, stand_in):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    res = subprocess.run([*stand_in, "translate", "--output", "/dev/full", "Hallo"], capture_output=True, text=True)
    one_line(res, 1, "/dev/full")
    assert Path("/dev/full").is_char_device()


# ---------------------------------------------------------------- the runner checks its files as train would

TINY = {"epochs": 1, "max_steps": 1, "val_bleu_sentences": 5, "model": {"N": 1, "d_model": 32, "d_ff": 64, "h": 2}}
BAD = [({"runs": {"a": {}}, "measure": {"limit": -1}}, "limit"),
       ({"runs": {"a": {}}, "measure": {"limit": 0}}, "limit"),
       ({"runs": {"a": {}}, "measure": {"curve": "no"}}, "curve"),
       ({"runs": {"a": {}}, "measure": {"beams": [0]}}, "beams"),
       ({"runs": {"a": {}}, "measure": {"beams": [1.5]}}, "beams"),
       ({"runs": {"a": {}, "b": {"distilled_from": ["a"], "with_references": "no"}}}, "with_references"),
       ({"runs": {"a": {}, "b": {"distilled_from": ["a"], "teacher_beam": 0}}}, "teacher_beam"),
       ({"runs": {"a": {"factor": -1.0}}}, "factor"),
       ({"runs": {"a": {"epochs": "3"}}}, "epochs"),
       ({"runs": {"a": {"epochs": True}}}, "epochs"),
       ({"runs": {"a": {"precision": "fp64"}}}, "precision"),
       ({"runs": {"a": {"keep_epochs": "no"}}}, "keep_epochs"),
       ({"recipe": {"smoothing": 1.5}, "runs": {"a": {}}}, "smoothing"),
       ({"runs": {"a": {"corpus_dir": "/no/such/corpus"}}}, "corpus_dir"),
       ({"runs": {"a": {"corpus_dir": "EMPTY"}}}, "train.de"),
       ({"runs": {"a": {"rdrop": 1.0, "model": {"dropout": 0.0}}}}, "rdrop")]


@pytest.mark.parametrize("spec, says", BAD, ids=[f"{s}-{i}" for i, (_, s) in enumerate(BAD)])
def test_a_run_the_command_would_refuse_is_refused_before_anything(tmp_path, capsys, spec, says):
    (tmp_path / "empty").mkdir()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec).replace("EMPTY", str(tmp_path / "empty")))
    assert experiment.main([str(path), "--runs-dir", str(tmp_path / "runs"), "--dry-run"]) == 2
    one_line((2, "", capsys.readouterr().err), 2, says)
    assert not (tmp_path / "runs").exists()


def test_two_runs_of_one_name_are_refused(tmp_path, capsys):
    path = tmp_path / "twice.json"
    path.write_text('{"runs": {"a": {}, "a": {"smoothing": 0.0}}}')
    assert experiment.main([str(path), "--dry-run"]) == 2
    one_line((2, "", capsys.readouterr().err), 2, "'a'")


def test_the_record_destination_and_the_runs_are_checked_first(tmp_path, capsys, monkeypatch):
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"recipe": TINY, "runs": {"a": {}}}))
    monkeypatch.setattr(experiment, "train_runs", lambda *a: pytest.fail("trained before checking the record"))
    (tmp_path / "a_file").write_text("x")
    args = [str(path), "--runs-dir", str(tmp_path / "runs")]
    assert experiment.main([*args, "--out", str(tmp_path / "a_file" / "record.json")]) == 2
    one_line((2, "", capsys.readouterr().err), 2, "a_file")
    assert experiment.main([*args, "--out", str(tmp_path)]) == 2  # a folder
    one_line((2, "", capsys.readouterr().err), 2, "--out")


@pytest.mark.parametrize("error, status", [(KeyboardInterrupt(), 130), ("locked", 1)])
def test_ctrl_c_and_a_second_runner_are_one_line(tmp_path, capsys, monkeypatch, error, status):
    from annotated_transformer.files import RunLockedError
    error = RunLockedError("runs/recipe is in use by another training run") if error == "locked" else error
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"recipe": TINY, "runs": {"a": {}}}))

    def stopped(*args):
        raise error
    monkeypatch.setattr(experiment, "train_runs", stopped)
    assert experiment.main([str(path), "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "r.json")]) == status
    one_line((status, "", capsys.readouterr().err), status)


def test_a_closed_stdin_is_one_line(tmp_path, stand_in):
    "(It already was: kept here so that it stays one line.)"
    import os
    for extra in ([], ["--input", "-"], ["--output", str(tmp_path / "out.txt")]):
        res = subprocess.run([*stand_in, "translate", *extra], capture_output=True, text=True,
                             preexec_fn=lambda: os.close(0))
        one_line(res, 2, "input")
        assert not (tmp_path / "out.txt").exists()


# ---------------------------------------------------------------- destinations nobody may write

@pytest.fixture
def read_only(tmp_path):
    "A folder with one file, where no file can be made, replaced or removed: root included (for whom os.access says yes)."
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "kept.txt").write_text("kept\n")
    root = os.geteuid() == 0
    if not root:
        folder.chmod(0o555)
    elif subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("the tests run as root on a file system without the immutable attribute: no folder is read-only")
    yield folder
    if root:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


def test_an_output_nobody_may_write_is_refused_before_any_work(tmp_path, capsys, read_only, quiet):
    src, ref = tmp_path / "in.de", tmp_path / "ref.en"
    src.write_text("Ein Hund läuft.\n")
    ref.write_text("A dog runs.\n")
    for target in (read_only / "new.txt", read_only / "kept.txt"):  # a new file, or one to replace
        one_line(command(capsys, "translate", "--input", str(src), "--output", str(target)), 2, str(target))
        one_line(command(capsys, "evaluate", "--src", str(src), "--ref", str(ref), "--json", str(target)), 2, str(target))
    assert snapshot(read_only) == {"kept.txt": b"kept\n"}


def test_a_run_folder_nobody_may_write_is_refused_before_any_work(tmp_path, capsys, read_only, quiet):
    data = corpus(tmp_path / "corpus")
    one_line(train(capsys, read_only / "run", data, "--epochs", "1"), 2, str(read_only))
    one_line(command(capsys, "copy-task", "--out", str(read_only / "copy"), "--epochs", "1"), 2, str(read_only))
    assert snapshot(read_only) == {"kept.txt": b"kept\n"}


def test_a_damaged_gz_input_is_one_line(tmp_path, stand_in):
    data = bytearray(gzip.compress(("Ein Hund läuft durch den Schnee.\n" * 200).encode()))
    data[len(data) // 2] ^= 0xFF  # a byte in the middle of the compressed data
    (tmp_path / "in.de.gz").write_bytes(bytes(data))
    res = subprocess.run([*stand_in, "translate", "--input", str(tmp_path / "in.de.gz"), "--output",
                          str(tmp_path / "out.txt")], capture_output=True, text=True)
    one_line(res, 2, "in.de.gz")
    assert not (tmp_path / "out.txt").exists()
