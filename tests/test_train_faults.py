"""Training runs that cannot be corrupted, checked with real processes and injected faults (tests/train_worker.py):
a run stopped by SIGTERM (or SIGHUP) resumes to the weights of an uninterrupted run; signals that arrive while the
stop's checkpoint is written neither cut it short nor change the exit status; a run killed in the middle of writing
a checkpoint resumes from the last complete one; a run ended by max_steps in the middle of an epoch resumes inside
that epoch; two runs on one folder cannot both train. The runs train a tiny model on a slice of Multi30k (3,000
pairs, 66 batches an epoch): what is tested is the bookkeeping, which does not depend on the data's size."""
import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import done

WORKER = Path(__file__).with_name("train_worker.py")
CORPUS = None  # the slice of Multi30k the workers train on, written once by the `corpus` fixture


@pytest.fixture(scope="module", autouse=True)
def corpus(tmp_path_factory, multi30k):
    global CORPUS
    CORPUS = tmp_path_factory.mktemp("corpus")
    for split, name, pairs in [("train", "train", 3000), ("val", "val", 100), ("test", "test_2016_flickr", 100)]:
        for lang in ("de", "en"):
            with gzip.open(multi30k[f"{name}.{lang}.gz"], "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(pairs)]
            (CORPUS / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return CORPUS


def worker_env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "TRAIN_WORKER_CORPUS": str(CORPUS)}


def run(out, mode, **kw):
    return subprocess.run([sys.executable, str(WORKER), str(out), mode], capture_output=True, text=True,
                          timeout=600, env=worker_env(), **kw)


def weights(folder):
    return load_file(str(Path(folder) / "last" / "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, multi30k):
    out = tmp_path_factory.mktemp("full")
    done(run(out, "full"))
    return weights(out)


def test_sigterm_mid_epoch_then_resume_gives_the_uninterrupted_weights(tmp_path, uninterrupted):
    stopped = run(tmp_path, "sigterm@50")
    assert stopped.returncode == 3, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    assert "step 50" in stopped.stdout
    resumed = done(run(tmp_path, "full"))
    assert "resuming" in resumed and "50 batches" in resumed
    torch.testing.assert_close(weights(tmp_path), uninterrupted, rtol=0, atol=0)


def test_killed_while_writing_a_checkpoint_resumes_from_the_last_complete_one(tmp_path, uninterrupted):
    killed = run(tmp_path, "kill-in-save@2")  # the save of last/ after epoch 2
    assert killed.returncode < 0, killed.stdout[-2000:]  # died by a signal
    assert "taking over" in done(run(tmp_path, "full"))  # the dead run's name was still beside the lock
    torch.testing.assert_close(weights(tmp_path), uninterrupted, rtol=0, atol=0)
    assert not list(tmp_path.glob(".last.*")), list(tmp_path.glob(".last.*"))  # the killed save's folder is gone


def test_two_runs_on_one_folder(tmp_path, multi30k):
    first = subprocess.Popen([sys.executable, str(WORKER), str(tmp_path), "hold@5"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=worker_env())
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "ready").exists():  # wait until the first run is training
            assert first.poll() is None and time.monotonic() < deadline, "the first run never started training"
            time.sleep(0.1)
        second = run(tmp_path, "full")
        assert second.returncode == 4, second.stdout[-2000:] + second.stderr[-2000:]
        assert "in use" in second.stdout and str(first.pid) in second.stdout  # names the run that holds the folder
    finally:
        (tmp_path / "go").write_text("")
        out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]


def test_sighup_saves_like_sigterm(tmp_path, multi30k):
    stopped = run(tmp_path, "sighup@7")
    assert stopped.returncode == 3, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    assert "SIGHUP" in stopped.stderr and "step 7" in stopped.stdout
    assert load_file(str(tmp_path / "last" / "trainer.safetensors"))  # the resumable checkpoint was written


def test_signals_during_the_save_end_in_the_save_and_130(tmp_path, multi30k):
    from annotated_transformer.files import check_manifest
    res = run(tmp_path, "cli-signals-in-save@6")
    assert res.returncode == 130, (res.returncode, res.stdout[-2000:], res.stderr[-3000:])
    assert res.stderr.count("being saved") == 4, res.stderr[-3000:]  # each signal during the save is answered
    assert "step 6" in res.stderr.strip().splitlines()[-1]
    assert check_manifest(tmp_path / "last")["step"] == 6  # whole, and the one the stop asked for


def test_max_steps_in_the_middle_of_an_epoch_resumes_inside_it(tmp_path, multi30k):
    import json
    done(run(tmp_path / "a", "steps@12"))
    record = json.loads((tmp_path / "a" / "history.jsonl").read_text().splitlines()[-1])
    assert record["partial"] and record["batches_done"] == 12 and record["epoch"] == 1, record
    assert not (tmp_path / "a" / "epoch_001").exists()  # an epoch folder means a finished epoch
    assert "12 batches" in done(run(tmp_path / "a", "steps@70"))  # more steps than epoch 1 holds: ends inside epoch 2
    done(run(tmp_path / "b", "steps@70"))
    torch.testing.assert_close(weights(tmp_path / "a"), weights(tmp_path / "b"), rtol=0, atol=0)
