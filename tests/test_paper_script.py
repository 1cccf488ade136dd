"""The paper's part as one script: the_annotated_transformer.py is what tools/paper_script.py makes of the notebooks,
it stands alone (torch, fastcore and the standard library; never this package), and it runs top to bottom on a CPU."""
import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cells, done, imports_of, notebook, script

SCRIPT = ROOT / "the_annotated_transformer.py"
# runs a script with every import of the package refused, so a script that leans on the package fails
RUN_ALONE = """
import importlib.abc, runpy, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "annotated_transformer":
            raise ImportError("the script imports " + name)
sys.meta_path.insert(0, Refuse())
sys.argv = sys.argv[1:]  # the script sees its own arguments
runpy.run_path(sys.argv[0], run_name="__main__")
"""
tool = script("tools/paper_script.py")


def run_alone(script: Path, cwd: Path, timeout: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN_ALONE, str(script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_the_script_is_what_the_notebooks_give_and_holds_every_name_they_export():
    "Each name that the package's part-1 modules export (their __all__) is defined in the script itself."
    assert SCRIPT.read_text() == tool.render(), \
        "the_annotated_transformer.py is not what the notebooks give: run python tools/paper_script.py"
    tree = ast.parse(SCRIPT.read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for nb in tool.part_one():
        module = next(m for c in cells(nb) if (m := tool.directives(c["source"]).get("default_exp")))
        exported = importlib.import_module(f"annotated_transformer.{module}").__all__
        assert set(exported) <= defined, (nb.name, sorted(set(exported) - defined))


def test_the_script_imports_only_torch_fastcore_and_the_standard_library():
    ours, outside = imports_of(ast.parse(SCRIPT.read_text()))
    assert "torch" in outside and not ours
    assert outside - {"torch", "fastcore"} - set(sys.stdlib_module_names) == set()


def test_the_script_runs_top_to_bottom_on_a_cpu(tmp_path):
    done(run_alone(SCRIPT, tmp_path, 900, "--quick"))  # the long trainings are nbdev-test's `slow` cells, left out too


def test_what_goes_in_and_what_stays_out(tmp_path):
    "Two small notebooks: the script keeps prose, exports and examples, and runs without the package."
    (tmp_path / "nbs").mkdir()
    first = notebook(
        tmp_path / "nbs" / "01_first.ipynb",
        ("markdown", "# First\n\nA [link](02_second.ipynb) to a page."),
        ("code", "#| hide\nraise SystemExit(3)  # Colab's install"),
        ("code", "#| default_exp first"),
        ("code", "#| export\ndef double(x):\n    return 2 * x"),
        ("code", "#| slow\ntext = \"\"\"a\nbc\"\"\"  # a string over two lines keeps its text\nraise SystemExit(len(text))"),
        ("code", "%timeit double(1)"),
        ("code", "assert double(2) == 4\ndouble(\n    21)", [{"output_type": "execute_result", "data": {}}]),
        ("code", "double(1)  # shown by no output: not printed"),
        ("markdown", "## Exercises\n\nWrite `double`."),
        ("code", "def double(x):\n    raise NotImplementedError"),
        ("markdown", "### Its solution"),
        ("code", "def double(x):\n    return x + x"),
    )
    second = notebook(
        tmp_path / "nbs" / "02_second.ipynb",
        ("markdown", "# Second"),
        ("code", "#| default_exp second"),
        ("code", "#| export\nimport math\n\nfrom annotated_transformer.first import double\n\n"
                 "def quadruple(x):\n    return double(double(x))"),
        ("markdown", "A chart of it:"),
        ("code", "from annotated_transformer.viz import chart\nc = chart(quadruple)"),
        ("code", "c.save('chart.png')"),
        ("markdown", "## Next"),
        ("code", "from annotated_transformer.first import double\nprint(quadruple(1))"),
    )
    text = tool.render([first, second])
    script = tmp_path / "script.py"
    script.write_text(text)
    printed = done(run_alone(script, tmp_path, 120, "--quick"))
    assert run_alone(script, tmp_path, 120).returncode == 4  # without --quick, the slow cell runs, its string whole
    assert printed == "42\n4\n"  # the shown expression is printed, the exercise's blank and solution are left out
    assert "# A [link](https://" in text and "02_second.html) to a page." in text
    assert "# ## Next" in text and "Exercises" not in text and "NotImplementedError" not in text
    assert "A chart of it" not in text and "chart" not in text.split("# %%", 1)[1]
    assert "annotated_transformer." not in text.split("# %%", 1)[1]


def test_an_exported_cell_that_needs_a_module_left_out_stops_the_generator(tmp_path):
    nb = notebook(tmp_path / "01_charts.ipynb", ("code", "#| default_exp charts"),
                  ("code", "#| export\nfrom annotated_transformer.viz import chart\n\ndef plot():\n    return chart()"))
    with pytest.raises(tool.GenerationError, match="annotated_transformer.viz"):
        tool.render([nb])
