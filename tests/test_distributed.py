"""DDP on CPU with gloo: two processes launched by torchrun end with identical parameters, equal to a
single process trained on the same global batches."""
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("ddp_worker.py")


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "OMP_NUM_THREADS": "1", "ANNOTATED_TRANSFORMER_DEVICE": "cpu"}


def test_two_gloo_processes_match_single_process(tmp_path):
    steps = 4
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(WORKER), str(tmp_path), str(steps)], capture_output=True, text=True, timeout=600, env=_env())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = subprocess.run([sys.executable, str(WORKER), str(tmp_path), str(steps)], capture_output=True, text=True,
                         timeout=600, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    r0, r1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    single = load_file(tmp_path / "rank0_single.safetensors")
    assert r0.keys() == r1.keys() == single.keys()
    for k in r0:
        assert torch.equal(r0[k], r1[k]), f"ranks differ in {k}"
        if k.endswith("linears.1.bias"):
            # The key-projection bias adds the same q.b to every score of a query, which the softmax ignores:
            # its true gradient is exactly 0, and what autograd returns is rounding noise (~1e-9) that differs
            # between a sum over one batch and an average of two. Adam divides by sqrt(v) and turns any such
            # noise into full-size steps, so these four numbers are not comparable; every other one is.
            continue
        torch.testing.assert_close(r0[k], single[k], atol=1e-5, rtol=1e-4, msg=f"DDP and single process differ in {k}")


def test_two_gloo_processes_train_under_bf16_autocast(tmp_path):
    "DDP + CPU bf16 autocast (the dtype rules of CUDA autocast): both ranks end identical, finite, float32."
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(WORKER), str(tmp_path), "3", "bf16"], capture_output=True, text=True, timeout=600, env=_env())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    r0, r1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    for k in r0:
        assert r0[k].dtype == torch.float32 and torch.isfinite(r0[k]).all(), k
        assert torch.equal(r0[k], r1[k]), f"ranks differ in {k}"
