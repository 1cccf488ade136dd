"""tools/experiment.py, the one runner of experiments: a file of settings in, a record out, no Python per experiment."""
import json
from pathlib import Path

import pytest

from annotated_transformer.recipe import read_history
from annotated_transformer.train import TrainConfig
from conftest import ROOT, corpus, one_line, script

experiment = script("tools/experiment.py")
TINY = {"epochs": 1, "max_steps": 1, "val_bleu_sentences": 5, "model": {"N": 1, "d_model": 32, "d_ff": 64, "h": 2}}


def write(folder: Path, name: str, spec: dict) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


def run_file(tmp_path: Path, path: Path) -> dict:
    "Run the experiment file `path`, its runs under tmp_path / runs: the record it writes."
    assert experiment.main([str(path), "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "record.json")]) == 0
    return json.loads((tmp_path / "record.json").read_text())


def test_a_new_experiment_file_runs_without_python_changes(tmp_path, capsys):
    "A file written now, of two tiny runs for one step each: trained, scored on val, the choice scored on test."
    path = write(tmp_path, "smoke", {"question": "Does a new file run?", "recipe": TINY,
                                     "runs": {"plain": {}, "no smoothing": {"smoothing": 0.0}},
                                     "measure": {"beams": [1, 2], "limit": 6, "length_penalties": [0.0, 1.0]}})
    record = run_file(tmp_path, path)
    assert record["question"] == "Does a new file run?" and [r["name"] for r in record["runs"]] == ["plain", "no smoothing"]
    for run in record["runs"]:
        assert run["history"] and run["history"][0]["step"] == 1  # one optimizer step, as the file asked
        assert {k for c in run["candidates"].values() for k in c["val"]} == {"beam_1", "beam_2"}
        assert all(c["val"]["beam_1"]["sentences"] == 6 for c in run["candidates"].values())
    by_name = {r["name"]: r for r in record["runs"]}
    assert by_name["no smoothing"]["settings"]["smoothing"] == 0.0 and by_name["plain"]["settings"]["smoothing"] == 0.1
    chosen = record["chosen"]
    tested = [(r["name"], name) for r in record["runs"] for name, c in r["candidates"].items() if "test" in c]
    assert tested == [(chosen["run"], chosen["candidate"])]  # test2016 scores the choice only
    # the length penalties: the choice decoded with the largest beam at each alpha, as evaluate_translator scores it
    from annotated_transformer.decoding import Translator
    from annotated_transformer.evaluation import evaluate_translator
    spec = experiment.read_experiment(path)
    folder = next(Path(r["config"].out_dir) for r in experiment.planned_runs(spec, path, tmp_path / "runs")
                  if r["name"] == chosen["run"])
    translator = Translator.from_checkpoint(folder / "best", "cpu")
    assert [r["alpha"] for r in record["length_penalty"]] == [0.0, 1.0]
    for row in record["length_penalty"]:
        for split in ("val", "test"):
            expected = evaluate_translator(translator, split, beam_size=2, alpha=row["alpha"], limit=6)["bleu"]
            assert row[split]["bleu"] == round(expected, 2) and row[split]["length_ratio"] > 0
    assert not list(tmp_path.glob("*.tmp"))


def test_a_continued_run_starts_from_the_finished_run(tmp_path):
    "A run that continues another is a copy of its folder trained on: its first epoch is the source's."
    spec = {"recipe": own_corpus(tmp_path, val_bleu_sentences=5),
            "runs": {"one epoch": {}, "two epochs": {"continues": "one epoch", "epochs": 2}}}
    planned = experiment.planned_runs(spec, write(tmp_path, "longer", spec), tmp_path / "runs")
    assert planned[1]["continues"] == Path(planned[0]["config"].out_dir)
    experiment.train_runs(planned, experiment.Runner())
    first, second = (read_history(Path(run["config"].out_dir)) for run in planned)
    assert len(first) == 1 and len(second) == 2 and second[0] == first[0]


def test_distillation_and_an_ensemble_are_steps_of_a_file(tmp_path):
    "A student trained on its teachers' translations, and two runs decoded together in 8 bits, from one file."
    spec = {"recipe": own_corpus(tmp_path),
            "runs": {"a": {}, "b": {"seed": 1}, "student": {"distilled_from": ["a", "b"]}},
            "ensembles": {"a and b": {"members": ["a", "b"], "dtype": "int8"}},
            "measure": {"beams": [1], "average_last": 0, "limit": 4}}
    with pytest.MonkeyPatch.context() as mp:  # the teachers translate this corpus's training side (scores use Multi30k's val)
        from annotated_transformer import recipe
        from annotated_transformer.data import load_parallel
        mp.setattr(recipe, "load_multi30k", lambda split, data_dir=None: load_parallel(tmp_path / "corpus", split, "de", "en"))
        record = run_file(tmp_path, write(tmp_path, "distil", spec))
    student = next(r for r in record["runs"] if r["name"] == "student")
    assert Path(student["settings"]["corpus_dir"]).parent == tmp_path / "runs"  # the teachers' corpus, not the references
    translated = (Path(student["settings"]["corpus_dir"]) / "train.en").read_text().splitlines()
    assert len(translated) == 60 and translated != (tmp_path / "corpus" / "train.en").read_text().splitlines()
    (ensemble,) = record["ensembles"]
    assert ensemble["members"] == ["a", "b"] and ensemble["dtype"] == "int8" and ensemble["val"]["beam_1"]["sentences"] == 4


def test_a_fine_tuning_starts_from_the_choice_of_the_run_it_tunes(tmp_path):
    "A run that fine-tunes another starts from the candidate that run chooses on val: its weights and its vocabulary."
    spec = {"recipe": own_corpus(tmp_path, epochs=2),
            "runs": {"base": {},
                     "tuned": {"fine_tunes": "base", "cooldown": 2, "warmup": 2, "factor": 0.5, "average_last": [2]}},
            "measure": {"beams": [1], "average_last": 0, "limit": 4}}
    path = write(tmp_path, "tune", spec)
    record = run_file(tmp_path, path)
    base, tuned = (next(r for r in experiment.planned_runs(spec, path, tmp_path / "runs") if r["name"] == name)
                   for name in ("base", "tuned"))
    start = Path(base["config"].out_dir) / "best"  # average_last 0: the base run's one candidate, its best epoch
    saved = json.loads((Path(tuned["config"].out_dir) / "train_config.json").read_text())
    assert Path(saved["init_from"]) == start and saved["cooldown"] == 2 and saved["factor"] == 0.5
    assert (Path(tuned["config"].out_dir) / "best" / "tokenizer.json").read_bytes() == (start / "tokenizer.json").read_bytes()
    by_name = {r["name"]: r for r in record["runs"]}
    assert list(by_name["base"]["candidates"]) == ["best epoch (validation BLEU)"]
    assert list(by_name["tuned"]["candidates"]) == ["best epoch (validation BLEU)", "average of the last 2 epochs"]
    assert by_name["tuned"]["history"][-1]["lr"] == 0.0  # the cooldown of the whole run ends at 0
    assert Path(by_name["tuned"]["settings"]["init_from"]) == start  # the record names the start it used
    # once begun, a fine-tuning keeps its start: a rerun that would choose another candidate still finds the run finished
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(experiment.Runner, "choice", lambda *a: Path(base["config"].out_dir) / "epoch_001")
        tuned_again = next(r for r in run_file(tmp_path, path)["runs"] if r["name"] == "tuned")
    assert Path(tuned_again["settings"]["init_from"]) == start and tuned_again["history"] == by_name["tuned"]["history"]


def own_corpus(tmp_path: Path, **settings) -> dict:
    "TINY's recipe on a small corpus of its own, written into tmp_path / corpus, so that whole epochs take a second."
    folder = corpus(tmp_path / "corpus", "".join(f"ein hund {i} rennt .\n" for i in range(60)),
                    "".join(f"a dog {i} runs .\n" for i in range(60)))
    return {**TINY, "max_steps": None, "cooldown": 0, "warmup": 1, "corpus_dir": str(folder), "subwords": 100,
            "min_freq": 1, "max_tokens": 400, "val_bleu_sentences": 0, **settings}


def test_runs_with_the_same_settings_share_a_folder_and_only_they_do(tmp_path):
    "The folder of a run is named by the settings it changes, so experiments that need one run train it once."
    spec = {"runs": {"the recipe": {}, "again": {"cooldown": None}, "fp32": {"precision": "fp32"}}}
    planned = experiment.planned_runs(spec, write(tmp_path, "x", spec), tmp_path)
    assert [Path(r["config"].out_dir).name for r in planned] == ["recipe", "recipe", "precision-fp32"]
    # the same teachers with and without the references make two corpora, in two folders: neither reuses the other's
    spec = {"runs": {"t": {}, "alone": {"distilled_from": ["t"]},
                     "with refs": {"distilled_from": ["t"], "with_references": True, "epochs": 19}}}
    planned = {r["name"]: r for r in experiment.planned_runs(spec, write(tmp_path, "x", spec), tmp_path)}
    assert planned["with refs"]["with_references"] and not planned["alone"]["with_references"]
    assert planned["with refs"]["config"].corpus_dir != planned["alone"]["config"].corpus_dir


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.json")), ids=lambda p: p.stem)
def test_every_experiment_file_is_the_recipe_plus_what_it_changes(path):
    spec = experiment.read_experiment(path)
    assert spec.get("question", "").endswith("?"), "each experiment answers one question"
    for run in experiment.planned_runs(spec, path, Path("runs")):
        assert isinstance(run["config"], TrainConfig)


def runner(capsys, *args) -> tuple[int, str, str]:
    "tools/experiment.py ARGS in this process: (status, stdout, stderr), as conftest's `command` gives them."
    status = experiment.main([str(a) for a in args])
    return status, *capsys.readouterr()


BAD = [  # (a file's settings, or its text; the key word of its one line: the setting at fault, as `train` names it)
    ({"runs": {"a": {"smoothin": 0.0}}}, "smoothin"),
    ({"runs": {"a": {"model": {"width": 3}}}}, "ModelConfig"),
    ({"runs": {}}, '"runs"'),
    ({"runs": {"a": {}}, "seed": [1]}, "seed"),
    ({"runs": {"a": {}}, "seeds": [0.5]}, "seeds"),
    ({"runs": {"a": {"continues": "b"}}}, "continues"),
    ({"runs": {"a": {"epochs": 2, "cooldown": 5}}}, "cooldown"),
    ({"runs": {"a": {}}, "measure": {"beam": [4]}}, "measure"),
    ({"runs": {"a": {}}, "measure": {"length_penalties": [-1]}}, "length_penalties"),
    ({"runs": {"a": {"distilled_from": ["b"]}, "b": {}}}, "distilled"),
    ({"runs": {"a": {"fine_tunes": "b"}, "b": {}}}, "fine-tunes"),
    ({"runs": {"a": {"init_from": "x"}}}, "init_from"),
    ({"runs": {"a": {"average_last": [2, -1]}}}, "average_last"),
    ({"runs": {"a": {}}, "measure": {"average_last": "5"}}, "average_last"),
    ({"runs": {"a": {}}, "ensembles": {"x": {"members": ["a", "c"]}}}, "members"),
    ({"runs": {"a": {}}, "ensembles": {"x": {"members": ["a"], "dtype": "int4"}}}, "dtype"),
    ({"runs": {"a": {}}, "measure": {"limit": -1}}, "limit"),
    ({"runs": {"a": {}}, "measure": {"limit": 0}}, "limit"),
    ({"runs": {"a": {}}, "measure": {"curve": "no"}}, "curve"),
    ({"runs": {"a": {}}, "measure": {"beams": [0]}}, "beams"),
    ({"runs": {"a": {}}, "measure": {"beams": [1.5]}}, "beams"),
    ({"runs": {"a": {}, "b": {"distilled_from": ["a"], "with_references": "no"}}}, "with_references"),
    ({"runs": {"a": {}, "b": {"distilled_from": ["a"], "teacher_beam": 0}}}, "teacher_beam"),
    ({"runs": {"a": {"factor": -1.0}}}, "factor"),
    ({"runs": {"a": {"epochs": "3"}}}, "epochs"),
    ({"runs": {"a": {"epochs": True}}}, "epochs"),
    ({"runs": {"a": {"precision": "fp64"}}}, "precision"),
    ({"runs": {"a": {"keep_epochs": "no"}}}, "keep_epochs"),
    ({"recipe": {"smoothing": 1.5}, "runs": {"a": {}}}, "smoothing"),
    ({"runs": {"a": {"corpus_dir": "/no/such/corpus"}}}, "corpus_dir"),
    ({"runs": {"a": {"corpus_dir": "EMPTY"}}}, "train.de"),
    ({"runs": {"a": {"rdrop": 1.0, "model": {"dropout": 0.0}}}}, "rdrop"),
    ('{"runs": {"a": {}, "a": {"smoothing": 0.0}}}', "'a'"),  # two runs of one name
    ("{runs: ", "JSON"),
]


@pytest.mark.parametrize("spec, says", BAD, ids=[s for _, s in BAD])
def test_a_bad_experiment_file_is_one_line_and_exit_2(tmp_path, capsys, spec, says):
    "Refused before anything is trained: the runner checks its files as the command checks its options and folders."
    (tmp_path / "empty").mkdir()
    path = tmp_path / "bad.json"
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec).replace("EMPTY", str(tmp_path / "empty")))
    one_line(runner(capsys, path, "--runs-dir", tmp_path / "runs", "--dry-run"), 2, says)
    assert not (tmp_path / "runs").exists()


def test_the_record_destination_and_the_runs_are_checked_first(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, "e", {"recipe": TINY, "runs": {"a": {}}})
    monkeypatch.setattr(experiment, "train_runs", lambda *a: pytest.fail("trained before checking the record"))
    (tmp_path / "a_file").write_text("x")
    one_line(runner(capsys, path, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "a_file" / "record.json"), 2,
             "a_file")
    one_line(runner(capsys, path, "--runs-dir", tmp_path / "runs", "--out", tmp_path), 2, "--out")  # a folder


@pytest.mark.parametrize("error, status", [(KeyboardInterrupt(), 130), ("locked", 1)])
def test_ctrl_c_and_a_second_runner_are_one_line(tmp_path, capsys, monkeypatch, error, status):
    from annotated_transformer.files import RunLockedError
    error = RunLockedError("runs/recipe is in use") if error == "locked" else error

    def stopped(*args):
        raise error
    monkeypatch.setattr(experiment, "train_runs", stopped)
    one_line(runner(capsys, write(tmp_path, "e", {"recipe": TINY, "runs": {"a": {}}}), "--runs-dir", tmp_path / "runs",
                    "--out", tmp_path / "r.json"), status)
