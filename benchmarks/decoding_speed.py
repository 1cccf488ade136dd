"""The package's own decoders against CTranslate2 in float32, at one CPU thread, in one interleaved run.

Each round decodes the 1,000 test2016 sentences four times, in this order: the package's greedy decoding, CTranslate2's
greedy decoding, the package's beam search (beam 4, alpha 0.6) and CTranslate2's beam search. Both sides sort the
sentences by length and decode batches of --batch-size, with outputs limited to input length + 50 and <unk> banned.
The figures are the median of --rounds rounds. On a machine that other jobs share, the ratios of one run are what
count: each round runs the four decoders within seconds of each other, so a busy spell slows them alike.
Speeds are given per second of wall-clock time and per second of this process's CPU time, which other jobs sway less.

The CTranslate2 model comes from `annotated_transformer.export` when the package has it; otherwise from the minimal
conversion at the end of this script (measurement only). Also counted: the greedy outputs the two engines share.

Usage: nice python benchmarks/decoding_speed.py --data-dir ../shared/data/multi30k --out benchmarks/results_decoding_speed.txt
"""
import argparse
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from annotated_transformer.data import EOS, SPECIALS, load_multi30k
from annotated_transformer.decoding import Translator, decode_in_batches, shipped_model_dir
from machine import cpu_name  # benchmarks/machine.py (the scripts run as python benchmarks/NAME.py)


def ct2_folder(checkpoint: Path, out: Path) -> Path:
    "A CTranslate2 model of `checkpoint` in `out`, by the package's exporter when it has one."
    try:
        from annotated_transformer.export import export_model
    except ImportError:
        return minimal_ct2_conversion(checkpoint, out)
    return export_model(checkpoint, out, "ctranslate2")


def token_names(size: int) -> list[str]:
    "CTranslate2 reads tokens, not ids: the specials by name, every other id as its number."
    return list(SPECIALS) + [str(i) for i in range(len(SPECIALS), size)]


def ct2_decode(engine, encoded: list[list[int]], beam: int, batch_size: int, names: list[str]) -> list[list[int]]:
    "CTranslate2's outputs for `encoded`, in batches of similar length as `decode_in_batches` makes them."
    ids = {name: i for i, name in enumerate(names)}
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    outputs = [None] * len(encoded)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        results = engine.translate_batch([[names[t] for t in encoded[i]] for i in idx], beam_size=beam,
                                         max_batch_size=batch_size, length_penalty=0.6 if beam > 1 else 1.0,
                                         max_decoding_length=max(len(encoded[i]) for i in idx) + 50, disable_unk=True)
        for i, r in zip(idx, results):
            outputs[i] = [ids[name] for name in r.hypotheses[0]]
    return outputs


def strip(ids: list[int]) -> list[int]:
    return ids[: ids.index(EOS)] if EOS in ids else ids


def rate(fn, n: int) -> tuple[float, float, list]:
    "(sentences per second of wall-clock time, of this process's CPU time, outputs) of one call of fn."
    t0, c0 = time.perf_counter(), time.process_time()  # CPU time: less swayed by other jobs on a shared machine
    out = fn()
    return n / (time.perf_counter() - t0), n / (time.process_time() - c0), out


