"""Writes docs/architecture.svg: the architecture figure as the code builds it (pre-norm by default, the paper's
post-norm noted under it), each block a link to the section that implements it, drawn in currentColor so it follows
the light and dark themes. It is 440 units wide and every text is at least 13.5 units, so that shown across a 358 px
phone column no text is smaller than 11 px.

The site (tools/build_docs.py) shows this file wherever a notebook embeds the figure; `--update-notebooks` also
writes it into the markdown cells of nbs/ that embed it (03_model, index), for readers of the notebooks."""
import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "architecture.svg"
FIGURE = re.compile(r'<svg [^>]*aria-label="The Transformer[^"]*".*?</svg>', re.S)

W = 440  # drawing width, units
COL = 200  # width of one stack
BOX = 168  # width of a block; the residual path runs in the lane to its right
MAIN, SUB = 14.5, 13.5  # font sizes (units)
ATT, FF, NORM, EMB, OUT_C = "#4c8bf5", "#3ab07c", "#f2b134", "#b07cf2", "#ef6b6b"
A = "01_attention.html#multi-head-attention-section-3-2-2"
F = "02_layers.html#position-wise-feed-forward-network-section-3-3"
N = "02_layers.html#residual-connections-and-where-the-norm-goes-section-3-1"
E, P = "02_layers.html#embeddings-section-3-4", "02_layers.html#positional-encoding-section-3-5"
ENC, DEC = "03_model.html#encoder-section-3-1", "03_model.html#decoder-section-3-1-and-the-causal-mask"
GEN = "03_model.html#configuration-and-make-model"


def box(x, y, h, lines, href, fill, sub=None, title=None):
    "A block linking to `href`: one or two lines of label, an optional smaller line under them."
    cx = x + BOX / 2
    rows = [(t, MAIN, 1.0) for t in lines] + ([(sub, SUB, 0.8)] if sub else [])
    step = 17
    y0 = y + h / 2 - step * (len(rows) - 1) / 2 + 5
    text = "".join(f'<text x="{cx:g}" y="{y0 + i * step:g}" text-anchor="middle" font-size="{size}" opacity="{op}">{t}</text>'
                   for i, (t, size, op) in enumerate(rows))
    label = title or " ".join(lines + ([sub] if sub else []))
    return (f'<a href="{href}" style="text-decoration:none"><g><title>{label}</title>'
            f'<rect x="{x:g}" y="{y:g}" width="{BOX}" height="{h}" rx="6" fill="{fill}" fill-opacity="0.28" '
            f'stroke="currentColor" stroke-width="1.2"/>{text}</g></a>')


def up_arrow(x, y_from, y_to):
    "A vertical arrow from y_from up to y_to (its tip)."
    return (f'<line x1="{x:g}" y1="{y_from:g}" x2="{x:g}" y2="{y_to + 6:g}" stroke="currentColor" stroke-width="1.4"/>'
            f'<polygon points="{x:g},{y_to:g} {x - 4.5:g},{y_to + 8:g} {x + 4.5:g},{y_to + 8:g}" fill="currentColor"/>')


def plus(cx, cy):
    "The residual addition."
    return (f'<circle cx="{cx:g}" cy="{cy:g}" r="9" fill="none" stroke="currentColor" stroke-width="1.4"/>'
            f'<path d="M {cx - 5:g} {cy:g} H {cx + 5:g} M {cx:g} {cy - 5:g} V {cy + 5:g}" stroke="currentColor" stroke-width="1.4"/>')


def stack(x, bottom, layer, top_blocks, frame_label, frame_href):
    """One stack drawn from the bottom up: `bottom` blocks, then the repeated layer (sublayers, each with its
    LayerNorm before it and its residual addition after it), then `top_blocks`. Returns (svg parts, positions)."""
    parts, y, cx = [], 800, x + BOX / 2
    pos = {}
    def place(h, gap=20):
        nonlocal y
        y -= h
        top = y
        y -= gap
        return top
    prev_top = None
    for spec in bottom:
        top = place(spec["h"])
        parts.append(box(x, top, spec["h"], spec["lines"], spec["href"], spec["fill"], spec.get("sub")))
        if prev_top is not None:
            parts.append(up_arrow(cx, prev_top, top + spec["h"]))
        prev_top = top
    frame_bottom = y + 14
    for sub in layer:
        branch = prev_top - 8  # where the residual leaves the main path
        ln = place(26, 14)
        parts.append(box(x, ln, 26, ["LayerNorm"], N, NORM, title="LayerNorm before the sublayer (pre-norm)"))
        parts.append(up_arrow(cx, prev_top, ln + 26))
        top = place(sub["h"], 16)
        parts.append(box(x, top, sub["h"], sub["lines"], sub["href"], sub["fill"], sub.get("sub")))
        parts.append(up_arrow(cx, ln, top + sub["h"]))
        pos[sub["key"]] = top
        py = place(18, 16) + 9
        parts.append(up_arrow(cx, top, py + 9))
        parts.append(plus(cx, py))
        lane = x + BOX + 14
        parts.append(f'<path d="M {cx:g} {branch:g} H {lane:g} V {py:g} H {cx + 15:g}" fill="none" stroke="currentColor" '
                     f'stroke-width="1.4" stroke-dasharray="4 3"/>'
                     f'<polygon points="{cx + 9:g},{py:g} {cx + 17:g},{py - 4.5:g} {cx + 17:g},{py + 4.5:g}" fill="currentColor"/>')
        prev_top = py - 9
    frame_top = y + 6
    parts.append(f'<a href="{frame_href}" style="text-decoration:none"><rect x="{x - 6:g}" y="{frame_top:g}" width="{COL + 2}" '
                 f'height="{frame_bottom - frame_top:g}" rx="10" fill="none" stroke="currentColor" stroke-dasharray="6 4" opacity="0.7"/>'
                 f'<text x="{x:g}" y="{frame_top - 6:g}" font-size="{SUB}">{frame_label}</text></a>')
    y -= 14
    for spec in top_blocks:
        top = place(spec["h"])
        parts.append(box(x, top, spec["h"], spec["lines"], spec["href"], spec["fill"], spec.get("sub"), spec.get("title")))
        parts.append(up_arrow(cx, prev_top, top + spec["h"]))
        pos[spec.get("key", spec["lines"][0])] = top
        prev_top = top
    pos["top"] = prev_top
    return parts, pos


