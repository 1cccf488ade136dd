"""Why did the recipe trained with compiled steps on an H100 score 2.5 BLEU below the CPU runs? Two checks, each
printed as it ends:

1. attention dropout: does the backward pass of `F.scaled_dot_product_attention` use the mask its forward pass drew?
   With q = k = 0 every weight is 1/S, and with v the identity the output *is* the kept mask, scaled; with the identity
   as the output's gradient, v's gradient is that mask (transposed) as the backward pass saw it. Eager and compiled,
   with the additive mask the model passes, in float32 and under bf16 autocast.
2. fresh masks: two calls of compiled dropout (nn.functional.dropout, and the feed-forward's `_ReluDropout`) on the
   same input must draw different masks.
3. one training step without dropout: the recipe's model (N=3, d_model 256, tied embeddings) on one batch with padding,
   gradients of the eager and the compiled step (bf16 autocast) against the same step in float64 on the CPU.

    python benchmarks/gpu_h100/compile_quality_probe.py --device cuda
"""
import argparse
import copy
import time

import torch
import torch.nn.functional as F

from annotated_transformer.batches import Batch
from annotated_transformer.devices import autocast_context
from annotated_transformer.fast import FastLossCompute, speed_up
from annotated_transformer.model import ModelConfig, build_model
from annotated_transformer.training import LabelSmoothing


def dropout_mask_check(device: torch.device, compiled: bool, precision: str) -> tuple[bool, float]:  # (one mask, kept)
    B, H, S, p = 4, 8, 32, 0.3
    mask = torch.zeros(B, 1, 1, S, device=device)  # additive, nothing masked: as `attend_sdpa` passes it

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), dropout_p=p)

    fn = torch.compile(attend) if compiled else attend
    q = torch.zeros(B, H, S, S, device=device)
    v = torch.eye(S, device=device).expand(B, H, S, S).clone().requires_grad_()
    with autocast_context(device, precision):
        out = fn(q, q.clone(), v)  # out[b, h, i, j] = kept[i, j] / ((1 - p) S)
    (out.float() * torch.eye(S, device=device)).sum().backward()  # v.grad[b, h, j, i] = kept[i, j] / ((1 - p) S)
    forward_mask, backward_mask = out.detach().float() > 0, v.grad.transpose(-2, -1) > 0
    return bool((forward_mask == backward_mask).all()), round(forward_mask.float().mean().item(), 3)


def gradients(model, batch, loss_compute, device, precision, compile_model=False) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    step = torch.compile(model, dynamic=True) if compile_model else model
    with autocast_context(device, precision):
        out = step(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)
        _, loss_node = loss_compute(out, batch.tgt_y, batch.ntokens)
    loss_node.backward()
    return torch.cat([p.grad.flatten().double().cpu() for p in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}")

    print("\n1. attention dropout: forward and backward use one mask")
    for compiled in (False, True):
        for precision in ("fp32", "bf16"):
            t0 = time.perf_counter()
            same, kept = dropout_mask_check(device, compiled, precision)
            print(f"   {'compiled' if compiled else 'eager   '} {precision}: same mask {same}, kept {kept} "
                  f"(expected 0.7)  {time.perf_counter() - t0:.0f}s", flush=True)

    print("\n2. fresh masks from one compiled call to the next")
    from annotated_transformer.fast import _ReluDropout
    x = torch.ones(64, 1024, device=device)
    for name, fn in (("F.dropout", lambda x: F.dropout(x, 0.2)), ("_ReluDropout", lambda x: _ReluDropout.apply(x, 0.2))):
        compiled = torch.compile(fn)
        first, second = compiled(x) == 0, compiled(x) == 0
        print(f"   {name}: dropped {first.float().mean().item():.3f} then {second.float().mean().item():.3f}, "
              f"same mask twice: {bool((first == second).all())}", flush=True)

    print("\n3. one step without dropout: gradients against float64 on the CPU (relative error of all gradients)")
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab=8000, tgt_vocab=8000, N=3, d_model=256, d_ff=1024, h=8, dropout=0.0, tie_embeddings=True)
    model = speed_up(build_model(cfg))
    lengths = torch.randint(8, 30, (64,))
    src = torch.randint(4, 8000, (64, 30)); tgt = torch.randint(4, 8000, (64, 31))
    for i, n in enumerate(lengths):  # padding (id 2) after each sentence's length
        src[i, n:] = 2; tgt[i, n + 1:] = 2
    tgt[:, 0] = 0
    loss_compute = lambda m: FastLossCompute(m.generator, speed_up(LabelSmoothing(8000, 2, 0.1)))
    reference = copy.deepcopy(model).double()
    ref = gradients(reference, Batch(src, tgt), loss_compute(reference), torch.device("cpu"), "fp32")
    model = model.to(device)
    batch = Batch(src, tgt).to(device)
    for name, precision, compiled in (("eager fp32", "fp32", False), ("eager bf16", "bf16", False),
                                      ("compiled bf16", "bf16", True)):
        t0 = time.perf_counter()
        g = gradients(model, batch, loss_compute(model), device, precision, compiled)
        print(f"   {name}: {((g - ref).norm() / ref.norm()).item():.2e}  {time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
