"""DDP on CPU with gloo: two processes launched by torchrun end with identical parameters, equal to a
single process trained on the same global batches."""
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from conftest import done

WORKER = Path(__file__).with_name("ddp_worker.py")


def worker(*args: str, ranks: int = 2) -> str:
    "tests/ddp_worker.py ARGS: under torchrun in `ranks` processes, or alone (ranks=1) for the reference."
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    launch = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] if ranks > 1 else []
    return done(subprocess.run([sys.executable, *launch, str(WORKER), *args], capture_output=True, text=True, timeout=600,
                               env={**env, "OMP_NUM_THREADS": "1", "ANNOTATED_TRANSFORMER_DEVICE": "cpu"}))


def test_two_gloo_processes_match_single_process(tmp_path):
    worker(str(tmp_path), "4")
    worker(str(tmp_path), "4", ranks=1)
    r0, r1, single = (load_file(tmp_path / f"{name}.safetensors") for name in ("rank0", "rank1", "rank0_single"))
    torch.testing.assert_close(r0, r1, rtol=0, atol=0)  # the ranks end identical
    # The key-projection bias (linears.1.bias) adds the same q.b to every score of a query, which the softmax ignores:
    # its true gradient is exactly 0, and what autograd returns is rounding noise (~1e-9) that differs between a sum
    # over one batch and an average of two. Adam divides by sqrt(v) and turns any such noise into full-size steps, so
    # these four numbers are not comparable; every other one is.
    comparable = lambda weights: {k: v for k, v in weights.items() if not k.endswith("linears.1.bias")}
    torch.testing.assert_close(comparable(r0), comparable(single), atol=1e-5, rtol=1e-4)  # DDP as one process


def test_two_gloo_processes_train_under_bf16_autocast(tmp_path):
    "DDP + CPU bf16 autocast (the dtype rules of CUDA autocast): both ranks end identical, finite, float32."
    worker(str(tmp_path), "3", "bf16")
    r0, r1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    torch.testing.assert_close(r0, r1, rtol=0, atol=0)  # the ranks end identical
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in r0.values())
