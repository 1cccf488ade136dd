"""Build the documentation site into site/ (or --out): no network needed, nothing executed.

1. copies docs/conf.py, docs/api.md and the notebooks of nbs/ into build/docs_src/, turning nbdev
   directives into what Sphinx understands: `#| hide` cells are dropped, directive comments are
   removed from the code shown, and an "Open in Colab" link is added under each notebook's title;
   the code cells between a chapter's title and its first sentence (imports, plumbing) are left out,
   so that every chapter opens with prose; a Colab form cell (`#@title Solution`, an exercise's solution) is folded
   under "Show the solution"; the home page carries the navigation, one captioned list per part of
   PART_CAPTIONS (below), in the pages' order;
2. puts the Vega/Vega-Lite/Vega-Embed bundle (from vl-convert-python) and the parts of MathJax 3 the
   pages use (from the pip package sphinx-mathjax-offline: no Node, no npm) into _static, so pages
   load nothing from elsewhere;
3. runs sphinx-build with -W: a warning (broken reference, missing page, bad markup) fails the build,
   keeping its cache (doctrees) in build/, out of the published folder;
4. makes pages light: the theme's 1.5 MB icon script is dropped (its icon font, already in the theme's
   CSS, draws the same icons), the code shown loses the spans that colour names and punctuation as the
   code's own text, and conf.py loads Vega only on pages with charts.
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
# The parts of MathJax 3 the pages load, as separate components (conf.py lists them for the loader): the core,
# TeX input, HTML output with its fonts, the hidden MathML that screen readers read, and the TeX extensions that
# `autoload` fetches when a page uses their macros. The combined tex-chtml.js would add the 0.4 MB context menu.
MATHJAX_PARTS = ["startup.js", "core.js", "input/tex.js", "output/chtml.js", "output/chtml/fonts/tex.js",
                 "output/chtml/fonts/woff-v2", "input/tex/extensions", "a11y/assistive-mml.js"]
DIRECTIVE = re.compile(r"^\s*#\|.*$")
# The site's navigation comes from the pages' numbers: every page of nbs/ and docs/ starts with one (01_attention,
# 17_gpu), the pages sort by it, and its tens digit is its part. A page's number is thus its place in the menu and, for
# a notebook, in the imports: a module imports only modules of lower numbers (tests/test_docs_site.py checks it).
REFERENCE = ("api",)  # reference pages, not read in order: no number, at the end of the menu
PART_CAPTIONS = {0: "Part 1: The paper", 1: "Part 2: Running it for real", 2: "Part 3: A translation system",
                 3: "Part 4: Tools"}
# the architecture figure embedded in markdown cells; the site shows the current docs/architecture.svg instead
FIGURE = re.compile(r'<svg [^>]*aria-label="The Transformer[^"]*".*?</svg>', re.S)


def repo_url() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"].rstrip("/")


def colab_url(name: str) -> str:
    return repo_url().replace("https://github.com/", "https://colab.research.google.com/github/") + f"/blob/main/nbs/{name}"


def opening_plumbing(cells: list[dict]) -> set[int]:
    "Indices of the code cells between the title cell and the first markdown cell after it (imports, set-up)."
    title = next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown"), None)
    if title is None:
        return set()
    found = set()
    for i in range(title + 1, len(cells)):
        if cells[i]["cell_type"] == "markdown":
            break
        found.add(i)
    return found


ALTAIR_ID = re.compile(r'<div id="(altair-viz-[0-9a-f]+)"></div>')
ALTAIR_CALL = re.compile(r'\}\)\((\{.*\}), (\{"mode":\s*"vega-lite"\})\);\s*</script>\s*$', re.S)


def compact_charts(cell: dict) -> dict:
    """An Altair chart in a saved output is a spec wrapped in a loader script that fetches Vega from a CDN when it is
    missing; on the site Vega is always there (docs/charts.js), so the output becomes the element and one call, with
    the spec written without spaces: the same chart, fewer bytes."""
    outputs = []
    for out in cell.get("outputs", []):
        html = "".join(out.get("data", {}).get("text/html", []))
        chart_id, call = ALTAIR_ID.search(html), ALTAIR_CALL.search(html)
        if chart_id and call:
            spec = json.dumps(json.loads(call[1]), separators=(",", ":"), ensure_ascii=False)
            html = (f'<div id="{chart_id[1]}"></div>\n<script>vegaEmbed(document.getElementById("{chart_id[1]}"), '
                    f'{spec}, {call[2]});</script>\n')
            out = {**out, "data": {**out["data"], "text/html": html}}
        outputs.append(out)
    return {**cell, "outputs": outputs}


PAPER_HEADING = re.compile(r"^(#{2,3}) (.*\(sections? [0-9][^)]*\).*)$", re.M)


def concept_index(markdown: str) -> str:
    """Before each heading that cites the paper ("## Label smoothing (section 5.4)"), an index entry for each concept
    it names ("label smoothing"): a search for a concept then lists the section that teaches it first, even when the
    heading is long ("Optimizer and learning-rate schedule (section 5.3)" for "learning-rate schedule")."""
    def entry(m):
        name = re.sub(r"\s*\(sections? [^)]*\)", "", m[2]).lower()
        concepts = [re.sub(r"^(the|a|an) ", "", c.strip()) for c in re.split(r",? and |, ", name)]
        concepts = [c for c in concepts if c and not c.startswith(("where ", "how ", "why ", "shape of"))]
        return "".join("```{index} !" + c + "\n```\n\n" for c in concepts) + m[0]  # "!": a main entry
    return PAPER_HEADING.sub(entry, markdown)


def site_pages(root: Path = ROOT) -> dict[str, Path]:
    "Every page of the site but the home page, by name: the notebooks of nbs/ and the Markdown pages of docs/."
    notebooks = {p.stem: p for p in (root / "nbs").glob("*.ipynb") if p.name != "index.ipynb"}
    docs = {p.stem: p for p in (root / "docs").glob("*.md")}
    if notebooks.keys() & docs.keys():
        sys.exit(f"a notebook and a page of docs/ have the same name: {sorted(notebooks.keys() & docs.keys())}")
    return {**notebooks, **docs}


def page_number(name: str) -> int | None:
    "The number a page's name starts with (`17_gpu` -> 17), or None."
    m = re.match(r"(\d+)_", name)
    return int(m[1]) if m else None


def navigation(root: Path = ROOT, captions: dict[int, str] = PART_CAPTIONS) -> list[tuple[str, list[str]]]:
    """The site's parts in reading order, each its caption and its pages sorted by number: a page's tens digit is its
    part. The reference pages (REFERENCE) close the last part. A page without a number, two pages with one number, or
    a page in a part with no caption stop the build with one line naming it."""
    pages = site_pages(root)
    unnumbered = sorted(name for name in pages if page_number(name) is None and name not in REFERENCE)
    if unnumbered:
        sys.exit(f"pages without a number (NN_name): {', '.join(unnumbered)}")
    numbered = [name for name in pages if name not in REFERENCE]
    numbers = [page_number(name) for name in numbered]
    shared = sorted(name for name in numbered if numbers.count(page_number(name)) > 1)
    if shared:
        sys.exit(f"pages that share a number: {', '.join(shared)}")
    orphans = sorted(name for name in numbered if page_number(name) // 10 not in captions)
    if orphans:
        sys.exit(f"pages in a part with no caption in PART_CAPTIONS: {', '.join(orphans)}")
    parts = [(caption, sorted((n for n in numbered if page_number(n) // 10 == part), key=page_number))
             for part, caption in sorted(captions.items())]
    parts[-1][1].extend(name for name in REFERENCE if name in pages)
    return parts


def page_title_and_summary(path: Path) -> tuple[str, str]:
    "A page's title (its `# ` heading) and its summary (the `> ` line under the title; empty when it has none)."
    if path.suffix == ".ipynb":
        first = "".join(next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown")["source"])
    else:
        first = path.read_text().split("\n## ", 1)[0]
    title, summary = re.search(r"^# (.+)$", first, re.M), re.search(r"^> (.+)$", first, re.M)
    return title[1].strip(), summary[1].strip() if summary else ""


def part_table(part: int,  # 1 for the first part of the navigation
               root: Path = ROOT) -> str:
    """The pages of one part of the navigation as a Markdown table, in their order: the page (a notebook's number,
    then its title linked to its source file, which the site and tools/make_readme.py turn into the right link), the
    module a notebook exports, and the page's summary line. The home page and the README show it under each part's introduction."""
    pages = site_pages(root)
    names = navigation(root=root)[part - 1][1]
    rows = []
    for name in names:
        path = pages[name]
        title, summary = page_title_and_summary(path)
        number, module = (name.split("_")[0] if page_number(name) is not None else ""), ""
        if path.suffix == ".ipynb":
            cells = json.loads(path.read_text())["cells"]
            module = next((f"`{m[1]}`" for c in cells if c["cell_type"] == "code"
                           for m in [re.search(r"^#\| ?default_exp (\w+)", "".join(c["source"]), re.M)] if m), "")
        rows.append(f"| {number + ' ' if number else ''}[{title}]({path.name}) | {module} | {summary} |")
    return "| page | module | what it covers |\n| --- | --- | --- |\n" + "\n".join(rows)


def prepare_notebook(src: Path, dst: Path, toctree: list[tuple[str, list[str]]] | None) -> None:
    nb = json.loads(src.read_text())
    cells = []
    plumbing = opening_plumbing(nb["cells"])
    for i, cell in enumerate(nb["cells"]):
        if i in plumbing and not cell.get("outputs"):
            continue
        text = "".join(cell["source"])
        if cell["cell_type"] == "code":
            lines = text.splitlines()
            directives = [l.strip() for l in lines if DIRECTIVE.match(l)]
            if any(d.replace(" ", "") in ("#|hide", "#|exporti", "#|hide_input") for d in directives):
                continue
            code = "\n".join(l for l in lines if not DIRECTIVE.match(l)).strip("\n")
            if not code:
                continue
            cell = compact_charts({**cell, "source": code})
            if "#|echo:false" in (d.replace(" ", "") for d in directives):  # only the output shows (nbdev's echo: false)
                cell["metadata"] = {**cell["metadata"], "tags": ["remove-input"]}
            if code.startswith("#@title"):  # a Colab form, as an exercise's solution: its code folded under its title
                title = code.splitlines()[0].removeprefix("#@title").strip().lower()
                cell["source"] = code.split("\n", 1)[1] if "\n" in code else ""
                cell["metadata"] = {**cell["metadata"], "tags": ["hide-input"],
                                    "mystnb": {"code_prompt_show": f"Show the {title}", "code_prompt_hide": f"Hide the {title}"}}
        elif cell["cell_type"] == "markdown":
            if FIGURE.search(text):
                figure = (ROOT / "docs" / "architecture.svg").read_text().strip()
                text = FIGURE.sub(lambda m: figure, text)
            cell = {**cell, "source": concept_index(text)}
        cells.append(cell)
    title = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown")
    runtime = ("it asks Colab for a GPU" if nb["metadata"].get("accelerator") == "GPU" else "a CPU runtime is enough")
    link = {"cell_type": "markdown", "metadata": {}, "id": "colab-link",
            "source": f"[Open this notebook in Colab]({colab_url(src.name)}) ({runtime}; the first cell installs the package)."}
    cells.insert(title + 1, link)
    for i, (caption, names) in enumerate(toctree or []):  # one captioned list in the sidebar for each part
        cells.append({"cell_type": "markdown", "metadata": {}, "id": f"site-toctree-{i + 1}",
                      "source": f"```{{toctree}}\n:hidden:\n:maxdepth: 1\n:caption: {caption}\n\n" + "\n".join(names) + "\n```"})
    nb["cells"] = cells
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False))


def result_file_markdown(text: str) -> str:
    """A result file of benchmarks/ as a page includes it: its Markdown tables stay tables, and each other block of
    lines (the machine and versions, a table's model, the ratios a script printed) becomes a block of plain text, so
    that a line of a log never reads as a paragraph of the page."""
    out = []  # [is a table, text]; neighbouring blocks of plain lines share one box
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        table = all(line.lstrip().startswith("|") for line in block.splitlines())
        if out and not table and not out[-1][0]:
            out[-1][1] += "\n\n" + block
        else:
            out.append([table, block])
    # a box of plain lines wraps them (custom.css, .result-lines) instead of hiding their ends behind a scroll bar
    return "\n\n".join(block if table else "```{code-block} text\n:class: result-lines\n\n" + block + "\n```"
                         for table, block in out) + "\n"


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


# The pages' addresses before the book was numbered in reading order: each old address sends its reader on.
MOVED = {"09_viz": "06_viz", "15_exercises": "07_exercises", "06_fast": "10_fast", "06a_devices": "11_devices",
         "06b_loop": "12_loop", "07_checkpoint": "14_checkpoint", "08_copy_task": "15_copy_task", "10_data": "20_data",
         "10a_subwords": "21_subwords", "11_decoding": "22_decoding", "12_evaluation": "23_evaluation",
         "13_train": "24_train", "13b_recipe": "25_recipe", "14_pretrained": "26_pretrained",
         "13a_own_pair": "27_own_pair", "90_cli": "30_cli", "14a_experiments": "31_experiments",
         "paper_map": "08_paper_map", "gpu": "17_gpu", "distributed": "16_distributed", "benchmarks": "19_benchmarks",
         "usage": "28_usage", "what-can-go-wrong": "32_what-can-go-wrong", "contributing": "33_contributing",
         "13_checkpoint": "14_checkpoint", "14_copy_task": "15_copy_task", "15_gpu": "17_gpu",
         "17_benchmarks": "19_benchmarks", "19_streams": "13_files", "streams": "13_files",
         "experiments": "31_experiments"}


def moved_pages(site: Path) -> None:
    """A page at each old address (MOVED) that sends the reader to the new one, keeping the section (#...). An old
    address that a module's page already holds (distributed.html) is left to it: it sends symbols to the API
    reference and everything else to the same chapter."""
    for old, new in MOVED.items():
        if not (site / f"{old}.html").exists():
            (site / f"{old}.html").write_text(REDIRECT.format(targets="{}", page=f"{new}.html"))


REDIRECT = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Redirecting</title>
<script>var t = {targets}; var a = location.hash.slice(1); location.replace(t[a] || "{page}" + location.hash);</script>
</head><body><a href="{page}">Continue to the chapter</a></body></html>
"""


LIVE_MODEL = ROOT / "annotated_transformer" / "pretrained" / "multi30k-de-en"  # the package's shipped student (one model)
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
            html = re.sub(r'(<div class="live-translate".*?</div>)\n?', lambda m: m[1] + "\n" + table, html, count=1, flags=re.S)
            page.write_text(html.replace("</head>", tags + "</head>", 1))


def trim(site: Path) -> None:
    "Drop what readers never load: source maps of the theme's scripts and styles, the theme's translations."
    for f in site.rglob("*.map"):
        f.unlink()
    shutil.rmtree(site / "_static" / "locales", ignore_errors=True)
    for f in site.glob(".buildinfo*"):  # Sphinx's record of the build, for incremental rebuilds
        f.unlink()
    shutil.rmtree(site / "_sources", ignore_errors=True)  # empty: sources are not copied (html_copy_source)


PLAIN_TOKEN = re.compile(r'<span class="([np])">([^<]*)</span>')  # a name or a punctuation mark of the code shown
HIGHLIGHT_BLOCK = re.compile(r'<div class="highlight"><pre>.*?</pre></div>', re.S)


def unwrap_plain_tokens(site: Path) -> None:
    """Pygments wraps every name and punctuation mark of the code shown in a span of its own (classes `n` and `p`),
    and the theme's pygments.css colours those exactly as the code block's own text, in either theme: unwrapped, the
    code looks the same and weighs about half as much. The colours are compared first, so a theme that styles names
    or punctuation apart keeps its spans."""
    css = (site / "_static" / "pygments.css").read_text()
    def colour(theme: str, selector: str) -> str | None:  # the colour pygments.css gives `selector` in a theme
        found = re.search(rf'html\[data-theme="{theme}"\] {re.escape(selector)} \{{[^}}]*?color: (#\w+)', css)
        return found[1].lower() if found else None
    plain = {token for token in ("n", "p")
             if all(colour(theme, f".highlight .{token}") == colour(theme, ".highlight") is not None for theme in ("light", "dark"))}
    unwrap = lambda m: m[2] if m[1] in plain else m[0]
    for page in site.rglob("*.html"):
        text = page.read_text()
        lighter = HIGHLIGHT_BLOCK.sub(lambda block: PLAIN_TOKEN.sub(unwrap, block[0]), text)
        if lighter != text:
            page.write_text(lighter)


ICON_SCRIPT = re.compile(r'\s*<script defer src="_static/scripts/fontawesome\.js[^"]*"></script>')


def drop_icon_script(site: Path) -> None:
    """The theme loads Font Awesome's 1.5 MB script, which redraws its icons as SVG; the theme's CSS already
    draws them with the icon font (about 0.1 MB, loaded once), so the script is removed from every page."""
    for page in site.rglob("*.html"):
        text = page.read_text()
        if "fontawesome.js" in text:
            page.write_text(ICON_SCRIPT.sub("", text))
    for f in (site / "_static" / "scripts").glob("fontawesome.js*"):
        f.unlink()


def theme_icons() -> str:
    "Font Awesome's script as shipped with the theme: the source of the icon outlines."
    import pydata_sphinx_theme
    return (Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / "scripts"
            / "fontawesome.js").read_text()


ICON = re.compile(r'(?:"([\w-]+)"|([\w$]+)):\[(\d+),(\d+),\[[^\]]*\],"[^"]*","([^"]+)"\]')


def icons_as_masks(site: Path) -> None:
    """Draw the theme's icons from their outlines instead of the 0.1 MB icon font every page would load: each solid
    icon the pages use (`fa-bars`, `fa-sun`, ...) becomes a CSS mask in the page's text colour, and the fonts go."""
    from urllib.parse import quote
    icons = theme_icons()
    start = icons.index('p("far",b)')  # the solid set is registered after the regular one
    solid = {(m[1] or m[2]): (m[3], m[4], m[5]) for m in ICON.finditer(icons[start:icons.index('p("fas",b)')])}
    used = set()
    for f in [*site.glob("*.html"), *(site / "_static").rglob("*.js")]:
        used |= set(re.findall(r"fa-([a-z0-9-]+)", f.read_text(errors="ignore")))
    rules = ['[class*="fa-"], [class*="fa-"]::before { font-family: inherit !important; }',
             '[class*="fa-"]::before { content: ""; display: inline-block; width: 1em; height: 1em; '
             "vertical-align: -0.125em; background-color: currentColor; "
             "-webkit-mask: var(--icon) center / contain no-repeat; mask: var(--icon) center / contain no-repeat; }"]
    for name in sorted(used & solid.keys()):
        w, h, path = solid[name]
        svg = f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {w} {h}'><path d='{path}'/></svg>"
        rules.append(f'.fa-{name} {{ --icon: url("data:image/svg+xml,{quote(svg)}"); }}'
                     f' .fa-{name}::before {{ width: {int(w) / int(h):.4g}em; }}')
    with open(site / "_static" / "custom.css", "a") as css:
        css.write("\n/* the theme's icons as masks (written by tools/build_docs.py) */\n" + "\n".join(rules) + "\n")
    shutil.rmtree(site / "_static" / "vendor" / "fontawesome", ignore_errors=True)
    theme_css = site / "_static" / "styles" / "pydata-sphinx-theme.css"  # less its 0.07 MB of icon-to-glyph rules
    theme_css.write_text(re.sub(r'(?:\.fa-[a-z0-9-]+,?)+\{--fa:[^}]*\}', "", theme_css.read_text()))


SEARCH_SCRIPTS = re.compile(r'\s*<script src="(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>')
NOTEBOOK_CSS = re.compile(r'\s*<link rel="stylesheet" type="text/css" href="_static/mystnb\.[^"]*" />')


SIGNATURE = re.compile(r'<dt class="sig[^"]*"[^>]*>.*?</dt>|<nav id="pst-page-toc-nav"[^>]*>.*?</nav>', re.S)
PRE = re.compile(r'<span class="pre">([^<]*)</span>')
PAGE_TOC = re.compile(r'<nav id="pst-page-toc-nav"[^>]*>.*?</nav>', re.S)
HEADING = re.compile(r'(<h[1-4]>)(.*?)(</h[1-4]>)', re.S)  # headings of the text ("DistributedDataParallel")
CODE_LITERAL = re.compile(r'(<code class="docutils literal[^"]*">)(.*?)(</code>)', re.S)  # inline code in the text
NAME_BREAK = re.compile(r'(?<=\w[._/])(?=\w)|(?<=[a-z])(?=[A-Z])')  # where a long name may wrap: after . _ /, CamelCase
BREAK_IN_CODE = re.compile(r'(?<=\w[._])(?=\w[^<>]*</code>)|(?<=[a-z])(?=[A-Z][^<>]*</code>)')


def page_assets(site: Path) -> None:
    """The search index and its scripts (0.15 MB) only on the search page (search-as-you-type is off, so other pages
    never use them), and myst-nb's notebook styles only on pages that show notebook cells. In the API signatures
    and the page contents every word sits in its own `<span class="pre">`; the words alone read the same (0.05 MB
    less on the API page). Long names in inline code and headings get break opportunities (<wbr>) after `.`, `_` and `/` and
    between CamelCase words, so that on a phone they wrap there instead of widening the page."""
    for page in site.glob("*.html"):
        text = page.read_text()
        new = text if page.name == "search.html" else SEARCH_SCRIPTS.sub("", text)
        if 'class="cell' not in new:
            new = NOTEBOOK_CSS.sub("", new)
        new = SIGNATURE.sub(lambda m: PRE.sub(r"\1", m[0]), new)
        new = PAGE_TOC.sub(lambda m: BREAK_IN_CODE.sub("<wbr>", m[0]), new)  # long names wrap at . _ and CamelCase
        new = HEADING.sub(lambda m: m[1] + re.sub(r">([^<]+)<", lambda t: ">" + NAME_BREAK.sub("<wbr>", t[1]) + "<",
                                                  ">" + m[2] + "<")[1:-1] + m[3], new)
        new = CODE_LITERAL.sub(lambda m: m[1] + re.sub(r">([^<]+)<", lambda t: ">" + NAME_BREAK.sub("<wbr>", t[1]) + "<",
                                                       ">" + m[2] + "<")[1:-1] + m[3], new)
        if new != text:
            page.write_text(new)


def css_items(css: str) -> list[tuple[str, str]]:
    "The top-level items of a stylesheet as (prelude, body) pairs; the body of an @media block holds more items."
    items, i = [], 0
    while (j := css.find("{", i)) >= 0:
        depth, k = 1, j + 1
        while depth and k < len(css):
            depth += {"{": 1, "}": -1}.get(css[k], 0)
            k += 1
        items.append((css[i:j].strip(), css[j + 1:k - 1]))
        i = k
    return items


# classes that scripts add at run time under names built from parts (Bootstrap's tooltips and dropdowns)
RUNTIME_CLASSES = re.compile(r"^(bs-|tooltip|popover|dropdown|modal|fade|show|collaps|active|disabled)")


def without_rules_for(css: str, unused: set[str]) -> str:
    "`css` less the selectors that need one of the `unused` classes, and the rules left with no selector."
    out = []
    for prelude, body in css_items(css):
        if prelude.startswith(("@media", "@supports", "@layer", "@container")):
            inner = without_rules_for(body, unused)
            if inner:
                out.append(prelude + "{" + inner + "}")
        elif prelude.startswith("@"):
            out.append(prelude + "{" + body + "}")
        else:
            def needed(selector):  # a class inside :not() is not needed to match; :is/:where/:has are kept whole
                if re.search(r":(is|where|has)\(", selector):
                    return set()
                return set(re.findall(r"\.([\w-]+)", re.sub(r":not\([^)]*\)", "", selector)))
            alive = [sel for sel in prelude.split(",") if not needed(sel) & unused]
            if alive:
                out.append(",".join(alive) + "{" + body + "}")
    return "".join(out)


def purge_unused_css(site: Path) -> None:
    """The theme's stylesheets carry all of Bootstrap (carousels, toasts, forms, ...): 0.2 MB that no page uses.
    A rule is dropped when it needs a class that no page's markup has and no script names (nor adds at run time,
    RUNTIME_CLASSES)."""
    in_pages = set()
    for page in site.glob("*.html"):
        for attr in re.findall(r'class="([^"]*)"', page.read_text()):
            in_pages |= set(attr.split())
    scripts = "".join(f.read_text(errors="ignore") for f in (site / "_static").rglob("*.js"))
    for css_file in [site / "_static" / "styles" / "pydata-sphinx-theme.css", site / "_static" / "styles" / "sphinx-book-theme.css",
                     site / "_static" / "basic.css", *(site / "_static").glob("mystnb.*.css")]:
        css = css_file.read_text()
        unused = {c for c in set(re.findall(r"\.([a-zA-Z][\w-]*)", css))
                  if c not in in_pages and c not in scripts and not RUNTIME_CLASSES.match(c)}
        css_file.write_text(without_rules_for(css, unused))


def site_scripts(static: Path) -> None:
    "The site's own scripts and the repository icon of the header (GitHub's mark, taken from the theme's icon set)."
    for name in ("site.js", "charts.js"):
        shutil.copy(ROOT / "docs" / name, static / name)
    shutil.copy(ROOT / "docs" / "search_scorer.js", static.parent / "search_scorer.js")  # conf.py's html_search_scorer
    icons = theme_icons()
    width, height, path = re.search(r'\bgithub:\[(\d+),(\d+),\[\],"\w+","([^"]+)"\]', icons).groups()
    (static / "repository.svg").write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}"><path fill="#6b7280" d="{path}"/></svg>\n')


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
    for result in (src / "benchmarks").rglob("*.txt"):  # the pages include them: tables as tables, log lines as log lines
        result.write_text(result_file_markdown(result.read_text()))
    shutil.copy(ROOT / "docs" / "favicon.svg", src / "_static" / "favicon.svg")
    shutil.copy(ROOT / "docs" / "custom.css", src / "_static" / "custom.css")
    notebooks = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if p.name != "index.ipynb")
    prepare_notebook(ROOT / "nbs" / "index.ipynb", src / "index.ipynb", navigation())
    for nb in notebooks:
        prepare_notebook(nb, src / nb.name, None)
    vega(src / "_static")
    mathjax(src / "_static")
    live_translator(src / "_static")
    site_scripts(src / "_static")
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(BUILD / "doctrees"),
           str(src), str(out)]
    res = subprocess.run(cmd)
    if res.returncode != 0:
        sys.exit("sphinx-build failed (warnings are errors: broken links, missing pages, bad markup)")
    nbdev_link_targets(out)
    moved_pages(out)
    live_translator_tags(out)
    trim(out)
    drop_icon_script(out)
    unwrap_plain_tokens(out)
    icons_as_masks(out)
    page_assets(out)
    purge_unused_css(out)
    print(f"site built in {out}")


if __name__ == "__main__":
    main()
