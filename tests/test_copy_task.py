"""The copy task learns to copy exactly (fixed seed, bounded steps, no timing) and the CLI runs."""
import subprocess
import sys

import torch

from annotated_transformer.copy_task import CopyTaskConfig, copy_batches, train_copy_task
from annotated_transformer.training import greedy_decode


def test_copy_task_copies_fresh_inputs_exactly():
    cfg = CopyTaskConfig(epochs=15, batches_per_epoch=20, seed=0)
    model, history = train_copy_task(cfg, device="cpu", progress=False)
    assert history[-1]["train_loss"] < history[0]["train_loss"] / 5
    # fresh inputs from a generator the training never used
    src = next(copy_batches(cfg.vocab, 100, 1, cfg.seq_len, torch.Generator().manual_seed(987654))).src
    out = greedy_decode(model, src, torch.ones(100, 1, cfg.seq_len, dtype=torch.bool), cfg.seq_len, start_symbol=1)
    exact = (out == src).all(dim=1).float().mean().item()
    assert exact >= 0.98, f"only {exact:.0%} exact copies"


def test_command_line_runs(tmp_path):
    out = tmp_path / "ckpt"
    res = subprocess.run([sys.executable, "-c", "from annotated_transformer.cli import main; raise SystemExit(main())", "copy-task", "--epochs", "1",
                          "--batches-per-epoch", "2", "--out", str(out), "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "checkpoint written to" in res.stdout
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
