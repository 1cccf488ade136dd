"""The shipped model through the package and through the inference engines, on one CPU thread:

test2016 (1,000 sentences, which training never saw), batches of 64 sorted by length, three rounds with the
configurations interleaved (a busy machine slows every configuration of a round alike), the median of each.
The package's own greedy and beam search are measured here against CTranslate2 in float32 too (issue #64's goal for
the package's decoder: at least 0.75x and 0.6x). Reports sentences a second, the ratio to the package's greedy (or
beam) speed, sacreBLEU, how many outputs equal the
package's at the same beam size, and the size of the model's files on disk.

Usage: nice python benchmarks/engines.py --json benchmarks/results_engines.json
       python benchmarks/engines.py --show benchmarks/results_engines.json > benchmarks/results_engines.txt
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from annotated_transformer.files import atomic_write
from annotated_transformer.decoding import Translator, shipped_model_dir
from annotated_transformer.evaluation import bleu, test_set
from annotated_transformer.export import export_model
from machine import cpu_name  # benchmarks/machine.py (the scripts run as python benchmarks/NAME.py)


def folder_mb(folder: Path, names=None) -> float:
    "Megabytes of the model's files in `folder` (all, or `names`)."
    return sum(p.stat().st_size for p in folder.iterdir() if names is None or p.name in names) / 1e6


def configurations(tmp: Path) -> list[tuple]:
    "(engine, precision, beam size, translator, size on disk) of each configuration measured."
    package = Translator.from_checkpoint(shipped_model_dir(), "cpu")
    shipped_mb = folder_mb(shipped_model_dir(), {"model.safetensors", "tokenizer.json", "config.json"})
    ct2, onnx = (export_model(shipped_model_dir(), tmp / e, e) for e in ("ctranslate2", "onnx"))
    ct2_float32 = Translator.from_checkpoint(ct2)
    ct2_int8, onnx_int8 = (Translator.from_checkpoint(f, quantization="int8") for f in (ct2, onnx))
    return [("this package (torch)", "fp32 (fp16 on disk)", 1, package, shipped_mb),
            ("this package (torch)", "fp32 (fp16 on disk)", 4, package, shipped_mb),
            ("CTranslate2", "float32", 1, ct2_float32, folder_mb(ct2)),
            ("CTranslate2", "float32", 4, ct2_float32, folder_mb(ct2)),
            ("CTranslate2", "int8", 1, ct2_int8, folder_mb(ct2)),
            ("CTranslate2", "int8", 4, ct2_int8, folder_mb(ct2)),
            ("ONNX Runtime", "fp32", 1, Translator.from_checkpoint(onnx), folder_mb(onnx)),
            ("ONNX Runtime", "int8 (dynamic)", 1, onnx_int8, folder_mb(onnx))]


def report(result: dict) -> None:
    "Print the results as a table."
    print(f"{result['machine']}, {result['threads']} thread, {result['sentences']} sentences of {result['data']}, "
          f"batches of {result['batch_size']}, median of {result['rounds']} interleaved rounds")
    print(f"{'engine':22} {'precision':20} {'decoding':8} {'sent/s':>7} {'ratio':>6} {'BLEU':>6} {'equal':>5} {'MB':>6}")
    for r in result["rows"]:
        print(f"{r['engine']:22} {r['precision']:20} {r['decoding']:8} {r['sentences_per_s']:7.1f} {r['speedup']:5.2f}x "
              f"{r['bleu']:6.2f} {r['equal']:5d} {r['size_mb']:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=int, default=1000, help="the first N sentences of test2016")
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--show", help="print the table of a results file this script wrote, and stop")
    args = parser.parse_args()
    if args.show:
        return report(json.loads(Path(args.show).read_text()))
    torch.set_num_threads(1)  # the engines read it too (intra_threads, intra_op_num_threads)
    pairs, data = test_set("de", "en", "test")
    sources, references = [s for s, _ in pairs[:args.limit]], [r for _, r in pairs[:args.limit]]
    with tempfile.TemporaryDirectory() as tmp:
        configs = configurations(Path(tmp))
        for _, _, beam, translator, _ in configs:  # warm-up
            translator.translate(sources[:64], beam_size=beam)
        times, outputs = [[] for _ in configs], [None] * len(configs)
        for _ in range(args.rounds):
            for i, (_, _, beam, translator, _) in enumerate(configs):
                start = time.perf_counter()
                outputs[i] = translator.translate(sources, beam_size=beam, batch_size=64)
                times[i].append(time.perf_counter() - start)
    reference = {beam: outputs[i] for i, (_, _, beam, _, _) in reversed(list(enumerate(configs)))}  # the package's
    speed = [len(sources) / statistics.median(t) for t in times]
    base = {beam: speed[i] for i, (_, _, beam, _, _) in reversed(list(enumerate(configs)))}
    rows = [dict(engine=e, precision=p, decoding="greedy" if beam == 1 else f"beam {beam}",
                 sentences_per_s=speed[i], speedup=speed[i] / base[beam], bleu=bleu(outputs[i], references)[0],
                 equal=sum(a == b for a, b in zip(outputs[i], reference[beam])), size_mb=mb)
            for i, (e, p, beam, _, mb) in enumerate(configs)]
    result = dict(machine=cpu_name(), threads=1, sentences=len(sources), data=data, rounds=args.rounds,
                  batch_size=64, rows=rows)
    report(result)
    if args.json:
        with atomic_write(os.path.realpath(args.json)) as tmp:
            Path(tmp).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
