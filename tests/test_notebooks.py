"""Structure of the notebooks: every one can run in Colab, installing the package from the one
repository URL declared in pyproject.toml."""
import json
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "nbs").glob("*.ipynb"))


def repo_url():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def code_cells(nb_path):
    nb = json.loads(nb_path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 4


def test_every_notebook_has_the_colab_setup_cell():
    url = repo_url()
    for nb in NOTEBOOKS:
        setup = [c for c in code_cells(nb) if "google.colab" in c]
        assert len(setup) == 1, f"{nb.name}: expected one Colab setup cell"
        cell = setup[0]
        assert cell.startswith("#| hide"), f"{nb.name}: the setup cell must be hidden on the docs site"
        assert f"git+{url}" in cell, f"{nb.name}: the setup cell must install from {url} (pyproject.toml)"
