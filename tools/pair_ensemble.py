"""Two recipe runs decoded together, and the student they teach.

The shipped student learned from four recipe runs (tools/distill.py), whose ensemble scored well above the student
with beam search. Here two runs of the recipe in bf16 decode together: seed 1 (tools/precision_run.py), one of those
four teachers, and the R-Drop run (tools/rdrop_run.py), each as the candidate its run would ship (for both, the best
epoch). The question is what the two give together, and whether they fit the 30 MB a shipped model may take:

1. `collect` scores each of the two, their ensemble (the package's `load_ensemble`: the mean of their
   log-probabilities at each step) and the shipped model on val, greedily and with beam 4, and the ensemble again with
   its weights stored in 8 bits (each row of each weight matrix scaled to the integers -127..127, as a file of int8
   numbers and one float32 scale per row holds them, the other tensors in float16: chapter 7's
   `save_model(..., dtype=torch.int8)`), with the size of that file.
   Two models in 16 bits take more than 30 MB; in 8 bits they take about what one does in 16. Test2016 is scored, greedily and with beam 4,
   only for the shipped model and for the candidate chosen on val. Each score keeps the seconds its decoding took,
   one after another in one process: run `collect` on an idle machine, since the pair's speed is compared with the
   shipped model's.
2. `run` trains a student as the shipped one was trained, with one change: its teachers are the pair instead of the
   four runs. The pair translates the 29,000 training German sentences greedily (the package's `distill_corpus`) and
   `STUDENT`'s settings (the recipe in bf16, 38 epochs, the last 8 cooling down, seed 0, its own BPE vocabulary) learn
   from those translations alone; its candidates are chosen on val, greedily, as `build_pretrained` chooses.

    python tools/pair_ensemble.py run --runs-dir runs/pair          # teaches (once), then trains (resumes)
    python tools/pair_ensemble.py collect --runs-dir runs/pair      # writes results/pair_ensemble.json
"""
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from ablation import finished, run_or_collect  # tools/ablation.py: a run's finished epochs; the command line

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.checkpoint import dequantized, weights_to_save  # noqa: E402 (this checkout's package)
from annotated_transformer.decoding import Ensemble, Translator, load_ensemble, shipped_model_dir  # noqa: E402
from annotated_transformer.evaluation import evaluate_translator  # noqa: E402
from annotated_transformer.model import EncoderDecoder  # noqa: E402
from annotated_transformer.pretrained import (AVERAGE_LAST, BEST_CANDIDATE, STUDENT,  # noqa: E402
                                              averaged_candidate, choose_on_val, distill_corpus, hardware, train_and_choose)

OUT = ROOT / "results" / "pair_ensemble.json"
LIMIT_MB = 30  # the most a shipped model may take (issue #22), in MB of 10^6 bytes
PAIR = {"bf16, seed 1": ROOT / "runs" / "multi30k-bf16-seed1" / "best",  # tools/precision_run.py's seed-1 run
        "R-Drop": ROOT / "runs" / "rdrop" / "rdrop5" / "best"}  # tools/rdrop_run.py's run


def student(runs_dir: Path):
    "The shipped student's settings, on the pair's translations."
    return replace(STUDENT, corpus_dir=str(runs_dir / "corpus"), out_dir=str(runs_dir / "student"))


def run(runs_dir: Path) -> dict:
    missing = [f"{folder} ({name})" for name, folder in PAIR.items() if not (folder / "model.safetensors").is_file()]
    if missing:
        raise SystemExit(f"no weights in {', '.join(missing)}: tools/precision_run.py and tools/rdrop_run.py train them")
    distill_corpus(list(PAIR.values()), runs_dir / "corpus", device="cpu")  # written once; kept if complete
    checkpoint, chosen, candidates = train_and_choose(student(runs_dir))
    return {"chosen": chosen, "candidates_val_bleu_greedy": candidates, "checkpoint": str(checkpoint)}


def store_in_8_bits(ensemble: Ensemble) -> int:
    """Replace the ensemble's weights, in place, by what a safetensors file of them in 8 bits holds, and return the bytes
    of that file: every matrix as int8 with float32 scales (the package's `int8_rows`), the other tensors in float16."""
    stored = {}
    with torch.no_grad():
        for i, model in enumerate(ensemble.members):
            tensors = weights_to_save(model, torch.int8)
            stored.update({f"{i}.{name}": tensor for name, tensor in tensors.items()})
            for name, tensor in dequantized(tensors).items():
                model.get_parameter(name).copy_(tensor)
    with tempfile.TemporaryDirectory() as tmp:
        save_file(stored, f"{tmp}/model.safetensors")
        return Path(f"{tmp}/model.safetensors").stat().st_size


