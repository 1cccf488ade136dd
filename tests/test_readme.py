"""The README cannot drift from the program: it is what nbs/index.ipynb gives, its numbers are rendered from their
result files, its shell examples (and those of the site pages it links) run from a folder other than the repository,
and the command works after a plain (non-editable) install, also when the tests run inside a virtual environment."""
import json
import os
import re
import subprocess
import sys
import venv
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import ROOT, cells, cli, done, notebook, run_as_user, script

read_tables = script("benchmarks/train_step.py").read_tables  # the benchmark's reader of the tables it writes
make_readme = script("tools/make_readme.py")

README = (ROOT / "README.md").read_text()
# the site pages the README sends readers to for commands; their examples are tested like the README's own
PAGES = ["28_usage", "16_distributed", "17_gpu", "19_benchmarks", "33_contributing"]
PAGE_FILES = [ROOT / "docs" / f"{page}.md" if (ROOT / "docs" / f"{page}.md").exists() else ROOT / "nbs" / f"{page}.ipynb"
              for page in PAGES]  # a page of docs/, or a notebook


def page_text(path: Path) -> str:
    "A Markdown page, or the Markdown cells of a notebook."
    return "\n".join(c["source"] for c in cells(path, "markdown")) if path.suffix == ".ipynb" else path.read_text()


EXAMPLES = README + "\n".join(page_text(path) for path in PAGE_FILES)
# examples not run here, and why; every other `annotated-transformer` line of a ```sh block is run
SKIP = {
    "annotated-transformer train --out-dir": "trains for an hour",
    "torchrun": "needs several GPUs",
    "--run-dir runs/": "needs the output of a training run",
    "--checkpoint runs/": "needs the output of a training run",
    "--input captions.de": "needs a file of the reader's (tests/test_own_pair.py translates files)",
    "--src test.de": "needs a test set of the reader's (tests/test_own_pair.py evaluates files)",
}
# text a reader sees in these files speaks about the project, not about how it was made
USER_TEXT = [ROOT / "README.md", *PAGE_FILES,
             *(ROOT / "nbs" / f"{nb}.ipynb" for nb in ("index", "15_copy_task", "20_data", "21_subwords", "23_evaluation",
                                                       "26_pretrained", "31_experiments", "30_cli"))]
HISTORY = re.compile(r"old model|old recipe|previous (shipped )?model|goal set|no GPU was|was lent|this session|"
                     r"development machine|not measured yet", re.I)


def shell_examples() -> list[str]:
    "Every command of the ```sh blocks of the README and its pages that runs the command (continuation lines joined)."
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", EXAMPLES, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            # the command itself, or piped into it (not a `git clone .../annotated-transformer` line)
            if (re.search(r"(^|\|\s*)annotated-transformer\s", line) or "annotated_transformer.cli" in line) and not line.startswith("#"):
                commands.append(line)
    return commands


def runnable() -> list[str]:
    return list(dict.fromkeys(c for c in shell_examples() if not any(k in c for k in SKIP)))  # each command once


def test_readme_has_examples_and_skips_are_real():
    assert len(runnable()) >= 5, runnable()
    assert any("annotated-transformer" in c for c in re.findall(r"```sh\n(.*?)```", README, re.S)), "no command in the README"
    skipped = [c for c in shell_examples() if c not in runnable()]
    assert all(any(k in c for c in skipped) for k in SKIP), "a SKIP pattern matches no example: remove it"


@pytest.mark.parametrize("command", runnable())
def test_readme_example_runs_from_another_folder(command, tmp_path, multi30k):
    assert done(run_as_user(["bash", "-c", command], cwd=tmp_path, text=True)).strip(), f"{command} printed nothing"


def test_one_copy_task_time_everywhere():
    from annotated_transformer.copy_task import COPY_TASK_TIME
    from annotated_transformer.cli import build_parser
    flat = lambda text: " ".join(text.split())
    assert COPY_TASK_TIME in flat(README)
    assert COPY_TASK_TIME in flat((ROOT / "nbs" / "15_copy_task.ipynb").read_text().replace('\\n",\n    "', " "))
    assert COPY_TASK_TIME in flat(build_parser().format_help())
    assert not re.search(r"copy.task[^\n]*(a minute|~\d+ ?s\b)", README), "another copy-task time in the README"


