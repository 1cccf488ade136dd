"""Run an experiment on the recipe, described by one JSON file in experiments/, and write its record.

An experiment file says what a reader's question needs, and nothing else:

    {"question": "Does label smoothing help?",        # what the record answers
     "recipe": {"epochs": 14, "cooldown": 0},         # changes every run makes to the recipe (optional)
     "runs": {"recipe": {},                           # run name -> the settings it changes ({} : the recipe itself)
              "no smoothing": {"smoothing": 0.0},
              "longer": {"continues": "recipe", "epochs": 22},    # a copy of a finished run, trained on
              "student": {"distilled_from": ["recipe", "no smoothing"], "teacher_beam": 1,
                          "with_references": false},
                                                      # trained on the teachers' ensemble translations of the training set
                                                      # (and on its references too, with_references: twice the pairs)
              "tuned": {"fine_tunes": "student", "epochs": 5, "warmup": 100, "factor": 0.032, "cooldown": 5,
                        "average_last": [2, 3]}},
                                                      # starts from the weights and vocabularies of the student's choice
                                                      # (init_from); average_last as in measure, for this run only
     "ensembles": {"both": {"members": ["recipe", "no smoothing"], "dtype": "int8"}},
                                                      # runs decoded together, weights stored in dtype; scored as a run
     "seeds": [0, 1],                                 # each run once per seed (default [0])
     "measure": {"average_last": 5,                   # candidates: the best epoch, and the last N averaged (0: none;
                                                      # a list: one average for each N)
                 "beams": [1, 4],                     # val BLEU of every candidate with these beam sizes
                 "curve": false,                      # also the greedy val BLEU of every N consecutive epochs averaged
                 "length_penalties": [0.6, 1.0],      # the choice decoded with the largest beam at each alpha, val and test
                 "limit": null}}                      # only the first N val/test sentences (smoke tests)

Settings are `TrainConfig` fields; "model" holds `ModelConfig` fields. Every run trains with `train` (it resumes
after a stop), in a folder of --runs-dir named by the settings it changes, so that experiments share a run they both
need (the recipe itself is --runs-dir/recipe). Then each run's candidates are scored on val; the
candidate with the best greedy val BLEU is the run's choice (what a student learns from and a fine-tuning starts from), and the run whose choice scores best is the experiment's
choice, the only one scored on test2016. The record goes to --out (default results/experiments/<experiment>.json):
the file's contents, and for every run its settings, its per-epoch history and its candidates' scores.

    python tools/experiment.py experiments/rdrop.json            # train what is missing, then record
    python tools/experiment.py experiments/rdrop.json --dry-run  # the runs and their changed settings
    python tools/experiment.py experiments/seeds.json --compare runs/multi30k  # a run of yours against the record

--compare judges a finished run of the same settings (its seed and precision may differ) against the record: it
passes (exit 0) when the run's best epoch scores at most --margin BLEU below the record's lowest best epoch on val,
and fails with exit 1 otherwise. The GPU check (tools/gpu_check.sh) judges a GPU's run of the recipe this way.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from annotated_transformer.model import ModelConfig

ROOT = Path(__file__).resolve().parents[1]

EXPERIMENT_KEYS = {"question", "recipe", "runs", "seeds", "measure", "ensembles"}
MEASURE_KEYS = {"average_last", "beams", "limit", "curve", "length_penalties"}
RUN_ONLY_KEYS = {"continues", "distilled_from", "teacher_beam", "with_references", "fine_tunes", "average_last"}  # what a run may say beside settings
NOT_SETTINGS_OF_A_RUN = {"init_from"}  # the runner sets it from "fine_tunes"
DTYPES = ("float32", "float16", "int8")  # how an ensemble's members are stored (torch dtypes of these names)
NOT_SETTINGS = {"out_dir", "data_dir"}  # the runner places every run itself


class ExperimentError(ValueError):
    "An experiment file that cannot run: one line, exit status 2."


def settings_fields() -> set[str]:
    from annotated_transformer.train import TrainConfig
    return {f.name for f in fields(TrainConfig)} - NOT_SETTINGS


def changed(base, changes: dict, where: str):
    "`base` (a TrainConfig) with `changes`: TrainConfig fields, and `model` for ModelConfig fields."
    unknown = sorted(set(changes) - (settings_fields() - NOT_SETTINGS_OF_A_RUN))
    if unknown:
        raise ExperimentError(f"{where}: {', '.join(unknown)} is not a setting (expected TrainConfig fields: "
                              f"{', '.join(sorted(settings_fields() - NOT_SETTINGS_OF_A_RUN))})")
    model = changes.get("model", {})
    if not isinstance(model, dict) or set(model) - {f.name for f in fields(ModelConfig)}:
        raise ExperimentError(f"{where}: model must hold ModelConfig fields, got {model!r}")
    try:
        return replace(base, **{k: v for k, v in changes.items() if k != "model"}, model=replace(base.model, **model))
    except (TypeError, ValueError) as e:
        raise ExperimentError(f"{where}: {e}") from None


def averages(average_last: int | list[int]) -> list[int]:
    "How many last epochs each averaged candidate averages: `average_last` as a list, without 0 and 1 (no average)."
    return [n for n in ([average_last] if isinstance(average_last, int) else average_last) if n > 1]


def whole(n, low: int = 0) -> bool:
    "Is `n` a whole number >= low (JSON's true and false are not)?"
    return isinstance(n, int) and not isinstance(n, bool) and n >= low


def good_average_last(value) -> bool:
    return whole(value) or (isinstance(value, list) and bool(value) and all(whole(n) for n in value))


def unique_keys(path: Path):
    "JSON's objects, with a key written twice refused: the second would silently replace the first (a run dropped)."
    def hook(pairs):
        keys = [k for k, _ in pairs]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise ExperimentError(f"{path}: {twice!r} is written twice in one object: give each run its own name")
        return dict(pairs)
    return hook


def check_measure(measure, path: Path) -> None:
    "Refuse what `measure` cannot mean: a limit below 1, a curve that is not true or false, beams that are not beams."
    from annotated_transformer.decoding import MAX_BEAM
    if not isinstance(measure, dict):
        raise ExperimentError(f"{path}: measure must be an object, got {measure!r}")
    if measure.get("limit") is not None and not whole(measure["limit"], 1):
        raise ExperimentError(f"{path}: measure.limit must be a whole number >= 1 or null, got {measure['limit']!r}")
    if not isinstance(measure.get("curve", False), bool):
        raise ExperimentError(f"{path}: measure.curve must be true or false, got {measure['curve']!r}")
    beams = measure.get("beams", [1])
    if not (isinstance(beams, list) and beams and all(whole(b, 1) and b <= MAX_BEAM for b in beams)):
        raise ExperimentError(f"{path}: measure.beams must be a list of beam sizes 1..{MAX_BEAM}, got {beams!r}")


def check_run(name: str, run: dict, path: Path) -> None:
    "Refuse a distillation's settings that are not what they say: a teacher beam below 1, a with_references not a boolean."
    if not whole(run.get("teacher_beam", 1), 1):
        raise ExperimentError(f"{path}: run {name!r}: teacher_beam must be a whole number >= 1, got {run['teacher_beam']!r}")
    if not isinstance(run.get("with_references", False), bool):
        raise ExperimentError(f"{path}: run {name!r}: with_references must be true or false, "
                              f"got {run['with_references']!r}")


def read_experiment(path: Path) -> dict:
    "The experiment file, checked: its keys, its runs' settings, what a run continues."
    try:
        spec = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_keys(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExperimentError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("runs"), dict) or not spec["runs"]:
        raise ExperimentError(f"{path}: expected an object with \"runs\": {{name: settings it changes}}")
    if set(spec) - EXPERIMENT_KEYS:
        raise ExperimentError(f"{path}: unknown keys {sorted(set(spec) - EXPERIMENT_KEYS)} (expected {sorted(EXPERIMENT_KEYS)})")
    check_measure(spec.get("measure", {}), path)
    if set(spec.get("measure", {})) - MEASURE_KEYS:
        raise ExperimentError(f"{path}: measure takes {sorted(MEASURE_KEYS)}, got {sorted(spec['measure'])}")
    alphas = spec.get("measure", {}).get("length_penalties", [])
    if not (isinstance(alphas, list) and all(isinstance(a, (int, float)) and not isinstance(a, bool) and 0 <= a < 100
                                             for a in alphas)):
        raise ExperimentError(f"{path}: length_penalties must be a list of numbers alpha >= 0, got {alphas!r}")
    if not good_average_last(spec.get("measure", {}).get("average_last", 5)):
        raise ExperimentError(f"{path}: average_last must be a whole number >= 0 or a list of them, "
                              f"got {spec['measure']['average_last']!r}")
    seeds = spec.get("seeds", [0])
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise ExperimentError(f"{path}: seeds must be a list of whole numbers, got {seeds!r}")
    names = list(spec["runs"])
    for name, run in spec["runs"].items():
        if not isinstance(run, dict):
            raise ExperimentError(f"{path}: run {name!r} must be an object of the settings it changes")
        check_run(name, run, path)
        source = run.get("continues")
        if source is not None and (source not in spec["runs"] or source == name or "continues" in spec["runs"][source]):
            raise ExperimentError(f"{path}: run {name!r} continues {source!r}, which is not another run of this file "
                                  "that starts from scratch")
        teachers = run.get("distilled_from", [])
        if not isinstance(teachers, list) or any(t not in names[:names.index(name)] for t in teachers):
            raise ExperimentError(f"{path}: run {name!r} is distilled from {teachers!r}: expected runs named before it")
        if "fine_tunes" in run and run["fine_tunes"] not in names[:names.index(name)]:
            raise ExperimentError(f"{path}: run {name!r} fine-tunes {run['fine_tunes']!r}: expected a run named before it")
        if not good_average_last(run.get("average_last", 0)):
            raise ExperimentError(f"{path}: run {name!r}: average_last must be a whole number >= 0 or a list of them, "
                                  f"got {run['average_last']!r}")
    for name, ensemble in spec.get("ensembles", {}).items():
        members = ensemble.get("members") if isinstance(ensemble, dict) else None
        if not (isinstance(members, list) and members and all(m in spec["runs"] for m in members)):
            raise ExperimentError(f"{path}: ensemble {name!r} needs \"members\": a list of this file's runs, got {members!r}")
        if ensemble.get("dtype", "float32") not in DTYPES:
            raise ExperimentError(f"{path}: ensemble {name!r}: dtype must be one of {', '.join(DTYPES)}")
    return spec


def planned_runs(spec: dict, path: Path, runs_dir: Path) -> list[dict]:
    "Every (run, seed) with its TrainConfig, its folder, and the runs it starts from, in the file's order."
    from annotated_transformer.cli import check_settings
    from annotated_transformer.train import TrainConfig
    base = changed(TrainConfig(), spec.get("recipe", {}), f"{path}: recipe")  # TrainConfig's defaults are the recipe
    planned = []
    for seed in spec.get("seeds", [0]):
        configs = {}
        for name, run in spec["runs"].items():
            cfg = changed(replace(base, seed=seed), {k: v for k, v in run.items() if k not in RUN_ONLY_KEYS},
                          f"{path}: run {name!r}")
            try:  # every setting as `train` checks it (the runner's own corpus and start are made later)
                check_settings(cfg)
            except ValueError as e:
                raise ExperimentError(f"{path}: run {name!r}: {e}") from None
            missing = [f"{split}.{lang}" for split in ("train", "val", "test") for lang in (cfg.src_lang, cfg.tgt_lang)
                       if cfg.corpus_dir and not any(Path(cfg.corpus_dir, f"{split}.{lang}{gz}").is_file()
                                                     for gz in ("", ".gz"))]  # as `load_parallel` looks for them
            if missing:
                raise ExperimentError(f"{path}: run {name!r}: corpus_dir {cfg.corpus_dir} has no {', '.join(missing)}")
            teachers = [runs_dir / folder_name(configs[t]) for t in run.get("distilled_from", [])]
            if teachers:  # the teachers' translations are the corpus: a folder named by the teachers and their beam
                corpus = "corpus-" + hashlib.sha256(json.dumps([[t.name for t in teachers], run.get("teacher_beam", 1)]
                                                                + (["with references"] if run.get("with_references") else []))
                                                    .encode()).hexdigest()[:12]
                cfg = replace(cfg, corpus_dir=str(runs_dir / corpus))
            tuned = None if "fine_tunes" not in run else runs_dir / folder_name(configs[run["fine_tunes"]])
            if tuned is not None:  # named by the run it fine-tunes; train_runs puts in the candidate that run chooses
                cfg = replace(cfg, init_from=str(tuned))
            configs[name] = cfg
            source = run.get("continues")
            planned.append({"name": name, "seed": seed, "config": replace(cfg, out_dir=str(runs_dir / folder_name(cfg))),
                            "continues": None if source is None else runs_dir / folder_name(configs[source]),
                            "teachers": teachers, "teacher_beam": run.get("teacher_beam", 1),
                            "with_references": bool(run.get("with_references", False)), "fine_tunes": tuned,
                            "average_last": run.get("average_last", spec.get("measure", {}).get("average_last", 5))})
    return planned


def folder_name(cfg) -> str:
    """A run's folder, named by the settings it changes ("recipe" for none): experiments that need the same run share
    it, and train it once."""
    from annotated_transformer.train import TrainConfig
    flat = differences(cfg, TrainConfig())
    flat = {**{k: Path(v).name if k in ("corpus_dir", "init_from") else v for k, v in flat.items() if k != "model"},  # a corpus by its name
            **{f"model.{k}": v for k, v in flat.get("model", {}).items()}}
    name = "_".join(f"{k}-{v}" for k, v in sorted(flat.items())) or "recipe"
    name = re.sub(r"[^A-Za-z0-9._-]", "", name)
    return name if len(name) <= 120 else hashlib.sha256(name.encode()).hexdigest()[:16]


def differences(cfg, base) -> dict:
    "The settings of `cfg` that differ from `base`'s (model fields by name), folders left out."
    new, old = asdict(cfg), asdict(base)
    found = {k: v for k, v in new.items() if k not in NOT_SETTINGS | {"model"} and v != old[k]}
    model = {k: v for k, v in new["model"].items() if v != old["model"][k]}
    return {**found, **({"model": model} if model else {})}


def continue_from(finished_run: Path, cfg) -> None:
    "Start the run of `cfg` as a copy of `finished_run`, written aside and moved in whole."
    from annotated_transformer.train import SETTINGS_FILE
    out = Path(cfg.out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(finished_run, tmp, ignore=lambda folder, names: [n for n in names if n == ".lock" or n.startswith("avg")])
    (tmp / SETTINGS_FILE).write_text(json.dumps(asdict(cfg), indent=2))
    os.replace(tmp, out)


def train_runs(planned: list[dict], runner: "Runner") -> None:
    """Train (or resume) every run, in order. A continued run starts as a copy of its source once that has finished;
    a distilled run trains on its teachers' translations, and a fine-tuning starts from a model: each the candidate
    its run chooses on val."""
    from annotated_transformer.recipe import distill_corpus
    from annotated_transformer.train import train
    average_last = {Path(run["config"].out_dir): run["average_last"] for run in planned}
    choice = lambda folder: runner.choice(folder, average_last[folder])
    for run in planned:
        cfg = replace(run["config"], data_dir=runner.data_dir)
        if run["continues"] is not None and not Path(cfg.out_dir).exists():
            continue_from(run["continues"], cfg)
        if run["teachers"]:
            distill_corpus([choice(teacher) for teacher in run["teachers"]], cfg.corpus_dir, runner.data_dir,
                           beam_size=run["teacher_beam"], with_references=run["with_references"])
        if run["fine_tunes"] is not None:  # a fine-tuning that has begun keeps the start it began from
            cfg = replace(cfg, init_from=started_from(Path(cfg.out_dir)) or str(choice(run["fine_tunes"])))
        train(cfg)


def translator_of(checkpoint: Path | list[Path]):
    "The `Translator` of a checkpoint folder, or of a list of them decoded together as one ensemble."
    from annotated_transformer.decoding import Translator, load_ensemble
    return load_ensemble(checkpoint) if isinstance(checkpoint, list) else Translator.from_checkpoint(checkpoint)


def started_from(folder: Path) -> str | None:
    "The model a fine-tuning run in `folder` started from, as its settings say (None: it has not begun)."
    from annotated_transformer.train import SETTINGS_FILE
    return json.loads((folder / SETTINGS_FILE).read_text())["init_from"] if (folder / SETTINGS_FILE).is_file() else None


@dataclass
class Runner:
    """What one command of the runner knows: where the data is, how many sentences it scores (`limit`), and what it
    has scored and averaged so far. A teacher's candidates, scored to choose it, are not decoded again for the record,
    and a finished run is averaged once."""
    data_dir: str | None = None  # Multi30k files on disk (None: the data folder, or a download)
    limit: int | None = None  # only the first N val/test sentences (smoke tests)
    scored: dict = field(default_factory=dict)  # (checkpoint folders, split, beam) -> scores
    found: dict = field(default_factory=dict)  # (run folder, average_last) -> its candidates

    def score(self, checkpoint: Path | list[Path], split: str, beams: list[int]) -> dict:
        "BLEU and <unk> written, for each beam size, of a checkpoint folder (or a list of them decoded as an ensemble)."
        from annotated_transformer.recipe import measure_bleu
        folders = tuple(str(Path(c).resolve()) for c in (checkpoint if isinstance(checkpoint, list) else [checkpoint]))
        missing = tuple(beam for beam in beams if (folders, split, beam) not in self.scored)
        if missing:
            translator = translator_of(checkpoint)
            for beam, r in zip(missing, measure_bleu(translator, split, self.data_dir, missing, self.limit).values()):
                self.scored[(folders, split, beam)] = {k: r[k] for k in ("bleu", "unk", "sentences")}
        return {f"beam_{beam}": self.scored[(folders, split, beam)] for beam in beams}

    def greedy_val_bleu(self, checkpoint: Path) -> float:
        return self.score(checkpoint, "val", [1])["beam_1"]["bleu"]

    def candidates(self, folder: Path, average_last: int | list[int]) -> dict[str, Path]:
        "A finished run's candidates (`recipe.run_candidates`): its best epoch, and its last N epochs averaged."
        from annotated_transformer.recipe import run_candidates
        key = (str(Path(folder).resolve()), json.dumps(average_last))
        if key not in self.found:
            self.found[key] = run_candidates(folder, averages(average_last))
        return self.found[key]

    def choice(self, folder: Path, average_last: int | list[int]) -> Path:
        "The candidate of a finished run with the best greedy val BLEU (`recipe.choose_on_val`): the run's choice."
        from annotated_transformer.recipe import choose_on_val
        found = self.candidates(folder, average_last)
        return found[choose_on_val(found, greedy_val_bleu=self.greedy_val_bleu)[0]]


def averaged_curve(folder: Path, average_last: int, runner: Runner) -> list[dict]:
    "Greedy val BLEU of the average of each `average_last` consecutive epoch checkpoints, by the last epoch averaged."
    from annotated_transformer.evaluation import average_checkpoints
    epochs = sorted(int(p.name.split("_")[1]) for p in folder.glob("epoch_[0-9][0-9][0-9]"))
    curve = []
    for last in epochs[average_last - 1:]:
        with tempfile.TemporaryDirectory() as tmp:
            averaged = average_checkpoints([folder / f"epoch_{e:03d}" for e in range(last - average_last + 1, last + 1)],
                                           Path(tmp) / "avg")
            curve.append({"epoch": last, "val": runner.score(averaged, "val", [1])})
    return curve


def penalty_sweep(checkpoint: Path | list[Path], alphas: list[float], beam: int, runner: Runner) -> list[dict]:
    "BLEU and the length ratio (output tokens / reference tokens) on val and test2016 at each length penalty alpha."
    from annotated_transformer.evaluation import evaluate_translator
    translator = translator_of(checkpoint)
    sweep = []
    for alpha in alphas:
        found = {split: evaluate_translator(translator, split, runner.data_dir, beam_size=beam, alpha=alpha,
                                           limit=runner.limit)
                 for split in ("val", "test")}
        sweep.append({"alpha": alpha, **{split: {"bleu": round(r["bleu"], 2), "length_ratio": round(r["length_ratio"], 4)}
                                         for split, r in found.items()}})
    return sweep


def val_bleu(scored: dict) -> float:
    "The greedy val BLEU of a scored candidate or ensemble: what chooses."
    return scored["val"]["beam_1"]["bleu"]


def recorded_run(run: dict, runner: Runner, beams: list[int], curve: bool) -> dict:
    "A finished run's settings, history, candidates scored on val and its choice (`recipe.choose_on_val`)."
    from annotated_transformer.recipe import choose_on_val, read_history
    folder = Path(run["config"].out_dir)
    epochs = read_history(folder)
    finished = [r for r in epochs if not r.get("partial")]
    if len(finished) < run["config"].epochs and run["config"].max_steps is None:
        raise ExperimentError(f"{folder} has {len(finished)} of its {run['config'].epochs} epochs: train it first")
    found = runner.candidates(folder, run["average_last"])  # averaged once: the test and the ensembles reuse them
    scored = {name: {"val": runner.score(c, "val", beams)} for name, c in found.items()}
    chosen = choose_on_val(found, greedy_val_bleu=runner.greedy_val_bleu)[0]
    settings = {k: v for k, v in asdict(run["config"]).items() if k not in NOT_SETTINGS}
    if run["fine_tunes"] is not None:
        settings["init_from"] = started_from(folder)  # the candidate it started from, not the run it fine-tunes
    averaged = averages(run["average_last"])
    return {"name": run["name"], "seed": run["seed"], "settings": settings, "history": epochs,
            "candidates": scored, "chosen": chosen, "checkpoint": found[chosen],
            **({"averaged_curve": averaged_curve(folder, max(averaged), runner)} if curve and averaged else {})}


def recorded_ensembles(spec: dict, runs: list[dict], runner: Runner, beams: list[int]) -> list[dict]:
    """Every ensemble of the file scored on val. One that beats every run and every ensemble before it is scored on
    test2016 too, while its members are at hand (`record` keeps the test scores of the one chosen)."""
    best, ensembles = max(val_bleu(r["candidates"][r["chosen"]]) for r in runs), []
    for name, ensemble in spec.get("ensembles", {}).items():
        dtype = ensemble.get("dtype", "float32")
        with tempfile.TemporaryDirectory() as tmp:
            members = stored_members([r for r in runs if r["name"] in ensemble["members"]], dtype, Path(tmp))
            scored = {"val": runner.score(members, "val", beams)}
            megabytes = round(sum((m / "model.safetensors").stat().st_size for m in members) / 1e6, 2)
            if val_bleu(scored) > best:
                best, scored["test"] = val_bleu(scored), runner.score(members, "test", beams)
        ensembles.append({"name": name, "members": ensemble["members"], "dtype": dtype, "megabytes": megabytes, **scored})
    return ensembles


def scored_choice(runs: list[dict], ensembles: list[dict], runner: Runner, beams: list[int],
                  alphas: list[float]) -> tuple[dict, list[dict]]:
    """The experiment's choice, the run or ensemble best on val (the first of equals), scored on test2016; and the
    length-penalty sweep of it when `alphas` are given. Only the choice keeps test scores."""
    run = max(runs, key=lambda r: val_bleu(r["candidates"][r["chosen"]]))
    ensemble = max(ensembles, key=val_bleu, default=None)
    if ensemble is not None and val_bleu(ensemble) <= val_bleu(run["candidates"][run["chosen"]]):
        ensemble = None
    for e in ensembles:
        if e is not ensemble:
            e.pop("test", None)
    if ensemble is None:
        run["candidates"][run["chosen"]]["test"] = runner.score(run["checkpoint"], "test", beams)
        chosen = {"run": run["name"], "seed": run["seed"], "candidate": run["chosen"]}
        return chosen, penalty_sweep(run["checkpoint"], alphas, max(beams), runner) if alphas else []
    sweep = []
    if alphas:
        with tempfile.TemporaryDirectory() as tmp:
            members = stored_members([r for r in runs if r["name"] in ensemble["members"]], ensemble["dtype"], Path(tmp))
            sweep = penalty_sweep(members, alphas, max(beams), runner)
    return {"ensemble": ensemble["name"]}, sweep


def record(spec: dict, path: Path, planned: list[dict], runner: Runner) -> dict:
    "Every run's settings, history and candidates scored on val; the choice, scored on test2016."
    import torch
    from annotated_transformer.recipe import hardware
    measure = {"average_last": 5, "beams": [1, 4], "curve": False, "length_penalties": [], "limit": None,
               **spec.get("measure", {})}
    beams = sorted(set(measure["beams"]) | {1})  # greedy always: it chooses
    runs = [recorded_run(run, runner, beams, measure["curve"]) for run in planned]
    ensembles = recorded_ensembles(spec, runs, runner, beams)
    chosen, sweep = scored_choice(runs, ensembles, runner, beams, measure["length_penalties"])
    for r in runs:
        del r["checkpoint"]  # a folder of this machine (the chosen candidate's): not part of the record
    return {"experiment": path.stem, **spec, "measure": measure,
            "metric": "cased detokenized sacreBLEU; val chooses, test2016 only for the chosen run",
            "chosen": chosen, "hardware": hardware(), "torch": torch.__version__, "runs": runs,
            **({"ensembles": ensembles} if ensembles else {}), **({"length_penalty": sweep} if sweep else {})}


def stored_members(runs: list[dict], dtype: str, tmp: Path) -> list[Path]:
    "Each run's chosen candidate, stored in `dtype` (`checkpoint.save_model`), so an ensemble decodes what it would ship."
    import torch
    from annotated_transformer.checkpoint import load_model, save_model
    from annotated_transformer.evaluation import vocabulary_files
    folders = []
    for i, run in enumerate(runs):
        chosen = run["checkpoint"]
        folders.append(save_model(load_model(chosen), tmp / f"member_{i}", dtype=getattr(torch, dtype),
                                  files=vocabulary_files(chosen)))
    return folders


COMPARE_IGNORES = {"seed", "precision", "max_steps", "keep_epochs", "val_bleu_sentences", "init_from"}  # may differ from the record's


def compare_run(folder: Path, spec: dict, path: Path, record: dict, margin: float) -> tuple[bool, list[str]]:
    """(passed, lines to print) for the finished run in `folder` against the record of the experiment `spec`: its
    best epoch's val BLEU against the lowest of the record's runs'. ExperimentError if it is not such a run."""
    from annotated_transformer.recipe import BEST_CANDIDATE, read_history
    from annotated_transformer.train import TrainConfig
    log, config = folder / "history.jsonl", folder / "train_config.json"
    if not log.is_file() or not config.is_file():
        raise ExperimentError(f"no training run at {folder} (expected history.jsonl and train_config.json)")
    try:
        epochs = read_history(folder)
        settings = json.loads(config.read_text())
        run = TrainConfig(**{k: v for k, v in settings.items() if k in {f.name for f in fields(TrainConfig)}})
        complete = all(isinstance(r["val_bleu"], (int, float)) for r in epochs)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ExperimentError(f"{log} or train_config.json beside it is not a training log ({e!r})") from None
    def changes(cfg):  # a cooldown of None written out as the last fifth of the epochs, as train resolves it for the recipe
        cfg = replace(cfg, cooldown=round(cfg.epochs / 5)) if cfg.cooldown is None else cfg
        return {k: v for k, v in differences(cfg, TrainConfig()).items() if k not in COMPARE_IGNORES}
    ours, theirs = changes(run), [changes(p["config"]) for p in planned_runs(spec, path, Path("runs"))]
    if ours not in theirs:
        differ = sorted(set(ours) ^ set(theirs[0]) | {k for k in ours if k in theirs[0] and ours[k] != theirs[0][k]})
        raise ExperimentError(f"the run in {folder} is not a run of {path.name} (settings {', '.join(differ)} differ)")
    if [r["epoch"] for r in epochs] != list(range(1, run.epochs + 1)) or not complete:
        raise ExperimentError(f"{log} is not a finished run: expected epochs 1 to {run.epochs}, each with a validation "
                              f"BLEU, found {len(epochs)} epoch records")
    recorded = [r["candidates"][BEST_CANDIDATE]["val"]["beam_1"]["bleu"] for r in record["runs"]
                if BEST_CANDIDATE in r["candidates"]]
    best = max(r["val_bleu"] for r in epochs)
    lines = [f"epoch {r['epoch']:3d}  train loss {r['train_loss']:.3f}  val loss {r['val_loss']:.3f}  "
             f"val BLEU {r['val_bleu']:.2f}" for r in epochs]
    lines.append(f"best validation BLEU {best} in {len(epochs)} epochs (the recorded runs: {min(recorded)} to "
                 f"{max(recorded)}; the check asks at least {min(recorded) - margin:.2f})")
    passed = best >= min(recorded) - margin
    if not passed:
        lines.append(f"this run scores more than {margin:g} BLEU below every recorded run")
    return passed, lines


