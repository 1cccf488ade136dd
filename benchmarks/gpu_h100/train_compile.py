"""The training command's loop, eager and with its training steps compiled, on the model of the shipped recipe
(`RECIPE`: N=3, d_model 256, batches of 2,500 tokens, the precision "auto" picks).

Compiled means: `train` runs as it is, except that `train_epoch` is given `torch.compile(model, dynamic=True)` for
the training passes (`compiled_steps` below); the validation passes, decoding and checkpoints use the model as it is.
(The package offers no such option: docs/gpu.md says why, from what this script measured.)

1. eager: `RECIPE` for --eager-epochs epochs, without validation BLEU: seconds and target tokens/s of every epoch
   (an epoch's seconds cover its training and its validation loss, as the command's log has them).
2. compiled: `RECIPE` itself with compiled training steps (38 epochs, the last 8 cooling down, validation BLEU every epoch),
   then chosen on val, measured and exported as the shipped model is (`build_pretrained`: val and test2016, greedy
   and beam 4) into --export. Its first epoch holds the compiling. On a GPU this is also the `#| slow` cell of the
   training chapter (one run of `RECIPE`), with the steps compiled.
Each epoch's line is printed as it ends, so a log cut short by a time limit keeps what was measured; the tables and
ratios come at the end.

    python benchmarks/gpu_h100/train_compile.py --device cuda --eager-epochs 3 --run-dir /tmp/compiled --export /tmp/model
    python benchmarks/gpu_h100/train_compile.py --device cpu --max-steps 20 --eager-epochs 1   (a quick run of the script)
"""
import argparse
import datetime
import json
import statistics
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from unittest import mock

import torch

import annotated_transformer.train
from annotated_transformer.devices import resolve_precision
from annotated_transformer.loop import train_epoch
from annotated_transformer.recipe import RECIPE, build_pretrained, hardware, train_and_choose
from annotated_transformer.train import train


@contextmanager
def compiled_steps():
    "Inside: `train`'s training passes go through `torch.compile(model, dynamic=True)` (one compiled module per model)."
    compiled = {}
    def train_epoch_compiled(data_iter, model, *args, **kwargs):
        if id(model) not in compiled:
            compiled[id(model)] = torch.compile(model, dynamic=True)
        return train_epoch(data_iter, compiled[id(model)], *args, **kwargs)
    with mock.patch.object(annotated_transformer.train, "train_epoch", train_epoch_compiled):
        yield


def peak_mb(device: torch.device) -> float | None:
    "The peak of allocated GPU memory since the last reset, in MB (None on a CPU, where torch keeps no such count)."
    return round(torch.cuda.max_memory_allocated(device) / 2**20) if device.type == "cuda" else None


def epoch_table(runs: dict[str, list[dict]]) -> str:
    "One row per epoch of each run: seconds and target tokens/s, as the run's history has them."
    rows = ["| run | epoch | seconds | target tokens/s |", "| --- | ---: | ---: | ---: |"]
    for name, history in runs.items():
        rows += [f"| {name} | {r['epoch']} | {r['seconds']} | {r['tokens_per_s']} |" for r in history]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda or cpu (default: cuda)")
    parser.add_argument("--eager-epochs", type=int, default=2, help="epochs of the eager run (default: 2)")
    parser.add_argument("--run-dir", default=None, help="the compiled run's folder (default: a temporary one)")
    parser.add_argument("--export", default=None, help="where the compiled run's chosen model is exported")
    parser.add_argument("--max-steps", type=int, default=None, help="stop both runs after this many steps (a quick run)")
    args = parser.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else hardware()
    print(f"date      {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    print(f"device    {name}; torch {torch.__version__}; precision {resolve_precision(device, RECIPE.precision)}")

    with tempfile.TemporaryDirectory() as tmp:
        # 1. eager: the first epochs of the recipe, no cooldown (the steps are those of RECIPE's first epochs)
        eager_recipe = replace(RECIPE, out_dir=f"{tmp}/eager", epochs=args.eager_epochs, cooldown=0, val_bleu_sentences=0,
                               keep_epochs=False, max_steps=args.max_steps)
        print(f"\n== eager: {args.eager_epochs} epochs of RECIPE (no validation BLEU)")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()
        eager = train(eager_recipe, device=str(device))
        eager_wall, eager_peak = time.perf_counter() - started, peak_mb(device)

        # 2. compiled: RECIPE as the trained-model chapter trains it, its training steps compiled
        run_dir = args.run_dir or f"{tmp}/compiled"
        compiled_recipe = replace(RECIPE, out_dir=run_dir, max_steps=args.max_steps)
        print(f"\n== compiled: RECIPE with compiled training steps ({RECIPE.epochs} epochs, validation BLEU every epoch)")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()
        with compiled_steps():
            compiled = train(compiled_recipe, device=str(device))
        compiled_wall, compiled_peak = time.perf_counter() - started, peak_mb(device)
        print("\n== the compiled run's model: chosen on val, then measured")
        if args.export:
            results = json.loads((build_pretrained(compiled_recipe, args.export, device=str(device)) /
                                  "results.json").read_text())
            chosen = {"checkpoint": results["checkpoint"], "candidates_val_bleu_greedy": results["candidates_val_bleu_greedy"],
                      **{split: {k: v["bleu"] for k, v in results[split].items()} for split in ("val", "test2016")}}
        else:
            _, checkpoint, scores = train_and_choose(compiled_recipe, device=str(device))
            chosen = {"checkpoint": checkpoint, "candidates_val_bleu_greedy": scores}
        print(json.dumps(chosen))

    print("\n== per epoch\n")
    print(epoch_table({"eager": eager, "compiled": compiled}))
    steady = lambda history: statistics.median(r["seconds"] for r in history[1:]) if len(history) > 1 else None
    print(f"\nwall seconds: eager run {eager_wall:.0f} ({len(eager)} epochs), compiled run {compiled_wall:.0f} "
          f"({len(compiled)} epochs, validation BLEU included)")
    print(f"peak memory MB: eager {eager_peak}, compiled {compiled_peak}")
    if steady(eager) and steady(compiled):
        print(f"median epoch after the first: eager {steady(eager):.1f} s, compiled {steady(compiled):.1f} s: "
              f"compiled {steady(eager) / steady(compiled):.2f}x")
        print(f"first epoch: eager {eager[0]['seconds']} s, compiled {compiled[0]['seconds']} s (compiling: "
              f"{compiled[0]['seconds'] - eager[0]['seconds']:.0f} s more)")


if __name__ == "__main__":
    main()
