"""Training-step throughput and peak memory: the package's fast path vs its explicit teaching path
vs torch.nn.Transformer of the same size, on the CPU or on a CUDA GPU.

One training step = forward + label-smoothed loss + backward + Adam step, on batches of 128 (or
--batch-sizes) sentence pairs with Multi30k-like lengths and vocabularies of 8000 (source) / 6000 (target).

* (a) fast:     the package as shipped (attention by SDPA on a GPU and written out on the CPU, output layer
                fused with the label-smoothed loss, LayerNorm and ReLU+dropout with hand-written backward passes,
                dropout masks from a quarter of the random bits on the CPU), in --precision (default
                'auto', as training uses it: bf16 on a GPU that has it and on a CPU with bf16 matrix units
                (AMX, AVX512-BF16), else fp16 on older GPUs and fp32 on other CPUs)
* (b) explicit: the teaching path in fp32 (attention weights materialised and kept, target distribution
                built, LayerNorm as the formula is written, plain ReLU + nn.Dropout): the same arithmetic
                as The Annotated Transformer's 2022 code (05_training reproduces that code's losses seed for seed)
* (c) torch:    torch.nn.Transformer (pre-norm, batch_first) + F.cross_entropy(label_smoothing=0.1),
                in the same precision as (a)
* (d) fast+compile (only with --compile): (a) with its forward pass and loss compiled as one graph by
                torch.compile (dynamic shapes, default inductor backend); backward and Adam as in (a)
* (e) fast+torch_masks (only with --torch-masks): (a) with its dropout masks drawn from a random number per
                entry, as PyTorch draws them (nn.Dropout instead of FastDropout, torch.rand for the feed-forward's
                ReLU + dropout): what the 16- and 15-bit masks of `dropout_mask` save
* (f) fast+rdrop (only with --rdrop): (a) trained as `TrainConfig(rdrop=5)` trains: each batch `doubled` (every pair
                twice, under two dropout masks) and `RDropLoss` (both passes' label-smoothed losses plus the KL
                between them, from the full log-probabilities in float32). Its target tokens count each pair once,
                so its tokens/s is the rate at which it gets through the training set, comparable with (a)'s

MFU (model FLOP utilisation) on a GPU whose peak is known (PEAK_FLOPS): the arithmetic a step needs, divided by its
time and the GPU's dense bf16 peak (989 TFLOP/s for an H100 SXM or an H200). A step's FLOPs (`step_flops`) count its
matrix products, forward and backward (three times the forward's, hence the 6 in 6 x parameters):
  6 x (4 d^2 + 2 d d_ff) x N x source tokens                           encoder layers' weights
  6 x (8 d^2 + 2 d d_ff) x N x target tokens + 6 x d x V x target tokens   decoder layers' and output layer's weights
  12 x d x N x (source tokens x S + target tokens x (T + S))             attention's two products, per key position
where tokens are the real (not padding) tokens, S and T the padded source and target lengths (every key is computed,
masked or not), d = d_model and V the target vocabulary. Embeddings, norms and element-wise work are left out, as MFU
usually leaves them. The same FLOPs are charged to every implementation: (b)'s fp32 and (c)'s own arithmetic too.

On a GPU the timings wait for the GPU (torch.cuda.synchronize) and the memory is the peak of
torch.cuda.max_memory_allocated during a step above the memory allocated before it.

Speed: each implementation trains in a process of its own, as a training run would: --repeats
processes each (their order rotating, so that a machine that slows down or speeds up weighs on
all of them alike), each timing --rounds steps on the same batches after two warm-up steps; the
median time per target token over all those steps is reported. (In one process shared by all of
them, the allocator's state left by one implementation changes the next one's time: a step that
follows a step using less memory must fault fresh pages in.)

Memory: measured in a second process started with MALLOC_MMAP_THRESHOLD_=65536. With the
threshold fixed, glibc gives every allocation above 64 KiB its own mapping and returns it to
the OS when freed (by default the threshold adapts and freed tensors linger in the heap, so
resident memory measures the allocator's history more than the program). The peak of a step
is the high-water mark of resident memory during the step (Linux: reset through
/proc/self/clear_refs, read from VmHWM) above the resident memory just before it: activations,
loss tensors and gradients, not the weights and Adam state that all three keep anyway.
Timings are not taken in that process, because an mmap per tensor slows every step.

Usage: python benchmarks/train_step.py [--models small base] [--rounds 5] [--repeats 3] [--threads 2]
       python benchmarks/train_step.py --device cuda --models base --batch-sizes 128 1024 [--compile]
       python benchmarks/train_step.py --precision fp32 --compile --torch-masks --repeats 2   (the fp32 file of the docs)
       python benchmarks/train_step.py --models small --rdrop   (what R-Drop costs, results_train_step_rdrop.txt)
"""
import argparse
import ctypes
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from contextlib import nullcontext
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.batches import Batch
from annotated_transformer.devices import autocast_context, make_grad_scaler, resolve_precision
from annotated_transformer.fast import FastDropout, FastLossCompute, speed_up
from annotated_transformer.layers import sinusoid_table
from annotated_transformer.model import make_model, subsequent_mask
from annotated_transformer.train import RDropLoss, doubled
from annotated_transformer.training import LabelSmoothing, SimpleLossCompute
from machine import cpu_name  # benchmarks/machine.py (the scripts run as python benchmarks/NAME.py)

