"""Run by tests/test_train_faults.py: one small Multi30k training run, with a fault injected on request.

    python tests/train_worker.py OUT_DIR MODE

MODE: `full` trains normally; `sigterm@N` sends itself SIGTERM right after optimizer step N; `kill-in-save@N` dies
(SIGKILL) in the middle of the N-th save of last/, after its weights and before its other files;
`hold@N` pauses after step N, with OUT_DIR/ready written, until OUT_DIR/go exists. Exits 0 when training ends,
3 when it was stopped (TrainingStopped), 4 when the run folder is locked by another run."""
import os
import signal
import sys
import time
from pathlib import Path

from annotated_transformer import checkpoint, training
from annotated_transformer.model import ModelConfig
from annotated_transformer.train import RunLockedError, TrainConfig, TrainingStopped, train

CONFIG = dict(model=ModelConfig(N=1, d_model=32, d_ff=64, h=2, dropout=0.1), max_tokens=8000, epochs=2, warmup=20,
              min_freq=2, seed=0, val_bleu_sentences=20)


def after_step(n, action):
    "Patch the optimizer step so that `action()` runs right after step n."
    real = training._optimizer_step
    def step(model, optimizer, scheduler, scaler, max_grad_norm, state):
        real(model, optimizer, scheduler, scaler, max_grad_norm, state)
        if state.step == n:
            action()
    training._optimizer_step = step


def die_in_save(n):
    "Patch the weight writer: the n-th save of last/ is killed after its weights file."
    real, calls = checkpoint.save_file, []
    def save_file(tensors, filename, *args, **kw):
        real(tensors, filename, *args, **kw)
        if filename.endswith(checkpoint.WEIGHTS_FILE) and "/.last." in filename and ".tmp/" in filename:
            calls.append(filename)
            if len(calls) == n:
                os.kill(os.getpid(), signal.SIGKILL)
    checkpoint.save_file = save_file


def hold(out):
    (out / "ready").write_text(str(os.getpid()))
    while not (out / "go").exists():  # the test says when to go on
        time.sleep(0.05)


def main(out, mode):
    out = Path(out)
    kind, _, n = mode.partition("@")
    if kind == "sigterm":
        after_step(int(n), lambda: os.kill(os.getpid(), signal.SIGTERM))
    elif kind == "kill-in-save":
        die_in_save(int(n))
    elif kind == "hold":
        after_step(int(n), lambda: hold(out))
    try:
        train(TrainConfig(out_dir=str(out), **CONFIG), device="cpu", progress=True)
    except TrainingStopped as e:
        print(e)
        return 3
    except RunLockedError as e:
        print(e)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
