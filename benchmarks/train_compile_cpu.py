"""The CPU's side of benchmarks/gpu_h100/train_compile.py: does a run whose training steps are compiled train as
well as an eager one? A small model (N=2, d_model 128, d_ff 512, 4 heads, dropout 0.2) on Multi30k with the recipe's
other settings (BPE 8,000, batches of 2,500 tokens, warmup 800, bf16 where the CPU computes it natively), six epochs
eager and then six compiled (`compiled_steps`: training passes through `torch.compile(model, dynamic=True)`), one seed:
train and validation loss and seconds of every epoch.

    python benchmarks/train_compile_cpu.py > benchmarks/results_train_compile_cpu.txt
"""
import datetime
import sys
import tempfile
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent / "gpu_h100"))
from train_compile import compiled_steps  # noqa: E402 (benchmarks/gpu_h100/train_compile.py)

from annotated_transformer.devices import resolve_precision  # noqa: E402
from annotated_transformer.model import ModelConfig  # noqa: E402
from annotated_transformer.recipe import RECIPE, hardware  # noqa: E402
from annotated_transformer.train import train  # noqa: E402

SMALL = replace(RECIPE, model=ModelConfig(N=2, d_model=128, d_ff=512, h=4, dropout=0.2), epochs=6, cooldown=0,
                val_bleu_sentences=0, keep_epochs=False)

if __name__ == "__main__":
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}, {hardware()}, torch {torch.__version__}, "
          f"precision {resolve_precision(torch.device('cpu'), SMALL.precision)}")
    print("run epoch train_loss val_loss seconds")
    for run in ("eager", "compiled"):
        with tempfile.TemporaryDirectory() as d, (compiled_steps() if run == "compiled" else nullcontext()):
            for r in train(replace(SMALL, out_dir=d), device="cpu", progress=False):
                print(run, r["epoch"], round(r["train_loss"], 4), round(r["val_loss"], 4), r["seconds"], flush=True)