SIZES = {"small": dict(N=2, d_model=256, d_ff=1024, h=4), "base": dict(N=6, d_model=512, d_ff=2048, h=8)}
SRC_VOCAB, TGT_VOCAB, PAD = 8000, 6000, 2


def make_batch(gen, size=128):
    "`size` pairs; lengths like Multi30k (German ~ 13.9 +- 4.5 tokens, English ~ 13.1 +- 4.1, plus <s> </s>)."
    src_len = (torch.randn(size, generator=gen) * 4.5 + 13.9).round().clamp(4, 40).long() + 2
    tgt_len = (torch.randn(size, generator=gen) * 4.1 + 13.1).round().clamp(4, 40).long() + 2
    src = torch.full((size, int(src_len.max())), PAD)
    tgt = torch.full((size, int(tgt_len.max())), PAD)
    for i in range(size):
        src[i, : src_len[i]] = torch.randint(4, SRC_VOCAB, (int(src_len[i]),), generator=gen)
        tgt[i, : tgt_len[i]] = torch.randint(4, TGT_VOCAB, (int(tgt_len[i]),), generator=gen)
    return Batch(src, tgt, pad=PAD)


class TorchTransformer(nn.Module):
    "Baseline (c): torch.nn.Transformer with the same sizes, embeddings and sinusoidal encoding."
    def __init__(self, N, d_model, d_ff, h, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.src_emb, self.tgt_emb = nn.Embedding(SRC_VOCAB, d_model), nn.Embedding(TGT_VOCAB, d_model)
        self.register_buffer("pe", sinusoid_table(512, d_model))
        self.drop = nn.Dropout(dropout)
        warnings.filterwarnings("ignore", message="enable_nested_tensor")  # nested tensors are for inference only
        self.core = nn.Transformer(d_model, h, N, N, d_ff, dropout, batch_first=True, norm_first=True)
        self.proj = nn.Linear(d_model, TGT_VOCAB)

    def embed(self, emb, x):
        return self.drop(emb(x) * math.sqrt(self.d_model) + self.pe[: x.size(1)])

    def loss(self, b: Batch):
        causal = ~subsequent_mask(b.tgt.size(1))[0].to(b.tgt.device)  # True = masked out, as nn.Transformer expects
        out = self.core(self.embed(self.src_emb, b.src), self.embed(self.tgt_emb, b.tgt), tgt_mask=causal,
                        src_key_padding_mask=b.src == PAD, tgt_key_padding_mask=b.tgt == PAD,
                        memory_key_padding_mask=b.src == PAD)
        logits = self.proj(out)
        return F.cross_entropy(logits.reshape(-1, TGT_VOCAB), b.tgt_y.reshape(-1), ignore_index=PAD,
                               label_smoothing=0.1, reduction="sum") / b.ntokens


PEAK_FLOPS = [("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12), ("L4", 121e12)]  # dense bf16


def step_flops(size: str, b: Batch) -> float:
    "The FLOPs of one training step's matrix products on batch `b` (see the docstring)."
    N, d, d_ff = SIZES[size]["N"], SIZES[size]["d_model"], SIZES[size]["d_ff"]
    src_tokens, tgt_tokens = int((b.src != PAD).sum()), b.ntokens
    S, T = b.src.size(1), b.tgt.size(1)
    weights = 6 * N * ((4 * d * d + 2 * d * d_ff) * src_tokens + (8 * d * d + 2 * d * d_ff) * tgt_tokens)
    attention = 12 * d * N * (src_tokens * S + tgt_tokens * (T + S))
    return weights + attention + 6 * d * TGT_VOCAB * tgt_tokens


def flops_per_target_token(size: str, batch_size: int, rounds: int) -> float:
    "The FLOPs per target token of the batches `bench` times (the same generator and seed)."
    gen = torch.Generator().manual_seed(1)
    batches = [make_batch(gen, batch_size) for _ in range(rounds + 2)][2:]
    return sum(step_flops(size, b) for b in batches) / sum(b.ntokens for b in batches)


def peak_flops(device: torch.device) -> tuple[str, float] | None:
    "(GPU name, dense bf16 FLOP/s) of a GPU in PEAK_FLOPS, or None."
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next(((name, peak) for key, peak in PEAK_FLOPS if key in name), None)


def build(kind, size, device, precision):
    "One training step of implementation `kind` (see the docstring), as a function of a batch."
    torch.manual_seed(0)
    if kind == "explicit":
        precision = "fp32"
    if kind == "torch":
        model = TorchTransformer(**SIZES[size])
        step_loss = model.loss
    else:
        model = make_model(SRC_VOCAB, TGT_VOCAB, **SIZES[size])  # the plain teaching model
        if kind == "explicit":  # the plain path: every attention map kept, the full target distribution built
            crit = SimpleLossCompute(model.generator, LabelSmoothing(TGT_VOCAB, PAD, 0.1))
        else:  # the toolkit's fast layers, closed-form and fused loss, padding skipped
            speed_up(model)
            crit = FastLossCompute(model.generator, speed_up(LabelSmoothing(TGT_VOCAB, PAD, 0.1)))
        def step_loss(b):
            return crit(model(b.src, b.tgt, b.src_mask, b.tgt_mask), b.tgt_y, b.ntokens)[1]
        if kind == "fast+rdrop":  # as train() runs R-Drop: the batch doubled, its loss with the KL between the passes
            rdrop = RDropLoss(model.generator, crit.criterion, 5.0)
            def step_loss(b):
                two = doubled(b)  # (2B, ...)
                return rdrop(model(two.src, two.tgt, two.src_mask, two.tgt_mask), two.tgt_y, two.ntokens)[1]
        if kind == "fast+compile":  # forward pass and loss in one graph (10_fast checks there is no break)
            step_loss = torch.compile(step_loss, fullgraph=True, dynamic=True)
    masks = nullcontext
    if kind == "fast+torch_masks":  # every dropout mask from a random number per entry, as PyTorch draws them
        for m in model.modules():
            if type(m) is FastDropout:
                m.__class__ = nn.Dropout
        def torch_mask(shape, p, device="cpu"):
            return torch.rand(shape, device=device) < p, 1.0 / (1.0 - p)
        masks = lambda: mock.patch("annotated_transformer.fast.dropout_mask", torch_mask)  # _ReluDropout's masks
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    scaler = make_grad_scaler(device, precision)
    def step(b):
        with autocast_context(device, precision), masks():
            loss = step_loss(b)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
    return step




_libc = ctypes.CDLL("libc.so.6") if platform.system() == "Linux" else None


def _rss_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])


def measured_cuda(step, batch):
    "(seconds, peak extra allocated MB) of one step on the GPU."
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    step(batch)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, (torch.cuda.max_memory_allocated() - before) / 2**20


def measured(step, batch):
    "(seconds, peak extra resident MB) of one step."
    if batch.src.is_cuda:
        return measured_cuda(step, batch)
    gc.collect()
    if _libc is not None:
        _libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        before = _rss_kb("VmRSS")
    t0 = time.perf_counter()
    step(batch)
    seconds = time.perf_counter() - t0
    peak = (_rss_kb("VmHWM") - before) / 1024 if _libc is not None else float("nan")
    return seconds, peak


def rotated(kinds, r):
    "`kinds` starting at position r (modulo its length): who goes first changes from round to round."
    return kinds[r % len(kinds):] + kinds[: r % len(kinds)]


def bench(size, rounds, kinds=("fast", "explicit", "torch"), device="cpu", precision="fp32", batch_size=128):
    """Each measured step of each implementation, interleaved in this process: {kind: [(s/token, peak MB), ...]}, and
    {kind: seconds of its two warm-up steps}."""
    steps = {k: build(k, size, device, precision) for k in kinds}
    gen = torch.Generator().manual_seed(1)
    batches = [make_batch(gen, batch_size).to(device) for _ in range(rounds + 2)]
    warmup = {}  # seconds of the two warm-up steps: Adam's state, first-call overheads, compilation
    for k in kinds:
        t0 = time.perf_counter()
        steps[k](batches[0])
        steps[k](batches[1])
        if batches[1].src.is_cuda:  # as measured() decides
            torch.cuda.synchronize()
        warmup[k] = time.perf_counter() - t0
    values = {k: [] for k in kinds}
    for r, b in enumerate(batches[2:]):
        for k in rotated(kinds, r):
            seconds, peak_mb = measured(steps[k], b)
            values[k].append((seconds / b.ntokens, peak_mb))
    return values, warmup


def child(args, phase, runs, kinds, precision, env=None):
    "Run this script again as a child process for one phase; its JSON lines."
    sizes = sorted({b for _, b in runs})
    out = subprocess.run([sys.executable, __file__, "--phase", phase, "--rounds", str(args.rounds), "--threads",
                          str(args.threads), "--device", args.device, "--precision", precision, "--kinds", *kinds,
                          "--models", *sorted({m for m, _ in runs}), "--batch-sizes", *map(str, sizes)],
                         env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if out.returncode != 0:  # show why the child failed, not only that it did
        sys.exit(f"{phase} process for {', '.join(kinds)} failed:\n{out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def speed_apart(args, run, kinds, precision):
    "{kind: (median s/token, median peak MB)} with each kind timed in processes of its own, in rotating order."
    steps = {k: [] for k in kinds}
    for r in range(args.repeats):
        for k in rotated(kinds, r):
            (row,) = child(args, "speed", [run], (k,), precision)
            steps[k] += row["steps"][k]
            # progress on stderr: a run stopped at a time limit still shows what its finished processes measured
            print(f"  {run[0]} model, {run[1]} pairs: {k} process {r + 1}/{args.repeats}: "
                  f"{1 / statistics.median(x[0] for x in row['steps'][k]):.0f} tok/s, "
                  f"warm-up steps {row['warmup_s'][k]:.1f} s", file=sys.stderr, flush=True)
    return {k: tuple(statistics.median(x[i] for x in v) for i in (0, 1)) for k, v in steps.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["small", "base"], choices=list(SIZES))
    ap.add_argument("--rounds", type=int, default=5, help="measured steps per process")
    ap.add_argument("--repeats", type=int, default=3, help="processes per implementation")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", default="auto", help="of (a) and (c): auto, fp32, bf16 or fp16")
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=None,
                    help="sentence pairs per batch (default: 128 on the CPU, 128 and 1024 on a GPU)")
    ap.add_argument("--compile", action="store_true", help="also time (a) under torch.compile")
    ap.add_argument("--torch-masks", action="store_true", help="also time (a) with PyTorch's dropout masks")
    ap.add_argument("--rdrop", action="store_true", help="also time (a) trained with R-Drop (alpha 5)")
    ap.add_argument("--phase", choices=["all", "speed", "memory"], default="all", help=argparse.SUPPRESS)
    ap.add_argument("--kinds", nargs="+", help=argparse.SUPPRESS)  # a child's implementations
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    precision = resolve_precision(device, args.precision)
    kinds = ("fast", "explicit", "torch") + (("fast+compile",) if args.compile else ()) + \
        (("fast+torch_masks",) if args.torch_masks else ()) + (("fast+rdrop",) if args.rdrop else ())
    sizes = args.batch_sizes or ([128, 1024] if device.type == "cuda" else [128])
    runs = [(m, b) for m in args.models for b in sizes]
    if args.phase != "all":  # a child process: one JSON line per (model, batch size)
        for m, b in runs:
            values, warmup = bench(m, args.rounds, tuple(args.kinds), device, precision, b)
            print(json.dumps({"run": [m, b], "steps": values, "warmup_s": warmup}) if args.phase == "speed" else
                  json.dumps({"run": [m, b], **{k: statistics.median(x[1] for x in v) for k, v in values.items()}}))
        return
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpu_name()}, {os.cpu_count()} cores, {args.threads} threads"
    print(f"torch {torch.__version__}, {where}; each implementation in {args.repeats} process{'es' if args.repeats > 1 else ''} of its own, "
          f"{args.rounds} measured steps each; (a) and (c) in {precision}, (b) in fp32")
    results = {run: speed_apart(args, run, kinds, precision) for run in runs}
    memory = {run: {k: v[1] for k, v in r.items()} for run, r in results.items()}  # a GPU's allocated memory
    if device.type == "cpu":  # resident memory is only meaningful in a process with a fixed mmap threshold
        rows = child(args, "memory", runs, kinds, precision, env={"MALLOC_MMAP_THRESHOLD_": "65536"})
        memory = {tuple(row.pop("run")): row for row in rows}
    for run in runs:
        tok_s = {k: 1 / v[0] for k, v in results[run].items()}
        mem = memory[run]
        print(f"\n{run[0]} model {SIZES[run[0]]}, {run[1]} sentence pairs per batch")
        print("\n| implementation | target tokens/s | peak step memory (MB) |\n| --- | ---: | ---: |")
        for k in tok_s:
            print(f"| {k} | {tok_s[k]:.0f} | {mem[k]:.0f} |")
        print(f"\nratios: speed fast/explicit {tok_s['fast'] / tok_s['explicit']:.2f}x, "
              f"fast/torch {tok_s['fast'] / tok_s['torch']:.2f}x; "
              f"memory fast/explicit {mem['fast'] / mem['explicit']:.2f}x, fast/torch {mem['fast'] / mem['torch']:.2f}x"
              + (f"; fast+compile/torch {tok_s['fast+compile'] / tok_s['torch']:.2f}x" if args.compile else "")
              + (f"; fast/fast+torch_masks speed {tok_s['fast'] / tok_s['fast+torch_masks']:.2f}x, memory "
                 f"{mem['fast'] / mem['fast+torch_masks']:.2f}x" if args.torch_masks else "")
              + (f"; fast/fast+rdrop speed {tok_s['fast'] / tok_s['fast+rdrop']:.2f}x, memory "
                 f"{mem['fast+rdrop'] / mem['fast']:.2f}x of fast's" if args.rdrop else ""))
        print_mfu(run, tok_s, peak_flops(device), args.rounds)


def print_mfu(run, tok_s: dict, peak: tuple[str, float] | None, rounds: int) -> None:
    "One line: each implementation's MFU, with the FLOPs per target token and the peak it divides by."
    per_token = flops_per_target_token(run[0], run[1], rounds)
    if peak is None:
        print(f"MFU: no peak known for this device ({per_token / 1e6:.1f} MFLOP per target token)")
        return
    name, flops = peak
    print(f"MFU ({per_token / 1e6:.1f} MFLOP per target token; {name}'s dense bf16 peak {flops / 1e12:.0f} TFLOP/s): "
          + ", ".join(f"{k} {t * per_token / flops:.1%}" for k, t in tok_s.items()))


def read_tables(text: str) -> dict[str, dict[str, tuple[float, float]]]:
    "The tables `main` prints, read back from its output or a log: {model: {implementation: (target tokens/s, peak MB)}}."
    return {model: {k: (float(tok_s), float(mb)) for k, tok_s, mb in re.findall(r"^\| ([\w+]+) \| ([\d.]+) \| ([\d.]+) \|$", block, re.M)}
            for model, block in re.findall(r"^(\w+) model \{[^}]*\}[^\n]*\n\n((?:\|[^\n]*\n)+)", text, re.M)}

if __name__ == "__main__":
    main()
