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
# the pages of docs/ after the chapters, in this order (a page not named here comes after them)
DOCS_PAGES = ["usage", "what-can-go-wrong", "benchmarks", "gpu", "distributed", "contributing", "paper_map", "api"]


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
            if "#|echo:false" in (d.replace(" ", "") for d in directives):  # only the output shows (nbdev's echo: false)
                cell["metadata"] = {**cell["metadata"], "tags": ["remove-input"]}
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


LIVE_MODEL = ROOT / "annotated_transformer" / "pretrained" / "multi30k-de-en"  # the package's shipped model
LIVE_MODEL_FILES = ("config.json", "tokenizer.json", "model.safetensors")  # what docs/live/worker.js reads


def live_translator(static: Path) -> None:
    """The in-browser translator: docs/live/ into _static/live/, and the shipped model's files (checked against the
    SHA-256s of its manifest.json) into _static/live/model/. Built from the package each time, so the page always
    runs the package's current model, and the weights are stored once in the repository."""
    import hashlib
    dst = static / "live"
    shutil.copytree(ROOT / "docs" / "live", dst, dirs_exist_ok=True)
    (dst / "model").mkdir(exist_ok=True)
    manifest = json.loads((LIVE_MODEL / "manifest.json").read_text())
    for name in LIVE_MODEL_FILES:
        digest = hashlib.sha256((LIVE_MODEL / name).read_bytes()).hexdigest()
        if digest != manifest["files"].get(name):
            sys.exit(f"{LIVE_MODEL / name} does not match the SHA-256 in its manifest.json: the shipped model is damaged")
        shutil.copy(LIVE_MODEL / name, dst / "model" / name)
    shutil.copy(LIVE_MODEL / "manifest.json", dst / "model" / "manifest.json")


def live_benchmark_table() -> str:
    "The speed of the in-browser translator, as benchmarks/live_translate.py measured it into results_live.json."
    f = ROOT / "benchmarks" / "results_live.json"
    if not f.exists():
        return ""
    r = json.loads(f.read_text())
    rows = "".join(f"<tr><td>{label} ({r[k]['sentences']} test2016 sentences)</td><td>{r[k]['median_ms']:.0f} ms</td>"
                   f"<td>{r[k]['mean_ms']:.0f} ms</td><td>{r[k]['p90_ms']:.0f} ms</td></tr>"
                   for k, label in (("greedy", "a sentence, greedy"), ("beam4", "a sentence, beam search (4 beams)")))
    return (f'<table class="lt-benchmark"><caption>Speed in {r["browser"]} on {r["cpu_cores"]} CPU cores '
            f'(<code>benchmarks/live_translate.py</code>; 1-minute load average of the machine {r["load_average"][0]}): '
            f'loading the model takes {r["load_s"]["empty_cache"]} s the first time ({r["weights_mb"]} MB of weights) and '
            f'{r["load_s"]["cache_api"]} s from the browser\'s cache; a sentence, from the request to its translation and '
            f'attention maps:</caption><thead><tr><th></th><th>median</th><th>mean</th><th>90th percentile</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>\n")


def live_translator_tags(site: Path) -> None:
    "Load the translator's script and style on the pages that have a `live-translate` box, and only there; its speed below it."
    tags = '<link rel="stylesheet" href="_static/live/live.css">\n<script type="module" src="_static/live/live.js"></script>\n'
    table = live_benchmark_table()
    for page in site.glob("*.html"):
        html = page.read_text()
        if 'class="live-translate"' in html:
            html = re.sub(r'(<div class="live-translate".*?</div>\n)', lambda m: m[1] + table, html, count=1, flags=re.S)
            page.write_text(html.replace("</head>", tags + "</head>", 1))


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
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy(page, src / page.name)
    shutil.copytree(ROOT / "benchmarks", src / "benchmarks", ignore=shutil.ignore_patterns("*.py", "__pycache__"))  # results
    shutil.copy(ROOT / "docs" / "favicon.svg", src / "_static" / "favicon.svg")
    shutil.copy(ROOT / "docs" / "custom.css", src / "_static" / "custom.css")
    notebooks = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if p.name != "index.ipynb")
    pages = [p for p in DOCS_PAGES if (ROOT / "docs" / f"{p}.md").exists()]
    pages += sorted(p.stem for p in (ROOT / "docs").glob("*.md") if p.stem not in pages)  # any other page last
    toctree = [p.stem for p in notebooks] + pages
    prepare_notebook(ROOT / "nbs" / "index.ipynb", src / "index.ipynb", toctree)
    for nb in notebooks:
        prepare_notebook(nb, src / nb.name, None)
    vega(src / "_static")
    mathjax(src / "_static")
    live_translator(src / "_static")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(src), str(out)]
    res = subprocess.run(cmd)
    if res.returncode != 0:
        sys.exit("sphinx-build failed (warnings are errors: broken links, missing pages, bad markup)")
    nbdev_link_targets(out)
    live_translator_tags(out)
    trim(out)
    print(f"site built in {out}")


if __name__ == "__main__":
    main()