def test_version():
    from annotated_transformer import __version__
    assert __version__ in done(cli("--version", text=True))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    "The package as `pip wheel .` builds it: the file that `pip install .` installs."
    folder = tmp_path_factory.mktemp("wheel")
    done(subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder),
                         str(ROOT)], capture_output=True, text=True, timeout=600))
    (found,) = folder.glob("*.whl")
    return found


def test_translate_after_a_plain_install_from_any_folder(tmp_path, wheel):
    """pip install . (not editable; its wheel) into a fresh environment; translate and evaluate find the shipped model there.
    torch & co. come from the environment that runs the tests, whether that is the system's Python or the venv the
    README creates: a .pth file lists its package folders after the new environment's own, so the copy installed
    here is the one imported (`system_site_packages=True` would see the base interpreter's packages, not a venv's)."""
    import site
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    site_packages = next((env_dir / "lib").glob("python*")) / "site-packages"
    running = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    (site_packages / "running_environment.pth").write_text("".join(f"{p}\n" for p in running if Path(p).is_dir()))
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}  # no checkout
    done(subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site_packages),
                         str(wheel)], capture_output=True, text=True, timeout=600))
    installed = lambda *args: done(subprocess.run([python, *args], cwd=tmp_path, capture_output=True, text=True,
                                                  timeout=300, env=env))
    assert str(env_dir) in installed("-c", "import annotated_transformer as a, torch; print(a.__file__)")  # that copy
    assert "dog" in installed("-m", "annotated_transformer.cli", "translate", "--beam-size", "1",
                              "Ein Hund rennt durch den Schnee.").lower()
    assert "BLEU" in installed("-m", "annotated_transformer.cli", "evaluate", "--limit", "20", "--beam-size", "1")


# --- the README is generated from nbs/index.ipynb, and is a front page

def test_readme_is_generated_from_index():
    assert README == make_readme.render(), "README.md is not what nbs/index.ipynb gives: run python tools/make_readme.py"
    assert "index" in {p.values[0].stem for p in rendering_cells()}  # its numbers: renderings of files (below)


def test_make_readme_rules(tmp_path):
    "Markdown as is; code with its text output; echo: false shows only its output; hidden and exported cells never."
    markdown_out = {"output_type": "execute_result", "data": {"text/markdown": "| a |\n| --- |\n| 1 |", "text/plain": "<Markdown>"}}
    out = make_readme.render(notebook(
        tmp_path / "index.ipynb",
        ("markdown", "# Title\n\nSee [the model](03_model.ipynb), [tests](33_contributing.md#run) and <https://x.org>."),
        ("code", "#| hide\nsecret = 1"), ("code", "#| export\nimport torch"),
        ("code", "1 + 1", [{"output_type": "execute_result", "data": {"text/plain": "2"}}]),
        ("code", "#| echo: false\nMarkdown(table)", [markdown_out]),
        ("markdown", 'A figure: <svg viewBox="0 0 1 1"><a href="x.html"><text>t</text></a></svg>')))
    site = make_readme.site_url()
    assert f"[the model]({site}03_model.html)" in out and f"[tests]({site}33_contributing.html#run)" in out
    assert "<https://x.org>" in out
    assert "secret" not in out and "import torch" not in out
    assert "```python\n1 + 1\n```\n\n```text\n2\n```" in out
    assert "| a |\n| --- |\n| 1 |" in out and "Markdown(table)" not in out and "<Markdown>" not in out
    assert "<svg" not in out and "(docs/architecture.svg)" in out


def test_readme_is_a_front_page():
    # a front page, not a manual: set-up, results and the chapters (the next test), in at most 1,500 words, code and
    # addresses included
    assert len(README.split()) <= 1500, len(README.split())
    for heading in ("## Set up", "## Three ways to use it", "## Results", "## Chapters"):
        assert f"\n{heading}\n" in README, heading
    assert len(re.findall(r"^\| sacreBLEU \|", README, re.M)) == 1, "one results table"


