"""Write the_annotated_transformer.py: the paper's part of the book (nbs/0*.ipynb) as one script, with jupytext.

The script reads like the notebooks and runs top to bottom on a CPU, as The Annotated Transformer's
`the_annotated_transformer.py` does. It stands alone: it imports torch, the standard library and `fastcore.test` (for
the checks), never this package. What goes in, notebook by notebook, in reading order:

* markdown cells, as comments (jupytext's percent format: `# %% [markdown]`); relative links become links to the
  published site, and the inline architecture figure a link to docs/architecture.svg;
* `#| export` cells, without the directive and without their imports of the package: the names they import are
  defined earlier in the same script;
* the examples and checks (the other code cells). A cell whose last line is an expression that the notebook shows
  (a saved `execute_result`) prints it.

What stays out:

* the notebooks in LEFT_OUT below, with the reason;
* each notebook's `## Exercises` section: blanks that a reader fills in, and their solutions;
* `#| hide` cells (Colab's install cell, checks of a page's prose), `#| default_exp` cells, and cells flagged
  `gpu` or `notest`;
* cells flagged `slow` go in, but under `if LONG_RUNS:`, so `python the_annotated_transformer.py --quick` (what the
  tests run) leaves out the long trainings, as nbdev-test does;
* cells with IPython syntax (`%magic`, `!shell`, `get_ipython()`, `display(...)`);
* cells that use a name imported from a module the script does not hold (the charts of `annotated_transformer.viz`),
  and the caption just before such a cell (a markdown cell without a heading).

An exported cell that imports a module the script does not hold stops the generator: the script would not stand alone.

    python tools/paper_script.py          # write the_annotated_transformer.py
    python tools/paper_script.py --check  # exit 1, naming the difference, if the script is not what the notebooks give
"""
import argparse
import ast
import difflib
import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import jupytext
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "the_annotated_transformer.py"
PACKAGE = "annotated_transformer"
# part 1's notebooks the script leaves out, and why (the header of the script says so too)
LEFT_OUT = {
    "06_viz": "the charts: a script shows none, and they need Altair and pandas",
    "07_exercises": "the exercises: a reader fills them in, in the notebooks",
}
EXERCISES = re.compile(r"exercises?\b", re.I)  # the title of a notebook's exercises section
HEADING = re.compile(r"^(#{1,6})\s+(.*)$", re.M)
IPYTHON = re.compile(r"^\s*[%!]|\bget_ipython\(|\bdisplay\(", re.M)


class GenerationError(Exception):
    "The notebooks hold something the script cannot take in as it is."


def make_readme():
    "tools/make_readme.py, for its rules that adapt markdown written for the site (links, the inline figure)."
    spec = importlib.util.spec_from_file_location("make_readme", ROOT / "tools" / "make_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flags() -> set[str]:
    "The flags whose cells nbdev-test skips ([tool.nbdev] tst_flags), and `hide`."
    nbdev = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["nbdev"]
    return set(nbdev.get("tst_flags", "").split()) | {"hide"}


def part_one(nbs: Path = ROOT / "nbs") -> list[Path]:
    "The paper's notebooks (numbers 00-09) in reading order, less LEFT_OUT."
    return [p for p in sorted(nbs.glob("0[0-9]_*.ipynb")) if p.stem not in LEFT_OUT]


def directives(source: str) -> dict[str, str]:
    "A cell's nbdev directives: `#| export` -> {'export': ''}, `#| default_exp model` -> {'default_exp': 'model'}."
    found = {}
    for line in source.splitlines():
        m = re.match(r"\s*#\|\s*([\w-]+):?\s*(.*)$", line)
        if m:
            found[m[1]] = m[2].strip()
    return found


def without_directives(source: str) -> str:
    return "\n".join(l for l in source.splitlines() if not l.lstrip().startswith("#|")).strip("\n")


def bound_names(tree: ast.Module) -> set[str]:
    "The names a piece of code binds at its top level (definitions, imports, assignment and loop targets)."
    names = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
        else:
            names |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def package_module(node: ast.AST) -> str | None:
    "The package's module an import statement imports from ('model'; '' for the package itself), else None."
    if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == PACKAGE:
        return ".".join(node.module.split(".")[1:])
    if isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in node.names):
        return ""
    return None


