"""Attention on the CPU: `F.scaled_dot_product_attention` against equation 1 written out, the two ways
`FastMultiHeadedAttention` can attend (`attend_sdpa` and `attend_written_out`).

One call = the heads' attention of one layer (the step between the projections and W^O) over a batch of
128 Multi30k-like source sentences with their padding mask, at the small and base models' sizes:

* training pass: forward and backward, dropout 0.1 on the weights (the module in train mode);
* inference pass: forward only, without gradients and without dropout.

Each in float32 and under bf16 autocast. The two ways are interleaved (round robin, the same inputs) and the
median of --rounds calls is reported.

Usage: python benchmarks/attention.py [--rounds 30] [--threads 2] > benchmarks/results_attention.txt
"""
import argparse
import os
import statistics
import time

import torch

from annotated_transformer.devices import autocast_context, cpu_bf16_native
from annotated_transformer.fast import FastMultiHeadedAttention
from machine import cpu_name  # benchmarks/machine.py
from train_step import SIZES, make_batch  # the train-step benchmark's models and batches

WAYS = ("attend_sdpa", "attend_written_out")


def milliseconds(module, way, q, k, v, mask, training, precision):
    "Time of one call of `module.<way>`, forward and (when training) backward, in ms."
    start = time.perf_counter()
    with torch.set_grad_enabled(training), autocast_context("cpu", precision):
        out = getattr(module, way)(q, k, v, mask)
    if training:
        out.float().sum().backward()
    return (time.perf_counter() - start) * 1e3


def bench(size, precision, training, rounds):
    "{way: median ms per call} for one model size, precision and pass."
    cfg = SIZES[size]
    h, d_k = cfg["h"], cfg["d_model"] // cfg["h"]
    module = FastMultiHeadedAttention(h, cfg["d_model"], dropout=0.1).train(training)
    batch = make_batch(torch.Generator().manual_seed(1))
    length = batch.src.size(1)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32  # what the projections give under autocast
    q, k, v = (torch.randn(batch.src.size(0), h, length, d_k, dtype=dtype, requires_grad=training) for _ in range(3))
    mask = batch.src_mask.unsqueeze(1)  # (batch, 1, 1, keys), as `MultiHeadedAttention.forward` passes it
    times = {way: [] for way in WAYS}
    for r in range(rounds + 2):
        for way in (WAYS if r % 2 else WAYS[::-1]):  # alternate who goes first
            ms = milliseconds(module, way, q, k, v, mask, training, precision)
            if r >= 2:  # two warm-up rounds
                times[way].append(ms)
    return {way: statistics.median(t) for way, t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30, help="measured calls of each way")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {cpu_name()}, {os.cpu_count()} cores, {args.threads} threads, "
          f"bf16 matrix units: {'yes' if cpu_bf16_native() else 'no'}, "
          f"median of {args.rounds} calls\n")
    print("| model | precision | pass | SDPA (ms) | written out (ms) | SDPA / written out |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for size in SIZES:
        for precision in ("fp32", "bf16"):
            for training in (True, False):
                ms = bench(size, precision, training, args.rounds)
                sdpa, written = ms["attend_sdpa"], ms["attend_written_out"]
                print(f"| {size} | {precision} | {'training' if training else 'inference'} | {sdpa:.2f} | {written:.2f} "
                      f"| {sdpa / written:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
