"""The documentation site in a real browser: Debian's Chromium driven by Playwright, the site served on 127.0.0.1.
Every page loads with no page error, no console error, no failed request and no request leaving the machine; every
chart renders; hovering an attention map shows a tooltip; math is rendered; every internal link resolves. A missing
Chromium or site build is a failure, never a skip.

Then the site read on a laptop (1280x800, 1366x768) and a phone (390x844, touch), as a reader would: tapping the menu
and contents buttons and following their links, measuring what is on the screen (bounding boxes, characters a line,
rendered sizes, overflow), hovering charts, copying code and searching. Nothing here reads the site's CSS: only what
the browser lays out and draws."""
import html as html_lib
import json
import re
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from conftest import REPOSITORY, ROOT, SITE, expected_charts, opened, pages, script, typeset, wait_for_charts


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


def test_code_copies_and_exercise_solutions_are_folded_until_opened(site_url, browser):
    "An exercise's solution (a Colab form cell) shows only its 'Show the solution' line until the reader opens it."
    with opened(browser, "1280x800", "01_attention.html", site_url, permissions=["clipboard-read", "clipboard-write"]) as page:
        block = page.locator("div.cell_input div.highlight").first  # a code block's copy button copies its code
        block.scroll_into_view_if_needed()
        block.hover()
        button = block.locator("button.copybtn")
        button.wait_for(state="visible", timeout=5000)
        button.click()
        assert page.evaluate("navigator.clipboard.readText()").strip() == block.locator("pre").inner_text().strip()
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


def test_site_is_small_and_holds_no_build_files(site):
    "Under 15 MB, not counting the shipped model's files that the in-browser translator fetches (the package's own, checked by hash)."
    leftovers = [p.name for p in site.iterdir() if p.name in (".doctrees", ".buildinfo", "_sources")]
    assert not leftovers, f"build files in the published folder: {leftovers}"
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


CHAPTERS = [p for p in (pages() if (SITE / "index.html").exists() else []) if re.match(r"\d", p)]


def visible(page, selector):
    "The first element matching `selector` that the reader can see."
    loc = page.locator(f"{selector} >> visible=true").first
    loc.wait_for(state="visible", timeout=20000)
    return loc


def opens(locator, what):
    "Wait until a tap has made `locator` visible; fail with one line naming `what` if it never does."
    try:
        locator.wait_for(state="visible", timeout=15000)
    except Exception:
        pytest.fail(f"tapping the visible {what} button opened nothing", pytrace=False)


def on_screen(page, locator) -> bool:
    "The element is inside the viewport and is what a tap at its centre would hit."
    return locator.evaluate("""e => { const r = e.getBoundingClientRect();
        if (r.width < 1 || r.height < 1 || r.left < 0 || r.top < 0 || r.right > innerWidth + 1 || r.bottom > innerHeight + 1) return false;
        const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        return !!hit && (hit === e || e.contains(hit) || hit.contains(e)); }""")


# --- navigation -------------------------------------------------------------------------------------------------

def test_phone_menu_opens_and_its_links_work(site_url, browser):
    with opened(browser, "390x844", "05_training.html", site_url) as page:
        link = page.locator(f".bd-header-article a[href='{REPOSITORY}']").first  # the header links to the code
        assert link.is_visible() and on_screen(page, link), f"the phone's header has no visible link to {REPOSITORY}"
        visible(page, ".primary-toggle").tap()
        link = page.locator("#pst-primary-sidebar-modal a", has_text="Seeing the Transformer").first  # the next page
        opens(link, "menu")
        assert on_screen(page, link), "the chapter list opened, but its links are not on the screen"
        chapters = page.eval_on_selector_all("#pst-primary-sidebar-modal nav a[href]", "els => els.map(e => e.getAttribute('href'))")
        assert len(chapters) >= len(CHAPTERS), f"the phone menu lists {len(chapters)} pages"
        link.tap()
        page.wait_for_url("**/06_viz.html", timeout=10000)