def byte_col(line: str, col: int) -> int:
    "ast's column (a UTF-8 byte offset) as a character offset."
    return len(line.encode()[:col].decode(errors="ignore"))


def indented(code: str) -> str:
    "`code` four spaces deeper, except the inner lines of a string over several lines: they are the string's text."
    inner = {line for node in ast.walk(ast.parse(code)) if isinstance(node, (ast.Constant, ast.JoinedStr))
             for line in range(node.lineno + 1, node.end_lineno + 1)}
    return "\n".join(f"    {line}" if line and i not in inner else line for i, line in enumerate(code.splitlines(), 1))


def printing_last(lines: list[str], stmt: ast.Expr) -> list[str]:
    "The lines with the expression statement `stmt` wrapped in print(...)."
    first, last = stmt.lineno - 1, stmt.end_lineno - 1
    start, end = byte_col(lines[first], stmt.col_offset), byte_col(lines[last], stmt.end_col_offset)
    lines = list(lines)
    if first == last:
        lines[first] = lines[first][:start] + "print(" + lines[first][start:end] + ")" + lines[first][end:]
    else:
        lines[first] = lines[first][:start] + "print(" + lines[first][start:]
        lines[last] = lines[last][:end] + ")" + lines[last][end:]
    return lines


class Assembler:
    "Turns notebooks into the script's cells, keeping track of which names the script defines."

    def __init__(self):
        self.held: dict[str, set[str]] = {}  # each module the script holds -> the names its exported cells define
        self.defined: set[str] = set()  # every name the script's code binds so far
        self.missing: set[str] = set()  # names only a module the script does not hold would define
        self.skip = test_flags() - {"slow"}
        self.readme = make_readme()
        self.cells: list = []
        self.lacking = False  # whether the last cell left out uses what the script does not hold

    def markdown(self, source: str) -> str:
        text = self.readme.SVG.sub(self.readme.FIGURE, source)
        site = self.readme.site_url()
        return self.readme.SITE_LINK.sub(lambda m: f"]({site}{m[1]}.html{m[3] or ''})", text)

    def lacks(self, tree: ast.Module) -> None:
        "Leave out a cell that needs what the script does not hold; what it binds is missing from then on too."
        self.missing |= bound_names(tree) - self.defined
        self.lacking = True

    def package_imports(self, tree: ast.Module, code: str, where: str, exported: bool) -> set[int] | None:
        "The lines of the cell's imports of the package, to remove; None when the cell imports what is not held."
        lines = set()
        for node in ast.walk(tree):
            imported = package_module(node)
            if imported is None:
                continue
            if imported not in self.held:
                if exported:
                    raise GenerationError(f"{where}: an exported cell imports {PACKAGE}.{imported}, which the script "
                                          f"does not hold, so the script would not stand alone")
                return None
            unknown = {a.name for a in node.names} - self.held[imported]
            if unknown or node not in tree.body:
                raise GenerationError(f"{where}: `{ast.unparse(node)}` imports what the script does not define "
                                      f"before it ({sorted(unknown)}), or imports inside a block")
            if any(";" in line.split("#")[0] for line in code.splitlines()[node.lineno - 1:node.end_lineno]):
                raise GenerationError(f"{where}: put `{ast.unparse(node)}` on lines of its own")
            lines |= set(range(node.lineno - 1, node.end_lineno))
        return lines

    def code(self, cell: dict, where: str, module: str | None) -> str | None:
        "The cell's code as the script holds it, or None when the script leaves the cell out."
        self.lacking = False
        source = "".join(cell["source"])
        flags = directives(source)
        if self.skip & flags.keys() or "default_exp" in flags or IPYTHON.search(source):
            return None
        code = without_directives(source)
        tree = ast.parse(code)
        exported = "export" in flags or "exporti" in flags
        uses = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if uses & self.missing and exported:
            raise GenerationError(f"{where}: an exported cell uses {sorted(uses & self.missing)}, which only a "
                                  f"module the script does not hold defines")
        drop = None if uses & self.missing else self.package_imports(tree, code, where, exported)
        if drop is None:
            self.lacks(tree)
            return None
        lines = code.splitlines()
        last = tree.body[-1] if tree.body else None
        shown = any(o["output_type"] == "execute_result" for o in cell.get("outputs", []))
        if shown and isinstance(last, ast.Expr) and last.lineno - 1 not in drop:
            lines = printing_last(lines, last)  # the notebook shows it: the script prints it
        kept = "\n".join(l for i, l in enumerate(lines) if i not in drop).strip("\n")
        if "slow" in flags:  # a long run: the script runs it unless told --quick
            kept = "if LONG_RUNS:  # `--quick` leaves this long run out\n" + indented(kept)
        bound = bound_names(tree)
        if exported and module is not None:
            self.held.setdefault(module, set()).update(bound)
        self.defined |= bound
        self.missing -= bound
        return kept if ast.parse(kept).body else None

    def add(self, notebook: Path) -> None:
        cells = json.loads(notebook.read_text())["cells"]
        exports = [directives("".join(c["source"])).get("default_exp") for c in cells if c["cell_type"] == "code"]
        module = next((m for m in exports if m), None)  # the module the notebook's exported cells make
        in_exercises, caption = False, None
        for i, cell in enumerate(cells):
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                headings = [(len(m[1]), m[2]) for m in HEADING.finditer(source)]
                top = [title for level, title in headings if level <= 2]
                if top:
                    in_exercises = bool(EXERCISES.match(top[-1]))
                if not in_exercises:
                    self.cells.append(new_markdown_cell(self.markdown(source)))
                    caption = None if headings else self.cells[-1]
                continue
            if cell["cell_type"] != "code" or in_exercises:
                continue
            code = self.code(cell, f"{notebook.relative_to(notebook.parents[1])} cell {i}", module)
            if code is None:
                if self.lacking and caption is not None and self.cells[-1] is caption:
                    self.cells.pop()  # a caption of what the script leaves out
            else:
                self.cells.append(new_code_cell(code))
            caption = None