def test_readme_follows_the_sites_navigation():
    "The README's chapters are the site's three parts: each part's caption as a heading, then a table of its pages in the menu's order."
    parts = script("tools/build_docs.py").navigation()
    chapters = README.split("\n## Chapters\n", 1)[1]
    headings = re.findall(r"^### (.+)$", chapters, re.M)
    assert headings == [caption for caption, _ in parts], headings
    for (caption, names), section in zip(parts, re.split(r"^### .+$", chapters, flags=re.M)[1:]):
        linked = re.findall(r"^\| (?:\w+ )?\[[^]]+\]\([^)]*/([\w.-]+)\.html\)", section, re.M)
        assert linked == names, (caption, linked, names)


# --- numbers a reader sees are rendered from the files they were measured into

def rendering_cells():
    "(notebook, cell index) of every `#| echo: false` cell whose saved output is Markdown: a rendering of a file."
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        for i, cell in enumerate(cells(nb)):
            if (cell["cell_type"] == "code" and re.search(r"^#\|\s*echo:\s*false", cell["source"], re.M)
                    and any("text/markdown" in o.get("data", {}) for o in cell["outputs"])):
                yield pytest.param(nb, i, id=f"{nb.stem}-cell{i}")


def markdown_outputs(outputs) -> list[str]:
    text = lambda t: "".join(t) if isinstance(t, list) else t
    return [text(o["data"]["text/markdown"]).strip() for o in outputs if "text/markdown" in o.get("data", {})]


@pytest.mark.parametrize("notebook, index", list(rendering_cells()))
def test_saved_renderings_match_their_files(notebook, index, monkeypatch):
    "Each rendering cell, run again now, gives its saved output: no number in a notebook or the README is stale."
    from execnb.shell import CaptureShell
    cell = cells(notebook)[index]
    monkeypatch.chdir(notebook.parent)  # where nbdev-test runs it
    fresh = markdown_outputs(CaptureShell().run(cell["source"]))
    assert fresh == markdown_outputs(cell["outputs"]), (
        f"{notebook.name}, cell {index}: the saved output differs from what its files give now; re-run the notebook "
        f"(nbdev-test --save {notebook.relative_to(ROOT)}) and then python tools/make_readme.py")


@pytest.mark.parametrize("path", USER_TEXT, ids=lambda p: p.name)
def test_text_speaks_about_the_project_only(path):
    text = page_text(path)
    if path.suffix == ".ipynb":  # and the Markdown its code cells show
        text += "\n".join(o for c in cells(path, "code") for o in markdown_outputs(c["outputs"]))
    found = [text[max(0, m.start() - 40):m.end() + 40] for m in HISTORY.finditer(text)]
    assert not found, f"{path.name}: text about how the project was made, not about the project: {found}"


# --- the benchmark page renders the benchmarks' own output files

def test_benchmark_page_includes_result_files():
    page = (ROOT / "docs" / "19_benchmarks.md").read_text()
    included = re.findall(r"```\{include\} (\S+)", page)
    assert {"benchmarks/results_train_step.txt", "benchmarks/results_decode.txt"} <= set(included), included
    assert all((ROOT / f).is_file() for f in included), included
    assert not re.search(r"\d+(\.\d+)? ?(x|s|tok/s|sentences/s)\b", re.sub(r"```.*?```", "", page, flags=re.S)), \
        "a measured figure typed into the page: it belongs in the included result files"


def test_the_benchmark_page_says_what_the_recheck_and_the_rdrop_run_measured():
    "docs/19_benchmarks.md's words on results_train_step_recheck.txt and _rdrop.txt, against them and the first one."
    first, recheck, rdrop = (read_tables((ROOT / "benchmarks" / f"results_train_step{name}.txt").read_text())
                             for name in ("", "_recheck", "_rdrop"))
    assert set(first) == set(recheck) == {"small", "base"}
    for model, rows in recheck.items():
        assert rows["fast+compile"][0] < rows["fast"][0]  # "compiling is still slower than the eager step there"
        slower = {k: rows[k][0] / first[model][k][0] for k in rows}
        assert all(slower[k] < 0.8 for k in ("fast", "torch", "fast+compile", "fast+torch_masks")), slower  # "far slower"
        assert 0.8 <= slower["explicit"] < 1, slower  # "the fp32 teaching path only a little slower"
    assert recheck["small"]["fast+compile"][1] > recheck["small"]["fast"][1]  # "more memory at its peak for the small model"
    assert recheck["base"]["fast"][0] < 2.5 * recheck["base"]["explicit"][0] <= first["base"]["fast"][0]  # "less than 2.5 times"
    # the R-Drop run
    assert set(rdrop) == {"small"} and set(rdrop["small"]) == {"fast", "explicit", "torch", "fast+rdrop"}
    rows, before = rdrop["small"], first["small"]
    slower = {k: rows[k][0] / before[k][0] for k in ("fast", "explicit", "torch")}
    assert slower["fast"] < 0.8 and slower["torch"] < 0.8 and slower["explicit"] >= 0.8, slower  # "far slower", "is not"
    assert rows["fast"][0] / rows["explicit"][0] < before["fast"][0] / before["explicit"][0]  # "gains less over (b)"
    assert rows["fast+rdrop"][0] < rows["fast"][0] and rows["fast+rdrop"][1] > rows["fast"][1]  # R-Drop costs time and memory


