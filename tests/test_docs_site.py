"""The documentation site in a real browser: Debian's Chromium driven by Playwright, the site served on
127.0.0.1. Every page loads with no page error, no console error, no failed request and no request
leaving the machine; every chart renders; hovering an attention map shows a tooltip; math is rendered;
every internal link resolves. A missing Chromium or site build is a failure, never a skip."""
import html as html_lib
import json
import re
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from conftest import ROOT, SITE, expected_charts, opened, pages, script, typeset, wait_for_charts


# Bytes a page may load with an empty cache (sum of the response bodies). Vega is loaded only with charts and MathJax
# only with math, each library within its own budget; the page with everything else (its HTML, the theme, the site's
# scripts) within 1 MB, so a page with both charts and math has the same room for its own content as one with neither.
LIBRARIES = {"Vega": (lambda u: u.endswith(("/_static/vega-bundle.js", "/_static/vega-setup.js")), 1.0e6),
             "MathJax": (lambda u: "/_static/mathjax/" in u, 1.0e6)}
PAGE_BUDGET = 1.0e6


def weight_problems(name: str, loaded: list[tuple[str, int]]) -> list[str]:
    "What is too heavy, or loaded without need, among a page's (path, bytes) responses."
    html = (SITE / name).read_text()
    needs = {"Vega": bool(expected_charts(name)), "MathJax": 'class="math' in html}
    problems, own = [], sum(size for _, size in loaded)
    for library, (part_of, budget) in LIBRARIES.items():
        size = sum(s for u, s in loaded if part_of(u))
        own -= size
        if size > budget:
            problems.append(f"{name}: {library} {size / 1e6:.2f} MB (budget {budget / 1e6:.1f} MB)")
        if (size > 0) != needs[library]:
            problems.append(f"{name}: {library} {'loaded without need' if size else 'missing'}")
    if own > PAGE_BUDGET:
        problems.append(f"{name}: {own / 1e6:.2f} MB besides Vega and MathJax (budget 1.0 MB)")
    return problems


