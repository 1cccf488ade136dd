"""Reading the site on a laptop (1280x800, 1366x768) and a phone (390x844, touch) in Chromium, as a reader would:
tapping the menu and contents buttons and following their links, measuring what is on the screen (bounding boxes,
characters a line, rendered sizes, overflow), hovering charts, copying code, searching, and weighing what each page
loads. Nothing here reads the site's CSS: only what the browser lays out and draws."""
import contextlib
import io
import json
import os
import re
from types import SimpleNamespace

import pytest

from conftest import REPOSITORY, ROOT, SCREENS, SITE, cells, opened, pages, script, typeset, wait_for_charts

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
        visible(page, ".primary-toggle").tap()
        link = page.locator("#pst-primary-sidebar-modal a", has_text="Seeing the Transformer").first  # the next page
        opens(link, "menu")
        assert on_screen(page, link), "the chapter list opened, but its links are not on the screen"
        chapters = page.eval_on_selector_all("#pst-primary-sidebar-modal nav a[href]", "els => els.map(e => e.getAttribute('href'))")
        assert len(chapters) >= len(CHAPTERS), f"the phone menu lists {len(chapters)} pages"
        link.tap()
        page.wait_for_url("**/06_viz.html", timeout=10000)


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
        page.wait_for_timeout(600)  # smooth scrolling
        top = page.evaluate("id => document.getElementById(decodeURIComponent(id)).getBoundingClientRect().top", target)
        assert -5 <= top <= 300, f"{name}: after tapping #{target} its section is at y={top:.0f}, not on the screen"


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
        anchor = contents.get_attribute("href")[1:]
        contents.click()
        page.wait_for_timeout(600)
        top = page.evaluate("id => document.getElementById(decodeURIComponent(id)).getBoundingClientRect().top", anchor)
        assert -5 <= top <= 300, f"{name} at {screen}: the contents link did not bring its section into view"


def test_header_links_to_the_repository(site_url, browser):
    for screen in SCREENS:
        with opened(browser, screen, "01_attention.html", site_url) as page:
            link = page.locator(f".bd-header-article a[href='{REPOSITORY}']").first
            assert link.is_visible() and on_screen(page, link), f"at {screen} the header has no visible link to {REPOSITORY}"


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
            page.wait_for_timeout(50)
            cue = page.evaluate("i => getComputedStyle(document.querySelector(`[data-probe='${i}']`).parentElement, '::after').content", b["i"])
            assert cue in ("none", "normal"), f"{name}: the scroll cue stays after scrolling to the end"


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


def test_copy_button_copies_the_code(site_url, browser):
    with opened(browser, "1280x800", "01_attention.html", site_url, permissions=["clipboard-read", "clipboard-write"]) as page:
        block = page.locator("div.cell_input div.highlight").first
        block.scroll_into_view_if_needed()
        block.hover()
        button = block.locator("button.copybtn")
        button.wait_for(state="visible", timeout=5000)
        button.click()
        copied = page.evaluate("navigator.clipboard.readText()")
        assert copied.strip() == block.locator("pre").inner_text().strip()


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


def test_no_build_cache_in_the_published_site(site):
    leftovers = [p.name for p in site.iterdir() if p.name in (".doctrees", ".buildinfo", "_sources")]
    assert not leftovers, f"build files in the published folder: {leftovers}"


# --- the architecture figure ------------------------------------------------------------------------------------

def model_layernorms():
    "LayerNorm modules of each stack of the model make_model builds by default, with one layer per stack."
    from annotated_transformer.layers import LayerNorm
    from annotated_transformer.model import make_model
    model = make_model(10, 10, N=1, d_model=16, d_ff=32, h=2)
    return tuple(sum(isinstance(m, LayerNorm) for m in stack.modules()) for stack in (model.encoder, model.decoder))


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
    assert (m["enc"], m["dec"]) == model_layernorms(), "the figure's LayerNorms are not those of the model make_model builds"
    assert m["residuals"] == 5, f"{name}: {m['residuals']} residual connections drawn (2 per encoder layer, 3 per decoder layer)"


def test_architecture_figure_file_is_what_the_tool_draws():
    assert (ROOT / "docs" / "architecture.svg").read_text() == script("tools/draw_architecture.py").figure() + "\n"


# --- Colab ------------------------------------------------------------------------------------------------------

LONG_RUN = re.compile(r"^\s*#\|\s*(slow|gpu)\b", re.M)


def test_notebooks_with_long_runs_ask_colab_for_a_gpu():
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        if any(LONG_RUN.search(c["source"]) for c in cells(path, "code")):
            assert nb["metadata"].get("accelerator") == "GPU", f"{path.name}: no GPU requested in its metadata"
            assert nb["metadata"].get("colab", {}).get("gpuType"), f"{path.name}: no Colab GPU type"


def test_long_training_cells_do_not_start_without_a_gpu(monkeypatch):
    "Each slow or GPU cell that trains, run as 'Run all' would run it on a CPU runtime: it trains nothing and says how to run it."
    def refuse(*args, **kwargs):
        raise AssertionError("training started on a CPU runtime")
    monkeypatch.delenv("ANNOTATED_TRANSFORMER_LONG_RUNS", raising=False)
    cells = 0
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        for source in (c["source"] for c in cells(path, "code")):
            if not LONG_RUN.search(source) or not re.search(r"\b(train|build_pretrained|build_distilled)\(", source):
                continue
            cells += 1
            cpu_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
            names = {"torch": cpu_torch, "os": os, "train": refuse, "build_pretrained": refuse, "build_distilled": refuse, "default_device": refuse,
                     "RECIPE": None, "pretrained_dir": refuse, "replace": refuse}
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(source, path.name, "exec"), names)
            assert "Skipped" in printed.getvalue() and "GPU" in printed.getvalue(), f"{path.name}: a long cell says nothing when skipped"
    assert cells >= 3
