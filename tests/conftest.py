"""Shared fixtures and helpers: running the command (`cli` in a process of its own, `command` in this one) and judging
its end (`done`, `one_line`, `snapshot`); stand-ins, corpora and tiny models; the built site in a browser.

Data: the Multi30k files are found as the library finds them; `tools/check.sh` points $ANNOTATED_TRANSFORMER_DATA at
../shared/data/multi30k when that folder exists (CI, offline). CI runs the tests in two processes (`pytest -n 2`); each
gives torch its share of the cores. Every test that uses `site` or `browser` gets the marker `browser`: CI runs them,
and `pytest -m "not browser"` leaves them out."""
import ast
import contextlib
import functools
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "multi30k"
REPOSITORY = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
if not os.environ.get("ANNOTATED_TRANSFORMER_DATA") and SHARED.is_dir():  # `pytest` run on its own, beside CI's data
    os.environ["ANNOTATED_TRANSFORMER_DATA"] = str(SHARED)
os.environ["TQDM_DISABLE"] = "1"  # no progress bars from the commands the tests run (a test of the bars removes it)
if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n N` (CI: -n 2): the cores are shared between the N workers
    import torch
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


@pytest.fixture(scope="session")
def multi30k():
    "{file name: verified path} of every Multi30k file; a one-line failure, not a traceback, when unreachable."
    from annotated_transformer.data import DataError, ensure_multi30k
    try:
        return ensure_multi30k(progress=False)
    except DataError as e:
        pytest.fail(f"Multi30k is not reachable: {e}", pytrace=False)


# ---------------------------------------------------------------- commands

def run_as_user(argv: list, stdin=None, env=None, cwd=None, **kwargs) -> subprocess.CompletedProcess:
    "Run a command line as a user runs it: a process of its own, without progress bars, on one thread."
    return subprocess.run(argv, input=stdin, capture_output=True, cwd=cwd,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                          **{"timeout": 600, **kwargs})


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    "Run `annotated-transformer ARGS` as a user runs it (see `run_as_user`)."
    return run_as_user([sys.executable, "-m", "annotated_transformer.cli", *args], **kwargs)


def command(capsys, *args) -> tuple[int, str, str]:
    """Run `annotated-transformer ARGS` in this process, through the command's `main`: (status, stdout, stderr). The
    status is the exit's for the arguments that argparse refuses (it exits rather than returning)."""
    from annotated_transformer import cli as commands
    try:
        status = commands.main([*args])
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    return status, out, err


def done(result) -> str:
    "`result` (a finished process) ended with status 0: its stdout, as text."
    text = lambda out: out if isinstance(out, str) else (out or b"").decode()
    assert result.returncode == 0, text(result.stdout)[-2000:] + text(result.stderr)[-3000:]
    return text(result.stdout)


def one_line(result, status: int, *says: str, last: bool = False) -> str:
    """`result` (of `cli` or `command`) ended with `status` and one line of stderr, no traceback, naming each of `says`.
    `last`: judge the last line only (a training run's progress bars come above it)."""
    if isinstance(result, subprocess.CompletedProcess):
        got, err = result.returncode, result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    else:
        got, _, err = result
    assert got == status, (got, err[-3000:])
    assert "Traceback" not in err and (last or err.strip().count("\n") == 0), err[-3000:]
    line = err.strip().splitlines()[-1] if err.strip() else ""
    for word in says:
        assert word in line, (word, err[-3000:])
    return line


@functools.cache
def script(path: str):
    "A script of the repository (`tools/build_docs.py`, `benchmarks/train_step.py`) imported as a module, once."
    file = ROOT / path
    if str(file.parent) not in sys.path:  # as when it runs: its folder's other scripts are importable
        sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = sys.modules[file.stem] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imports_of(tree: ast.AST) -> tuple[set[str], set[str]]:
    "The package's modules and the outside top-level packages that a piece of code imports (anywhere in it)."
    ours, outside = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            ours |= {node.module} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("annotated_transformer"):
            rest = node.module.split(".")[1:]
            ours |= {rest[0]} if rest else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                (ours.add(a.name.split(".")[1]) if a.name.startswith("annotated_transformer.")
                 else outside.add(a.name.split(".")[0]))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            outside.add(node.module.split(".")[0])
    return ours, outside


def notebook(path: Path, *cells: tuple) -> Path:
    "Write a notebook of (kind, source), (kind, source, outputs) or (kind, source, outputs, metadata) cells."
    def cell(kind, source, outputs=(), metadata=None):
        extra = {"execution_count": None, "outputs": list(outputs)} if kind == "code" else {}
        return {"cell_type": kind, "metadata": metadata or {}, "source": source, **extra}
    path.write_text(json.dumps({"cells": [cell(*c) for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def cells(path: Path, kind: str = "") -> list[dict]:
    "A notebook's cells (only those of `kind`, 'code' or 'markdown', if given), each with its source as one string."
    return [{**c, "source": "".join(c["source"])} for c in json.loads(Path(path).read_text())["cells"]
            if kind in ("", c["cell_type"])]


def snapshot(folder: Path) -> dict:
    "Every file under `folder` with its bytes: two equal snapshots mean nothing was written, changed or removed."
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class Upper:
    "Stands in for a model: a line's translation is its upper case; no line is too long; Ctrl-C on the batch `stop_at`."
    model = type("M", (), {"config": type("C", (), {"max_len": 5000})()})()

    def __init__(self, stop_at=None):
        self.calls, self.stop_at = 0, stop_at

    def too_long(self, sentences, max_extra=50):
        return []

    def translate(self, sentences, beam_size=4, alpha=0.6, batch_size=64):
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        return [s.upper() for s in sentences]


@pytest.fixture
def stand_in(tmp_path) -> list[str]:
    "The command line of `annotated-transformer` with `Upper` standing in for the model: no model loads."
    script = tmp_path / "stand_in.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nfrom conftest import Upper\n"
                      "from annotated_transformer import cli\ncli._translator = lambda args: Upper()\n"
                      "sys.exit(cli.main(sys.argv[1:]))\n")
    return [sys.executable, str(script)]


@pytest.fixture
def model_copy(tmp_path) -> Path:
    "A copy of the shipped model that a test may change."
    from annotated_transformer.decoding import shipped_model_dir
    shutil.copytree(shipped_model_dir(), tmp_path / "model")
    for p in (tmp_path / "model").iterdir():
        p.chmod(0o644)
    return tmp_path / "model"


def swapped_vocabulary(folder: Path) -> str:
    "The tokenizer.json of `folder` with two pieces' ids swapped: the same size, other meanings."
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    a, b = list(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    return json.dumps(tokenizer, ensure_ascii=False)


def eos_model(seed: int, eos: float, vocab: int = 40, pre_norm: bool = True):
    "A small random model; `eos` raises </s>'s logit, so that sentences end at many different lengths."
    import torch
    from annotated_transformer.data import EOS
    from annotated_transformer.model import make_model
    torch.manual_seed(seed)
    m = make_model(vocab, vocab, N=2, d_model=32, d_ff=64, h=4, pre_norm=pre_norm).eval()
    with torch.no_grad():
        m.generator.proj.bias[EOS] += eos
    return m


# ---------------------------------------------------------------- a tiny training run on a corpus of your own

PAIRS = [("Ein Hund läuft.", "A dog runs."), ("Eine Katze schläft.", "A cat sleeps."), ("Zwei Hunde spielen.", "Two dogs play."),
         ("Ein Mann liest ein Buch.", "A man reads a book."), ("Eine Frau singt.", "A woman sings.")] * 8
DE, EN = ("".join(line + "\n" for line in side) for side in zip(*PAIRS))
# a model of a few thousand parameters, trained on the CPU with a word vocabulary
TINY_TRAIN = ["--subwords", "0", "--min-freq", "1", "--N", "1", "--d-model", "16", "--d-ff", "32", "--h", "2",
              "--max-tokens", "200", "--warmup", "5", "--val-bleu-sentences", "2", "--device", "cpu", "--threads", "1"]


def corpus(folder: Path, de: str = DE, en: str = EN, splits=("train", "val", "test")) -> Path:
    "A folder that `train --corpus-dir` reads: the texts `de` and `en`, as they are, in each split."
    folder.mkdir(parents=True, exist_ok=True)
    for split in splits:
        (folder / f"{split}.de").write_text(de, newline="")
        (folder / f"{split}.en").write_text(en, newline="")
    return folder


def train(capsys, out: Path, data: Path, *extra) -> tuple[int, str, str]:
    "`annotated-transformer train` of the tiny model on the corpus `data`, in this process (see `command`)."
    return command(capsys, "train", "--corpus-dir", str(data), "--out-dir", str(out), *TINY_TRAIN, *extra)


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Path:
    "A folder with corpus/ and run/, the tiny model trained on it for one epoch. Copy it before changing it."
    from annotated_transformer import cli as commands
    folder = tmp_path_factory.mktemp("trained")
    data = corpus(folder / "corpus")
    assert commands.main(["train", "--corpus-dir", str(data), "--out-dir", str(folder / "run"), *TINY_TRAIN, "--epochs", "1"]) == 0
    return folder


@pytest.fixture
def trained_copy(trained, tmp_path) -> tuple[Path, Path]:
    "(corpus, run) of `trained`, copied into this test's folder: its own to change."
    shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
    return tmp_path / "corpus", tmp_path / "run"


# ---------------------------------------------------------------- the documentation site in a browser

SITE = Path(os.environ.get("ANNOTATED_TRANSFORMER_SITE", ROOT / "site"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(items):
    for item in items:
        if {"site", "browser"} & set(item.fixturenames):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def site() -> Path:
    "The built site, with the in-browser translator's model: built now when missing, rather than skipped."
    if not (SITE / "index.html").exists() or not (SITE / "_static" / "live" / "model" / "model.safetensors").exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "build_docs.py"), "--out", str(SITE)], check=True)
    return SITE


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site_url(site):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    assert Path(CHROMIUM).exists(), f"Chromium not found at {CHROMIUM}: install Debian's chromium package"
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


SCREENS = {"1280x800": {"viewport": {"width": 1280, "height": 800}},
           "1366x768": {"viewport": {"width": 1366, "height": 768}},
           "390x844": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True,
                       "device_scale_factor": 2}}


@contextlib.contextmanager
def opened(browser, screen="1280x800", name=None, site_url=None, **options):
    "A page in a fresh context (empty cache) on one of the SCREENS, at `name` if given; closed after the block."
    context = browser.new_context(**SCREENS[screen], **options)
    page = context.new_page()
    try:
        if name:
            page.goto(site_url + name, wait_until="networkidle")
        yield page
    finally:
        context.close()


def pages():
    "The site's pages, without the small pages that send nbdev's links (`attention.html#...`) on to their target."
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.glob("*.html")
                  if "<title>Redirecting</title>" not in p.read_text()[:200])


