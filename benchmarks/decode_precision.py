"""Which precision should decoding use on this CPU? BLEU and wall time of the shipped student on the 1,000
test2016 sentences, greedy and beam 4, in float32 and under CPU bfloat16 autocast, one run each after a warm-up.

bf16 only pays where the processor multiplies bf16 matrices in hardware (Intel AMX or AVX512-BF16, which
`annotated_transformer.devices.cpu_bf16_native` detects); elsewhere PyTorch emulates it. The printed table says
which kind of CPU it ran on, and the documentation's choice of default reads these numbers.

Usage: python benchmarks/decode_precision.py --data-dir ../shared/data/multi30k > benchmarks/results_decode_precision.txt
"""
import argparse
import os
import time

import torch

from annotated_transformer.data import load_multi30k
from annotated_transformer.decoding import Translator, shipped_model_dir
from annotated_transformer.evaluation import bleu
from annotated_transformer.devices import autocast_context, cpu_bf16_native
from machine import cpu_name  # benchmarks/machine.py (the scripts run as python benchmarks/NAME.py)




def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help="folder with the Multi30k files (default: cache or download)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pairs = load_multi30k("test", args.data_dir, progress=False)[: args.limit]
    sources, references = [de for de, _ in pairs], [en for _, en in pairs]
    translator = Translator.from_checkpoint(shipped_model_dir(), "cpu")
    print(f"torch {torch.__version__}, {cpu_name()} ({os.cpu_count()} cores, {args.threads} threads), "
          f"native bf16 matrix units: {'yes' if cpu_bf16_native() else 'no'}; {len(sources)} sentences")
    print("\n| decoding | precision | BLEU | seconds |\n| --- | --- | ---: | ---: |")
    for beam in (1, 4):
        for precision in ("fp32", "bf16"):
            with autocast_context("cpu", precision):
                translator.translate(sources[:16], beam_size=beam)  # warm-up
                start = time.perf_counter()
                hypotheses = translator.translate(sources, beam_size=beam)
                seconds = time.perf_counter() - start
            name = "greedy" if beam == 1 else f"beam {beam}"
            print(f"| {name} | {precision} | {bleu(hypotheses, references)[0]:.2f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
