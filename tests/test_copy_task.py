"""The copy-task command in a subprocess, in full and in mixed precision (the training itself is tested in its notebook)."""
import subprocess
import sys

import torch

from annotated_transformer.training import greedy_decode
from conftest import cli


def test_command_line_runs(tmp_path):
    out = tmp_path / "ckpt"
    res = subprocess.run([sys.executable, "-c", "from annotated_transformer.cli import main; raise SystemExit(main())", "copy-task", "--epochs", "1",
                          "--batches-per-epoch", "2", "--out", str(out), "--device", "cpu"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()


def test_command_line_trains_in_bf16_and_the_checkpoint_decodes_in_fp32(tmp_path):
    """CPU bf16 autocast applies CUDA's dtype rules: this is the CI proxy for mixed-precision training on a GPU."""
    out = tmp_path / "bf16"
    res = cli("copy-task", "--precision", "bf16", "--epochs", "2", "--batches-per-epoch", "3", "--batch-size", "16",
              "--d-model", "32", "--d-ff", "64", "--out", str(out), "--device", "cpu", "--examples", "2", text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "bf16" in res.stdout, res.stdout
    from annotated_transformer.checkpoint import load_model
    model = load_model(out, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    src = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        ys = greedy_decode(model, src, torch.ones(1, 1, 10, dtype=torch.bool), max_len=10, start_symbol=1)
    assert ys.shape == (1, 10) and ys[0, 0].item() == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_tqdm_disable_silences_the_progress_bars(tmp_path):
    """TQDM_DISABLE=1, tqdm's own switch, keeps the bars out of logs (the GPU check sets it); without it they show."""
    import os
    stderr = {}
    for quiet in (False, True):
        env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"} | ({"TQDM_DISABLE": "1"} if quiet else {})
        res = subprocess.run([sys.executable, "-m", "annotated_transformer.cli", "copy-task", "--epochs", "1",
                              "--batches-per-epoch", "2", "--out", str(tmp_path / str(quiet)), "--device", "cpu"],
                             capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        stderr[quiet] = res.stderr
    assert "epoch 1/1" in stderr[False] and "epoch 1/1" not in stderr[True], stderr
