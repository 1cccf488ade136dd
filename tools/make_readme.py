"""Write README.md from nbs/index.ipynb, the notebook nbdev's `readme_nb` names (nbdev-readme needs Quarto).

What goes into the README, cell by cell:

* markdown cells as they are;
* code cells as ```python blocks, followed by their saved output (text, or Markdown as Markdown);
* `#| echo: false` cells by their saved output only (tables rendered from result files, for example);
* `#| hide`, `#| export` and `#| default_exp` cells not at all.

Two things GitHub cannot show are adapted: relative links to pages of the site (`01_attention.ipynb`,
`19_benchmarks.md`, `x.html#anchor`) become links to the published site (`[project.urls] Documentation` in
pyproject.toml), an inline SVG figure becomes an image of docs/architecture.svg, and the in-browser translation box
(which needs the site's scripts) becomes a link to the site.

    python tools/make_readme.py          # write README.md
    python tools/make_readme.py --check  # exit 1, naming the difference, if README.md is not what index.ipynb gives
"""
import argparse
import difflib
import json
import os
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "nbs" / "index.ipynb"
README = ROOT / "README.md"
HEADER = "<!-- Generated from nbs/index.ipynb by tools/make_readme.py: edit the notebook, not this file. -->\n"
SKIP = ("#|hide", "#|export", "#|exporti", "#|default_exp")
SITE_LINK = re.compile(r"\]\((?![a-z]+:|#|/)([\w.-]+)\.(ipynb|md|html)(#[^)\s]*)?\)")
SVG = re.compile(r"<svg\b.*?</svg>", re.S)
LIVE_BOX = re.compile(r'<div class="live-translate"[^>]*>.*?</div>', re.S)  # the in-browser translator (site only)
FIGURE = "![The Transformer: the encoder and decoder stacks this package builds](docs/architecture.svg)"


def site_url() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Documentation"].rstrip("/") + "/"


def directives(source: str) -> list[str]:
    "The nbdev directives of a cell (`#| hide` -> `#|hide`), spaces removed."
    return [line.replace(" ", "") for line in source.splitlines() if line.lstrip().startswith("#|")]


def output_text(output: dict) -> tuple[str, str] | None:
    "('markdown' or 'text', content) for an output worth showing in a README, else None."
    if output["output_type"] == "stream" and output.get("name") == "stdout":
        return "text", "".join(output["text"])
    data = output.get("data", {})
    if "text/markdown" in data:
        return "markdown", "".join(data["text/markdown"])
    if "text/plain" in data and not any(k.startswith(("image/", "text/html", "application/")) for k in data):
        return "text", "".join(data["text/plain"])
    return None


def cell_markdown(cell: dict) -> str | None:
    source = "".join(cell["source"])
    if cell["cell_type"] == "markdown":
        return source
    if cell["cell_type"] != "code":
        return None
    flags = directives(source)
    if any(f.startswith(SKIP) for f in flags):
        return None
    parts = []
    if "#|echo:false" not in flags:
        code = "\n".join(l for l in source.splitlines() if not l.lstrip().startswith("#|")).strip("\n")
        parts.append(f"```python\n{code}\n```")
    for output in cell.get("outputs", []):
        shown = output_text(output)
        if shown is None:
            continue
        kind, text = shown
        parts.append(text.strip("\n") if kind == "markdown" else f"```text\n{text.strip(chr(10))}\n```")
    return "\n\n".join(parts) or None


def render(notebook: Path = INDEX) -> str:
    "The README that `notebook` gives."
    cells = json.loads(notebook.read_text())["cells"]
    text = "\n\n".join(m.strip("\n") for m in map(cell_markdown, cells) if m and m.strip())
    text = SVG.sub(FIGURE, text)
    site = site_url()
    text = LIVE_BOX.sub(f"[Try it on the site's home page]({site}).", text)
    text = SITE_LINK.sub(lambda m: f"]({site}{m[1]}.html{m[3] or ''})", text)
    return HEADER + "\n" + text + "\n"


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare: exit 1 if README.md differs from index.ipynb")
    args = ap.parse_args()
    text = render()
    current = README.read_text() if README.exists() else ""
    if args.check:
        if current != text:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), "README.md", "from index.ipynb", lineterm="", n=1)
            sys.exit("README.md is not what nbs/index.ipynb gives; run python tools/make_readme.py\n" + "\n".join(list(diff)[:40]))
        print("README.md matches nbs/index.ipynb")
    elif current != text:
        write_atomically(README, text)
        print("README.md written from nbs/index.ipynb")


if __name__ == "__main__":
    main()
