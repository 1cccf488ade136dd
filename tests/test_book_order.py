"""One order: a page's number is its place in the menu and in the imports. A module imports only modules of lower
numbers; a notebook uses only modules of its own part or earlier ones; the paper's part imports nothing of the toolkit."""
import ast
import re
import sys

import pytest

from conftest import ROOT, cells, imports_of

PACKAGE = ROOT / "annotated_transformer"
PAPER_LIBRARIES = {"torch", "altair", "pandas"}  # what part 1's modules may import besides the standard library


def module_numbers() -> dict[str, int]:
    "Each exported module by name, with the number of the notebook it is exported from."
    return {m[1]: int(nb.stem.split("_")[0]) for nb in sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))
            for cell in cells(nb, "code") if (m := re.search(r"^#\|\s*default_exp\s+(\w+)", cell["source"], re.M))}


NUMBERS = module_numbers()


def test_every_notebook_module_is_numbered_and_sorted():
    assert {"attention", "model", "training", "fast", "checkpoint", "data", "train", "cli"} <= NUMBERS.keys()
    names = sorted(p.stem for p in (ROOT / "nbs").glob("[0-9]*.ipynb"))
    assert names == sorted(names, key=lambda n: int(n.split("_")[0])), "file order is number order"


@pytest.mark.parametrize("module", sorted(NUMBERS))
def test_a_module_imports_only_lower_numbers(module):
    ours, outside = imports_of(ast.parse((PACKAGE / f"{module}.py").read_text()))
    later = {m: NUMBERS.get(m) for m in ours if m != "_modidx" and NUMBERS.get(m, 0) >= NUMBERS[module]}
    assert not later, f"{module} ({NUMBERS[module]:02d}) imports {later}"
    if NUMBERS[module] < 10:  # the paper's part: torch and the charts' libraries, nothing of the later parts
        assert outside - PAPER_LIBRARIES - set(sys.stdlib_module_names) - {"__future__"} == set(), outside


def test_the_exercises_checker_uses_only_the_paper():
    "The checker is written by hand, outside the book's pages; it serves part 1, so it imports only what part 1 may."
    assert "exercises" not in NUMBERS, "no page exports the checker: nbdev-export leaves the hand-written file alone"
    ours, outside = imports_of(ast.parse((PACKAGE / "exercises.py").read_text()))
    assert {m: NUMBERS.get(m) for m in ours if NUMBERS.get(m, 99) >= 10} == {}
    assert outside - PAPER_LIBRARIES - set(sys.stdlib_module_names) - {"__future__"} == set(), outside


@pytest.mark.parametrize("nb", sorted((ROOT / "nbs").glob("[0-9]*.ipynb")), ids=lambda p: p.stem)
def test_a_notebook_uses_only_its_part_and_earlier_ones(nb):
    part = int(nb.stem.split("_")[0]) // 10
    used = set()
    for cell in cells(nb, "code"):
        source = "\n".join(l for l in cell["source"].splitlines() if not l.lstrip().startswith(("!", "%")))
        used |= imports_of(ast.parse(source))[0]  # (shell and magic lines are not Python)
    later = {m: NUMBERS[m] for m in used if m in NUMBERS and NUMBERS[m] // 10 > part}
    assert not later, f"{nb.stem} uses modules of later parts: {later}"


PAGES = sorted((ROOT / "nbs").glob("[0-9]*.ipynb"), key=lambda p: int(p.stem.split("_")[0]))


@pytest.mark.parametrize("nb", PAGES, ids=lambda p: p.stem)
def test_code_cells_fit_on_a_screen(nb):
    "A code cell of parts 1 and 2 (the paper, running it for real) is at most 80 lines; any other at most 120."
    limit = 80 if int(nb.stem.split("_")[0]) < 20 else 120
    lengths = [len(c["source"].splitlines()) for c in cells(nb, "code")]
    assert max(lengths, default=0) <= limit, f"{nb.stem}: a code cell of {max(lengths)} lines (limit {limit})"


def test_pages_point_by_title_not_by_chapter_number():
    "Prose names a page by its title and a link: a chapter's number is not what the menu shows a reader."
    texts = [(nb.stem, c["source"]) for nb in PAGES + [ROOT / "nbs" / "index.ipynb"] for c in cells(nb, "markdown")]
    texts += [(p.stem, p.read_text()) for p in (ROOT / "docs").glob("*.md")]
    found = [(name, m[0]) for name, text in texts for m in re.finditer(r"\bchapters? \d+", text, re.I)]
    assert not found, found
