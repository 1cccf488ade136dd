"""Where the time of a training step goes: the package's default training path under torch.profiler,
its operator time grouped by what it computes.

The step is the one of `train_step.py` (a): forward, label-smoothed loss, backward, Adam, on batches
of 128 Multi30k-like sentence pairs, in --precision (default 'auto', which is what `train` uses on
this machine). Every operator's own time (not counting the operators it calls) is charged to the
first group, in the order of GROUPS, whose pattern matches the operator or one of the operators
or autograd nodes that called it: a matrix product inside the fused output layer counts as
"output layer + loss", one inside a linear layer's backward node as "matrix products".

Usage: python benchmarks/profile_step.py [--models small base] [--steps 3] [--threads 2] > benchmarks/results_profile.txt
"""
import argparse
import os

import torch
from torch.profiler import ProfilerActivity, profile

from annotated_transformer.devices import resolve_precision
from machine import cpu_name  # benchmarks/machine.py
from train_step import SIZES, build, make_batch

DROPOUT = "dropout (residual, embeddings, attention weights)"  # two entries below charge to it
GROUPS = [  # (group, substrings of operator / autograd node names), first match wins
    ("optimizer (Adam step, zeroing gradients)", ("Optimizer.",)),
    ("output layer + label-smoothed loss (fused)", ("_FusedProjectionLabelSmoothing",)),
    ("layer norm (forward and backward)", ("_LayerNormFunction",)),
    ("feed-forward ReLU + dropout", ("_ReluDropout",)),
    # FastDropout's autograd function, which the CPU's written-out attention also applies to its weights
    (DROPOUT, ("_Dropout",)),
    ("attention (scores, mask, softmax, weighted sum)",
     ("scaled_dot_product", "attention", "aten::bmm", "BmmBackward", "softmax", "Softmax", "masked_fill", "MaskedFill")),
    ("matrix products of the linear layers", ("aten::mm", "aten::addmm", "aten::linear", "Addmm", "MmBackward")),
    (DROPOUT, ("dropout", "bernoulli", "Dropout")),
    ("casts and copies", ("_to_copy", "aten::copy_", "aten::to", "aten::clone", "aten::contiguous")),
    ("embeddings", ("embedding", "Embedding")),
]
OTHER = "other element-wise (residual adds, scaling, positional encoding, autograd bookkeeping)"


def group_of(event) -> str:
    "The group of a profiler event, from its own name and those of its callers."
    names = []
    while event is not None:
        names.append(event.name)
        event = event.cpu_parent
    for group, patterns in GROUPS:
        if any(p in name for name in names for p in patterns):
            return group
    return OTHER


def profile_model(size, steps, precision, batch_size=128):
    "{group: milliseconds per step} of `steps` profiled steps after two warm-up steps."
    step = build("fast", size, torch.device("cpu"), precision)
    gen = torch.Generator().manual_seed(1)
    batches = [make_batch(gen, batch_size) for _ in range(steps + 2)]
    step(batches[0])
    step(batches[1])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for b in batches[2:]:
            step(b)
    totals = {}
    for event in prof.events():
        g = group_of(event)
        totals[g] = totals.get(g, 0.0) + event.self_cpu_time_total / 1e3 / steps
    return totals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["small", "base"], choices=list(SIZES))
    ap.add_argument("--steps", type=int, default=3, help="profiled steps per model")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--precision", default="auto", help="auto, fp32 or bf16")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    precision = resolve_precision("cpu", args.precision)
    print(f"torch {torch.__version__}, {cpu_name()}, {os.cpu_count()} cores, {args.threads} threads; "
          f"default path in {precision}, {args.steps} profiled steps of 128 sentence pairs")
    for size in args.models:
        totals = profile_model(size, args.steps, precision)
        whole = sum(totals.values())
        print(f"\n{size} model {SIZES[size]}: {whole:.0f} ms of operator time per step")
        print("\n| where | ms per step | share |\n| --- | ---: | ---: |")
        for g, ms in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"| {g} | {ms:.0f} | {ms / whole:.0%} |")


if __name__ == "__main__":
    main()
