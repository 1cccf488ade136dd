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

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# notebooks are shown with the outputs saved in the repository; nothing is executed here
nb_execution_mode = "off"
nb_ipywidgets_js = {}  # no require.js or widget scripts from a CDN
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
nb_render_markdown_format = "myst"

# math is rendered by a local copy of MathJax 3 (copied into _static by tools/build_docs.py)
mathjax_path = "mathjax/tex-chtml.js"

html_theme = "sphinx_book_theme"
html_title = "The Annotated Transformer, tested"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # a lower-triangular grid: the causal mask
html_js_files = ["vega-setup.js", "vega-bundle.js"]
html_css_files = ["custom.css"]  # a wide content column; code, equations and charts scroll instead of being cut off
html_sidebars = {"**": ["navbar-logo.html", "sbt-sidebar-nav.html"]}  # one search box (the header's), not two  # Vega, Vega-Lite, Vega-Embed served by the site itself
html_theme_options = {
    "repository_url": _project["urls"]["Repository"],
    "use_repository_button": False,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
}
html_context = {"default_mode": "light"}
html_last_updated_fmt = None
html_copy_source = False

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_typehints = "description"
autodoc_inherit_docstrings = False  # no "Define the computation performed at every call" from torch.nn.Module
