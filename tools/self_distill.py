"""A second round of distillation: the shipped model teaches a new student of its own size.

The shipped model is a student of four recipe runs (tools/distill.py). Here it is the teacher: it translates the
29,000 training German sentences greedily (the package's `distill_corpus` with one teacher, whose ensemble of one
decodes as the model does), and a new student, the shipped student's settings exactly (`STUDENT`: the recipe in bf16,
38 epochs, the last 8 cooling down, seed 0, its own BPE vocabulary), learns from those translations alone. Its two
candidates (best epoch, last 5 averaged) are scored on val, greedily, as `build_pretrained` scores candidates; the test
sets are not used. Whether a student can pass a teacher of its own size is the question.

    python tools/self_distill.py run --runs-dir runs/self_distill      # teaches (once), then trains (resumes)
    python tools/self_distill.py collect --runs-dir runs/self_distill  # writes results/self_distill.json
"""
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ablation import finished, run_or_collect  # tools/ablation.py: a run's finished epochs; the command line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.decoding import shipped_model_dir  # noqa: E402 (the package of this checkout)
from annotated_transformer.pretrained import (AVERAGE_LAST, BEST_CANDIDATE, STUDENT, averaged_candidate,  # noqa: E402
                                              choose_on_val, distill_corpus, hardware, train_and_choose)

OUT = ROOT / "results" / "self_distill.json"


def student(runs_dir: Path):
    "The shipped student's settings, on the shipped model's translations."
    return replace(STUDENT, corpus_dir=str(runs_dir / "corpus"), out_dir=str(runs_dir / "student"))


def run(runs_dir: Path) -> dict:
    distill_corpus([shipped_model_dir()], runs_dir / "corpus")  # written once; kept if complete
    checkpoint, chosen, scores = train_and_choose(student(runs_dir))
    return {"chosen": chosen, "candidates_val_bleu_greedy": scores, "checkpoint": str(checkpoint)}


def collect(runs_dir: Path, out: Path) -> dict:
    "The finished run's candidates scored on val, its history, and the teacher as the corpus's seal names it."
    teacher = json.loads((shipped_model_dir() / "results.json").read_text())
    run_dir = runs_dir / "student"
    _, scores = choose_on_val({BEST_CANDIDATE: run_dir / "best", averaged_candidate(): run_dir / f"avg{AVERAGE_LAST}"})
    seal = json.loads((runs_dir / "corpus" / "teachers.json").read_text())  # the teacher's weights' SHA-256, its beam
    settings = asdict(student(runs_dir))
    return {"metric": "greedy sacreBLEU on the val split (1,014 sentences)",
            "teacher": {"model": "the shipped model", "val_bleu_greedy": teacher["val"]["beam_1"]["bleu"],
                        "sha256": list(seal["teachers"].values()), "beam_size": seal["beam_size"]},
            "student": {**{k: settings[k] for k in ("epochs", "cooldown", "warmup", "seed", "precision", "subwords")},
                        "model": {k: settings["model"][k] for k in ("N", "d_model", "d_ff", "h", "dropout")},
                        "candidates_val_bleu_greedy": scores, "history": finished(run_dir)},
            "hardware": hardware(), "torch": torch.__version__}


if __name__ == "__main__":
    run_or_collect(__doc__, run, collect, "runs/self_distill", OUT)