def test_every_page_loads_cleanly_offline_light_and_fits_a_phone(site_url, browser):
    "Each page on a first visit (empty cache) at 390 px: no error, nothing from outside, within its weight, no wider than the screen."
    html_pages = pages()
    assert "index.html" in html_pages and "01_attention.html" in html_pages and "api.html" in html_pages
    problems, links, ids = [], {}, {}
    host = urlparse(site_url).netloc
    for name in html_pages:
        context = browser.new_context(viewport={"width": 390, "height": 844})  # a fresh cache for every page
        page, done = context.new_page(), []
        page.route("**/*", lambda route: route.continue_() if urlparse(route.request.url).netloc == host
                   or route.request.url.startswith(("data:", "blob:")) else
                   (problems.append(f"external request {route.request.url}"), route.abort())[1])
        page.on("pageerror", lambda e: problems.append(f"{page.url}: page error {e}"))
        page.on("console", lambda m: problems.append(f"{page.url}: console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("requestfailed", lambda r: problems.append(f"{page.url}: failed request {r.url} {r.failure}"))
        page.on("response", lambda r: problems.append(f"{page.url}: HTTP {r.status} for {r.url}") if r.status >= 400 else None)
        page.on("requestfinished", lambda r: done.append(r))
        page.goto(site_url + name)  # until the load event: the waits below, then the network's quiet, see the rest
        wait_for_charts(page, name)  # every chart of the notebook drew something
        typeset(page)  # MathJax loads its parts and fonts as it typesets
        page.wait_for_load_state("networkidle")
        assert page.locator("link[rel='icon']").count() >= 1, f"{name}: no favicon"
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{name}: the page is {overflow} px wider than a 390 px screen"
        links[name] = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
        ids[name] = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
        problems += weight_problems(name, [(urlparse(r.url).path, r.sizes()["responseBodySize"]) for r in done])
        context.close()
    assert not problems, "\n".join(problems[:30])
    # every internal link resolves: the target page exists and, for #anchors, the element exists
    for name, hrefs in links.items():
        for href in hrefs:
            url = urljoin(site_url + name, href)
            if urlparse(url).netloc != host:
                continue
            target, anchor = urldefrag(url)
            path = urlparse(target).path.lstrip("/") or "index.html"
            assert (SITE / path).exists(), f"{name}: broken link {href}"
            if anchor and path.endswith(".html"):
                if path not in ids:  # a page that sends nbdev's links on: the ids of the page it lands on
                    with opened(browser, name=path, site_url=site_url) as page:
                        ids[path] = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
                assert anchor in ids[path], f"{name}: link {href} points to a missing anchor"


def test_charts_math_and_tooltips(site_url, browser):
    assert len(expected_charts("06_viz.html")) >= 3  # the attention maps of a copy-task model
    with opened(browser, name="06_viz.html", site_url=site_url) as page:
        wait_for_charts(page, "06_viz.html")
        # hover a cell of the decoder-source attention map: the tooltip shows the token pair and the weight
        att = page.locator(".vega-embed", has_text="key (source)").first
        att.scroll_into_view_if_needed()
        att.locator("g.mark-rect path").nth(5).hover()
        tooltip = page.locator("#vg-tooltip-element")
        tooltip.wait_for(state="visible", timeout=5000)
        assert all(word in tooltip.inner_text() for word in ("query (target)", "key (source)", "weight"))
        # nbdev's symbol links (module page + symbol anchor) land on the symbol in the API reference
        page.goto(site_url + "attention.html#multiheadedattention.attend")
        page.wait_for_url("**/api.html#annotated_transformer.attention.MultiHeadedAttention.attend", timeout=15000)
        for name in ("01_attention.html", "02_layers.html", "05_training.html"):
            page.goto(site_url + name, wait_until="networkidle")
            page.locator("mjx-container").first.wait_for(state="attached", timeout=15000)
            assert page.locator("mjx-container").count() > 3, f"{name}: math not rendered"


def test_exercise_solutions_are_folded_until_opened(site_url, browser):
    "An exercise's solution (a Colab form cell) shows only its 'Show the solution' line until the reader opens it."
    with opened(browser, name="01_attention.html", site_url=site_url) as page:
        folds = page.locator("details", has_text="Show the solution")
        assert folds.count() == 2, "01_attention: one folded solution per exercise"
        code = folds.first.locator("pre").first
        assert not code.is_visible(), "the solution shows before it is opened"
        folds.first.locator("summary").click()
        code.wait_for(state="visible", timeout=5000)
        assert "def attention(" in code.inner_text() and "#@title" not in code.inner_text()


def test_api_page_covers_every_module():
    "A new exported module must be added to docs/api.md, or its docstrings never reach the site."
    listed = set(re.findall(r"automodule:: annotated_transformer\.(\w+)", (ROOT / "docs" / "api.md").read_text()))
    modules = {p.stem for p in (ROOT / "annotated_transformer").glob("*.py") if not p.stem.startswith("_")}
    assert modules <= listed, f"missing from docs/api.md: {sorted(modules - listed)}"


def test_layout_uses_the_screen(site_url, browser):
    "At 1280 px the content column holds code and charts beside both sidebars (the phone's width: in the test above)."
    with opened(browser, name="01_attention.html", site_url=site_url) as wide:
        column = wide.evaluate("document.querySelector('.bd-article-container').getBoundingClientRect().width")
        visible_search = wide.evaluate("[...document.querySelectorAll('.search-button-field, .bd-search input')]"
                                       ".filter(e => e.offsetParent !== null).length")
    assert column >= 640, f"content column only {column:.0f} px wide at 1280 px"
    assert visible_search == 1, f"{visible_search} search boxes on the page"


def test_site_is_small(site):
    "Under 15 MB, not counting the shipped model's files that the in-browser translator fetches (the package's own, checked by hash)."
    model = site / "_static" / "live" / "model"
    assert (model / "model.safetensors").is_file(), "the docs build copies the shipped model for the in-browser translator"
    total = sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and model not in f.parents)
    assert total < 15e6, f"the site is {total / 1e6:.1f} MB without the model's weights (budget 15 MB)"


def test_every_docs_link_of_the_package_resolves(site):
    "The `Docs:` link of every module docstring and every symbol link of `_modidx.py` lands on something that exists."
    import importlib
    import annotated_transformer._modidx as modidx
    base = modidx.d["settings"]["doc_host"] + modidx.d["settings"]["doc_baseurl"] + "/"
    api_ids = set(re.findall(r'id="([^"]+)"', (site / "api.html").read_text()))
    modules = {p.stem for p in (ROOT / "annotated_transformer").glob("*.py") if p.stem != "_modidx"}
    for name in sorted(modules):
        doc = importlib.import_module("annotated_transformer" if name == "__init__" else f"annotated_transformer.{name}").__doc__
        for url in re.findall(r"Docs: (\S+)", doc or ""):
            assert url.startswith(base) and (site / url[len(base):]).is_file(), f"{name}: Docs link {url} has no page"
    for module, symbols in modidx.d["syms"].items():
        for symbol, (link, _) in symbols.items():
            page, anchor = link.split("#", 1)
            redirect = (site / page).read_text()
            targets = json.loads(re.search(r"var t = (\{.*?\});", redirect)[1])
            assert anchor in targets, f"{symbol}: {link} leads nowhere"
            target = targets[anchor]
            assert (target.startswith("api.html#") and target.split("#", 1)[1] in api_ids) or (site / target).is_file(), (symbol, target)


def api_entry_text(html: str, name: str) -> str:
    "The text of one entry of the API page (`annotated_transformer.loop.train_epoch`): its signature and description."
    start = html.index(f'id="{name}"')
    end = html.find('<dt class="sig', start + 1)
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", html[start:end if end > 0 else None]))
    return " ".join(text.replace("\u2018", "'").replace("\u2019", "'").split())


def test_api_reference_shows_the_parameter_comments(site):
    "The comment beside each parameter in the notebooks (nbdev's docments) is that parameter's description on the site."
    import torch
    from fastcore.docments import docments
    from annotated_transformer import loop, training
    html = (site / "api.html").read_text()
    for obj in (loop.train_epoch, training.run_epoch, training.rate, training.LabelSmoothing):
        entry = api_entry_text(html, f"{obj.__module__}.{obj.__qualname__}")
        comments = docments(obj.__init__ if isinstance(obj, type) else obj)
        described = {p: c for p, c in comments.items() if c and p not in ("self", "return")}
        assert described, obj
        for param, comment in described.items():
            # the parameter's name, its type in parentheses when annotated, a dash, then the comment as written
            shown = re.search(rf"\b{param}(?: \([^)]*\))? – (.*?)(?= \w+(?: \([^)]*\))? – |$)", entry)
            assert shown and shown[1].startswith(" ".join(comment.replace("`", "").split())), (obj, param, comment)
    # no docstring inherited from torch.nn.Module: its forward's first sentence appears nowhere on the page
    inherited = torch.nn.Module.forward.__doc__.strip().split(".")[0]
    assert len(inherited.split()) >= 4 and inherited not in html_lib.unescape(re.sub(r"<[^>]+>", "", html))


def test_code_keeps_its_look_without_the_spans_of_plain_tokens(tmp_path):
    "Names and punctuation lose their spans only where pygments.css colours them as the code's own text, in both themes."
    unwrap_plain_tokens = script("tools/build_docs.py").unwrap_plain_tokens
    block = ('<div class="highlight"><pre><span class="n">x</span> <span class="o">=</span> '
             '<span class="n">f</span><span class="p">(</span><span class="mi">1</span><span class="p">)</span></pre></div>')
    prose = '<p><span class="n">not code</span></p>'
    rules = lambda dark_name: (
        'html[data-theme="light"] .highlight { background: #fefefe; color: #080808 }\n'
        'html[data-theme="light"] .highlight .n { color: #080808 } /* Name */\n'
        'html[data-theme="light"] .highlight .p { color: #080808 } /* Punctuation */\n'
        'html[data-theme="dark"] .highlight { background: #2b2b2b; color: #F8F8F2 }\n'
        f'html[data-theme="dark"] .highlight .n {{ color: {dark_name} }} /* Name */\n'
        'html[data-theme="dark"] .highlight .p { color: #f8f8f2 } /* Punctuation */\n')
    (tmp_path / "_static").mkdir()
    for dark_name, kept in (("#F8F8F2", []), ("#66D9EF", ["n"])):  # a dark theme that colours names apart keeps them
        (tmp_path / "_static" / "pygments.css").write_text(rules(dark_name))
        (tmp_path / "page.html").write_text(prose + block)
        unwrap_plain_tokens(tmp_path)
        page = (tmp_path / "page.html").read_text()
        assert page.startswith(prose), page  # only inside code blocks
        assert re.sub(r"<[^>]+>", "", page) == re.sub(r"<[^>]+>", "", prose + block)  # the same text
        assert sorted(set(re.findall(r'class="(n|p)"', page.removeprefix(prose)))) == kept, page
        assert '<span class="o">=</span>' in page and '<span class="mi">1</span>' in page  # styled tokens keep theirs
    built = SITE / "_static" / "pygments.css"
    if built.exists():  # the theme the site is built with colours both as the code's text: its pages have no such spans
        assert not re.search(r'<span class="[np]">', (SITE / "01_attention.html").read_text())


def test_navigation_comes_from_the_pages_numbers(tmp_path):
    "A page's tens digit is its part, its number its place; a page without a number, or sharing one, stops the build."
    navigation = script("tools/build_docs.py").navigation
    (tmp_path / "nbs").mkdir(), (tmp_path / "docs").mkdir()
    for name in ("index", "02_b", "01_a", "10_c"):
        (tmp_path / "nbs" / f"{name}.ipynb").write_text("{}")
    (tmp_path / "docs" / "03_guide.md").write_text("# guide\n")
    captions = {0: "One", 1: "Two"}
    assert navigation(tmp_path, captions) == [("One", ["01_a", "02_b", "03_guide"]), ("Two", ["10_c"])]
    for bad in ("docs/guide.md", "docs/02_again.md", "nbs/20_far.ipynb"):
        (tmp_path / bad).write_text("# x\n")
        with pytest.raises(SystemExit, match=Path(bad).stem):
            navigation(tmp_path, captions)
        (tmp_path / bad).unlink()
    (tmp_path / "docs" / "api.md").write_text("# API\n")  # a reference page: no number, last
    assert navigation(tmp_path, captions) == [("One", ["01_a", "02_b", "03_guide"]), ("Two", ["10_c", "api"])]
    # the site's own pages: every one numbered, in one of the parts, and the API reference last
    numbered = [p.stem for p in [*(ROOT / "nbs").glob("[0-9]*.ipynb"), *(ROOT / "docs").glob("*.md")] if p.stem != "api"]
    assert [n for _, names in navigation() for n in names] == sorted(numbered, key=lambda n: int(n.split("_")[0])) + ["api"]


def test_old_page_addresses_lead_to_the_new_pages(site_url, browser):
    "Every address a page had before the book was renumbered opens the page it became, at the same section."
    build_docs = script("tools/build_docs.py")
    current = build_docs.site_pages()
    assert not build_docs.MOVED.keys() & current.keys() and set(build_docs.MOVED.values()) <= current.keys()
    with opened(browser) as page:
        for old, new in build_docs.MOVED.items():
            page.goto(f"{site_url}{old}.html#top")
            page.wait_for_url(f"**/{new}.html#top")