def header(notebooks: list[Path]) -> str:
    site = make_readme().site_url()
    names = "".join(f"#   nbs/{p.name}\n" for p in notebooks)
    left_out = "".join(f"#   nbs/{stem}.ipynb: {why}.\n" for stem, why in LEFT_OUT.items())
    return (f"# The paper's part of annotated-transformer as one script: the notebooks in reading order.\n"
            f"# Generated by tools/paper_script.py from\n{names}"
            f"# Edit the notebooks, not this file.\n"
            f"#\n"
            f"# It runs top to bottom on a CPU: python the_annotated_transformer.py [--quick: no long trainings]\n"
            f"# It needs torch, and fastcore for the checks (pip install torch fastcore).\n"
            f"# Left out: each notebook's exercises, cells that need a GPU, and\n{left_out}"
            f"# The book, with charts and exercises: {site}\n"
            f"# Each part of the paper and the code that implements it: {site}08_paper_map.html\n\n")


def render(notebooks: list[Path] | None = None) -> str:
    "The script that the notebooks give."
    notebooks = part_one() if notebooks is None else notebooks
    assembler = Assembler()
    for notebook in notebooks:
        assembler.add(notebook)
    quick = new_code_cell('import sys\n\nLONG_RUNS = "--quick" not in sys.argv[1:]  # the long trainings run unless --quick')
    nb = new_notebook(cells=[quick, *assembler.cells])
    nb.metadata["jupytext"] = {"notebook_metadata_filter": "-all", "cell_metadata_filter": "-all"}
    return header(notebooks) + jupytext.writes(nb, fmt="py:percent")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare: exit 1 if the script differs from the notebooks")
    args = ap.parse_args()
    try:
        text = render()
    except GenerationError as e:
        sys.exit(f"paper_script.py: {e}")
    current = SCRIPT.read_text() if SCRIPT.exists() else ""
    if args.check:
        if current != text:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), SCRIPT.name, "from the notebooks",
                                        lineterm="", n=1)
            sys.exit(f"{SCRIPT.name} is not what the notebooks give; run python tools/paper_script.py\n"
                     + "\n".join(list(diff)[:40]))
        print(f"{SCRIPT.name} matches the notebooks")
    elif current != text:
        tmp = SCRIPT.with_name(SCRIPT.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(SCRIPT)
        print(f"{SCRIPT.name} written from the notebooks")


if __name__ == "__main__":
    main()
