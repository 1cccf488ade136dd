"""The default path's training step, checked where a GPU loses time or trains differently; every part runs on a CPU too.

A step is what `train` runs for one batch: `train_epoch` on one batch of the fast model (`speed_up`), with
`make_optimizer`'s Adam and schedule, in the precision "auto" picks. Four parts, each printed as it ends:

1. profile: one step at --pairs sentence pairs under torch.profiler, after two warm-up steps. It counts the operators
   the step runs, and on a GPU the kernels, the kernel launches, the step's time against the GPU's busy time, and the
   copies and synchronisations that make the host wait. `HostReads` lists every read of a tensor's value by Python
   (`.item()`, `float(t)`, `bool(t)`, ...), with the function that made it; `expected_reads` says which are harmless.
2. dropout sites: each dropout of the model, compiled alone on its real layout (FastDropout on (batch, length, d_model),
   also after a transpose as the heads are merged; the feed-forward's ReLU + dropout; attention's dropout inside
   `F.scaled_dot_product_attention`), its input all ones so that the output *is* the mask. Per site: the share kept
   (expected 1 - p), whether two neighbours agree as often as independent draws would, and whether the backward pass
   used the forward's mask.
3. compare: the same model trained from the same seed, eagerly and with `torch.compile(model, dynamic=True)` (as
   gpu_h100/train_compile.py compiled it), step by step: loss, gradient norm, learning rate. Three pairs of runs:
   dropout off (the two must agree to rounding), dropout on, and dropout on with inductor's `fallback_random` (the
   compiled run draws eager's masks, so the two must agree again). A last run with dropout on, eager with another
   seed, says how far two eager runs part by chance.

Usage:
    python benchmarks/gpu_step.py --device cuda --log benchmarks/results_gpu_step.txt
    python benchmarks/gpu_step.py --dry-run          (a tiny model on the CPU, a few steps: checks the script itself)
"""
import argparse
import datetime
import statistics
import sys
import time
from collections import Counter

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile

from annotated_transformer.batches import Batch
from annotated_transformer.devices import resolve_precision
from annotated_transformer.fast import FastDropout, FastLossCompute, _ReluDropout, speed_up
from annotated_transformer.loop import train_epoch
from annotated_transformer.model import make_model
from annotated_transformer.training import LabelSmoothing, make_optimizer

SIZES = {"tiny": dict(N=2, d_model=32, d_ff=64, h=4), "recipe": dict(N=3, d_model=256, d_ff=1024, h=8),
         "base": dict(N=6, d_model=512, d_ff=2048, h=8)}
PAD = 2


# ------------------------------------------------------------------ the step

def make_batches(n: int, pairs: int, vocab: int, seed: int = 1) -> list[Batch]:
    "`n` batches of `pairs` sentence pairs with Multi30k-like lengths (about 14 tokens, some padding), on the CPU."
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        src_len = (torch.randn(pairs, generator=gen) * 4.5 + 13.9).round().clamp(4, 40).long() + 2
        tgt_len = (torch.randn(pairs, generator=gen) * 4.1 + 13.1).round().clamp(4, 40).long() + 2
        src = torch.randint(4, vocab, (pairs, int(src_len.max())), generator=gen)
        tgt = torch.randint(4, vocab, (pairs, int(tgt_len.max())), generator=gen)
        src[torch.arange(src.size(1)) >= src_len[:, None]] = PAD  # padding after each sentence
        tgt[torch.arange(tgt.size(1)) >= tgt_len[:, None]] = PAD
        out.append(Batch(src, tgt, pad=PAD))
    return out


class Trainer:
    "The default path's model, optimizer, schedule and loss, and its step: `train_epoch` on one batch."
    def __init__(self, size: str | dict, vocab: int, device, precision: str = "auto", dropout: float = 0.1, seed: int = 0,
                 compiled: bool = False):  # size: a name of SIZES, or its N, d_model, d_ff and h
        size = SIZES[size] if isinstance(size, str) else size
        torch.manual_seed(seed)
        self.model = speed_up(make_model(vocab, vocab, dropout=dropout, **size)).to(device)
        self.optimizer, self.scheduler = make_optimizer(self.model, size["d_model"], warmup=400)
        self.loss_compute = FastLossCompute(self.model.generator, speed_up(LabelSmoothing(vocab, PAD, 0.1)))
        self.precision = resolve_precision(torch.device(device), precision)
        self.step_model = torch.compile(self.model, dynamic=True) if compiled else self.model

    def step(self, batch: Batch) -> float:
        "One optimizer step on `batch`; its loss per target token (read once, at the end, as an epoch reads it)."
        loss, _ = train_epoch([batch], self.step_model, self.loss_compute, self.optimizer, self.scheduler,
                              precision=self.precision, progress=False)
        return loss


