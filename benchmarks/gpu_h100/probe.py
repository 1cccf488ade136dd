"""GPU probe, run from the repository root: python benchmarks/gpu_h100/probe.py

(1) eager against compiled (aot_eager) gradients of the fast training step, as 06_fast's test computes them, on the
CPU and on CUDA ("current": the package as it is); (2) the same with the fused loss's updates written out of place
("functional", what the package now does); (3) milliseconds per base-model step at 128 sentence pairs, and a
profile of one step, for the fast path in bf16 and fp32 and the explicit path in fp32.
probe_before_fixes.txt is its output before the two fixes it led to, probe_after_fixes.txt after them."""
import sys, time, torch, torch._dynamo
sys.path.insert(0, ".")
from annotated_transformer.model import make_model
from annotated_transformer.batches import Batch
from annotated_transformer.training import LabelSmoothing
from annotated_transformer import fast
from annotated_transformer.fast import speed_up, FastLossCompute
print("torch", torch.__version__)

def loss_of_batch(model, loss_compute, b):
    return loss_compute(model(b.src, b.tgt, b.src_mask, b.tgt_mask), b.tgt_y, b.ntokens)[1]

def check(device, label):
    g = torch.Generator().manual_seed(2)
    src, tgt = torch.randint(1, 11, (4, 7), generator=g), torch.randint(1, 11, (4, 8), generator=g)
    src[0, 5:] = 0; tgt[1, 4:] = 0
    b = Batch(src.to(device), tgt.to(device), pad=0)
    torch.manual_seed(0)
    model = speed_up(make_model(11, 11, N=2, d_model=32, d_ff=64, h=4, dropout=0.0)).to(device)
    lc = FastLossCompute(model.generator, speed_up(LabelSmoothing(11, 0, 0.1)))
    res = []
    for step in (loss_of_batch, torch.compile(loss_of_batch, fullgraph=True, backend="aot_eager")):
        torch._dynamo.reset(); model.zero_grad()
        loss = step(model, lc, b); loss.backward()
        res.append([("loss", loss.detach())] + [(n, p.grad.clone()) for n, p in model.named_parameters()])
    bad = [(n, (e - c).abs().max().item(), c.abs().max().item()) for (n, e), (_, c) in zip(*res) if not torch.allclose(e, c, atol=1e-5)]
    print(label, device, "mismatches:", bad if bad else "none")

for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
    check(dev, "current")
orig = fast._FusedProjectionLabelSmoothing._forward_fp32
def functional(ctx, x, weight, bias, target, confidence, e, pad, chunk):
    V = weight.size(0); const = fast._xlogx(confidence) + (V - 2) * fast._xlogx(e)
    gx, gw, gb, loss = [], 0, 0, 0
    w32, b32 = weight.float(), bias.float()
    for xc, yc in zip(x.split(chunk), target.split(chunk)):
        xc = xc.float(); real = (yc != pad).float().unsqueeze(1)
        z = torch.addmm(b32, xc, w32.t()); lse = z.logsumexp(1, keepdim=True)
        gold = z.gather(1, yc.unsqueeze(1)) - lse
        others = z.sum(1, keepdim=True) - z[:, pad:pad + 1] - (gold + lse) - (V - 2) * lse
        loss = loss + (real * (const - confidence * gold - e * others)).sum()
        t = torch.full_like(z, e).index_fill(1, torch.tensor([pad], device=z.device), 0.0).scatter(1, yc.unsqueeze(1), confidence)
        gz = ((z - lse).exp() - t) * real
        gx.append((gz @ w32).to(x.dtype)); gw = gw + gz.t() @ xc; gb = gb + gz.sum(0)
    ctx.save_for_backward(torch.cat(gx), gw.to(weight.dtype), gb.to(bias.dtype))
    return loss
fast._FusedProjectionLabelSmoothing._forward_fp32 = staticmethod(functional)
for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
    check(dev, "functional")
fast._FusedProjectionLabelSmoothing._forward_fp32 = staticmethod(orig)

if torch.cuda.is_available():
    sys.path.insert(0, "benchmarks")
    import train_step as ts
    from torch.profiler import profile, ProfilerActivity
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(1)
    batches = [ts.make_batch(gen, 128).to(dev) for _ in range(6)]
    for kind, prec in (("fast", "bf16"), ("fast", "fp32"), ("explicit", "fp32")):
        step = ts.build(kind, "base", dev, prec)
        for b in batches[:3]:
            step(b)
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for b in batches[3:]:
            step(b)
        torch.cuda.synchronize(); print(f"\n##### {kind} {prec}: {(time.perf_counter() - t0) / 3 * 1000:.1f} ms/step, tokens {batches[3].ntokens}")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step(batches[4]); torch.cuda.synchronize()
        ka = prof.key_averages()
        print(ka.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))
        print(ka.table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60))