def expected_charts(page_name: str) -> list[str]:
    "Element ids of the Altair charts saved in the outputs of the page's notebook (cells hidden on the site excluded)."
    nb = ROOT / "nbs" / page_name.replace(".html", ".ipynb")
    if not nb.exists():
        return []
    ids = []
    for cell in cells(nb, "code"):
        if cell["source"].lstrip().startswith("#| hide"):
            continue
        for output in cell.get("outputs", []):
            html = "".join(output.get("data", {}).get("text/html", []))
            ids += re.findall(r'<div id="(altair-viz-[0-9a-f]+)"></div>', html)
    return ids


def wait_for_charts(page, name: str, timeout_ms: int = 30000) -> None:
    "Wait until every chart the notebook saved has drawn (an svg or canvas inside it); name the first that never does."
    ids = expected_charts(name)
    for chart_id in ids:
        # drawn, and sized to its column (docs/charts.js marks the chart data-fitted once its last drawing is done)
        drawn = page.locator(f"#{chart_id}[data-fitted] svg, #{chart_id}[data-fitted] canvas").first
        try:
            drawn.wait_for(state="attached", timeout=timeout_ms)
        except Exception:
            pytest.fail(f"{name}: chart #{chart_id} never drew within {timeout_ms / 1000:.0f} s", pytrace=False)
    assert page.locator(".vega-embed").count() == len(ids), f"{name}: {len(ids)} charts expected"


def typeset(page) -> None:
    "Wait until MathJax has typeset every equation of the page, which it does after the load event (none: no wait)."
    if not page.locator("article .math").count():
        return  # a page without equations loads no MathJax
    page.wait_for_function("""() => window.MathJax && MathJax.startup && MathJax.startup.promise
        && [...document.querySelectorAll('article .math')].every(m => m.querySelector('mjx-container'))""", timeout=30000)
    page.evaluate("() => MathJax.startup.promise")