# ------------------------------------------------------------------ 1. what a step launches and reads

class HostReads(TorchFunctionMode):
    "Within this block, every read of a tensor's value by Python is listed: (what, the tensor, the function that read)."
    READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy", "__array__", "nonzero"}

    def __init__(self):
        super().__init__()
        self.reads = []  # (name, tensor, caller)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        data_dependent_index = name == "__getitem__" and any(  # x[mask]: its size is read from the device
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if isinstance(args[1], tuple) else (args[1],)))
        if name in self.READS or data_dependent_index:
            self.reads.append((name, args[0], _caller()))
        return func(*args, **(kwargs or {}))


def _caller() -> str:
    "The innermost function outside torch itself, and the innermost inside torch's optimizers (they read on purpose)."
    frame, names = sys._getframe(2), []
    while frame is not None and "/torch/" in frame.f_code.co_filename.replace("\\", "/"):
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return f"{frame.f_code.co_name if frame else '?'}" + (f" > {names[-1]}" if names else "")


def expected_reads(reads, optimizer) -> tuple[list, list]:
    """(harmless, device reads) of `HostReads.reads` in one step. Harmless: the token ids checked on the CPU before the
    batch's copy (`check_token_ids`), Adam's step counters (kept on the CPU by torch unless `fused` or `capturable`),
    and the epoch's mean loss read once at its end (`train_epoch`)."""
    counters = {id(s["step"]) for s in optimizer.state.values() if "step" in s and s["step"].device.type == "cpu"}
    harmless, device = [], []
    for name, tensor, caller in reads:
        ok = caller.startswith("check_token_ids") or id(tensor) in counters or (caller == "train_epoch" and name == "__float__")
        (harmless if ok else device).append((name, caller))
    return harmless, device


def count_ops(trainer: Trainer, batch: Batch) -> int:
    "The top-level operators (aten ops not called by another aten op) one step runs, counted by torch.profiler."
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.step(batch)
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and not
               (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::")))


def profile_step(trainer: Trainer, batch: Batch, device: torch.device) -> dict:
    """One step timed, then one under torch.profiler (after two warm-up steps): operators, kernels, launches, syncs,
    copies to the host and the GPU's busy time. A step much longer than the GPU is busy is bound by the host."""
    for _ in range(2):
        trainer.step(batch)
    t0 = time.perf_counter()
    trainer.step(batch)  # not profiled: the step's own time (it ends by reading its loss, so the GPU has finished)
    step_s = time.perf_counter() - t0
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with HostReads() as reads, profile(activities=activities) as prof:
        trainer.step(batch)
    events = prof.events()
    names = Counter(e.name for e in events)
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    harmless, device_reads = expected_reads(reads.reads, trainer.optimizer)
    return dict(
        operators=sum(1 for e in events if e.name.startswith("aten::") and not
                      (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))),
        kernels=len(kernels), gpu_busy_ms=round(sum(e.time_range.elapsed_us() for e in kernels) / 1e3, 2) if cuda else None,
        launches=sum(n for k, n in names.items() if "LaunchKernel" in k or k == "cuLaunchKernel"),
        syncs=sum(n for k, n in names.items() if "Synchronize" in k),
        copies_to_host=sum(1 for e in events if "Memcpy DtoH" in e.name or "Memcpy D2H" in e.name),
        step_ms=round(step_s * 1e3, 2), harmless_reads=dict(Counter(harmless)), device_reads=dict(Counter(device_reads)),
        table=prof.key_averages().table(sort_by="device_time_total" if cuda else "cpu_time_total", row_limit=25))


# ------------------------------------------------------------------ 2. the dropout masks, eager and compiled

