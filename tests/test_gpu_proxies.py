"""What a CPU can check of the training step a GPU runs: CI's proxies for the GPU's speed and for compiled training.

A GPU step is bound by what the host does: every operator is a kernel launch, and every read of a value on the device
makes the host wait for the GPU. So the operators of one step of the default path must not grow back (counted by
torch.profiler, which counts them on a CPU as on a GPU), and the step must read nothing from the device. The compiled
step must train as the eager one does. The GPU script that measures the rest, benchmarks/gpu_step.py, must run."""
import re

import pytest
import torch

from annotated_transformer import fast
from annotated_transformer.loop import train_epoch
from conftest import ROOT, script

gpu_step = script("benchmarks/gpu_step.py")
train_step = script("benchmarks/train_step.py")

VOCAB = 50
TINY = dict(d_model=32, d_ff=64, h=4)

# Top-level operators of one step of the default path (bf16 autocast, make_optimizer's Adam) on the CPU, for the tiny
# model: `fixed` at N=1, `per_layer` added by each further encoder + decoder layer. An extra operator in a layer's
# forward pass adds at least 2 to per_layer (one per stack), so MARGIN stays below that: the second test shows a
# `.clone()` in the feed-forward layers would fail the budget. Recorded per torch version, as operators change with it.
BUDGETS = {"2.13": dict(fixed=1334, per_layer=1063)}
MARGIN = 1


def step_ops() -> dict:
    "The operators of one step at N=1 (`fixed`), and those each further layer adds (`per_layer`)."
    counted = []
    for N in (1, 2):
        trainer = gpu_step.Trainer(dict(N=N, **TINY), VOCAB, "cpu", "bf16", dropout=0.1)
        batch, warmup = gpu_step.make_batches(2, 4, VOCAB)
        trainer.step(warmup)  # Adam's state exists from here on, as in every step but a run's first
        counted.append(gpu_step.count_ops(trainer, batch))
    return dict(fixed=counted[0], per_layer=counted[1] - counted[0])


def budget() -> dict:
    version = ".".join(torch.__version__.split(".")[:2])
    if version not in BUDGETS:
        pytest.skip(f"no operator budget recorded for torch {version}: record step_ops() in BUDGETS")
    return BUDGETS[version]


def test_a_step_launches_no_more_operators_than_its_budget():
    counted, allowed = step_ops(), budget()
    assert all(counted[k] <= allowed[k] + MARGIN for k in allowed), (counted, allowed)


def test_the_budget_catches_one_extra_operator_per_layer(monkeypatch):
    allowed = budget()
    forward = fast.FastFeedForward.forward
    monkeypatch.setattr(fast.FastFeedForward, "forward", lambda self, x: forward(self, x).clone())
    assert step_ops()["per_layer"] > allowed["per_layer"] + MARGIN


def reads_of_epoch(batches, loss_compute=None):
    "(harmless reads, device reads) of `train_epoch` over `batches`: the reads by Python of a tensor's value."
    trainer = gpu_step.Trainer(dict(N=1, **TINY), VOCAB, "cpu", "bf16", dropout=0.1)
    trainer.step(batches[0])  # Adam's state made
    with gpu_step.HostReads() as reads:
        train_epoch(batches, trainer.model, loss_compute or trainer.loss_compute, trainer.optimizer, trainer.scheduler,
                    precision="bf16", progress=False, max_grad_norm=1.0)
    return gpu_step.expected_reads(reads.reads, trainer.optimizer)


def test_a_step_reads_nothing_from_the_device():
    harmless, device = reads_of_epoch(gpu_step.make_batches(3, 4, VOCAB))
    assert device == []
    assert harmless.count(("__float__", "train_epoch")) == 1  # the epoch's mean loss, once for three steps


def test_a_read_in_the_step_is_caught():
    batches = gpu_step.make_batches(2, 4, VOCAB)
    trainer_loss = gpu_step.Trainer(dict(N=1, **TINY), VOCAB, "cpu", "bf16").loss_compute
    def loss_with_a_read(x, y, norm):
        loss, node = trainer_loss(x, y, norm)
        if loss > 1e6:  # a check of every step's loss: bool() of a tensor waits for the GPU
            raise RuntimeError("diverged")
        return loss, node
    _, device = reads_of_epoch(batches, loss_with_a_read)
    assert ("__bool__", "loss_with_a_read") in device
    x = torch.arange(6.0)
    with gpu_step.HostReads() as reads:
        x[x > 2]  # a masked selection: its size is read from the device
    assert [name for name, _, _ in reads.reads] == ["__getitem__"]


