"""Decoding speed on the 1,000 test2016 sentences, one run each, same model:

* per-sentence, uncached greedy decoding, like The Annotated Transformer's loop (one sentence at a time,
  the whole prefix recomputed every step; stops at </s>, limit input length + 50);
* batched greedy decoding with the key/value cache (sentences sorted by length, batches of --batch-size);
* batched beam search (beam 4, alpha 0.6) with the cache.

After a warm-up on a few sentences, prints the wall times and the ratios; the outputs of the two greedy decoders are compared too.

Usage: python benchmarks/decode.py --checkpoint models/multi30k-de-en --data-dir ../shared/data/multi30k
"""
import argparse
import platform
import time

import torch

from annotated_transformer.data import BOS, EOS, PAD, load_multi30k
from annotated_transformer.decoding import Translator, beam_search, greedy_decode_cached
from annotated_transformer.training import greedy_decode


def encode_all(translator, sentences):
    return [[BOS] + translator.src_vocab.encode(translator.src_tok(s)) + [EOS] for s in sentences]


def per_sentence_uncached(model, encoded):
    outputs = []
    for ids in encoded:
        src = torch.tensor([ids])
        out = greedy_decode(model, src, torch.ones(1, 1, len(ids), dtype=torch.bool), len(ids) + 51, BOS, EOS)
        outputs.append(out[0, 1:].tolist())
    return outputs


def batched(encoded, batch_size, decode):
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    outputs = [None] * len(encoded)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in idx)
        src = torch.full((len(idx), width), PAD)
        for r, i in enumerate(idx):
            src[r, :len(encoded[i])] = torch.tensor(encoded[i])
        for r, out in zip(idx, decode(src, (src != PAD).unsqueeze(-2), width)):
            outputs[r] = out
    return outputs


def strip(ids):
    return ids[: ids.index(EOS)] if EOS in ids else ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    translator = Translator.from_checkpoint(args.checkpoint, "cpu")
    model = translator.model
    sentences = [de for de, _ in load_multi30k("test", args.data_dir)][: args.limit]
    encoded = encode_all(translator, sentences)
    print(f"torch {torch.__version__}, {platform.machine()}, {args.threads} threads; {len(encoded)} sentences; "
          f"model {model.config}")

    with torch.no_grad():
        # warm-up on a few sentences, so that one-time costs (kernel selection, allocator growth) are not timed
        batched(encoded[:16], args.batch_size, lambda s, m, w: beam_search(model, s, m, 4, 0.6, 50)[0])
        per_sentence_uncached(model, encoded[:4])
        t0 = time.perf_counter()
        greedy_cached = batched(encoded, args.batch_size,
                                lambda s, m, w: [r[1:] for r in greedy_decode_cached(model, s, m, w + 51, BOS, EOS).tolist()])
        t_cached = time.perf_counter() - t0
        t0 = time.perf_counter()
        batched(encoded, args.batch_size, lambda s, m, w: beam_search(model, s, m, 4, 0.6, 50)[0])
        t_beam = time.perf_counter() - t0
        t0 = time.perf_counter()
        baseline = per_sentence_uncached(model, encoded)
        t_base = time.perf_counter() - t0
    same = sum(strip(a) == strip(b) for a, b in zip(baseline, greedy_cached))
    print(f"| decoder | seconds | sentences/s |\n| --- | ---: | ---: |")
    for name, t in [("per-sentence uncached greedy", t_base), ("batched cached greedy", t_cached),
                    ("batched cached beam 4", t_beam)]:
        print(f"| {name} | {t:.1f} | {len(encoded) / t:.1f} |")
    print(f"speed-up of batched cached greedy over the per-sentence uncached loop: {t_base / t_cached:.1f}x (target >= 20x)")
    print(f"beam 4 / batched greedy time: {t_beam / t_cached:.2f}x (target <= 3x)")
    print(f"identical greedy outputs: {same}/{len(encoded)}")


if __name__ == "__main__":
    main()
