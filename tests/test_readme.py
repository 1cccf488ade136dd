"""The README cannot drift from the program: its shell examples run (those that need no GPU and no hours of
training), from a folder other than the repository, and the command works after a plain (non-editable) install."""
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# README examples not run here, and why; every other `annotated-transformer` line of a ```sh block is run
SKIP = {
    "annotated-transformer train --out-dir": "trains for an hour",
    "torchrun": "needs several GPUs",
    "--run-dir runs/": "needs the output of a training run",
    "--checkpoint runs/": "needs the output of a training run",
}


def shell_examples() -> list[str]:
    "Every command of the README's ```sh blocks that runs the command (continuation lines joined)."
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if ("annotated-transformer " in line or "annotated_transformer.cli" in line) and not line.startswith("#"):
                commands.append(line)
    return commands


def runnable() -> list[str]:
    return [c for c in shell_examples() if not any(k in c for k in SKIP)]


def test_readme_has_examples_and_skips_are_real():
    assert len(runnable()) >= 5, runnable()
    skipped = [c for c in shell_examples() if c not in runnable()]
    assert all(any(k in c for c in skipped) for k in SKIP), "a SKIP pattern matches no README line: remove it"


@pytest.mark.parametrize("command", runnable())
def test_readme_example_runs_from_another_folder(command, tmp_path, multi30k):
    res = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TQDM_DISABLE": "1"})
    assert res.returncode == 0, f"{command}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert res.stdout.strip(), f"{command} printed nothing"


def test_one_copy_task_time_everywhere():
    from annotated_transformer.copy_task import COPY_TASK_TIME
    from annotated_transformer.cli import build_parser
    flat = lambda text: " ".join(text.split())
    assert COPY_TASK_TIME in flat(README)
    assert COPY_TASK_TIME in flat((ROOT / "nbs" / "08_copy_task.ipynb").read_text().replace('\\n",\n    "', " "))
    assert COPY_TASK_TIME in flat(build_parser().format_help())
    assert not re.search(r"copy.task[^\n]*(a minute|~\d+ ?s\b)", README), "another copy-task time in the README"


def test_version():
    from annotated_transformer import __version__
    res = subprocess.run([sys.executable, "-m", "annotated_transformer.cli", "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and __version__ in res.stdout


def test_translate_after_a_plain_install_from_any_folder(tmp_path):
    "pip install . (not editable) into a fresh environment; translate and evaluate find the shipped model there."
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)  # torch & co. come from this environment
    python = env_dir / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--target", str(next((env_dir / "lib").glob("python*")) / "site-packages"), str(ROOT)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    where = subprocess.run([python, "-c", "import annotated_transformer as a; print(a.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert str(env_dir) in where.stdout, where.stdout + where.stderr  # the installed copy, not the checkout
    res = subprocess.run([python, "-m", "annotated_transformer.cli", "translate", "--beam-size", "1",
                          "Ein Hund rennt durch den Schnee."], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "dog" in res.stdout.lower(), res.stdout + res.stderr[-2000:]
    res = subprocess.run([python, "-m", "annotated_transformer.cli", "evaluate", "--limit", "20", "--beam-size", "1"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "TQDM_DISABLE": "1"})
    assert res.returncode == 0 and "BLEU" in res.stdout, res.stdout + res.stderr[-2000:]