def test_decode_results_agree():
    "The decoding table of results_decode.txt is the one recorded in results_decode.json, from the shipped model."
    data = json.loads((ROOT / "benchmarks" / "results_decode.json").read_text())
    table = {decoder: (float(seconds), float(rate)) for decoder, seconds, rate in re.findall(
        r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \|$", (ROOT / "benchmarks" / "results_decode.txt").read_text(), re.M)}
    assert table == {row["decoder"]: (round(row["seconds"], 1), round(row["sentences_per_s"], 1)) for row in data["rows"]}
    config = json.loads((ROOT / "annotated_transformer" / "pretrained" / "multi30k-de-en" / "config.json").read_text())["model"]
    assert {k: data["model"][k] for k in config if k in data["model"]} == {k: v for k, v in config.items() if k in data["model"]}


def test_decode_benchmark_writes_json(tmp_path, multi30k):
    out = tmp_path / "decode.json"
    done(subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode.py"), "--checkpoint",
                         str(ROOT / "annotated_transformer" / "pretrained" / "multi30k-de-en"), "--limit", "4",
                         "--batch-sizes", "4", "--json", str(out)], capture_output=True, text=True, timeout=600))
    data = json.loads(out.read_text())
    assert data["sentences"] == 4 and len(data["rows"]) == 3 and data["identical_greedy"] is not None
    assert data["parameters"] > 0 and "threads" in data["device"]


def test_the_recipe_commands_are_the_recipe():
    "The shell command that reproduces the shipped model's runs is `train` with no settings: its defaults are RECIPE's."
    from annotated_transformer.recipe import RECIPE
    from annotated_transformer.train import TrainConfig
    texts = {"docs/28_usage.md": (ROOT / "docs" / "28_usage.md").read_text(),
             "nbs/25_recipe.ipynb": "".join(c["source"] for c in cells(ROOT / "nbs" / "25_recipe.ipynb"))}
    for name, text in texts.items():
        assert re.search(r"annotated-transformer train --out-dir runs/multi30k(`|\s+#)", text), f"{name}: no recipe command"
    assert replace(RECIPE, cooldown=None) == TrainConfig()  # the cooldown of None is 8 in 38 epochs (chapter 13)
    help_text = subprocess.run(["annotated-transformer", "train", "--help"], capture_output=True, text=True).stdout
    for option, value in (("epochs", 38), ("warmup", 800), ("dropout", 0.2), ("subwords", 8000), ("max-tokens", 2500)):
        assert re.search(rf"--{option} \S+\s+(?:(?!\n  --).)*?\(default: {value}\)", help_text, re.S), option


def test_a_wheel_ships_one_model_and_no_experiment_record(wheel):
    "The package a user installs holds the one trained model's folder, the bundled test set, and no experiment record."
    import zipfile
    data = [n for n in zipfile.ZipFile(wheel).namelist() if not n.endswith(".py") and ".dist-info/" not in n]
    assert {n.rsplit("/", 1)[0] for n in data} == {"annotated_transformer/pretrained/multi30k-de-en",
                                                    "annotated_transformer/datasets/multi30k"}, data
    assert {n.rsplit("/", 1)[1] for n in data if "pretrained" in n} == {
        "config.json", "manifest.json", "model.safetensors", "results.json", "tokenizer.json"}
