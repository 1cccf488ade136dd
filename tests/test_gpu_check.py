"""tools/gpu_check.sh, the GPU check CI cannot run: it parses, says what is wrong with a bad option,
refuses to run without a GPU (exit 3, leaving the committed results untouched), and covers what it promises."""
import itertools
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, done, one_line, script

read_tables = script("benchmarks/train_step.py").read_tables  # the benchmark's reader of the tables it writes

SCRIPT = ROOT / "tools" / "gpu_check.sh"
GPU_RUNS = ROOT / "benchmarks" / "gpu_h100"  # the logs and epochs of the runs made on H100 machines


def run(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd="/")


def epochs_of(name: str) -> list[dict]:
    "The records of a run's history.jsonl kept in benchmarks/gpu_h100/, one per epoch."
    return [json.loads(line) for line in (GPU_RUNS / name).read_text().splitlines()]


SEEDS = ROOT / "results" / "experiments" / "seeds.json"  # the recipe's CPU runs in bf16, seeds 0, 1 and 2


def cpu_runs() -> list[dict]:
    "The recipe's CPU runs that step 1 judges a GPU run against, by seed."
    return sorted(json.loads(SEEDS.read_text())["runs"], key=lambda run: run["seed"])


def judge_run(folder: Path) -> subprocess.CompletedProcess:
    "Step 1's judge, the runner's --compare, on the run in `folder`."
    return subprocess.run([sys.executable, str(ROOT / "tools" / "experiment.py"), str(ROOT / "experiments" / "seeds.json"),
                           "--compare", str(folder)], capture_output=True, text=True, timeout=60)


BAD = [(("--bogus",), "--bogus"), *((("--steps", bad), "--steps") for bad in ("8", "0", "1,,2", "a")),
       *((("--steps", only, "--no-bench"), "--no-bench") for only in ("5", "6", "7", "5,6,7"))]  # benchmarks only


