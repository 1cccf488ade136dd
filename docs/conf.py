# Sphinx configuration of the documentation site. Build with `python tools/build_docs.py`:
# it prepares the notebooks and static files in build/docs_src and runs Sphinx there.
import tomllib
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
_project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

project = "The Annotated Transformer, tested"
author = "annotated-transformer developers"
copyright = "2026, annotated-transformer developers (MIT license)"
release = ""

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx_copybutton"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# notebooks are shown with the outputs saved in the repository; nothing is executed here
nb_execution_mode = "off"
nb_ipywidgets_js = {}  # no require.js or widget scripts from a CDN
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
nb_render_markdown_format = "myst"

# math is rendered by a local copy of MathJax 3 (copied into _static by tools/build_docs.py)
mathjax_path = "mathjax/startup.js"
mathjax3_config = {"loader": {"load": ["input/tex", "output/chtml", "a11y/assistive-mml"]}}

html_theme = "sphinx_book_theme"
templates_path = [str(ROOT / "docs" / "_templates")]  # layout.html: the theme's page, less a print-only copy of its contents
html_title = "The Annotated Transformer, tested"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # a lower-triangular grid: the causal mask
html_js_files = ["site.js"]  # menu and contents buttons on small screens, scroll cues, readable search snippets
html_css_files = ["custom.css"]  # both sidebars from 1200 px, a readable measure; wide things scroll in their own box
html_sidebars = {"**": ["navbar-logo.html", "sbt-sidebar-nav.html"]}  # one search box (the header's), not two
# copy buttons on code cells copy the code only, not the `>>>` or `$ ` prompts of examples
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_selector = "div.highlight pre"
html_theme_options = {
    "repository_url": _project["urls"]["Repository"],
    "use_repository_button": False,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    # the repository, in the header of every page (beside the theme, search and contents buttons);
    # the icon is written by tools/build_docs.py
    "article_header_end": ["icon-links.html", "article-header-buttons.html"],
    "icon_links": [{"name": "Source code on GitHub", "url": _project["urls"]["Repository"],
                    "icon": "_static/repository.svg", "type": "local"}],
}
html_context = {"default_mode": "light"}
html_search_scorer = str(Path(__file__).resolve().parent / "search_scorer.js")  # a concept's own section first (copied here by tools/build_docs.py)
html_last_updated_fmt = None
html_copy_source = False

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_typehints = "description"
autodoc_inherit_docstrings = False  # no "Define the computation performed at every call" from torch.nn.Module


def _parameter_comments(app, what, name, obj, options, lines):
    """Add the comment written beside each parameter in the notebooks (fastcore's docments) to the API reference,
    as the parameter's description, so the inline documentation reaches the site."""
    if what not in ("function", "method", "class"):
        return
    try:
        from fastcore.docments import docments
        comments = docments(obj.__init__ if what == "class" else obj)
    except Exception:  # a builtin, or a signature docments cannot read
        return
    def rst(text):  # a comment is plain text, not reStructuredText: no emphasis, no references
        return text.replace("*", "\\*").replace("|", "\\|")
    comments = {p: rst(c) if c else c for p, c in comments.items()}
    described = [(p, c) for p, c in comments.items() if c and p not in ("self", "return")]
    if described:
        lines += [""] + [f":param {p}: {c}" for p, c in described]
    if comments.get("return"):
        lines += [f":returns: {comments['return']}"]


def _chart_scripts(app, pagename, templatename, context, doctree):
    "Vega, Vega-Lite and Vega-Embed (0.9 MB) and the chart sizing only on the pages that have charts."
    if "altair-viz-" in context.get("body", ""):
        for name in ("vega-setup.js", "vega-bundle.js", "charts.js"):
            app.add_js_file(name)


def setup(app):
    app.connect("autodoc-process-docstring", _parameter_comments)
    app.connect("html-page-context", _chart_scripts)