def _sdpa_site(p: float):
    "Attention's dropout: with q = k = 0 every weight is 1/S and v the identity, so the output is the kept mask."
    def site(x):  # x: (batch, heads, S, S) ones; v is the identity, and x gets v's gradient
        q = torch.zeros_like(x)
        v = x - x.detach() + torch.eye(x.size(-1), device=x.device)
        return F.scaled_dot_product_attention(q, q, v, dropout_p=p) * x.size(-1)
    return site


def dropout_sites(p: float, d_model: int, d_ff: int, heads: int) -> dict:
    "{site: (function of an all-ones input, the input's shape)}: each of the model's dropouts on its real layout."
    drop = FastDropout(p).train()
    def merged_heads(x):  # (batch, heads, length, d_k) -> (batch, length, d_model), as attention merges its heads
        return drop(x.transpose(1, 2).contiguous().view(x.size(0), x.size(2), -1))
    return {"residual / embeddings: FastDropout (batch, length, d_model)": (drop, (32, 24, d_model)),
            "after merging heads: FastDropout of a transposed copy": (merged_heads, (32, heads, 24, d_model // heads)),
            "feed-forward: _ReluDropout (batch, length, d_ff)": (lambda x: _ReluDropout.apply(x, p), (32, 24, d_ff)),
            ATTENTION: (_sdpa_site(p), (8, heads, 24, 24))}


ATTENTION = "attention weights: F.scaled_dot_product_attention"


def backward_mask(name: str, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    "The mask the backward pass used, in the output's layout, from the input's gradient."
    if name == ATTENTION:  # the output's gradient is the identity: v's gradient is the kept weights, transposed
        out.backward(torch.eye(out.size(-1), device=out.device).expand_as(out))
        return x.grad.transpose(-2, -1) != 0
    out.backward(torch.ones_like(out))
    if x.dim() == 4:  # the merged-heads site: the gradient comes back in the heads' layout
        return x.grad.transpose(1, 2).reshape(out.shape) != 0
    return x.grad != 0


def mask_stats(name: str, site, shape: tuple, p: float, device) -> dict:
    "Keep rate, neighbours' agreement (independent draws: p^2 + (1-p)^2) and one mask in both passes, of one site."
    x = torch.ones(shape, device=device, requires_grad=True)
    out = site(x)
    kept = out.detach() != 0
    rows = kept.reshape(-1, out.size(-1)).float()  # rows of the last dimension
    return dict(kept=round(rows.mean().item(), 4), expected=round(1 - p, 4),
                neighbours_agree=round((rows[:, 1:] == rows[:, :-1]).float().mean().item(), 4),
                independent=round(p * p + (1 - p) ** 2, 4),
                same_mask_backward=bool((backward_mask(name, x, out) == kept).all()))


def check_dropout_sites(device, p: float = 0.1, d_model: int = 256, d_ff: int = 1024, heads: int = 8,
                        compiled: bool = True) -> dict:
    "{site: mask_stats} for every dropout site, compiled by inductor (or eager)."
    out = {}
    for name, (site, shape) in dropout_sites(p, d_model, d_ff, heads).items():
        torch._dynamo.reset()
        out[name] = mask_stats(name, torch.compile(site, dynamic=False) if compiled else site, shape, p, device)
    return out


# ------------------------------------------------------------------ 3. eager and compiled training, step by step

def trace(trainer: Trainer, batches: list[Batch]) -> list[dict]:
    "Per step: loss, the gradients' global norm before the update and the learning rate it used."
    norms = []
    def before_step(optimizer, *_):
        grads = [q.grad for group in optimizer.param_groups for q in group["params"] if q.grad is not None]
        norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())
    hook = trainer.optimizer.register_step_pre_hook(before_step)
    rows = []
    try:
        for batch in batches:
            lr = trainer.optimizer.param_groups[0]["lr"]
            loss = trainer.step(batch)  # the hook has read the gradients' norm before the update
            rows.append(dict(loss=loss, grad_norm=norms[-1], lr=lr))
    finally:
        hook.remove()
    return rows


def compare_runs(size: str, vocab: int, device, steps: int, pairs: int, precision: str = "auto") -> dict:
    "{run: trace} of eager and compiled runs from one seed, dropout off and on, and an eager run of another seed."
    batches = make_batches(steps, pairs, vocab, seed=2)
    runs = {}
    for name, p, compiled, seed in (("eager, dropout 0", 0.0, False, 0), ("compiled, dropout 0", 0.0, True, 0),
                                    ("eager, dropout 0.1", 0.1, False, 0), ("compiled, dropout 0.1", 0.1, True, 0),
                                    ("eager, dropout 0.1, seed 1", 0.1, False, 1)):
        torch._dynamo.reset()
        t0 = time.perf_counter()
        runs[name] = trace(Trainer(size, vocab, device, precision, p, seed, compiled), batches)
        print(f"   {name}: {steps} steps in {time.perf_counter() - t0:.0f} s", flush=True)
    return runs


def summarise(runs: dict) -> list[str]:
    "What the runs say: where the dropout-free pair parts, and each dropout run's mean loss over its second half."
    lines = []
    eager, compiled = runs["eager, dropout 0"], runs["compiled, dropout 0"]
    worst = max(range(len(eager)), key=lambda i: abs(eager[i]["loss"] - compiled[i]["loss"]))
    lines.append(f"dropout 0: largest loss difference {abs(eager[worst]['loss'] - compiled[worst]['loss']):.2e} at step "
                 f"{worst + 1}; learning rates equal: {all(a['lr'] == b['lr'] for a, b in zip(eager, compiled))}")
    half = len(eager) // 2
    for name, rows in runs.items():
        tail = rows[half:] or rows
        lines.append(f"{name}: mean loss {statistics.mean(r['loss'] for r in tail):.4f}, mean gradient norm "
                     f"{statistics.mean(r['grad_norm'] for r in tail):.3f} over steps {half + 1}-{len(rows)}")
    return lines


# ------------------------------------------------------------------ the script

def part_profile(args, device) -> None:
    trainer = Trainer(args.profile_model, args.vocab, device, args.precision)
    result = profile_step(trainer, make_batches(1, args.pairs, args.vocab)[0], device)
    table = result.pop("table")
    print(f"\n1. one step of the {args.profile_model} model, {args.pairs} pairs, {trainer.precision}: "
          + ", ".join(f"{k} {v}" for k, v in result.items()))
    print(table)


def part_dropout(args, device) -> None:
    size = SIZES[args.model]
    print(f"\n2. dropout sites (p = 0.1, the {args.model} model's widths), compiled by inductor and eager")
    for compiled in (True, False):
        for name, stats in check_dropout_sites(device, 0.1, size["d_model"], size["d_ff"], size["h"], compiled).items():
            print(f"   {'compiled' if compiled else 'eager   '} {name}: {stats}", flush=True)


def part_compare(args, device) -> None:
    print(f"\n3. eager and compiled training of the {args.model} model, {args.steps} steps of {args.pairs} pairs, "
          f"precision {resolve_precision(device, args.precision)}")
    runs = compare_runs(args.model, args.vocab, device, args.steps, args.pairs, args.precision)
    for line in summarise(runs):
        print(f"   {line}")
    print("   step | " + " | ".join(runs))
    for i in range(0, args.steps, max(1, args.steps // 20)):
        print(f"   {i + 1:4d} | " + " | ".join(f"{r[i]['loss']:.4f} {r[i]['grad_norm']:.3f} {r[i]['lr']:.2e}"
                                                for r in runs.values()))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--parts", nargs="+", default=["profile", "dropout", "compare"], choices=["profile", "dropout", "compare"])
    ap.add_argument("--profile-model", default="base", choices=list(SIZES), help="the model profiled (default: base)")
    ap.add_argument("--model", default="recipe", choices=list(SIZES), help="the model compared (default: the recipe's)")
    ap.add_argument("--pairs", type=int, default=128, help="sentence pairs per batch (default: 128)")
    ap.add_argument("--steps", type=int, default=200, help="steps of each compared run (default: 200)")
    ap.add_argument("--vocab", type=int, default=8000, help="both vocabularies' size (default: 8000)")
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU, a few steps: checks the script")
    args = ap.parse_args(argv)
    if args.dry_run:
        args.device, args.profile_model, args.model, args.pairs, args.steps, args.vocab = "cpu", "tiny", "tiny", 8, 4, 50
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; {name}; torch {torch.__version__}")
    parts = {"profile": part_profile, "dropout": part_dropout, "compare": part_compare}
    for part in args.parts:
        t0 = time.perf_counter()
        parts[part](args, device)
        print(f"-- {part}: {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
