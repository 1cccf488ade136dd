"""The copy-task command in a subprocess, in full and in mixed precision (the training itself is tested in its notebook)."""
import os
import subprocess
import sys

import pytest
import torch

from annotated_transformer.training import greedy_decode
from conftest import cli, done


@pytest.mark.parametrize("quiet", [False, True], ids=["bars", "TQDM_DISABLE"])
def test_command_line_runs_and_tqdm_disable_silences_the_progress_bars(tmp_path, quiet):
    """TQDM_DISABLE=1, tqdm's own switch, keeps the bars out of logs (the GPU check sets it); without it they show."""
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"} | ({"TQDM_DISABLE": "1"} if quiet else {})
    res = subprocess.run([sys.executable, "-m", "annotated_transformer.cli", "copy-task", "--epochs", "1",
                          "--batches-per-epoch", "2", "--out", str(tmp_path / "ckpt"), "--device", "cpu"],
                         capture_output=True, text=True, timeout=300, env=env)
    done(res)
    assert ("epoch 1/1" in res.stderr) is not quiet, res.stderr
    assert (tmp_path / "ckpt" / "model.safetensors").is_file() and (tmp_path / "ckpt" / "config.json").is_file()


def test_command_line_trains_in_bf16_and_the_checkpoint_decodes_in_fp32(tmp_path):
    """CPU bf16 autocast applies CUDA's dtype rules: this is the CI proxy for mixed-precision training on a GPU."""
    out = tmp_path / "bf16"
    assert "bf16" in done(cli("copy-task", "--precision", "bf16", "--epochs", "2", "--batches-per-epoch", "3",
                              "--batch-size", "16", "--d-model", "32", "--d-ff", "64", "--out", str(out), "--device",
                              "cpu", "--examples", "2", text=True))
    from annotated_transformer.checkpoint import load_model
    model = load_model(out, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    src = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        ys = greedy_decode(model, src, torch.ones(1, 1, 10, dtype=torch.bool), max_len=10, start_symbol=1)
    assert ys.shape == (1, 10) and ys[0, 0].item() == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
