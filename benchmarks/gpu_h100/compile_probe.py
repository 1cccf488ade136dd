"""torch.compile of the training step, step by step: where the time of a compiled run goes, from its first step on.

    python benchmarks/gpu_h100/compile_probe.py --kind fast            # the eager step, (a) of train_step.py
    python benchmarks/gpu_h100/compile_probe.py --kind fast+compile    # the same step compiled, (d) of train_step.py

One process per kind, as benchmarks/train_step.py times them; the step is built by train_step.py's `build` (forward
pass and loss compiled as one graph, dynamic shapes; backward and Adam eager) and runs on train_step.py's batches
(Multi30k-like lengths, so the padded shape changes from batch to batch). Prints, as it goes, the seconds of every
step (waiting for the GPU), then the median speed of the steps after the first two, the step at which the compiled
step first runs at its speed, and dynamo's counters (frames compiled, recompilations, graph breaks). Set
TORCH_LOGS=dynamo,inductor to log each phase of compiling with its time."""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # benchmarks/, for train_step
from train_step import build, make_batch  # noqa: E402
from annotated_transformer.devices import resolve_precision  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--kind", choices=["fast", "fast+compile"], required=True)
ap.add_argument("--model", choices=["small", "base"], default="base")
ap.add_argument("--batch-size", type=int, default=128, help="sentence pairs per batch")
ap.add_argument("--steps", type=int, default=30, help="steps in all (the first two are warm-up)")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = ap.parse_args()

device = torch.device(args.device)
precision = resolve_precision(device, "auto")
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
print(f"torch {torch.__version__}, {where}; {args.kind}, {args.model} model, {args.batch_size} pairs per batch, "
      f"{precision}", flush=True)
t_start = time.perf_counter()
step = build(args.kind, args.model, device, precision)
gen = torch.Generator().manual_seed(1)
batches = [make_batch(gen, args.batch_size).to(device) for _ in range(args.steps)]
seconds = []
for i, b in enumerate(batches):
    sync()
    t0 = time.perf_counter()
    step(b)
    sync()
    seconds.append(time.perf_counter() - t0)
    print(f"step {i + 1:3d}  source x target {tuple(b.src.shape)} x {tuple(b.tgt.shape)}  {seconds[-1]:8.3f} s  "
          f"({time.perf_counter() - t_start:.1f} s since the start)", flush=True)
tok_s = [int(b.ntokens) / s for b, s in zip(batches[2:], seconds[2:])]
median = statistics.median(tok_s)
settled = next(i for i, s in enumerate(seconds) if all(t <= 2 * min(seconds) for t in seconds[i:]))
print(f"{args.kind}: {median:.0f} target tok/s (median of steps 3-{args.steps}); steps 1-2 took "
      f"{sum(seconds[:2]):.1f} s; every step from step {settled + 1} on within twice the fastest", flush=True)
if args.kind == "fast+compile":
    from torch._dynamo.utils import counters
    print("dynamo counters:", {k: dict(v) for k, v in counters.items() if k in ("stats", "frames", "recompiles", "graph_break")})