def write_atomic(path: Path, text: str) -> None:
    "Write aside, then rename: a reader never sees half a file."
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, default=shipped_model_dir())
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    ap.add_argument("--out", type=Path, default=None, help="write the results (markdown) to this file too")
    args = ap.parse_args()
    import ctranslate2  # the deploy extra; after the arguments, so that --help works without it

    torch.set_num_threads(1)
    translator = Translator.from_checkpoint(args.checkpoint, "cpu")
    encoded = [translator.encode(de) for de, _ in load_multi30k("test", args.data_dir)][: args.limit]
    names = token_names(translator.model.config.tgt_vocab)
    with tempfile.TemporaryDirectory() as tmp:
        engine = ctranslate2.Translator(str(ct2_folder(args.checkpoint, Path(tmp) / "ct2")), device="cpu",
                                        compute_type="float32", inter_threads=1, intra_threads=1)
    n, bs, model, banned = len(encoded), args.batch_size, translator.model, translator.banned
    runs = {"package greedy": lambda sents: decode_in_batches(model, sents, 1, batch_size=bs, banned=banned),
            "CTranslate2 greedy": lambda sents: ct2_decode(engine, sents, 1, bs, names),
            "package beam 4": lambda sents: decode_in_batches(model, sents, 4, batch_size=bs, banned=banned),
            "CTranslate2 beam 4": lambda sents: ct2_decode(engine, sents, 4, bs, names)}
    for fn in runs.values():  # warm-up: one-time costs (allocator growth, kernel choice) are not timed
        fn(encoded[:bs])
    speeds, cpu, outputs = {name: [] for name in runs}, {name: [] for name in runs}, {}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            speed, cpu_speed, outputs[name] = rate(lambda: fn(encoded), n)
            speeds[name].append(speed)
            cpu[name].append(cpu_speed)
    median = {name: statistics.median(s) for name, s in speeds.items()}
    median_cpu = {name: statistics.median(s) for name, s in cpu.items()}
    same = sum(strip(a) == strip(b) for a, b in zip(outputs["package greedy"], outputs["CTranslate2 greedy"]))
    lines = [f"{cpu_name()} ({platform.machine()}, {os.cpu_count()} cores), 1 thread; torch {torch.__version__}, "
             f"ctranslate2 {ctranslate2.__version__} float32; {n} test2016 sentences, batches of {bs} sorted by length; "
             f"median of {args.rounds} interleaved rounds", "",
             "| decoder | sentences/s (median) | rounds | package / CTranslate2 | sentences per CPU second | "
             "package / CTranslate2 (CPU time) |", "| --- | ---: | --- | ---: | ---: | ---: |"]
    for name in runs:
        engine_name = name.replace("package", "CTranslate2")
        mine = name.startswith("package")
        ratio = f"{median[name] / median[engine_name]:.2f}x" if mine else ""
        ratio_cpu = f"{median_cpu[name] / median_cpu[engine_name]:.2f}x" if mine else ""
        lines.append(f"| {name} | {median[name]:.1f} | {', '.join(f'{s:.0f}' for s in speeds[name])} | {ratio} | "
                     f"{median_cpu[name]:.1f} | {ratio_cpu} |")
    lines += ["", f"greedy outputs equal to CTranslate2's: {same}/{n}"]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        write_atomic(args.out, text)


def minimal_ct2_conversion(checkpoint: Path, out: Path) -> Path:
    """A stand-in for `annotated_transformer.export` (used only when the package has none): the shipped model's
    weights in CTranslate2's `TransformerSpec`. Our LayerNorm divides by the unbiased standard deviation plus eps; the
    engine's by the square root of the biased variance plus eps, so the gain is scaled by sqrt((n - 1) / n)."""
    from ctranslate2.specs import transformer_spec
    from annotated_transformer.checkpoint import load_model
    model = load_model(checkpoint, "cpu").float()
    cfg = model.config
    arr = lambda t: t.detach().numpy()
    scale = math.sqrt((cfg.d_model - 1) / cfg.d_model)

    def norm(spec, ln):
        spec.gamma, spec.beta = arr(ln.a_2) * scale, arr(ln.b_2)

    def linear(spec, *lins):
        spec.weight = arr(torch.cat([lin.weight for lin in lins]))
        spec.bias = arr(torch.cat([lin.bias for lin in lins]))

    spec = transformer_spec.TransformerSpec.from_config(cfg.N, cfg.h, pre_norm=cfg.pre_norm)
    for side, stack, (embed, position) in (("encoder", spec.encoder, model.src_embed), ("decoder", spec.decoder, model.tgt_embed)):
        ours = getattr(model, side)
        (stack.embeddings[0] if side == "encoder" else stack.embeddings).weight = arr(embed.lut.weight)
        stack.position_encodings.encodings = arr(position.pe[0])
        norm(stack.layer_norm, ours.norm)
        for layer_spec, layer in zip(stack.layer, ours.layers):
            linear(layer_spec.self_attention.linear[0], *layer.self_attn.linears[:3])
            linear(layer_spec.self_attention.linear[1], layer.self_attn.linears[3])
            norm(layer_spec.self_attention.layer_norm, layer.sublayer[0].norm)
            if side == "decoder":
                linear(layer_spec.attention.linear[0], layer.src_attn.linears[0])
                linear(layer_spec.attention.linear[1], *layer.src_attn.linears[1:3])
                linear(layer_spec.attention.linear[2], layer.src_attn.linears[3])
                norm(layer_spec.attention.layer_norm, layer.sublayer[1].norm)
            linear(layer_spec.ffn.linear_0, layer.feed_forward.w_1)
            linear(layer_spec.ffn.linear_1, layer.feed_forward.w_2)
            norm(layer_spec.ffn.layer_norm, layer.sublayer[-1].norm)
    linear(spec.decoder.projection, model.generator.proj)
    spec.register_source_vocabulary(token_names(cfg.src_vocab))
    spec.register_target_vocabulary(token_names(cfg.tgt_vocab))
    spec.validate()
    spec.optimize(quantization="float32")
    out.mkdir(parents=True)
    spec.save(str(out))
    return out


if __name__ == "__main__":
    main()
