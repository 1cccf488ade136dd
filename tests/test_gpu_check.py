"""tools/gpu_check.sh, the GPU check CI cannot run: it parses, says what is wrong with a bad option,
refuses to run without a GPU (exit 3, leaving the committed results untouched), and covers what it promises."""
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from train_step import read_tables  # noqa: E402  (benchmarks/, where the tables are written)

SCRIPT = ROOT / "tools" / "gpu_check.sh"


def run(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd="/")


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_bad_option_is_one_line_and_exit_2():
    res = run("--bogus")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "--bogus" in res.stderr


def test_without_a_gpu_it_stops_before_writing_the_log(tmp_path):
    if torch.cuda.is_available():
        return  # on a GPU machine the script runs for real; nothing to check here
    log = tmp_path / "log.txt"
    res = run("--log", str(log))
    assert res.returncode == 3 and "no CUDA GPU" in res.stderr
    assert not log.exists()


def test_covers_what_the_readme_promises():
    text = SCRIPT.read_text()
    for piece in ("nbdev-test --flags gpu", "copy-task", "train --out-dir", "translate --checkpoint",
                  "evaluate --checkpoint", "benchmarks/train_step.py --device cuda", "benchmarks/decode.py", "--compile",
                  "--device cuda"):
        assert piece in text, piece
    assert "gpu_check.sh" in (ROOT / "README.md").read_text()


def test_bad_steps_list_is_one_line_and_exit_2():
    for bad in ("7", "0", "1,,2", "a"):
        res = run("--steps", bad)
        assert res.returncode == 2, bad
        assert res.stderr.strip().count("\n") == 0 and "--steps" in res.stderr, res.stderr


def test_no_bench_leaves_out_the_benchmark_steps_in_either_order():
    """--no-bench and --steps used to write one variable, so the later option won; now --no-bench always removes the
    benchmark steps, 5 and 6."""
    for args in (("--no-bench", "--steps", "1,5,6"), ("--steps", "1,5", "--no-bench"), ("--no-bench",)):
        res = run(*args, "--dry-run")
        assert res.returncode == 0, res.stderr
        expected = "1" if "--steps" in args else "1,2,3,4"
        assert res.stdout.split() == ["steps", expected, "(of", "1-6)"], (args, res.stdout)
    for benchmarks_only in ("5", "6", "5,6"):
        res = run("--steps", benchmarks_only, "--no-bench")
        assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "--no-bench" in res.stderr, res.stderr
    res = run("--dry-run")
    assert res.stdout.split() == ["steps", "1,2,3,4,5,6", "(of", "1-6)"], res.stdout


def test_help_is_the_header_comment():
    res = run("--help")
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert lines[0].startswith("The project's GPU check") and "downloaded once into the cache" in lines[-1], lines[-1]


@pytest.mark.parametrize("signal, status", [("TERM", 143), ("INT", 130)])
def test_a_stopped_check_logs_the_step_in_flight(tmp_path, signal, status):
    """A check stopped by a time limit (as `timeout` stops it: TERM to the whole process group) ends its log with the
    step that was running and for how long: the H100 log of step 6 used to end at the benchmark's first lines, with
    nothing to say that the run had been cut off. Fake `python` (CUDA "found") and `annotated-transformer` (a copy
    task that never ends) on PATH run the real script without a GPU."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text("#!/bin/sh\nexit 0\n")
    (fake / "annotated-transformer").write_text("#!/bin/sh\necho training the copy task\nexec sleep 60\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    log = tmp_path / "log.txt"
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run(["timeout", "--preserve-status", "-s", signal, "4", "bash", str(SCRIPT), "--steps", "2",
                          "--log", str(log)], capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert res.returncode == status, res.stderr  # the script's own status: ended by that signal
    for _ in range(100):  # tee, which writes the log, ends a moment after the script: wait until it has written
        lines = log.read_text().splitlines()
        if lines and lines[-1].startswith("-- "):
            break
        time.sleep(0.1)
    assert "training the copy task" in lines
    assert lines[-1].startswith("-- STOPPED after ") and lines[-1].endswith(" s: copy-task with its defaults reaches exact copies"), lines[-3:]


def test_the_gpu_tables_in_the_docs_are_lines_of_the_check_log():
    "results_gpu_train_step.txt (the table docs/gpu.md shows) holds only lines of the check's log, in the log's order."
    log = iter((ROOT / "benchmarks" / "results_gpu.txt").read_text().splitlines())
    table = [line for line in (ROOT / "benchmarks" / "results_gpu_train_step.txt").read_text().splitlines() if line]
    assert any(line.startswith("| fast |") for line in table)
    assert all(line in log for line in table)  # `in` on an iterator consumes it: each line found after the one before


def test_the_compiled_step_figures_in_the_docs_come_from_the_check_log():
    "docs/gpu.md's figures for the compiled step (speed-up, warm-up, catching up, memory) are those of the log's step 6."
    step6_log = "date" + (ROOT / "benchmarks" / "results_gpu.txt").read_text().split("\ndate")[-1]  # the last check
    step6 = step6_log.split("steps     6 (of 1-6)")[-1]
    (rows,) = read_tables(step6).values()  # the base model's table
    warmup = {k: float(s) for k, s in re.findall(r"([\w+]+) process 1/1: \d+ tok/s, warm-up steps ([\d.]+) s", step6)}
    (finished,) = re.findall(r"^-- ok \((\d+) s\): benchmark: training step with torch.compile", step6, re.M)
    eager, compiled = rows["fast"][0], rows["fast+compile"][0]
    extra = warmup["fast+compile"] - warmup["fast"]  # seconds the compiled run's warm-up costs beyond the eager one's
    catch_up = extra / (1 / eager - 1 / compiled)  # target tokens after which the compiled run is ahead
    text = " ".join((ROOT / "docs" / "gpu.md").read_text().split())  # line breaks read as spaces
    date, gpu = re.findall(r"^date      (\S+) .*\nGPU       NVIDIA (\w+)", step6_log, re.M)[-1]
    assert f"On {date}, on an {gpu}, step 6" in text and f"Its latest run was on an {gpu}" in text
    for figure in (f"ran {compiled / eager:.2f} times as fast", f"took {warmup['fast+compile']:.0f} s", f"finished in {finished} s",
                   f"after {catch_up / 1e6:.1f} million target tokens", f"about {catch_up / eager / 60:.0f} minutes"):
        assert figure in text, figure
    assert rows["fast+compile"][1] < rows["fast"][1]  # "with a lower peak of memory"
