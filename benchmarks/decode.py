"""Decoding speed on the 1,000 test2016 sentences, one run each, same model:

* per-sentence, uncached greedy decoding, like The Annotated Transformer's loop (one sentence at a time,
  the whole prefix recomputed every step; stops at </s>, limit input length + 50);
* batched greedy decoding with the key/value cache (sentences sorted by length, batches of --batch-size);
* batched beam search (beam 4, alpha 0.6) with the cache.

After a warm-up on a few sentences, prints the wall times and the ratios; the outputs of the two greedy decoders are compared too.
With several --batch-sizes (a sweep, e.g. on a GPU) the batched decoders are timed at each size.
--json writes the same results as JSON (written aside, then renamed), which the documentation renders.

Usage: python benchmarks/decode.py --checkpoint annotated_transformer/pretrained/multi30k-de-en --data-dir ../shared/data/multi30k \
           --json benchmarks/results_decode.json > benchmarks/results_decode.txt
       python benchmarks/decode.py --checkpoint ... --device cuda --batch-sizes 32 128 512 1000
"""
import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from annotated_transformer.data import BOS, EOS, PAD, load_multi30k
from annotated_transformer.decoding import Translator, beam_search, greedy_decode_cached
from annotated_transformer.training import greedy_decode
from machine import cpu_name  # benchmarks/machine.py (the scripts run as python benchmarks/NAME.py)


def encode_all(translator, sentences):
    return [translator.encode(s) for s in sentences]  # <s> tokens </s>, words or subwords as the checkpoint says


def per_sentence_uncached(model, encoded):
    device = next(model.parameters()).device
    outputs = []
    for ids in encoded:
        src = torch.tensor([ids], device=device)
        out = greedy_decode(model, src, torch.ones(1, 1, len(ids), dtype=torch.bool, device=device), len(ids) + 51, BOS, EOS)
        outputs.append(out[0, 1:].tolist())
    return outputs


def batched(encoded, batch_size, decode, device="cpu"):
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    outputs = [None] * len(encoded)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in idx)
        src = torch.full((len(idx), width), PAD)
        for r, i in enumerate(idx):
            src[r, :len(encoded[i])] = torch.tensor(encoded[i])
        src = src.to(device)
        for r, out in zip(idx, decode(src, (src != PAD).unsqueeze(-2), width)):
            outputs[r] = out
    return outputs


def strip(ids):
    return ids[: ids.index(EOS)] if EOS in ids else ids


def timed(fn):
    "(seconds, result) of fn(), waiting for the GPU if there is one."
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    result = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, result




def write_json(path: str, data: dict) -> None:
    "Write aside, then rename: a reader never sees half a file."
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[128], help="sentences per batch (a sweep if several)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    ap.add_argument("--skip-baseline", action="store_true", help="do not time the per-sentence uncached loop")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    translator = Translator.from_checkpoint(args.checkpoint, args.device)
    model = translator.model
    sentences = [de for de, _ in load_multi30k("test", args.data_dir)][: args.limit]
    encoded = encode_all(translator, sentences)
    device = next(model.parameters()).device
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"{cpu_name()} ({platform.machine()}, {os.cpu_count()} cores), {args.threads} threads")
    print(f"torch {torch.__version__}, {where}; {len(encoded)} sentences; model {model.config}")

    def greedy(bs):
        return batched(encoded, bs, lambda s, m, w: [r[1:] for r in greedy_decode_cached(model, s, m, w + 51, BOS, EOS).tolist()], device)

    def beam(bs):
        return batched(encoded, bs, lambda s, m, w: beam_search(model, s, m, 4, 0.6, 50)[0], device)

    rows = []
    with torch.no_grad():
        # warm-up on a few sentences, so that one-time costs (kernel selection, allocator growth) are not timed
        batched(encoded[:16], 16, lambda s, m, w: beam_search(model, s, m, 4, 0.6, 50)[0], device)
        per_sentence_uncached(model, encoded[:4])
        for bs in args.batch_sizes:
            t_cached, greedy_cached = timed(lambda: greedy(bs))
            t_beam, _ = timed(lambda: beam(bs))
            rows += [(f"batched cached greedy (batch {bs})", t_cached), (f"batched cached beam 4 (batch {bs})", t_beam)]
            print(f"\nbatch {bs}: beam 4 / batched greedy time: {t_beam / t_cached:.2f}x")
        if not args.skip_baseline:
            t_base, baseline = timed(lambda: per_sentence_uncached(model, encoded))
            rows.insert(0, ("per-sentence uncached greedy", t_base))
    print("\n| decoder | seconds | sentences/s |\n| --- | ---: | ---: |")
    for name, t in rows:  # the seconds as the JSON records them (2 decimals), so the two files show one number
        print(f"| {name} | {round(t, 2):.1f} | {len(encoded) / t:.1f} |")
    if not args.skip_baseline:
        same = sum(strip(a) == strip(b) for a, b in zip(baseline, greedy_cached))
        print(f"\nspeed-up of batched cached greedy (batch {args.batch_sizes[-1]}) over the per-sentence uncached loop: "
              f"{t_base / t_cached:.1f}x")
        print(f"\nidentical greedy outputs: {same}/{len(encoded)}")
    if args.json:
        write_json(args.json, {
            "device": where, "torch": torch.__version__, "checkpoint": Path(args.checkpoint).name,
            "sentences": len(encoded), "parameters": sum(p.numel() for p in model.parameters()),
            "model": {k: v for k, v in vars(model.config).items()},
            "rows": [{"decoder": name, "seconds": round(t, 2), "sentences_per_s": round(len(encoded) / t, 1)} for name, t in rows],
            "greedy_speedup": None if args.skip_baseline else round(t_base / t_cached, 1),
            "beam_over_greedy": round(t_beam / t_cached, 2),
            "identical_greedy": None if args.skip_baseline else same,
        })


if __name__ == "__main__":
    main()
