"""The ablation of nbs/14a_experiments.ipynb: word vs subword vocabularies, tied vs untied embeddings, two dropouts.

Every run has the shipped model's shape and schedule (N=3, d_model=256, d_ff=1024, h=8, 2,500 tokens per batch,
800 warmup steps, label smoothing 0.1, seed 0) and differs from the others in one setting at a time. The runs
are compared after the same budget of BUDGET epochs (the learning-rate schedule depends on the step only, so
the first epochs of a longer run are the same as a run of BUDGET epochs), by greedy BLEU on the validation
split. The two tied subword runs go on to FULL epochs: their curves decide the dropout of the recipe (and the
run with dropout 0.1 goes on to the recipe's epochs: it is the shipped model's run).

    python tools/ablation.py run --runs-dir runs/ablation      # trains what is missing (resumes after a stop)
    python tools/ablation.py collect --runs-dir runs/ablation  # writes results/ablation.json

`run` trains one configuration after the other; on a 2-core CPU, starting the commands it prints in
parallel, each with --threads 1, finishes sooner.
"""
import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 3  # epochs every configuration gets in the table
FULL = 10  # epochs of the two runs that choose the dropout
COMMON = ["--warmup", "800", "--max-tokens", "2500", "--seed", "0", "--N", "3", "--d-model", "256", "--d-ff", "1024",
          "--h", "8", "--smoothing", "0.1"]
ROWS = [  # (folder, vocabulary, tied, dropout, epochs, options)
    ("words-untied-d01", "words (min_freq 2)", False, 0.1, BUDGET, ["--subwords", "0", "--dropout", "0.1"]),
    ("sub8k-untied-d01", "shared BPE, 8000", False, 0.1, BUDGET,
     ["--subwords", "8000", "--tie-embeddings", "false", "--dropout", "0.1"]),
    ("sub8k-tied-d01", "shared BPE, 8000", True, 0.1, 14, ["--subwords", "8000", "--dropout", "0.1"]),  # = RECIPE
    ("sub8k-tied-d03", "shared BPE, 8000", True, 0.3, FULL, ["--subwords", "8000", "--dropout", "0.3"]),
]


def command(runs_dir: Path, folder: str, epochs: int, options: list[str]) -> list[str]:
    return ["annotated-transformer", "train", "--out-dir", str(runs_dir / folder), "--epochs", str(epochs),
            *COMMON, *options]


def history(run: Path) -> list[dict]:
    f = run / "history.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []


def finished(run: Path) -> list[dict]:
    "A run's records of finished epochs (a stop mid-epoch logs a partial one)."
    return [r for r in history(run) if not r.get("partial")]


def write_json(path: Path, data: dict) -> None:
    "Write `data` to `path` as indented JSON, atomically: a stop in the middle leaves the previous file."
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
    print(f"wrote {path}")


def run_or_collect(doc: str, run, collect, runs_dir: str, out: Path) -> None:
    """The command line of an experiment script: `run(runs_dir)` trains what is missing (resuming), `collect(runs_dir, out)`
    returns the JSON written to `out` (it may keep what `out` already holds). A stop while training (Ctrl-C, SIGTERM)
    ends, like the `train` command, with one line naming the saved position and exit status 130."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("action", choices=("run", "collect"))
    parser.add_argument("--runs-dir", type=Path, default=Path(runs_dir))
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args()
    if args.action == "collect":
        write_json(args.out, collect(args.runs_dir, args.out))
        return
    sys.path.insert(0, str(ROOT))
    from annotated_transformer.train import TrainingStopped
    try:
        run(args.runs_dir)
    except TrainingStopped as stopped:  # Ctrl-C or SIGTERM: the checkpoint is saved, the same command resumes
        print(f"{Path(sys.argv[0]).name}: {stopped}", file=sys.stderr)
        raise SystemExit(130)


def collect(runs_dir: Path) -> dict:
    "The table: each configuration at the budget, and the full-length runs' best and last epochs."
    sys.path.insert(0, str(ROOT))
    from annotated_transformer.pretrained import hardware
    rows, full = [], []
    for folder, vocabulary, tied, dropout, epochs, _ in ROWS:
        records = history(runs_dir / folder)
        if len(records) < BUDGET:
            raise SystemExit(f"{runs_dir / folder} has {len(records)} epochs, fewer than the budget of {BUDGET}: "
                             "run `python tools/ablation.py run` first")
        at = records[BUDGET - 1]
        rows.append({"run": folder, "vocabulary": vocabulary, "tied": tied, "dropout": dropout,
                     "val_bleu": at["val_bleu"], "val_loss": round(at["val_loss"], 3),
                     "train_loss": round(at["train_loss"], 3), "minutes": round(sum(r["seconds"] for r in records[:BUDGET]) / 60, 1)})
        if epochs >= FULL and len(records) >= FULL:
            best = max(records[:FULL], key=lambda r: r["val_bleu"])
            full.append({"run": folder, "dropout": dropout, "best_val_bleu": best["val_bleu"], "best_epoch": best["epoch"],
                         "last_val_bleu": records[FULL - 1]["val_bleu"], "last_val_loss": round(records[FULL - 1]["val_loss"], 3),
                         "history": records[:FULL]})
    return {"budget_epochs": BUDGET, "full_epochs": FULL, "seed": 0, "metric": "greedy sacreBLEU on the val split (1,014 sentences)",
            "hardware": hardware(), "note": "the runs shared the machine's cores, several at a time: the minutes are not comparable",
            "rows": rows, "full_length": full}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("run", "collect", "commands"))
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/ablation"))
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "ablation.json")
    args = parser.parse_args()
    if args.action == "collect":
        write_json(args.out, collect(args.runs_dir))
        return
    for folder, _, _, _, epochs, options in ROWS:
        cmd = command(args.runs_dir, folder, epochs, options)
        if args.action == "commands":
            print(shlex.join(cmd + ["--threads", "1"]))
        else:
            subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
