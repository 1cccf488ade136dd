"""Distillation from the recipe's four runs: train the recipe on the four runs' own translations of the training set.

The recipe has been trained four times: in fp32 with seed 0 (the model shipped before the second student below) and in
bf16 with seeds 0, 1 and 2 (tools/precision_run.py, whose runs this script reads from runs/precision). Averaging their predictions makes an
ensemble that translates better than any one of them, but four models do not fit in the 30 MB a shipped model may
take. Sequence-level knowledge distillation (Kim and Rush 2016) trains one model of the usual size on the ensemble's
translations instead:

1. `teach`: the ensemble translates the 29,000 German training sentences greedily (the package's `distill_corpus`,
   which writes the second student's corpus below and seals it with its teachers), following at each step the mean
   of the four models' log-probabilities. Each teacher is the candidate its run would ship: its best epoch or its
   averaged last epochs, whichever scored higher on val. The ensemble translates nothing but the training set's German.
2. The student's corpus is the training set twice: once with its own English, once with the ensemble's; its val and
   test are Multi30k's own. The student is the recipe with two changes: it trains in bf16, like the three seed runs,
   and for 19 epochs of this corpus (the last 4 cooling down) instead of 38 (the last 8). With twice the pairs per
   epoch that is about the recipe's number of optimizer steps on the recipe's schedule (batches are cut by tokens, and
   the ensemble's sentences are not exactly as long as the references). Like every run, it learns its BPE vocabulary
   from its own training corpus, which here includes the ensemble's English, so its vocabulary is not the teachers'.
   A second student, the recipe exactly (38 epochs, the last 8 cooling down) in bf16, learns from the ensemble's
   English alone: the training set's German paired with the ensemble's translations, no references, the form of
   distillation Kim and Rush describe.
3. `teach_with_beam`: the ensemble translates the training German again, with beam search (beam 4, the package's
   `distill_corpus`), and a third student, the second's settings exactly, learns from those translations alone.
   Kim and Rush's sequence-level distillation trains on the teacher's beam-search outputs, and on val the ensemble
   scores higher with beam 4 than greedily.
4. A fourth student is the second with a wider model, d_model 384 instead of 256 (d_ff and the 8 heads kept, 26 MB in
   float16, within the 30 MB a shipped model may take), on the second's corpus. On Multi30k's own references the
   wider recipe gained nothing (tools/wide_run.py); the ensemble's translations are more regular than references,
   and the students come within the spread of the ensemble's greedy score but not of its beam-4 score, so the
   question is whether a wider student keeps more of the ensemble.
5. `collect` scores the teachers, the ensemble (greedy and beam 4) and each student's candidates on val, as
   `build_pretrained` scores candidates, and writes results/distill.json, which the
   experiments chapter (nbs/14a_experiments.ipynb) reads. The test sets are not used.

    python tools/distill.py run --runs-dir runs/distill      # teaches (once), then trains the students (resumes)
    python tools/distill.py collect --runs-dir runs/distill  # writes results/distill.json
"""
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

from ablation import finished, run_or_collect, write_json  # tools/ablation.py: finished epochs, the command line, JSON
from precision_run import COMPARISONS, KEEP, averaged_val_bleu, val_bleu  # tools/precision_run.py: the seed runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.data import load_multi30k  # noqa: E402 (the package of this checkout)
from annotated_transformer.evaluation import bleu  # noqa: E402
from annotated_transformer.decoding import load_ensemble  # noqa: E402
from annotated_transformer.pretrained import (AVERAGE_LAST, BEST_CANDIDATE, RECIPE, _sealed, averaged_candidate,  # noqa: E402
                                              distill_corpus, hardware, write_lines)
from annotated_transformer.experiments import seed_runs  # noqa: E402
from annotated_transformer.pretrained import STUDENT as SHIPPED_STUDENT, TEACHERS  # noqa: E402
from annotated_transformer.train import train  # noqa: E402