# the section `id` is on the screen and the page has stopped scrolling (the same scrollY on two frames in a row)
SECTION_ON_SCREEN = """id => { const y = window.scrollY, still = window.lastScrollY === y; window.lastScrollY = y;
                                const top = document.getElementById(decodeURIComponent(id)).getBoundingClientRect().top;
                                return still && -5 <= top && top <= 300; }"""


def settles(page, condition: str, arg=None, timeout: int = 10_000) -> bool:
    "Whether `condition` (a function of `arg`, in the page) comes true within `timeout` ms: handlers and smooth scrolling finish later on a busy machine."
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        page.wait_for_function(condition, arg=arg, timeout=timeout)
    except PlaywrightTimeout:
        return False
    return True


@pytest.mark.parametrize("name", ["05_training.html", "api.html"])
def test_phone_contents_open_and_every_link_lands_on_its_section(site_url, browser, name):
    with opened(browser, "390x844", name, site_url) as page:
        visible(page, ".secondary-toggle").tap()
        dialog = page.locator("#pst-secondary-sidebar-modal")
        links = dialog.locator("nav a[href^='#']")
        opens(links.first, f"{name} contents")
        assert on_screen(page, links.first), f"{name}: the contents opened, but not on the screen"
        anchors = links.evaluate_all("els => els.map(e => e.getAttribute('href').slice(1))")
        assert len(anchors) >= 3
        missing = page.evaluate("ids => ids.filter(id => !document.getElementById(decodeURIComponent(id)))", anchors)
        assert not missing, f"{name}: contents links without a target: {missing[:5]}"
        shown = dialog.locator("nav a[href^='#'] >> visible=true")  # a method's entry stays folded under its class
        middle = shown.nth(shown.count() // 2)
        target = middle.get_attribute("href")[1:]
        middle.tap()
        page.wait_for_function("() => !document.querySelector('#pst-secondary-sidebar-modal').open", timeout=5000)
        shown = settles(page, SECTION_ON_SCREEN, target)  # once the smooth scrolling has brought it
        top = page.evaluate("id => document.getElementById(decodeURIComponent(id)).getBoundingClientRect().top", target)
        assert shown, f"{name}: after tapping #{target} its section is at y={top:.0f}, not on the screen"


@pytest.mark.parametrize("screen", ["1280x800", "1366x768"])
@pytest.mark.parametrize("name", ["01_attention.html", "api.html"])
def test_laptop_shows_chapters_and_page_contents_without_a_tap(site_url, browser, screen, name):
    with opened(browser, screen, name, site_url) as page:
        chapters = page.locator(".bd-sidebar-primary nav a.current").first  # the list scrolls to the page being read
        contents = page.locator(".bd-sidebar-secondary nav a[href^='#']").first
        for what, loc in (("chapter list", chapters), ("page contents", contents)):
            assert loc.is_visible() and on_screen(page, loc), f"{name} at {screen}: the {what} is not visible"
        width = page.locator(".bd-sidebar-secondary").evaluate("e => e.getBoundingClientRect().width")
        assert width >= 150, f"{name} at {screen}: the page contents are only {width:.0f} px wide"
        # the content column holds code and charts beside both sidebars, under one search box and a link to the code
        column = page.evaluate("document.querySelector('.bd-article-container').getBoundingClientRect().width")
        assert column >= 640, f"{name} at {screen}: the content column is only {column:.0f} px wide"
        boxes = page.evaluate("[...document.querySelectorAll('.search-button-field, .bd-search input')]"
                              ".filter(e => e.offsetParent !== null).length")
        assert boxes == 1, f"{name} at {screen}: {boxes} search boxes"
        link = page.locator(f".bd-header-article a[href='{REPOSITORY}']").first
        assert link.is_visible() and on_screen(page, link), f"{name} at {screen}: no visible link to {REPOSITORY}"
        anchor = contents.get_attribute("href")[1:]
        contents.click()
        assert settles(page, SECTION_ON_SCREEN, anchor), f"{name} at {screen}: the contents link did not bring its section into view"


# --- reading ----------------------------------------------------------------------------------------------------

LINE_STATS = """() => {
  const out = [];
  for (const p of document.querySelectorAll('article.bd-article p')) {
    if (p.closest('table, .cell_output, blockquote') || p.querySelector('mjx-container, .math')) continue;
    const lines = Math.round(p.getBoundingClientRect().height / parseFloat(getComputedStyle(p).lineHeight));
    if (lines >= 3) out.push(p.textContent.replace(/\\s+/g, ' ').trim().length / lines);
  }
  return out;
}"""


@pytest.mark.parametrize("name", ["05_training.html", "20_data.html", "24_train.html", "26_pretrained.html", "31_experiments.html"])
def test_prose_lines_are_65_to_85_characters_at_1280(site_url, browser, name):
    with opened(browser, "1280x800", name, site_url) as page:
        per_line = page.evaluate(LINE_STATS)
        assert len(per_line) >= 2, f"{name}: too few long paragraphs to measure"
        mean = sum(per_line) / len(per_line)
        # full lines of a paragraph are its average over all lines but the last, which is shorter: allow for that
        assert 60 <= mean <= 85, f"{name}: {mean:.0f} characters a line at 1280 px"


def test_every_chapter_opens_with_its_first_sentence(site_url, browser):
    with opened(browser) as page:
        for name in CHAPTERS:
            page.goto(site_url + name)
            first = page.evaluate("""() => {
              const article = document.querySelector('article.bd-article');
              const items = [...article.querySelectorAll('p, div.cell')].filter(e => !e.closest('blockquote')
                  && !e.querySelector('a[href*="colab.research.google.com"]'));
              return items.length ? (items[0].matches('p') ? 'prose' : items[0].textContent.trim().slice(0, 60)) : 'nothing';
            }""")
            assert first == "prose", f"{name} opens with code before its first sentence: {first!r}"


WORDS_ON_TWO_LINES = """sel => {
  const broken = [];
  for (const root of document.querySelectorAll(sel)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /[A-Za-z]{3,}/g; let m;
      while ((m = re.exec(node.data))) {
        if (m[0].length > 24) continue;  // an identifier longer than a phone line may break
        const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


@pytest.mark.parametrize("screen", ["1280x800", "390x844"])
def test_no_word_is_broken_across_lines(site_url, browser, screen):
    "Tables and text break between words, never inside one (no 'pa/pe/r', no 'introd uction')."
    with opened(browser, screen) as page:
        for name in ["08_paper_map.html", "index.html", "01_attention.html", "05_training.html", "26_pretrained.html", "31_experiments.html"]:
            page.goto(site_url + name, wait_until="networkidle")
            broken = page.evaluate(WORDS_ON_TWO_LINES, "article.bd-article table, article.bd-article p, article.bd-article li")
            assert not broken, f"{name} at {screen}: words split across lines: {broken[:8]}"


@pytest.mark.parametrize("name", ["01_attention.html", "02_layers.html", "05_training.html", "22_decoding.html", "08_paper_map.html"])
def test_phone_equations_and_tables_fit_or_scroll_with_a_cue(site_url, browser, name):
    with opened(browser, "390x844", name, site_url) as page:
        typeset(page)
        boxes = page.evaluate("""() => [...document.querySelectorAll("article mjx-container[display='true'], article table")].map((e, i) => {
            e.dataset.probe = i;
            const box = e.parentElement, cue = getComputedStyle(box, '::after').content;
            return {i, tag: e.tagName, wide: e.scrollWidth > e.clientWidth + 1, overflow: getComputedStyle(e).overflowX,
                    cue: box.classList.contains('scroll-box') && cue !== 'none' && cue !== 'normal',
                    right: e.getBoundingClientRect().right};
        })""")
        assert boxes, f"{name}: no display equations or tables found"
        for b in boxes:
            assert b["right"] <= 391, f"{name}: {b['tag']} #{b['i']} runs off the screen"
            if not b["wide"]:
                continue
            assert b["overflow"] in ("auto", "scroll") and b["cue"], f"{name}: {b['tag']} #{b['i']} is cut, with no scroll cue"
            # scrolling shows the rest, and the cue goes once the end is reached
            end = page.evaluate("""i => { const e = document.querySelector(`[data-probe="${i}"]`); e.scrollLeft = e.scrollWidth;
                                     return e.scrollLeft + e.clientWidth >= e.scrollWidth - 2; }""", b["i"])
            assert end, f"{name}: {b['tag']} #{b['i']} does not scroll to its end"
            gone = settles(page, "i => ['none', 'normal'].includes(getComputedStyle("
                                 "document.querySelector(`[data-probe='${i}']`).parentElement, '::after').content)", b["i"])
            assert gone, f"{name}: the scroll cue stays after scrolling to the end"


@pytest.mark.parametrize("name", ["01_attention.html", "24_train.html"])
def test_laptop_centres_the_display_equations_that_fit(site_url, browser, name):
    "A display equation narrower than its column sits in the column's middle, not at one of its edges."
    with opened(browser, "1280x800", name, site_url) as page:
        typeset(page)
        shifts = page.evaluate("""() => [...document.querySelectorAll("article div.math")].map(block => {
            const eq = block.querySelector("mjx-container[display='true'] mjx-math");
            if (!eq || eq.getBoundingClientRect().width > block.getBoundingClientRect().width - 40) return null;  // fills it
            const b = block.getBoundingClientRect(), e = eq.getBoundingClientRect();
            return Math.round((e.left + e.right) / 2 - (b.left + b.right) / 2);
        }).filter(s => s !== null)""")
        assert shifts, f"{name}: no display equation narrower than its column"
        off = [s for s in shifts if abs(s) > 25]  # the equation's link icon takes a little of the row
        assert not off, f"{name}: display equations off the column's centre by {off} px"


SEARCHES = {"label smoothing": "05_training.html#label-smoothing-section-5-4",
            "learning-rate schedule": "05_training.html#optimizer-and-learning-rate-schedule-section-5-3",
            "layer normalization": "02_layers.html#layer-normalization-section-3-1-citing-ba-et-al-2016",
            "beam search": "22_decoding.html#beam-search-section-6-1",
            "causal mask": "03_model.html#decoder-section-3-1-and-the-causal-mask",
            "positional encoding": "02_layers.html#positional-encoding-section-3-5",
            "multi-head attention": "01_attention.html#multi-head-attention-section-3-2-2",
            "scaled dot-product attention": "01_attention.html#scaled-dot-product-attention-section-3-2-1",
            "checkpoint averaging": "23_evaluation.html#checkpoint-averaging-section-6-1"}


def test_search_ranks_the_concepts_own_section_first_with_readable_snippets(site_url, browser):
    page = browser.new_page()
    for query, section in SEARCHES.items():
        page.goto(site_url + "search.html?q=" + query.replace(" ", "+"), wait_until="networkidle")
        page.locator("#search-results li p.context").first.wait_for(timeout=15000)
        first = page.locator("#search-results li > a").first.get_attribute("href")
        snippets = page.locator("#search-results li p.context").all_inner_texts()
        latex = [s for s in snippets if re.search(r"\\\(|\\[a-zA-Z]+\{|\\frac|_\{", s)]
        assert not latex, f"searching {query!r}: snippets show LaTeX source: {latex[0][:120]}"
        # the result is the section itself, or an index entry placed just before the section's heading
        landed = None
        if first.split("#")[0] == section.split("#")[0] and "#" in first:
            page.goto(site_url + first.split("#")[0])
            landed = page.evaluate("""id => { const t = document.getElementById(id); if (!t) return null;
                if (t.matches('section')) return t.id;
                const own = t.closest('section'), heading = own && own.querySelector(':scope > h1, :scope > h2, :scope > h3');
                if (heading && (t.compareDocumentPosition(heading) & Node.DOCUMENT_POSITION_FOLLOWING)) return own.id;
                const next = [...document.querySelectorAll('section[id]')].find(s => t.compareDocumentPosition(s) & Node.DOCUMENT_POSITION_FOLLOWING);
                return next ? next.id : null; }""", first.split("#")[1])
        assert landed == section.split("#")[1], f"searching {query!r}: first result {first}, not the section that teaches it ({section})"
    page.close()


# --- charts -----------------------------------------------------------------------------------------------------

CHART_PAGES = ["02_layers.html", "03_model.html", "05_training.html", "06_viz.html", "26_pretrained.html", "31_experiments.html"]

CHART_BOXES = """() => [...document.querySelectorAll('[id^="altair-viz-"]')].map(el => {
  const col = el.getBoundingClientRect(), svg = el.querySelector('svg');
  const own = parseFloat(svg.getAttribute('width'));
  const out = [...svg.querySelectorAll('g.role-legend, g.role-title, g.role-axis, g.role-frame')].map(g => g.getBoundingClientRect())
      .filter(r => r.width > 0 && (r.left < col.left - 1 || r.right > col.right + 1));
  const legends = [...svg.querySelectorAll('g.role-legend')].map(g => g.getBoundingClientRect());
  const s = svg.getBoundingClientRect();
  return {id: el.id, column: col.width, own, outside: out.length,
          legendsShown: legends.every(r => r.top >= s.top - 1 && r.bottom <= s.bottom + 1 && r.left >= col.left - 1 && r.right <= col.right + 1)};
})"""


@pytest.mark.parametrize("screen", ["1280x800", "390x844"])
def test_every_chart_fits_its_column_with_its_legend(site_url, browser, screen):
    with opened(browser, screen) as page:
        for name in CHART_PAGES:
            page.goto(site_url + name, wait_until="networkidle")
            wait_for_charts(page, name)
            for c in page.evaluate(CHART_BOXES):
                assert c["own"] <= c["column"] + 1, f"{name} at {screen}: chart {c['id']} is {c['own']:.0f} px in a {c['column']:.0f} px column"
                assert not c["outside"], f"{name} at {screen}: chart {c['id']} has a title, axis or legend outside its column"
                assert c["legendsShown"], f"{name} at {screen}: chart {c['id']} draws its legend outside the chart"


def test_line_chart_answers_the_pointer_near_the_line(site_url, browser):
    with opened(browser, "1280x800", "05_training.html", site_url) as page:
        wait_for_charts(page, "05_training.html")
        chart = page.locator("[id^='altair-viz-']", has_text="Learning-rate schedule").first
        chart.scroll_into_view_if_needed()
        line = chart.locator("g.mark-line path").first.bounding_box()
        # a point inside the plot that is on no line (the lines are 2 px wide), but near the curves
        x, y = line["x"] + line["width"] * 0.6, line["y"] + line["height"] * 0.5
        on_line = page.evaluate("([x, y]) => !!document.elementFromPoint(x, y).closest('g.mark-line')", [x, y])
        assert not on_line
        page.mouse.move(x, y)
        tooltip = page.locator("#vg-tooltip-element")
        tooltip.wait_for(state="visible", timeout=5000)
        assert "learning rate" in tooltip.inner_text() and "step" in tooltip.inner_text()


def test_charts_follow_the_dark_theme(site_url, browser):
    with opened(browser, "1280x800", "06_viz.html", site_url) as page:
        wait_for_charts(page, "06_viz.html")
        visible(page, ".theme-switch-button").click()  # a menu: system, light, dark
        visible(page, "[data-bs-title='Dark'], .dropdown-menu button:has-text('Dark'), .dropdown-menu a:has-text('Dark')").click()
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        wait_for_charts(page, "06_viz.html")
        colours = page.evaluate("""() => [...document.querySelectorAll('[id^="altair-viz-"] svg')].map(svg => {
            const bg = svg.querySelector('path.background, rect.background');
            const label = svg.querySelector('g.role-axis-label text');
            let card = svg, behind = 'rgba(0, 0, 0, 0)';  // the colour the chart is seen on: the nearest painted ancestor
            for (; card && behind === 'rgba(0, 0, 0, 0)'; card = card.parentElement) behind = getComputedStyle(card).backgroundColor;
            return {bg: bg ? getComputedStyle(bg).fill : 'none', text: getComputedStyle(label).fill, behind}; })""")

        def rgb(c):
            v = [float(x) for x in re.findall(r"[\d.]+", c)]
            return v if v else [0, 0, 0, 0]
        for c in colours:
            bg = rgb(c["bg"])
            assert c["bg"] in ("none", "transparent") or (len(bg) == 4 and bg[3] == 0) or sum(bg[:3]) < 200, f"white chart card in dark mode: {c}"
            assert sum(rgb(c["text"])[:3]) > 450, f"axis labels too dark for the dark theme: {c}"
            assert sum(rgb(c["behind"])[:3]) < 200, f"the chart sits on a light card in the dark theme: {c}"


# --- the architecture figure ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["index.html", "03_model.html"])
def test_architecture_figure_is_legible_on_a_phone_and_drawn_as_built(site_url, browser, name):
    with opened(browser, "390x844", name, site_url) as page:
        fig = page.locator("article svg[role='img']").first
        fig.scroll_into_view_if_needed()
        m = fig.evaluate("""svg => {
            const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
            const texts = [...svg.querySelectorAll('text')];
            const links = [...svg.querySelectorAll('a')];
            const mid = svg.viewBox.baseVal.x + svg.viewBox.baseVal.width / 2;
            const norms = texts.filter(t => t.textContent === 'LayerNorm').map(t => t.x.baseVal[0].value < mid ? 'enc' : 'dec');
            return {smallest: Math.min(...texts.map(t => parseFloat(t.getAttribute('font-size')) * scale)),
                    underlined: links.filter(a => getComputedStyle(a).textDecorationLine !== 'none').length,
                    tap: Math.min(...links.filter(a => a.querySelector('rect[fill^="#"]')).map(a => a.getBoundingClientRect().height)),
                    residuals: svg.querySelectorAll('path[stroke-dasharray]').length,
                    enc: norms.filter(n => n === 'enc').length, dec: norms.filter(n => n === 'dec').length,
                    width: svg.getBoundingClientRect().width};
        }""")
    assert m["width"] <= 390
    assert m["smallest"] >= 11, f"{name}: smallest text {m['smallest']:.1f} px on a phone"
    assert m["underlined"] == 0, f"{name}: {m['underlined']} underlined labels"
    assert m["tap"] >= 20, f"{name}: a block is only {m['tap']:.0f} px tall to tap"
    from annotated_transformer.layers import LayerNorm
    from annotated_transformer.model import make_model
    model = make_model(10, 10, N=1, d_model=16, d_ff=32, h=2)  # by default, with one layer per stack
    norms = tuple(sum(isinstance(mod, LayerNorm) for mod in stack.modules()) for stack in (model.encoder, model.decoder))
    assert (m["enc"], m["dec"]) == norms, "the figure's LayerNorms are not those of the model make_model builds"
    assert m["residuals"] == 5, f"{name}: {m['residuals']} residual connections drawn (2 per encoder layer, 3 per decoder layer)"


def test_architecture_figure_file_is_what_the_tool_draws():
    assert (ROOT / "docs" / "architecture.svg").read_text() == script("tools/draw_architecture.py").figure() + "\n"
