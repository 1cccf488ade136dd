"""Build the documentation site into site/ (or --out): no network needed, nothing executed.

1. copies docs/conf.py, docs/api.md and the notebooks of nbs/ into build/docs_src/, turning nbdev
   directives into what Sphinx understands: `#| hide` cells are dropped, directive comments are
   removed from the code shown, and an "Open in Colab" link is added under each notebook's title;
2. puts the Vega/Vega-Lite/Vega-Embed bundle (from vl-convert-python) and the parts of MathJax 3 the
   pages use (from the pip package sphinx-mathjax-offline: no Node, no npm) into _static, so pages
   load nothing from elsewhere;
3. runs sphinx-build with -W: a warning (broken reference, missing page, bad markup) fails the build.
"""
import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
# The parts of MathJax 3 the pages load: the TeX-to-HTML component, its fonts, and the TeX extensions
# that `autoload` fetches when a page uses their macros (the speech, SVG and MathML components are left out).
MATHJAX_PARTS = ["tex-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions"]
DIRECTIVE = re.compile(r"^\s*#\|.*$")


def repo_url() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"].rstrip("/")


def colab_url(name: str) -> str:
    return repo_url().replace("https://github.com/", "https://colab.research.google.com/github/") + f"/blob/main/nbs/{name}"


def prepare_notebook(src: Path, dst: Path, toctree: list[str] | None) -> None:
    nb = json.loads(src.read_text())
    cells = []
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "code":
            lines = text.splitlines()
            directives = [l.strip() for l in lines if DIRECTIVE.match(l)]
            if any(d.replace(" ", "") in ("#|hide", "#|exporti", "#|hide_input") for d in directives):
                continue
            code = "\n".join(l for l in lines if not DIRECTIVE.match(l)).strip("\n")
            if not code:
                continue
            cell = {**cell, "source": code}
        cells.append(cell)
    title = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown")
    link = {"cell_type": "markdown", "metadata": {}, "id": "colab-link",
            "source": f"[Open this notebook in Colab]({colab_url(src.name)}) (runs on a free GPU; the first cell installs the package)."}
    cells.insert(title + 1, link)
    if toctree is not None:
        cells.append({"cell_type": "markdown", "metadata": {}, "id": "site-toctree",
                      "source": "```{toctree}\n:hidden:\n:maxdepth: 1\n\n" + "\n".join(toctree) + "\n```"})
    nb["cells"] = cells
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False))


def mathjax(static: Path) -> None:
    "Copy the MathJax files the pages need from the sphinx-mathjax-offline package (installed by the dev extra)."
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("MathJax not found: pip install sphinx-mathjax-offline (it is in the [dev] extra)")
    source = Path(spec.submodule_search_locations[0]) / "static" / "mathjax"
    for part in MATHJAX_PARTS:
        src, dst = source / part, static / "mathjax" / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy(src, dst)


def vega(static: Path) -> None:
    import altair as alt
    import vl_convert as vlc
    bundle = vlc.javascript_bundle("window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;")
    # a function scope keeps the bundle's top-level names (such as `_`) from clashing with Sphinx's globals
    (static / "vega-bundle.js").write_text("(function () {\n" + bundle + "\n})();\n")
    # Altair's chart HTML loads Vega from a CDN unless VEGA_DEBUG already lists the versions it wants.
    versions = {"vega_version": alt.VEGA_VERSION, "vegalite_version": alt.VEGALITE_VERSION,
                "vegaembed_version": alt.VEGAEMBED_VERSION}
    (static / "vega-setup.js").write_text(f"window.VEGA_DEBUG = {json.dumps(versions)};\n")


def nbdev_link_targets(site: Path) -> None:
    """Make the links nbdev writes resolve on this site: `Docs: .../attention.html.md` in module docstrings and
    `attention.html#multiheadedattention.attend` in `_modidx.py` name pages by module, without the chapter number.
    For each module, `<module>.html.md` is the chapter as plain Markdown, and `<module>.html` sends the reader to the
    symbol's entry in the API reference (or, without a symbol, to the chapter)."""
    import annotated_transformer._modidx as modidx
    api_ids = set(re.findall(r'id="(annotated_transformer\.[^"]+)"', (site / "api.html").read_text()))
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        module = next((m[1] for c in cells for m in [re.search(r"#\| default_exp (\w+)", "".join(c["source"]))] if m), None)
        if module is None:
            continue
        module = "index" if module == "__init__" else module
        text = "\n\n".join("".join(c["source"]) if c["cell_type"] == "markdown" else "```python\n" + "".join(c["source"]) + "\n```"
                             for c in cells if not "".join(c["source"]).lstrip().startswith("#| hide"))
        (site / f"{module}.html.md").write_text(text + "\n")
        if module == "index":
            continue
        targets = {}
        for symbol, (link, _) in modidx.d["syms"].get(f"annotated_transformer.{module}", {}).items():
            parts = symbol.split(".")
            while parts and ".".join(parts) not in api_ids:  # e.g. __init__ has no entry of its own: its class does
                parts.pop()
            targets[link.split("#", 1)[1]] = "api.html#" + ".".join(parts) if parts else f"{nb.stem}.html"
        (site / f"{module}.html").write_text(REDIRECT.format(targets=json.dumps(targets), page=f"{nb.stem}.html"))


REDIRECT = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Redirecting</title>
<script>var t = {targets}; var a = location.hash.slice(1); location.replace(t[a] || "{page}");</script>
</head><body><a href="{page}">Continue to the chapter</a></body></html>
"""


def trim(site: Path) -> None:
    "Drop what readers never load: source maps of the theme's scripts and styles, the theme's translations."
    for f in site.rglob("*.map"):
        f.unlink()
    shutil.rmtree(site / "_static" / "locales", ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "site"), help="output folder (default: site/)")
    args = ap.parse_args()
    src = BUILD / "docs_src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "_static").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "conf.py", src / "conf.py")
    shutil.copy(ROOT / "docs" / "api.md", src / "api.md")
    shutil.copy(ROOT / "docs" / "paper_map.md", src / "paper_map.md")
    shutil.copy(ROOT / "docs" / "what-can-go-wrong.md", src / "what-can-go-wrong.md")
    shutil.copy(ROOT / "docs" / "favicon.svg", src / "_static" / "favicon.svg")
    shutil.copy(ROOT / "docs" / "custom.css", src / "_static" / "custom.css")
    notebooks = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if p.name != "index.ipynb")
    toctree = [p.stem for p in notebooks] + ["paper_map", "what-can-go-wrong", "api"]
    prepare_notebook(ROOT / "nbs" / "index.ipynb", src / "index.ipynb", toctree)
    for nb in notebooks:
        prepare_notebook(nb, src / nb.name, None)
    vega(src / "_static")
    mathjax(src / "_static")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(src), str(out)]
    res = subprocess.run(cmd)
    if res.returncode != 0:
        sys.exit("sphinx-build failed (warnings are errors: broken links, missing pages, bad markup)")
    nbdev_link_targets(out)
    trim(out)
    print(f"site built in {out}")


if __name__ == "__main__":
    main()