PRETRAINED = ROOT / "results"  # the experiments' records
PRECISION_RUNS = ROOT / "runs" / "precision"  # where tools/precision_run.py trains the bf16 seed runs
SHORT = {BEST_CANDIDATE: "best epoch", averaged_candidate(): f"last {AVERAGE_LAST} averaged"}  # the candidates' names in a table
OUT = PRETRAINED / "distill.json"
STUDENT = replace(RECIPE, epochs=RECIPE.epochs // 2, cooldown=RECIPE.cooldown // 2, precision="bf16")
STUDENT_ENSEMBLE_ONLY = SHIPPED_STUDENT  # the package's STUDENT, the shipped model (`run` names its folders)
TEACHER_BEAM = 4  # the third student's corpus: the ensemble's beam
STUDENT_WIDE = replace(STUDENT_ENSEMBLE_ONLY, model=replace(STUDENT_ENSEMBLE_ONLY.model, d_model=384))  # the fourth student


def teachers(precision_runs: Path = PRECISION_RUNS) -> dict[str, Path]:
    """The recipe's fp32 run (in the folder of the package's fp32 teacher; its results.json is kept as
    results_38_epochs.json), and each bf16 seed run's candidate with the higher val score in precision.json."""
    fp32 = json.loads((PRETRAINED / "results_38_epochs.json").read_text())["checkpoint"]
    run = ROOT / TEACHERS["fp32, seed 0"].out_dir
    chosen = {f"fp32, seed 0, {SHORT[fp32]}": run / ("best" if fp32 == BEST_CANDIDATE else f"avg{AVERAGE_LAST}")}
    records = json.loads((PRETRAINED / "precision.json").read_text())
    names = {id(pair): name for name, pair in records.items()}  # seed_runs gives the runs; COMPARISONS their folders
    for pair in seed_runs(records):
        scores = pair["candidates_val_bleu_greedy"]["bf16"]
        best = max(scores, key=scores.get)
        folder = precision_runs / COMPARISONS[names[id(pair)]][2] / ("best" if best == BEST_CANDIDATE else f"avg{AVERAGE_LAST}")
        chosen[f"bf16, seed {pair['seed']}, {SHORT[best]}"] = folder
    return chosen


def teach(corpus: Path, precision_runs: Path = PRECISION_RUNS) -> Path:
    """Write the first student's corpus, `corpus`: the training set twice (its own English, then the ensemble's), val and
    test as they are, and teachers.json naming the teachers. Return the second's, which the package's `distill_corpus`
    writes beside it (`corpus`_ensemble_only: the training German with the ensemble's greedy translations) and keeps,
    so a stop after the ensemble's pass loses nothing."""
    only = corpus.with_name(corpus.name + "_ensemble_only")
    if (corpus / "train.en").exists():  # written last: both corpora are complete
        return only
    folders = teachers(precision_runs)
    missing = [f"{folder} ({name})" for name, folder in folders.items() if not (folder / "model.safetensors").is_file()]
    if missing:
        raise SystemExit(f"no teacher weights in {', '.join(missing)}: `python tools/precision_run.py run` trains the "
                         "bf16 runs of the recipe")
    distill_corpus(list(folders.values()), only, device="cpu")
    corpus.mkdir(parents=True, exist_ok=True)
    write_json(corpus / "teachers.json", {name: str(folder) for name, folder in folders.items()})
    read = lambda name: (only / name).read_text(encoding="utf-8").splitlines()
    for name in ("val.de", "val.en", "test.de", "test.en"):
        write_lines(corpus / name, read(name))
    write_lines(corpus / "train.de", read("train.de") * 2)
    write_lines(corpus / "train.en", [en for _, en in load_multi30k("train")] + read("train.en"))
    return only


def teach_with_beam(runs_dir: Path) -> Path:
    """The third student's corpus (runs_dir/corpus_beam): the training German with the ensemble's beam-4 translations,
    val and test as Multi30k has them; the teachers are those of runs_dir/corpus (teachers.json)."""
    folders = json.loads((runs_dir / "corpus" / "teachers.json").read_text()).values()
    return distill_corpus(list(folders), runs_dir / "corpus_beam", device="cpu", beam_size=TEACHER_BEAM)


def run(runs_dir: Path) -> None:
    "Teach (once), then train the four students (each resuming after a stop)."
    only = teach(runs_dir / "corpus")  # the second and the fourth student's corpus
    train(replace(STUDENT, out_dir=str(runs_dir / "student"), corpus_dir=str(runs_dir / "corpus")))
    train(replace(STUDENT_ENSEMBLE_ONLY, out_dir=str(runs_dir / "student_ensemble_only"), corpus_dir=str(only)))
    train(replace(STUDENT_ENSEMBLE_ONLY, out_dir=str(runs_dir / "student_beam"), corpus_dir=str(teach_with_beam(runs_dir))))
    train(replace(STUDENT_WIDE, out_dir=str(runs_dir / "student_d384"), corpus_dir=str(only)))


def collect(runs_dir: Path, out: Path = OUT) -> dict:
    "The teachers' and the ensemble's val scores, and each student's run and candidates on val, from what the runs used."
    students = {"student": runs_dir / "student", "student_ensemble_only": runs_dir / "student_ensemble_only",
                "student_beam": runs_dir / "student_beam", "student_d384": runs_dir / "student_d384"}
    records = {}  # each student's finished epochs, read once
    for name, folder in students.items():
        if not (folder / "train_config.json").is_file():
            raise SystemExit(f"no student run in {folder}: `python tools/distill.py run --runs-dir {runs_dir}` trains it")
        epochs = json.loads((folder / "train_config.json").read_text())["epochs"]
        records[name] = finished(folder)
        if len(records[name]) < epochs:
            raise SystemExit(f"{folder} has {len(records[name])} of {epochs} epochs: `python tools/distill.py run` trains it")
    corpus = runs_dir / "corpus"
    folders = {name: Path(folder) for name, folder in json.loads((corpus / "teachers.json").read_text()).items()}
    pairs = {split: load_multi30k(split) for split in ("train", "val", "test")}
    ensemble = load_ensemble(list(folders.values()), "cpu")
    val_german, val_english = [de for de, _ in pairs["val"]], [en for _, en in pairs["val"]]
    german, references = [de for de, _ in pairs["train"]], [en for _, en in pairs["train"]]
    only = runs_dir / "corpus_ensemble_only"  # the package's distill_corpus wrote it, sealed with its teachers and beam
    sealed_by = lambda folder: json.loads((folder / "teachers.json").read_text()) if (folder / "teachers.json").is_file() else None
    if sealed_by(only) != _sealed(list(folders.values()), 1):
        raise SystemExit(f"{only} was not written by the teachers of {corpus} with greedy decoding")
    taught = (only / "train.en").read_text(encoding="utf-8").splitlines()
    beam_corpus = runs_dir / "corpus_beam"  # the package's distill_corpus wrote it, sealed with its teachers and beam
    if sealed_by(beam_corpus) != _sealed(list(folders.values()), TEACHER_BEAM):
        raise SystemExit(f"{beam_corpus} was not written by the teachers of {corpus} with beam {TEACHER_BEAM}")
    taught_beam = (beam_corpus / "train.en").read_text(encoding="utf-8").splitlines()
    teachers_vocabulary = (next(iter(folders.values())) / "tokenizer.json").read_bytes()
    # what each student's corpus should hold for training: (the record's name for the check, German, English)
    expected = {"student": ("train_is_references_then_ensemble", german * 2, references + taught),
                "student_ensemble_only": ("train_is_ensemble_only", german, taught),
                "student_beam": ("train_is_ensemble_beam_only", german, taught_beam),
                "student_d384": ("train_is_ensemble_only", german, taught)}
    result = {"metric": "sacreBLEU on the val split (1,014 sentences), greedy decoding unless a key says beam 4",
              "teachers_val_bleu_greedy": {name: val_bleu(folder) for name, folder in folders.items()},
              "ensemble_val_bleu_greedy": round(bleu(ensemble.translate(val_german, beam_size=1), val_english)[0], 2),
              f"ensemble_val_bleu_beam{TEACHER_BEAM}": round(bleu(ensemble.translate(val_german, beam_size=TEACHER_BEAM),
                                                                 val_english)[0], 2)}
    for name, student in students.items():
        settings = json.loads((student / "train_config.json").read_text())
        used = ROOT / settings["corpus_dir"]  # a relative folder is one under the checkout, where the runs train
        read = lambda file: (used / file).read_text(encoding="utf-8").splitlines()
        train_en = read("train.en")
        check, train_de_expected, train_en_expected = expected[name]
        result[name] = {
            **{k: settings[k] for k in ("epochs", "cooldown", "warmup", "seed", "precision", "subwords")},
            "model": {k: settings["model"][k] for k in ("N", "d_model", "d_ff", "h", "dropout")},
            "pairs_per_epoch": len(train_en),
            check: read("train.de") == train_de_expected and train_en == train_en_expected,
            "val_and_test_are_multi30k": all(list(zip(read(f"{split}.de"), read(f"{split}.en"))) == pairs[split]
                                             for split in ("val", "test")),
            "teachers_vocabulary": (student / "last" / "tokenizer.json").read_bytes() == teachers_vocabulary,
            "hardware": hardware(), "torch": torch.__version__,
            "history": [{k: r[k] for k in KEEP} | {"step": r["step"]} for r in records[name]],
            "candidates_val_bleu_greedy": {BEST_CANDIDATE: val_bleu(student / "best"),
                                           averaged_candidate(): averaged_val_bleu(student)}}
    return result


def main() -> None:
    run_or_collect(__doc__, run, collect, "runs/distill", OUT)


if __name__ == "__main__":
    main()
