"""Writes docs/architecture.svg: the architecture figure (an SVG whose blocks link to their sections), drawn in
currentColor so it follows the light and dark themes. 03_model and index embed its text in a markdown cell."""
from pathlib import Path
def box(x, y, w, h, label, href, fill, sub=None):
    t = f'<a href="{href}"><g class="blk"><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}" fill-opacity="0.28" stroke="currentColor" stroke-width="1.2"/>'
    if sub:
        t += f'<text x="{x + w / 2}" y="{y + h / 2 - 3}" text-anchor="middle" font-size="12.5">{label}</text>'
        t += f'<text x="{x + w / 2}" y="{y + h / 2 + 12}" text-anchor="middle" font-size="10.5" opacity="0.8">{sub}</text>'
    else:
        t += f'<text x="{x + w / 2}" y="{y + h / 2 + 4}" text-anchor="middle" font-size="12.5">{label}</text>'
    return t + "<title>" + label + (" — " + sub if sub else "") + "</title></g></a>"

def head(x, y, direction="up"):
    "A filled arrowhead whose tip is at (x, y), pointing up or right."
    pts = f"{x},{y} {x - 4},{y + 7} {x + 4},{y + 7}" if direction == "up" else f"{x},{y} {x - 7},{y - 4} {x - 7},{y + 4}"
    return f'<polygon points="{pts}" fill="currentColor"/>'

def arrow(x1, y1, x2, y2):
    return f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2 + 6}" stroke="currentColor" stroke-width="1.3"/>' + head(x2, y2)

L, R, W = 40, 330, 230
ATT, FF, NORM, EMB, OUT = "#4c8bf5", "#3ab07c", "#f2b134", "#b07cf2", "#ef6b6b"
a = "01_attention.html#multi-head-attention-section-3-2-2"
ff = "02_layers.html#position-wise-feed-forward-network-section-3-3"
norm = "02_layers.html#residual-connections-and-where-the-norm-goes-section-3-1"
emb, pe = "02_layers.html#embeddings-section-3-4", "02_layers.html#positional-encoding-section-3-5"
enc, dec = "03_model.html#encoder-section-3-1", "03_model.html#decoder-section-3-1-and-the-causal-mask"


def input_stack(x, ids_label):
    "Token ids, embeddings and positional encoding: the bottom of both stacks."
    return [box(x, 560, W, 30, ids_label, "04_batches.html", EMB),
            box(x, 510, W, 34, "Embeddings × √d_model", emb, EMB, "shared table when tied (3.4)"),
            box(x, 460, W, 34, "+ Positional encoding", pe, EMB, "sin/cos, then dropout (3.5)")]


def repeated(x, top, href, label):
    "The dashed frame of the N repeated layers, from y=top down to just above the positional encoding."
    return (f'<a href="{href}"><rect x="{x - 12}" y="{top}" width="{W + 24}" height="{446 - top}" rx="10" fill="none" '
            f'stroke="currentColor" stroke-dasharray="5 4"/><text x="{x - 4}" y="438" font-size="12">{label}</text></a>')


parts = input_stack(L, "Source ids (German)") + [repeated(L, 220, enc, "N × encoder layer")]  # encoder, bottom to top
parts += [box(L, 380, W, 40, "Multi-head self-attention", a, ATT, "padding mask (batch, 1, src)"),
          box(L, 338, W, 28, "Add & Norm (residual)", norm, NORM),
          box(L, 278, W, 40, "Feed-forward", ff, FF, "max(0, xW₁+b₁)W₂+b₂ (3.3)"),
          box(L, 236, W, 28, "Add & Norm (residual)", norm, NORM)]
parts += input_stack(R, "Target ids, shifted right") + [repeated(R, 120, dec, "N × decoder layer")]  # decoder
parts += [box(R, 380, W, 40, "Masked multi-head self-attention", a, ATT, "causal + padding mask"),
          box(R, 338, W, 28, "Add & Norm (residual)", norm, NORM),
          box(R, 278, W, 40, "Multi-head source attention", a, ATT, "keys, values: encoder memory"),
          box(R, 236, W, 28, "Add & Norm (residual)", norm, NORM),
          box(R, 176, W, 40, "Feed-forward", ff, FF, "max(0, xW₁+b₁)W₂+b₂ (3.3)"),
          box(R, 134, W, 28, "Add & Norm (residual)", norm, NORM),
          box(R, 70, W, 34, "Linear (output projection)", "03_model.html#configuration-and-make-model", OUT, "tied with the embeddings (3.4)"),
          box(R, 22, W, 30, "Softmax: next-token probabilities", "05_training.html", OUT)]
cx, dx = L + W / 2, R + W / 2
parts += [arrow(cx, 560, cx, 546), arrow(cx, 510, cx, 496), arrow(cx, 460, cx, 422), arrow(cx, 380, cx, 368),
          arrow(cx, 338, cx, 320), arrow(cx, 278, cx, 266),
          arrow(dx, 560, dx, 546), arrow(dx, 510, dx, 496), arrow(dx, 460, dx, 422), arrow(dx, 380, dx, 368),
          arrow(dx, 338, dx, 320), arrow(dx, 278, dx, 266), arrow(dx, 236, dx, 218), arrow(dx, 176, dx, 164),
          arrow(dx, 134, dx, 106), arrow(dx, 70, dx, 54)]
# memory: encoder output into the decoder's source attention
parts.append(f'<path d="M {cx} 236 L {cx} 200 L {R - 30} 200 L {R - 30} 298 L {R - 8} 298" fill="none" stroke="currentColor" stroke-width="1.3"/>'
             + head(R - 1, 298, "right") + f'<text x="{cx + 8}" y="194" font-size="11">encoder memory</text>')
svg = f'''<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 620 600" width="620" style="max-width:100%;height:auto;color:inherit" role="img" aria-label="The Transformer: encoder and decoder stacks, each block links to the section that implements it" font-family="sans-serif" fill="currentColor">
<text x="{cx}" y="{596}" text-anchor="middle" font-size="11" opacity="0.75">encoder</text>
<text x="{dx}" y="{596}" text-anchor="middle" font-size="11" opacity="0.75">decoder</text>
{"".join(parts)}
</svg>'''
open(Path(__file__).resolve().parents[1] / "docs" / "architecture.svg", "w").write(svg + "\n")
print("wrote docs/architecture.svg")
