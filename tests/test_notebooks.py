"""Structure of the notebooks: every one can run in Colab, installing the package, with exactly the
optional extras it needs, from the one repository URL declared in pyproject.toml."""
import ast
import contextlib
import io
import json
import os
import re
import tomllib
from types import SimpleNamespace

from conftest import REPOSITORY, ROOT, cells, imports_of

NOTEBOOKS = sorted((ROOT / "nbs").glob("*.ipynb"))


def code_cells(nb_path):
    return [c["source"] for c in cells(nb_path, "code")]


# What each extra of pyproject.toml brings, and the package modules that cannot be imported without it.
EXTRA_USES = {"viz": {"packages": ("altair", "pandas", "vl_convert"), "modules": ("viz",)},
              "mt": {"packages": ("spacy", "sacrebleu", "tokenizers"), "modules": ("data", "subwords", "train", "decoding", "pretrained", "cli", "options")},
              "deploy": {"packages": ("ctranslate2", "onnxruntime", "onnx"), "modules": ()}}  # export imports them lazily


def needed_extras(nb_path):
    "The extras a notebook needs: from the packages and package modules its code imports or exports."
    cells = [c for c in code_cells(nb_path) if "google.colab" not in c]
    code = "\n".join(cells)
    exported = set(re.findall(r"#\| default_exp (\w+)", code))
    imported = set(re.findall(r"annotated_transformer\.(\w+)", code)) | exported
    packages = set(re.findall(r"^\s*(?:from|import) (\w+)", code, re.M))
    return {extra for extra, uses in EXTRA_USES.items()
            if imported & set(uses["modules"]) or packages & set(uses["packages"])}


LONG_RUN = re.compile(r"^\s*#\|\s*(slow|gpu)\b", re.M)  # a cell that nbdev-test runs only when asked


def test_every_notebook_has_the_colab_setup_cell():
    "One hidden cell installs the package with the extras the notebook needs; a notebook with long runs asks for a GPU."
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, uses in EXTRA_USES.items():  # each extra of pyproject.toml lists the packages it brings
        missing = [p for p in uses["packages"] if p not in " ".join(declared[extra]).replace("-", "_")]
        assert not missing, f"[{extra}] in pyproject.toml does not list {missing}"
    for nb in NOTEBOOKS:
        setup = [c for c in code_cells(nb) if "google.colab" in c]
        assert len(setup) == 1, f"{nb.name}: expected one Colab setup cell"
        cell = setup[0]
        assert cell.startswith("#| hide"), f"{nb.name}: the setup cell must be hidden on the docs site"
        assert f"git+{REPOSITORY}" in cell, f"{nb.name}: the setup cell must install from {REPOSITORY} (pyproject.toml)"
        extras = needed_extras(nb)
        m = re.search(r"annotated-transformer\[([\w,]+)\] @ git\+", cell)
        installed = set(m[1].split(",")) if m else set()
        assert installed == extras, f"{nb.name}: the Colab cell installs extras {sorted(installed)}, the notebook needs {sorted(extras)}"
        if any(LONG_RUN.search(c) for c in code_cells(nb)):
            metadata = json.loads(nb.read_text())["metadata"]
            assert metadata.get("accelerator") == "GPU" and metadata.get("colab", {}).get("gpuType"), \
                f"{nb.name}: a notebook with long runs asks Colab for a GPU in its metadata"


def test_long_training_cells_do_not_start_without_a_gpu(monkeypatch):
    "Each slow or GPU cell that trains, run as 'Run all' would run it on a CPU runtime: it trains nothing and says how to run it."
    def refuse(*args, **kwargs):
        raise AssertionError("training started on a CPU runtime")
    monkeypatch.delenv("ANNOTATED_TRANSFORMER_LONG_RUNS", raising=False)
    found = 0
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        for source in (c["source"] for c in cells(path, "code")):
            if not LONG_RUN.search(source) or not re.search(r"\b(train|build_pretrained|build_distilled)\(", source):
                continue
            found += 1
            cpu_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
            names = {"torch": cpu_torch, "os": os, "train": refuse, "build_pretrained": refuse, "build_distilled": refuse, "default_device": refuse,
                     "RECIPE": None, "pretrained_dir": refuse, "replace": refuse}
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(source, path.name, "exec"), names)
            assert "Skipped" in printed.getvalue() and "GPU" in printed.getvalue(), f"{path.name}: a long cell says nothing when skipped"
    assert found >= 3


# The paper's chapters (01-05) show one plain path each; everything else reaches the model from later chapters.
TEACHING = ("attention", "layers", "model", "batches", "training")
PLAIN_IMPORTS = {"torch", "copy", "math", "json", "dataclasses"}  # torch and the standard library's basics
TOOLKIT_WORDS = ("scaled_dot_product_attention", "autocast", "autograd.Function", "GradScaler", "tqdm",
                 "torch.distributed", "torch.compile", "import os", "import time")


def test_teaching_chapters_are_plain():
    "The teaching modules import only torch, a few standard modules and each other, and use no toolkit machinery."
    for name in TEACHING:
        text = (ROOT / "annotated_transformer" / f"{name}.py").read_text()
        ours, outside = imports_of(ast.parse(text))
        assert outside <= PLAIN_IMPORTS, f"{name} imports {sorted(outside - PLAIN_IMPORTS)}"
        assert ours <= set(TEACHING), f"{name} imports {sorted(ours - set(TEACHING))} (not a teaching chapter)"
        for word in TOOLKIT_WORDS:
            assert word not in text, f"{name}.py uses {word!r}: that belongs in the toolkit chapter"
    imported = imports_of(ast.parse((ROOT / "annotated_transformer" / "data.py").read_text()))[0]
    assert "training" not in imported and "fast" not in imported, imported  # nor does the data chapter train


def test_notebooks_stay_light():
    "No notebook over 370 KB (the site shows each as one page; tests/test_docs_site.py weighs the built pages)."
    assert len(NOTEBOOKS) >= 4
    for nb in NOTEBOOKS:
        assert nb.stat().st_size <= 370_000, f"{nb.name}: {nb.stat().st_size / 1000:.0f} KB"


def test_a_notebook_that_reads_repository_files_works_in_a_clone_on_colab():
    """A notebook reading files or folders of the repository outside nbs/ (../benchmarks/..., which `pip install` does not bring)
    works in Colab only inside a clone: its setup cell clones the repository of pyproject.toml and moves into its nbs/.
    (Runs the notebook writes, under ../runs, need no clone.)"""
    url, readers = REPOSITORY, []
    for nb in NOTEBOOKS:
        code = "\n".join(c for c in code_cells(nb) if "google.colab" not in c)
        read = sorted(set(re.findall(r"""["'](\.\./(?!runs/)[^"']+)["']""", code)))
        if not read:
            continue
        readers.append(nb.name)
        missing = [path for path in read if not (ROOT / "nbs" / path).exists()]
        assert not missing, f"{nb.name} reads {missing}, which the repository does not hold"
        (setup,) = [c for c in code_cells(nb) if "google.colab" in c]
        clone = re.search(r'"git", "clone", [^\]]*"(https://[^"]+)",\s*"([^"]+)"\]', setup)
        assert clone and clone[1] == url, f"{nb.name} reads {read}: its Colab cell must clone {url}"
        assert f'os.chdir("{clone[2]}/nbs")' in setup, f"{nb.name}: its Colab cell must work in the clone's nbs/"
    assert "10_fast.ipynb" in readers  # the chapter that shows the benchmarks' tables