def write_record(path: Path, data: dict) -> None:
    "Write `data` as indented JSON, atomically (`files.atomic_write`): a stop in the middle leaves the previous file."
    from annotated_transformer.files import atomic_write
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path, help="the experiment file, e.g. experiments/rdrop.json")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/experiments"), help="where the runs train (default: runs/experiments)")
    parser.add_argument("--out", type=Path, default=None, help="the record (default: results/experiments/<experiment>.json)")
    parser.add_argument("--data-dir", default=None, help="Multi30k files on disk (default: the data folder, or a download)")
    parser.add_argument("--dry-run", action="store_true", help="print the runs and the settings they change, train nothing")
    parser.add_argument("--compare", type=Path, metavar="RUN", default=None,
                        help="judge the finished run in folder RUN against the record, train nothing (exit 1: below it)")
    parser.add_argument("--margin", type=float, default=1.0,
                        help="--compare: BLEU a run may score below the record's lowest best epoch (default: 1.0)")
    args = parser.parse_args(argv)
    from annotated_transformer.files import RunLockedError, check_output
    from annotated_transformer.options import exit_status, one_line
    from annotated_transformer.train import TrainingStopped
    try:
        spec = read_experiment(args.file)
        planned = planned_runs(spec, args.file, args.runs_dir)
        if args.compare is not None:
            out = args.out or ROOT / "results" / "experiments" / f"{args.file.stem}.json"
            try:
                recorded = json.loads(out.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ExperimentError(f"{out}: no record to compare with ({e})") from None
            passed, lines = compare_run(args.compare, spec, args.file, recorded, args.margin)
            print("\n".join(lines))
            return 0 if passed else 1
        if args.dry_run:
            from annotated_transformer.train import TrainConfig
            for run in planned:
                print(f"{run['config'].out_dir}: {json.dumps(differences(run['config'], TrainConfig()))}")
            return 0
        out = args.out or ROOT / "results" / "experiments" / f"{args.file.stem}.json"
        check_output(str(out), "--out", {"the experiment file": str(args.file)})  # before anything trains
        runner = Runner(args.data_dir, spec.get("measure", {}).get("limit"))
        train_runs(planned, runner)
        write_record(out, record(spec, args.file, planned, runner))
        print(f"wrote {out}")
        return 0
    except ExperimentError as e:
        print(f"experiment.py: {e}", file=sys.stderr)
        return 2
    except (TrainingStopped, KeyboardInterrupt) as stopped:  # Ctrl-C or SIGTERM: a stopped run resumes
        print(f"experiment.py: {str(stopped) or 'interrupted'}", file=sys.stderr)
        return 130
    except (ValueError, OSError, RunLockedError) as e:  # what `annotated-transformer train` says in one line
        print(f"experiment.py: {one_line(e)}", file=sys.stderr)
        return exit_status(e)


if __name__ == "__main__":
    sys.exit(main())
