"""Run by tests/test_train_faults.py: one small Multi30k training run, with a fault injected on request.

    TRAIN_WORKER_CORPUS=DIR python tests/train_worker.py OUT_DIR MODE

DIR holds a small corpus ({train,val,test}.{de,en}: a slice of Multi30k, written by tests/test_train_faults.py), so
that an epoch of 66 batches takes seconds.

MODE: `full` trains normally; `steps@N` trains with max_steps=N; `sigterm@N` (or `sighup@N`) sends itself the
signal during optimizer step N; `kill-in-save@N` dies (SIGKILL) in the middle of the N-th save of last/, after its
weights and before its other files; `hold@N` pauses at step N, with OUT_DIR/ready written, until OUT_DIR/go exists;
`cli-signals-in-save@N` runs the `annotated-transformer train` command, sends itself SIGTERM during step N and then
SIGTERM, SIGHUP and SIGINT while the stop's checkpoint is being written, and exits with the command's status.
Exits 0 when training ends, 3 when it was stopped (TrainingStopped), 4 when the run folder is locked by another run."""
import os
import signal
import sys
import time
from pathlib import Path

from annotated_transformer import checkpoint, training
from annotated_transformer.model import ModelConfig
from annotated_transformer.files import RunLockedError
from annotated_transformer.train import TrainConfig, TrainingStopped, train

CORPUS = os.environ["TRAIN_WORKER_CORPUS"]
SETTINGS = dict(N=1, d_model=32, d_ff=64, h=2, dropout=0.1, corpus_dir=CORPUS, subwords=1000, max_tokens=1200, epochs=2,
                warmup=20, min_freq=2, seed=0, val_bleu_sentences=20)
MODEL = ("N", "d_model", "d_ff", "h", "dropout")  # the settings of ModelConfig; the others are TrainConfig's
CONFIG = dict(model=ModelConfig(**{k: SETTINGS[k] for k in MODEL}), **{k: v for k, v in SETTINGS.items() if k not in MODEL})
CLI_ARGS = [arg for k, v in SETTINGS.items() for arg in (f"--{k.replace('_', '-')}", str(v))]  # the same, as options


def at_step(n, action):
    "Patch the batch counter so that `action()` runs during optimizer step n (after its batch, before its update)."
    real = training.TrainState.add_batch
    def add_batch(self, batch):
        real(self, batch)
        if self.accum_step == n:
            action()
    training.TrainState.add_batch = add_batch


def in_save_of_last(n, action):
    "Patch the weight writer: `action()` runs in the n-th save of last/, after its weights file is written."
    real, calls = checkpoint.save_file, []
    def save_file(tensors, filename, *args, **kw):
        real(tensors, filename, *args, **kw)
        if filename.endswith(checkpoint.WEIGHTS_FILE) and "/.last." in filename and ".tmp/" in filename:
            calls.append(filename)
            if len(calls) == n:
                action()
    checkpoint.save_file = save_file


def hold(out):
    (out / "ready").write_text(str(os.getpid()))
    while not (out / "go").exists():  # the test says when to go on
        time.sleep(0.05)


def send(*signals):
    def action():
        for s in signals:
            os.kill(os.getpid(), s)
    return action


def main(out, mode):
    out = Path(out)
    kind, _, n = mode.partition("@")
    config = dict(CONFIG)
    if kind == "steps":
        config["max_steps"] = int(n)
    elif kind in ("sigterm", "sighup"):
        at_step(int(n), send(signal.SIGTERM if kind == "sigterm" else signal.SIGHUP))
    elif kind == "kill-in-save":
        in_save_of_last(int(n), send(signal.SIGKILL))
    elif kind == "hold":
        at_step(int(n), lambda: hold(out))
    elif kind == "cli-signals-in-save":
        from annotated_transformer import cli
        at_step(int(n), send(signal.SIGTERM))
        in_save_of_last(1, send(signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGTERM))
        return cli.main(["train", "--out-dir", str(out), "--device", "cpu", "--threads", "1", *CLI_ARGS])
    try:
        train(TrainConfig(out_dir=str(out), **config), device="cpu", progress=True)
    except TrainingStopped as e:
        print(e)
        return 3
    except RunLockedError as e:
        print(e)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