def test_the_compiled_step_trains_as_the_eager_one():  # compiling on a CPU: about a minute of CPU time, in CI too
    """Dropout off, so that the two are deterministic: the first step's gradients, then every step's loss, gradient norm
    and learning rate, equal. (Not the weights: where a gradient is near zero, Adam turns its last bits into an update
    of about the learning rate, either way.)"""
    batches = gpu_step.make_batches(3, 4, VOCAB)
    runs, first_grads = [], []
    for compiled in (False, True):
        torch._dynamo.reset()
        trainer = gpu_step.Trainer(dict(N=1, **TINY), VOCAB, "cpu", "fp32", dropout=0.0, compiled=compiled)
        hook = trainer.optimizer.register_step_pre_hook(
            lambda opt, *_: first_grads.append([q.grad.clone() for g in opt.param_groups for q in g["params"]]))
        trainer.step(batches[0])
        hook.remove()
        runs.append(gpu_step.trace(trainer, batches[1:]))
    torch.testing.assert_close(first_grads[1], first_grads[0], rtol=1e-4, atol=1e-7)
    for eager, compiled in zip(*runs):
        assert compiled["lr"] == eager["lr"]
        torch.testing.assert_close(compiled["loss"], eager["loss"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(compiled["grad_norm"], eager["grad_norm"], rtol=1e-4, atol=1e-7)


@pytest.mark.slow  # compiling on a CPU, a few seconds per dropout site; tools/gpu_check.sh runs it on the GPU
def test_compiled_dropout_keeps_1_minus_p_independently_and_backward_uses_the_same_mask():
    p = 0.1
    for site, stats in gpu_step.check_dropout_sites("cpu", p, d_model=32, d_ff=64, heads=4).items():
        assert abs(stats["kept"] - (1 - p)) < 0.01, (site, stats)
        assert abs(stats["neighbours_agree"] - stats["independent"]) < 0.02, (site, stats)
        assert stats["same_mask_backward"], (site, stats)


def test_the_gpu_probe_runs_on_a_cpu(monkeypatch, capsys):
    "benchmarks/gpu_step.py --dry-run, compiled steps run eagerly here (the tests above compile): no typo waits for a GPU."
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    gpu_step.main(["--dry-run"])
    out = capsys.readouterr().out
    assert "device_reads {}" in out  # the profiled step read nothing from the device
    assert out.count("same_mask_backward': True") == 8  # 4 sites, compiled and eager
    no_dropout = next(line for line in out.splitlines() if line.strip().startswith("dropout 0"))
    assert "0.00e+00" in no_dropout, no_dropout  # the loss difference: the "compiled" run here is the eager one


def test_mfu_counts_the_matrix_products_and_the_gpu_page_gives_the_h100_logs():
    "6 x weights x tokens + attention: for one pair of one token each way, the formula by hand."
    from annotated_transformer.batches import Batch
    b = Batch(torch.tensor([[5]]), torch.tensor([[0, 7]]), pad=train_step.PAD)  # 1 source token, 1 target token
    N, d, d_ff = (train_step.SIZES["small"][k] for k in ("N", "d_model", "d_ff"))
    by_hand = 6 * N * (4 * d * d + 2 * d * d_ff) + 6 * N * (8 * d * d + 2 * d * d_ff) + 6 * d * train_step.TGT_VOCAB \
        + 12 * d * N * (1 * 1 + 1 * (1 + 1))
    assert train_step.step_flops("small", b) == by_hand
    # the GPU page's MFU figures: the H100 log's tokens/s of the default path, at 128 and 1,024 pairs, by `step_flops`
    text = (ROOT / "benchmarks" / "results_gpu_train_step.txt").read_text()
    pairs = [int(n) for n in re.findall(r"^base model .*?, (\d+) sentence pairs per batch$", text, re.M)]
    tok_s = [float(v) for v in re.findall(r"^\| fast \| ([\d.]+) \|", text, re.M)]
    assert pairs == [128, 1024] and len(tok_s) == 2
    page = (ROOT / "docs" / "17_gpu.md").read_text()
    for n, rate in zip(pairs, tok_s):
        mfu = rate * train_step.flops_per_target_token("base", n, 10) / 989e12  # the benchmark's 10 rounds
        assert f"{100 * mfu:.1f} % MFU" in page, (n, mfu)