@pytest.mark.parametrize("args,says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_option_is_one_line_and_exit_2(args, says):
    one_line(run(*args), 2, says)


def test_without_a_gpu_it_stops_before_writing_the_log(tmp_path):
    if torch.cuda.is_available():
        return  # on a GPU machine the script runs for real; nothing to check here
    log = tmp_path / "log.txt"
    res = run("--log", str(log))
    assert res.returncode == 3 and "GPU" in res.stderr
    assert not log.exists()


def test_no_bench_leaves_out_the_benchmark_steps_in_either_order():
    "--no-bench removes the benchmark steps (5, 6 and 7), before or after --steps (--steps of those only: BAD above)."
    for args, steps in ((("--no-bench", "--steps", "1,5,6"), "1"), (("--steps", "1,5", "--no-bench"), "1"),
                        (("--no-bench",), "1,2,3,4"), ((), "1,2,3,4,5,6,7")):
        assert done(run(*args, "--dry-run")).split()[1] == steps, args  # "steps 1,2,3,4 (of 1-7)"


def test_the_script_parses_covers_what_the_readme_promises_and_its_help_is_the_header_comment():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    for piece in ("nbdev-test --flags gpu", "copy-task", "train --out-dir", "translate --checkpoint",
                  "evaluate --checkpoint", "benchmarks/train_step.py --device cuda", "benchmarks/decode.py", "--compile",
                  "--device cuda", "benchmarks/gpu_step.py --device cuda"):
        assert piece in SCRIPT.read_text(), piece
    assert "gpu_check.sh" in (ROOT / "README.md").read_text()
    header = [re.sub(r"^# ?", "", line)  # the comment under the #! line, without its "# "
              for line in itertools.takewhile(lambda line: line.startswith("#"), SCRIPT.read_text().splitlines()[1:])]
    res = run("--help")
    assert res.returncode == 0 and len(header) > 10 and res.stdout.splitlines() == header


@pytest.mark.parametrize("signal, status", [("TERM", 143), ("INT", 130)])
def test_a_stopped_check_logs_the_step_in_flight(tmp_path, signal, status):
    """A check stopped by a time limit (as `timeout` stops it: TERM to the whole process group) ends its log with the
    step that was running and for how long. Fake `python` (CUDA "found") and `annotated-transformer` (a copy task that
    never ends) on PATH run the real script without a GPU."""
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
    assert "STOPPED" in lines[-1] and "copy-task" in lines[-1], lines[-3:]  # the step in flight


def measured_rows() -> dict[str, list[str]]:
    "The rows of docs/17_gpu.md's table of measured figures: {what was measured: [result, machine, log]}."
    page = (ROOT / "docs" / "17_gpu.md").read_text()
    table = page.split("| what was measured |")[1].split("\n\n")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def numbers(text: str) -> list[float]:
    "The numbers in a table cell, in order (thousands separators read as such)."
    found = re.findall(r"(?<![A-Za-z\d.,])\d[\d,]*(?:\.\d+)?(?![A-Za-z\d])", text)  # not the 16 of bf16
    return [float(n.replace(",", "")) for n in found]


def log_name(cell: str) -> str:
    "The file a table cell links to, relative to benchmarks/."
    return re.search(r"\]\(https://github.com/annotated-transformer/annotated-transformer/blob/main/benchmarks/([^)]+)\)", cell)[1]


def expected_figures() -> dict[str, tuple[list[float], str, str]]:
    "Each row's figures as its files give them: {row: (numbers of the result cell, machine, log file)}."
    eager, compiled = epochs_of("train_eager_history.jsonl"), epochs_of("train_compile_history.jsonl")
    cpu = cpu_runs()[0]["history"]  # seed 0, the GPU run's seed
    gap = lambda run, key: max(abs(r[key] - c[key]) for r, c in list(zip(run, cpu))[2:])  # from epoch 3 on
    best = [run["candidates"]["best epoch (validation BLEU)"]["val"]["beam_1"]["bleu"] for run in cpu_runs()]
    gpu_tok_s, cpu_tok_s = (statistics.median(r["tokens_per_s"] for r in run) for run in (eager, cpu))
    # step 5's tables (the train-step file) and step 6 (the last check of the log)
    base = read_tables((ROOT / "benchmarks" / "results_gpu_train_step.txt").read_text())["base"]
    check_log = (ROOT / "benchmarks" / "results_gpu.txt").read_text()
    step6 = ("date" + check_log.split("\ndate")[-1]).split("steps     6 (of 1-6)")[-1]
    (step6_rows,) = read_tables(step6).values()
    warmup = {k: float(v) for k, v in re.findall(r"([\w+]+) process 1/1: \d+ tok/s, warm-up steps ([\d.]+) s", step6)}
    shipped = re.search(r"^multi30k-de-en: test2016 beam 4 on the GPU: BLEU ([\d.]+) \(shipped results.json: ([\d.]+)\)",
                        check_log, re.M)
    # R-Drop: the second epoch's tokens/s of the bf16 runs
    rdrop_log = (GPU_RUNS / "rdrop_on_cuda.txt").read_text()
    tok_s = {flags: [int(t) for t in re.findall(r"(\d+) tok/s", body)]
             for flags, body in re.findall(r"^== train .*?(--precision \w+ --rdrop \d+)\n(.*?)^exit 0$", rdrop_log, re.M | re.S)}
    h100, h200 = "H100, torch 2.11", "H200, torch 2.11"
    return {
        "the recipe trained eagerly (38 epochs, bf16)":
            ([max(r["val_bleu"] for r in eager), min(best), max(best)], h100, "gpu_h100/train_eager_log.txt"),
        "its losses, against the CPU's bf16 run of the same seed":
            ([round(gap(eager, "train_loss"), 3), round(gap(eager, "val_loss"), 3), 3], h100, "gpu_h100/train_eager_history.jsonl"),
        "its speed":
            ([round(gpu_tok_s), round(gpu_tok_s / cpu_tok_s, 1), 2, round(cpu_tok_s), 38, round(sum(r["seconds"] for r in eager))],
             h100, "gpu_h100/train_eager_history.jsonl"),
        "the base model's training step, 1,024 pairs a batch":
            ([base["fast"][0], base["torch"][0]], h100, "results_gpu_train_step.txt"),
        "the base model's step under `torch.compile`, 128 pairs":
            ([round(step6_rows["fast+compile"][0] / step6_rows["fast"][0], 2), round(warmup["fast+compile"])], h200, "results_gpu.txt"),
        "the recipe trained with compiled steps":
            ([round(statistics.median(r["tokens_per_s"] for r in compiled[1:36]) / gpu_tok_s, 2),
              round(sum(r["seconds"] for r in compiled) - sum(r["seconds"] for r in eager)), max(r["val_bleu"] for r in compiled)],
             h100, "gpu_h100/train_compile_log.txt"),
        "R-Drop (`--rdrop 5`), second epoch, bf16":
            ([round(tok_s["--precision bf16 --rdrop 5"][1] / tok_s["--precision bf16 --rdrop 0"][1], 2)], h100,
             "gpu_h100/rdrop_on_cuda.txt"),
        "the shipped model on test2016, beam 4":
            ([float(shipped[1])] if shipped[1] == shipped[2] else [], h100, "results_gpu.txt"),
    }


def test_the_figures_and_tables_of_the_gpu_page_are_those_of_their_logs():
    "Every row of docs/17_gpu.md's table of measured figures: its numbers, machine and log, read from the files it links."
    rows, expected = measured_rows(), expected_figures()
    assert set(rows) == set(expected)
    for what, (figures, machine, log) in expected.items():
        result, row_machine, row_log = rows[what]
        assert numbers(result) == figures, (what, result, figures)
        assert (row_machine, log_name(row_log)) == (machine, log), what
        assert (ROOT / "benchmarks" / log).is_file()
    assert all(f"NVIDIA {m.split(',')[0]}" in (ROOT / "benchmarks" / log).read_text() or log.endswith(".jsonl")
               for _, m, log in expected.values())
    # results_gpu_train_step.txt (the table the page shows) holds only lines of the check's log, in the log's order
    log = iter((ROOT / "benchmarks" / "results_gpu.txt").read_text().splitlines())
    table = [line for line in (ROOT / "benchmarks" / "results_gpu_train_step.txt").read_text().splitlines() if line]
    assert any(line.startswith("| fast |") for line in table)
    assert all(line in log for line in table)  # `in` on an iterator consumes it: each line found after the one before


def test_what_holds_across_the_gpu_runs():
    """The claims beside the table, on the files: the eager run follows the CPU's seed more closely than other seeds do,
    its BLEU ran lower at the same loss, compiling made a worse model, R-Drop's epochs took about as long."""
    eager, compiled = epochs_of("train_eager_history.jsonl"), epochs_of("train_compile_history.jsonl")
    cpu, *seeds = [run["history"] for run in cpu_runs()]
    gap = lambda run, key: max(abs(r[key] - c[key]) for r, c in list(zip(run, cpu))[2:])
    assert gap(eager, "train_loss") < min(gap(s, "train_loss") for s in seeds) / 4
    assert statistics.mean(r["val_bleu"] for r in eager[-8:]) < statistics.mean(r["val_bleu"] for r in cpu[-8:])
    assert abs(eager[-1]["val_loss"] - cpu[-1]["val_loss"]) < 0.01
    assert max(r["val_bleu"] for r in compiled) < min(max(r["val_bleu"] for r in run) for run in [eager, cpu, *seeds])
    seconds = {flags: sum(int(s) for s in re.findall(r"  (\d+)s  \(log", body)) for flags, body in re.findall(
        r"^== train .*?(--precision \w+ --rdrop \d+)\n(.*?)^exit 0$", (GPU_RUNS / "rdrop_on_cuda.txt").read_text(), re.M | re.S)}
    assert seconds["--precision bf16 --rdrop 5"] < 1.2 * seconds["--precision bf16 --rdrop 0"]  # "little extra time"


def test_the_tutorial_run_on_a_gpu_is_judged_against_the_cpu_runs(tmp_path):
    """Step 1's judge (the runner's --compare) fails the compiled H100 run (40.12), passes the CPU's own bf16 run, and says
    in one line (exit 2) when the folder holds no finished run of the recipe."""
    from dataclasses import asdict, replace
    from annotated_transformer.recipe import RECIPE

    def judge(history: list[dict], settings=RECIPE, name="run"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
        (folder / "train_config.json").write_text(json.dumps(asdict(replace(settings, out_dir=str(folder)))))
        return judge_run(folder)

    failed = judge(epochs_of("train_compile_history.jsonl"), name="gpu")
    assert failed.returncode == 1 and "40.12" in failed.stdout, failed.stdout + failed.stderr  # its best validation BLEU
    assert "41.14" in failed.stdout  # the least the check asks
    cpu = cpu_runs()[0]
    passed = judge([{**r, "precision": "bf16"} for r in cpu["history"]], name="cpu")
    assert passed.returncode == 0 and "42.69" in passed.stdout, passed.stdout + passed.stderr
    for name, history, settings, says in (
            ("short", cpu["history"][:20], RECIPE, "finished"),
            ("other", cpu["history"], replace(RECIPE, warmup=4000), "warmup"),
            ("no_bleu", [{**r, "val_bleu": None} for r in cpu["history"]], RECIPE, "finished")):
        one_line(refused := judge(history, settings, name), 2, says)
        assert refused.stdout == "", name
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "history.jsonl").write_text('{"epoch": 1, "train_lo')
    (tmp_path / "broken" / "train_config.json").write_text("{}")
    for log, says in ((tmp_path / "broken" / "history.jsonl", "training log"),
                      (tmp_path / "none" / "history.jsonl", "no training run")):
        one_line(judge_run(log.parent), 2, says)