def figure() -> str:
    L, R = 8, 8 + COL + 28
    def inputs(ids, sub):
        return [dict(h=40, lines=[ids], sub=sub, href="04_batches.html", fill=EMB),
                dict(h=40, lines=["Embedding"], sub="× √d_model", href=E, fill=EMB),
                dict(h=40, lines=["Positional enc."], sub="added, then dropout", href=P, fill=EMB)]
    final_norm = dict(h=26, lines=["LayerNorm"], href=N, fill=NORM, key="final", title="LayerNorm after the last layer (pre-norm)")
    enc, epos = stack(L, inputs("Source ids", "German tokens"),
                      [dict(key="self", h=46, lines=["Multi-head", "self-attention"], href=A, fill=ATT),
                       dict(key="ff", h=46, lines=["Feed-forward"], sub="max(0, xW₁+b₁)W₂+b₂", href=F, fill=FF)],
                      [final_norm], "N × layer", ENC)
    dec, dpos = stack(R, inputs("Target ids", "shifted right"),
                      [dict(key="self", h=46, lines=["Masked multi-head", "self-attention"], href=A, fill=ATT),
                       dict(key="src", h=46, lines=["Source attention"], sub="keys, values: memory", href=A, fill=ATT),
                       dict(key="ff", h=46, lines=["Feed-forward"], sub="max(0, xW₁+b₁)W₂+b₂", href=F, fill=FF)],
                      [final_norm, dict(h=40, lines=["Linear"], sub="tied to embeddings", href=GEN, fill=OUT_C),
                       dict(h=40, lines=["Softmax"], sub="next-token probs", href="05_training.html", fill=OUT_C)],
                      "N × layer", DEC)
    # the encoder's output (memory) into every decoder layer's source attention
    ex, mem_y = L + BOX / 2, dpos["src"] + 23
    gap_x = L + COL + 12
    memory = (f'<path d="M {ex:g} {epos["top"]:g} V {epos["top"] - 16:g} H {gap_x:g} V {mem_y:g} H {R - 8:g}" fill="none" '
              f'stroke="currentColor" stroke-width="1.4"/>'
              f'<polygon points="{R - 1:g},{mem_y:g} {R - 9:g},{mem_y - 4.5:g} {R - 9:g},{mem_y + 4.5:g}" fill="currentColor"/>'
              f'<text x="{L:g}" y="{epos["top"] - 22:g}" font-size="{SUB}">memory</text>')
    top = dpos["top"] - 34
    out = up_arrow(R + BOX / 2, dpos["top"], top + 4)
    note = ["Drawn as built (pre_norm=True): each sublayer computes",
            "x + Sublayer(LayerNorm(x)), and each stack ends with a",
            "LayerNorm. The paper's post-norm (pre_norm=False):",
            "LayerNorm(x + Sublayer(x)), no final LayerNorm."]
    note_svg = "".join(f'<text x="{L:g}" y="{870 + 18 * i}" font-size="{SUB}" opacity="0.85">{t}</text>' for i, t in enumerate(note))
    legend = (f'<text x="{L + BOX / 2:g}" y="822" text-anchor="middle" font-size="{MAIN}" font-weight="bold">Encoder</text>'
              f'<text x="{R + BOX / 2:g}" y="822" text-anchor="middle" font-size="{MAIN}" font-weight="bold">Decoder</text>'
              f'<text x="{L:g}" y="848" font-size="{SUB}" opacity="0.85">Dashed: residual connection.</text>')
    height = 870 + 18 * len(note)
    parts = enc + dec + [memory, out, legend, note_svg]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 {top - 4:g} {W} {height - top + 4:g}" width="{W}" '
            f'style="max-width:100%;height:auto;color:inherit" role="img" aria-label="The Transformer as this package builds '
            f'it: encoder and decoder stacks with pre-norm sublayers and residual connections; each block links to the '
            f'section that implements it" font-family="sans-serif" fill="currentColor">\n' + "\n".join(parts) + "\n</svg>")


def update_notebooks(svg: str) -> None:
    "Replace the figure embedded in the markdown cells of the notebooks by `svg`."
    for nb_path in sorted((ROOT / "nbs").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text())
        changed = False
        for cell in nb["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and FIGURE.search(text):
                new = FIGURE.sub(lambda m: svg, text)
                lines = new.split("\n")
                cell["source"] = [l + "\n" for l in lines[:-1]] + [lines[-1]]
                changed = True
        if changed:
            tmp = nb_path.with_suffix(".ipynb.tmp")
            tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            tmp.replace(nb_path)
            print(f"updated the figure in {nb_path.relative_to(ROOT)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update-notebooks", action="store_true", help="also replace the figure embedded in nbs/*.ipynb")
    args = ap.parse_args()
    svg = figure()
    tmp = OUT.with_suffix(".svg.tmp")
    tmp.write_text(svg + "\n")
    tmp.replace(OUT)
    print(f"wrote {OUT.relative_to(ROOT)}")
    if args.update_notebooks:
        update_notebooks(svg)


if __name__ == "__main__":
    main()