def scores(translator: Translator, split: str) -> dict:
    "BLEU greedily and with beam 4, with the `<unk>` written and the seconds the decoding and scoring took."
    out = {}
    for beam in (1, 4):
        start = time.perf_counter()
        result = evaluate_translator(translator, split, beam_size=beam)
        out[f"beam_{beam}"] = {"bleu": round(result["bleu"], 2), "unk": result["unk"],
                               "seconds": round(time.perf_counter() - start, 1)}
    return out


def megabytes_16_bit(model: EncoderDecoder | Ensemble) -> float:
    "The size of a model's weights (an ensemble's: all its members') stored in 16 bits, in MB (10^6 bytes)."
    models = getattr(model, "members", [model])
    return round(sum(2 * t.numel() for m in models for t in weights_to_save(m).values()) / 1e6, 2)


def collect(runs_dir: Path, out: Path) -> dict:
    """Each member, the pair, the pair in 8 bits, the shipped model and (once its run has finished) the pair's student
    on val; on test the shipped model and the candidate chosen on val among those that fit."""
    # sizes: 2 bytes a weight for the members, the 16-bit pair and the student; the safetensors file for the others
    translators = {name: Translator.from_checkpoint(folder, "cpu") for name, folder in PAIR.items()}
    rows = {name: {"megabytes": megabytes_16_bit(t.model)} for name, t in translators.items()}
    translators["shipped model"] = Translator.from_checkpoint(shipped_model_dir(), "cpu")
    rows["shipped model"] = {"megabytes": round((shipped_model_dir() / "model.safetensors").stat().st_size / 1e6, 2)}
    translators["pair, 16 bits"] = load_ensemble(list(PAIR.values()), "cpu")
    rows["pair, 16 bits"] = {"megabytes": megabytes_16_bit(translators["pair, 16 bits"].model)}
    translators["pair, 8 bits"] = load_ensemble(list(PAIR.values()), "cpu")
    rows["pair, 8 bits"] = {"megabytes": round(store_in_8_bits(translators["pair, 8 bits"].model) / 1e6, 2)}
    run_dir, student_record = runs_dir / "student", None
    history = finished(run_dir) if (run_dir / "train_config.json").is_file() else []
    if len(history) == student(runs_dir).epochs:  # the student, once its run has finished: the candidate its run ships
        shipped_candidate, candidates = choose_on_val({BEST_CANDIDATE: run_dir / "best",
                                                       averaged_candidate(): run_dir / f"avg{AVERAGE_LAST}"})
        folder = run_dir / ("best" if shipped_candidate == BEST_CANDIDATE else f"avg{AVERAGE_LAST}")
        translators["student of the pair"] = Translator.from_checkpoint(folder, "cpu")
        rows["student of the pair"] = {"megabytes": megabytes_16_bit(translators["student of the pair"].model)}  # as shipped
        seal = json.loads((runs_dir / "corpus" / "teachers.json").read_text())  # the teachers' weights' SHA-256, the beam
        student_record = {"teachers_sha256": list(seal["teachers"].values()), "teachers_beam_size": seal["beam_size"],
                          "candidates_val_bleu_greedy": candidates, "history": history}
    for name, row in rows.items():
        row["val"] = scores(translators[name], "val")
    fits = {name: row for name, row in rows.items() if row["megabytes"] <= LIMIT_MB}
    chosen = max(fits, key=lambda name: fits[name]["val"]["beam_1"]["bleu"])  # as build_pretrained chooses: val, greedy
    for name in dict.fromkeys(["shipped model", chosen]):
        rows[name]["test"] = scores(translators[name], "test")
    result = {"metric": "sacreBLEU (greedy: beam_1; beam search: beam_4, length penalty 0.6)", "limit_megabytes": LIMIT_MB,
              "megabytes": "MB of 10^6 bytes: 2 bytes a weight for the members, the 16-bit pair and the student (stored "
                           "in 16 bits as a shipped model is), the safetensors file for the others",
              "members": {name: str(folder.relative_to(ROOT)) for name, folder in PAIR.items()},
              "rows": rows, "chosen_on_val": chosen, "hardware": hardware(), "torch": torch.__version__}
    if student_record:
        result["student"] = student_record
    return result


if __name__ == "__main__":
    run_or_collect(__doc__, run, collect, "runs/pair", OUT)
