"""Hostile input that most tests give to the command's `main` in this process (the same code a user's command runs,
minus the start-up of a new Python): weights that are not finite numbers, empty paths, folders that belong to
something, manifests that point out of their folder, the distributed environment, moved runs and changed data, runs
that must not mix, destinations checked before the work (and before the first step), mixed dtypes, writers killed with
SIGKILL, one file as two inputs, a full disk, and messages that name the real problem. The cases that need a process of
their own (a closed stdin or stdout, bytes that are not UTF-8 in argv, a rendezvous that would wait forever, SIGKILL)
start one. Models are tiny: a few thousand parameters."""
import gzip
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from annotated_transformer.checkpoint import WEIGHTS_FILE, save_model, writing_folder
from annotated_transformer.files import MANIFEST_FILE
from annotated_transformer.decoding import Translator, load_ensemble, shipped_model_dir
from annotated_transformer.evaluation import average_checkpoints
from annotated_transformer.model import make_model
from annotated_transformer.train import TrainConfig

from conftest import TINY_TRAIN, cli, command, corpus, one_line, snapshot, train
TOKENIZER = (shipped_model_dir() / "tokenizer.json").read_text()


def tiny_translator(folder: Path, dtype=None, seed: int = 0) -> Path:
    "A translation checkpoint of a few thousand parameters, with the shipped model's subword vocabulary."
    vocab = len(json.loads(TOKENIZER)["model"]["vocab"])
    torch.manual_seed(seed)
    model = make_model(vocab, vocab, N=1, d_model=8, d_ff=16, h=2, tie_embeddings=True)
    return save_model(model, folder, dtype=dtype, files={"tokenizer.json": TOKENIZER},
                      extra_config={"src_lang": "de", "tgt_lang": "en"})


@pytest.fixture
def ckpt(tmp_path) -> Path:
    "A tiny translation checkpoint (`tiny_translator`) in tmp_path / ckpt."
    return tiny_translator(tmp_path / "ckpt")


def reseal(folder: Path, also=()) -> None:
    "Write the manifest anew for the files as they are (what a damaged save would have sealed), and for `also`: {name: file}."
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    for name, path in ({name: folder / name for name in manifest["files"]} | dict(also)).items():
        manifest["files"][name] = hashlib.sha256(path.read_bytes()).hexdigest()
        manifest.setdefault("sizes", {})[name] = path.stat().st_size
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))


def poison(folder: Path, name: str, value=float("nan")) -> None:
    "Put `value` into one number of the stored tensor `name`, and seal the folder again."
    stored = load_file(str(folder / WEIGHTS_FILE))
    stored[name].view(-1)[3] = value
    save_file(stored, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    reseal(folder)


# ---------------------------------------------------------------- weights that are not finite numbers

@pytest.mark.parametrize("dtype,name,value", [(torch.float16, "encoder.norm.a_2", float("nan")),
                                              (torch.int8, "src_embed.0.lut.weight:scale", float("nan")),  # a row's scale
                                              (None, "decoder.layers.0.feed_forward.w_1.weight", float("nan")),
                                              (torch.float16, "generator.proj.bias", float("inf"))])
def test_a_nan_or_an_infinity_in_the_weights_is_refused_by_every_command(tmp_path, capsys, dtype, name, value):
    bad = tiny_translator(tmp_path / "bad", dtype)
    poison(bad, name, value)
    says = (name, "NaN" if value != value else "infinite")
    one_line(command(capsys, "translate", "--checkpoint", str(bad), "Ein Hund."), 2, *says)
    one_line(command(capsys, "evaluate", "--checkpoint", str(bad), "--split", "val", "--limit", "2"), 2, *says)
    good = tiny_translator(tmp_path / "good", dtype)
    one_line(command(capsys, "average", "--inputs", str(good), str(bad), "--out", str(tmp_path / "avg")), 2, *says)
    assert not (tmp_path / "avg").exists()
    with pytest.raises(ValueError, match=says[1]):  # the Python API: the same error
        Translator.from_checkpoint(bad, "cpu")


def test_a_model_that_computes_nan_never_gives_a_translation(tmp_path):
    translator = Translator.from_checkpoint(tiny_translator(tmp_path / "m"), "cpu")
    with torch.no_grad():
        translator.model.decoder.norm.a_2[0] = float("nan")  # weights changed in memory, after every check of the files
    for beam in (1, 4):
        with pytest.raises(ValueError, match="NaN"):
            translator.translate(["Ein Hund läuft.", "Zwei Katzen."], beam_size=beam)


# ---------------------------------------------------------------- empty paths

def test_an_empty_path_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch, ckpt):
    "An empty path is a user's mistake (an unset variable), not 'not given': refused at parse time, or when read."
    monkeypatch.chdir(tmp_path)  # an empty path would have been this folder
    before = snapshot(tmp_path)
    for args in (["copy-task", "--out", ""], ["train", "--out-dir", ""], ["train", "--corpus-dir", ""],
                 ["train", "--data-dir", ""], ["translate", "--checkpoint", "", "x"], ["evaluate", "--checkpoint", ""],
                 ["evaluate", "--data-dir", ""], ["average", "--inputs", str(ckpt), "--out", ""],
                 ["average", "--run-dir", "", "--out", "avg"], ["average", "--inputs", "", "--out", "avg"],
                 ["translate", "--input", "", "Hallo."], ["translate", "--output", "", "Hallo."],
                 ["evaluate", "--src", "", "--ref", "x"], ["evaluate", "--src", "x", "--ref", ""], ["evaluate", "--json", ""]):
        one_line(command(capsys, *args), 2, "empty", args[args.index("") - 1])
    # "none" is a folder's name, not "not given": it must exist like any other
    assert "none" in command(capsys, "train", "--corpus-dir", "none", "--epochs", "1")[2]
    model = make_model(11, 11, N=1, d_model=8, d_ff=16, h=2)  # the Python API: a ValueError
    for call in (lambda: save_model(model, ""), lambda: Translator.from_checkpoint(""), lambda: load_ensemble([ckpt, ""]),
                 lambda: average_checkpoints([ckpt], ""), lambda: TrainConfig(out_dir=""),
                 lambda: TrainConfig(corpus_dir=""), lambda: TrainConfig(data_dir="")):
        with pytest.raises(ValueError, match="empty"):
            call()
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- folders that belong to something

def test_average_does_not_replace_what_it_did_not_write(tmp_path, capsys):
    ensemble = tmp_path / "ensemble"
    members = [tiny_translator(ensemble / f"member_{i}", seed=i) for i in range(2)]
    third = tiny_translator(ensemble / "member_2", seed=2)
    before = snapshot(tmp_path)
    # a member of an ensemble: a checkpoint another tool saved
    one_line(command(capsys, "average", "--inputs", *map(str, members), "--out", str(third)), 2, "averaging")
    # the folder that holds the members: named as what it is, not as "a training run"
    err = one_line(command(capsys, "average", "--inputs", *map(str, members), "--out", str(ensemble)), 2, "contains")
    assert "training run" not in err
    # inside a checkpoint
    one_line(command(capsys, "average", "--inputs", *map(str, members), "--out", str(members[0] / "avg")), 2, "inside")
    one_line(command(capsys, "copy-task", "--out", str(third / "copy"), "--epochs", "1"), 2, "inside")
    assert snapshot(tmp_path) == before
    # an average replaces an average
    assert command(capsys, "average", "--inputs", *map(str, members), "--out", str(tmp_path / "avg"))[0] == 0
    assert command(capsys, "average", "--inputs", *map(str, members), "--out", str(tmp_path / "avg"))[0] == 0


# ---------------------------------------------------------------- manifests

@pytest.mark.parametrize("outside", ["../../x", "ABSOLUTE", ".."])
def test_a_manifest_names_files_of_its_folder_only(tmp_path, capsys, outside, ckpt):
    target = tmp_path / "x"
    target.write_text("not part of the checkpoint")
    reseal(ckpt, {str(target) if outside == "ABSOLUTE" else outside: target})
    one_line(command(capsys, "translate", "--checkpoint", str(ckpt), "x"), 2, MANIFEST_FILE)


def test_a_manifest_may_not_follow_a_link_out_of_its_folder(tmp_path, capsys, ckpt):
    outside = tmp_path / "tokenizer.json"
    outside.write_text(TOKENIZER)
    (ckpt / "tokenizer.json").unlink()
    (ckpt / "tokenizer.json").symlink_to(outside)  # the same bytes, somewhere else: replaceable behind the manifest's back
    one_line(command(capsys, "translate", "--checkpoint", str(ckpt), "x"), 2, "tokenizer.json", "link")


# ---------------------------------------------------------------- the distributed environment

def test_a_rank_outside_the_world_is_refused_before_any_rendezvous(tmp_path):
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "5", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    try:  # before the check, rank 5 waited for ranks 0 and 1 forever
        res = cli("train", "--epochs", "1", "--out-dir", str(tmp_path / "run"), env=env, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("RANK=5 WORLD_SIZE=2 waited for a rendezvous instead of being refused")
    one_line(res, 2, "RANK", "WORLD_SIZE")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("env,says", [  # what torch itself checks and names
    ({"WORLD_SIZE": "2"}, "RANK"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "MASTER_ADDR"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"}, "99999"),
])
def test_a_missing_or_wrong_distributed_variable_is_one_line(tmp_path, capsys, monkeypatch, env, says):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    one_line(command(capsys, "train", "--epochs", "1", "--out-dir", str(tmp_path / "run")), 2, says)
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- moved runs and changed data

def test_a_moved_run_resumes_and_changed_data_is_refused_unless_asked(tmp_path, capsys, trained_copy):
    data, _ = trained_copy  # one epoch trained in tmp_path / "run"
    moved = tmp_path / "elsewhere" / "run"
    shutil.move(tmp_path / "run", moved)  # copied or moved: the folder is the run, wherever it is
    status, out, err = train(capsys, moved, data, "--epochs", "2")
    assert status == 0 and "resuming" in out, err[-2000:]
    # the corpus changes under the run: refused, nothing written; --allow-changed-data goes on
    (data / "train.en").write_text((data / "train.en").read_text().replace("A dog runs.", "A dog walks.", 1))
    before = snapshot(moved)
    one_line(train(capsys, moved, data, "--epochs", "3"), 2, "--allow-changed-data")
    assert snapshot(moved) == before
    status, out, err = train(capsys, moved, data, "--epochs", "3", "--allow-changed-data")
    assert status == 0 and "resuming" in out and "changed" in out, err[-2000:]


# ---------------------------------------------------------------- destinations, dtypes, killed writers

def test_destinations_are_checked_before_the_work(tmp_path, capsys, monkeypatch):
    "(A folder nobody may write: `read_only` below.)"
    import annotated_transformer.cli as commands
    monkeypatch.setattr(commands, "train_copy_task", lambda *a, **k: pytest.fail("trained before checking --out"))
    (tmp_path / "a_file").write_text("x")
    translation = tiny_translator(tmp_path / "translation")
    before = snapshot(tmp_path)
    one_line(command(capsys, "average", "--inputs", str(translation), "--out", str(tmp_path / "a_file" / "avg")), 2,
             "folder")
    one_line(command(capsys, "copy-task", "--out", str(tmp_path / "a_file" / "ckpt")), 2, "folder")
    one_line(command(capsys, "copy-task", "--out", str(translation)), 2, "translation")  # a translation checkpoint
    assert snapshot(tmp_path) == before


def test_averaging_mixed_dtypes_does_not_depend_on_their_order(tmp_path, capsys):
    eight, half = tiny_translator(tmp_path / "int8", torch.int8, seed=1), tiny_translator(tmp_path / "fp16", torch.float16, seed=2)
    for name, inputs in (("one", [eight, half]), ("two", [half, eight])):
        assert command(capsys, "average", "--inputs", *map(str, inputs), "--out", str(tmp_path / name))[0] == 0
    one, two = ((tmp_path / name / WEIGHTS_FILE).read_bytes() for name in ("one", "two"))
    assert one == two
    assert {t.dtype for t in load_file(str(tmp_path / "one" / WEIGHTS_FILE)).values()} == {torch.float32}
    assert command(capsys, "average", "--inputs", str(half), str(eight), "--out", str(tmp_path / "f16"), "--dtype", "float16")[0] == 0
    assert {t.dtype for t in load_file(str(tmp_path / "f16" / WEIGHTS_FILE)).values()} == {torch.float16}


def test_the_temporary_folder_of_a_killed_writer_is_removed_by_the_next(tmp_path):
    dest = tmp_path / "ckpt"
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal, sys\n"
        "from annotated_transformer.checkpoint import writing_folder\n"
        "with writing_folder(sys.argv[1]) as tmp:\n"
        "    (tmp / 'model.safetensors').write_bytes(b'half of a model')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"), str(dest)], capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    left = list(tmp_path.glob(".ckpt.*.tmp"))
    assert len(left) == 1, left  # what SIGKILL leaves behind
    tiny_translator(dest)  # the next writer of the same folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ckpt.lock", "ckpt"]  # the lock file stays
    with writing_folder(tmp_path / "other") as tmp:  # a writer that runs is never taken for a dead one
        tiny_translator(dest)
        assert tmp.is_dir()


# ---------------------------------------------------------------- messages that name the real problem

def test_an_argument_that_is_not_utf8_or_a_closed_stdout_is_one_line():
    res = cli("translate", b"ein \xff Hund")
    one_line(res, 2, "argument 2", "UTF-8")
    assert res.stdout == b""
    res = cli("translate", "Ein Hund.", preexec_fn=lambda: os.close(1))  # as `annotated-transformer ... >&-`
    one_line(res, 2, "standard output")


def test_json_nested_too_deeply_is_bad_input(tmp_path, capsys, ckpt):
    deep = "[" * 100_000 + "]" * 100_000
    (ckpt / MANIFEST_FILE).write_text(deep)
    one_line(command(capsys, "translate", "--checkpoint", str(ckpt), "x"), 2, MANIFEST_FILE)
    (ckpt / MANIFEST_FILE).unlink()
    (ckpt / "config.json").write_text(deep)
    one_line(command(capsys, "translate", "--checkpoint", str(ckpt), "--trust", "x"), 2, "nested")
    run = tmp_path / "run"
    shutil.copytree(ckpt, run / "last")
    (run / "train_config.json").write_text(deep)
    one_line(command(capsys, "train", "--out-dir", str(run), "--epochs", "1"), 2, "nested")


def test_a_symlink_loop_is_named_as_one(tmp_path, capsys, ckpt):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    one_line(command(capsys, "average", "--inputs", str(ckpt), "--out", str(tmp_path / "loop" / "avg")), 2, "symbolic links")
    one_line(command(capsys, "train", "--out-dir", str(tmp_path / "loop"), "--epochs", "1"), 2, "symbolic links")
    assert "symbolic links" in command(capsys, "translate", "--checkpoint", str(tmp_path / "loop"), "x")[2]


# ---------------------------------------------------------------- a run is one run

def test_a_run_without_last_is_not_trained_on(trained_copy, capsys):
    data, run = trained_copy
    shutil.rmtree(run / "last")  # a finished run whose last/ was deleted: its history and best/ are still there
    (run / ".lock.holder").write_text("pid 1 on \x1b[31mred")  # a dead run's name, with an escape code
    before = snapshot(run)
    status, out, err = train(capsys, run, data, "--epochs", "2")
    one_line((status, out, err), 2, "--out-dir")
    assert "\x1b" not in out + err
    assert {k: v for k, v in snapshot(run).items() if k != ".lock.holder"} == \
        {k: v for k, v in before.items() if k != ".lock.holder"}  # one epoch in its history, its best/ as it was


def test_a_run_folder_starts_over_only_when_asked(trained_copy, capsys):
    data, run = trained_copy
    for path in run.iterdir():  # as a run killed before its first epoch was saved leaves it
        if path.name not in ("train_config.json", "data.json") and not path.name.startswith("."):  # (the lock stays)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    before = snapshot(run)
    assert {"train_config.json", "data.json"} <= set(before)
    one_line(train(capsys, run, data, "--epochs", "1", "--smoothing", "0.2"), 2, "train_config.json", "--start-over")
    assert snapshot(run) == before
    one_line(train(capsys, run, data, "--start-over", "--max-len", "3"), 2, "--max-len")  # refused after the old run moved
    assert snapshot(run) == before
    assert train(capsys, run, data, "--epochs", "2", "--smoothing", "0.2", "--start-over")[0] == 0
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in history] == [1, 2]
    assert json.loads((run / "train_config.json").read_text())["smoothing"] == 0.2
    status, out, err = train(capsys, run, data, "--epochs", "1", "--start-over")  # a whole run removed too
    assert status == 0, err[-2000:]
    assert len((run / "history.jsonl").read_text().splitlines()) == 1 and not (run / "epoch_002").exists()


def test_a_resume_keeps_its_start(tmp_path, capsys):
    data = corpus(tmp_path / "corpus")
    assert train(capsys, tmp_path / "base", data, "--epochs", "2")[0] == 0
    start, other = tmp_path / "base" / "epoch_001", tmp_path / "base" / "epoch_002"
    tune = ["train", "--corpus-dir", str(data), *TINY_TRAIN[4:]]  # without --subwords and --min-freq
    # the vocabulary is the start's: options that make one cannot apply
    for option in (["--subwords", "0"], ["--min-freq", "1"], ["--subwords", "8000"], ["--min-freq", "2"]):  # defaults too
        one_line(command(capsys, *tune, "--out-dir", str(tmp_path / "x"), "--init-from", str(start), *option), 2,
                 option[0])
        assert not (tmp_path / "x").exists()
    run = tmp_path / "tuned"
    assert command(capsys, *tune, "--out-dir", str(run), "--init-from", str(start), "--epochs", "1")[0] == 0
    before = snapshot(run)
    for changed in (["--init-from", str(other)], []):  # another start, or none
        one_line(command(capsys, *tune, "--out-dir", str(run), "--epochs", "2", *changed), 2, "init_from")
        assert snapshot(run) == before
    status, out, err = command(capsys, *tune, "--out-dir", str(run), "--init-from", str(start), "--epochs", "2")
    assert status == 0 and "resuming" in out, err[-2000:]


def test_an_out_dir_in_a_checkpoint_or_a_huge_epochs_is_refused_before_anything(tmp_path, trained_copy, capsys):
    data, run = trained_copy
    best = run / "best"
    before = snapshot(best)
    for out in (best, best / "inside"):
        one_line(train(capsys, out, data, "--epochs", "1"), 2, "checkpoint")
        assert snapshot(best) == before and not (best / ".lock").exists()
    status, _, err = command(capsys, "train", "--epochs", "10000000", "--out-dir", str(tmp_path / "new"))  # at once
    assert status == 2 and "--epochs" in err and not (tmp_path / "new").exists()  # refused before any data is read


# ---------------------------------------------------------------- smaller cases

def test_one_file_as_source_and_reference_is_refused(tmp_path, capsys):
    (tmp_path / "s.de").write_text("Ein Hund.\n")
    (tmp_path / "link.de").symlink_to(tmp_path / "s.de")
    for ref in ("s.de", "link.de"):
        one_line(command(capsys, "evaluate", "--src", str(tmp_path / "s.de"), "--ref", str(tmp_path / ref)), 2, "--ref")


def test_a_full_device_is_named(tmp_path, stand_in):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    res = subprocess.run([*stand_in, "translate", "--output", "/dev/full", "Hallo"], capture_output=True, text=True)
    one_line(res, 1, "/dev/full")
    assert Path("/dev/full").is_char_device()


def test_a_closed_stdin_is_one_line(tmp_path, stand_in):
    for extra in ([], ["--input", "-"], ["--output", str(tmp_path / "out.txt")]):
        res = subprocess.run([*stand_in, "translate", *extra], capture_output=True, text=True,
                             preexec_fn=lambda: os.close(0))
        one_line(res, 2, "input")
        assert not (tmp_path / "out.txt").exists()


# ---------------------------------------------------------------- destinations nobody may write

@pytest.fixture
def read_only(tmp_path):
    "A folder with one file, where no file can be made, replaced or removed: root included (for whom os.access says yes)."
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "kept.txt").write_text("kept\n")
    root = os.geteuid() == 0
    if not root:
        folder.chmod(0o555)
    elif subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("the tests run as root on a file system without the immutable attribute: no folder is read-only")
    yield folder
    if root:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


def test_an_output_nobody_may_write_is_refused_before_any_work(tmp_path, capsys, read_only):
    src, ref = tmp_path / "in.de", tmp_path / "ref.en"
    src.write_text("Ein Hund läuft.\n")
    ref.write_text("A dog runs.\n")
    for target in (read_only / "new.txt", read_only / "kept.txt"):  # a new file, or one to replace
        one_line(command(capsys, "translate", "--input", str(src), "--output", str(target)), 2, str(target))
        one_line(command(capsys, "evaluate", "--src", str(src), "--ref", str(ref), "--json", str(target)), 2, str(target))
    assert snapshot(read_only) == {"kept.txt": b"kept\n"}


def test_a_run_folder_nobody_may_write_is_refused_before_any_work(tmp_path, capsys, read_only):
    data = corpus(tmp_path / "corpus")
    one_line(train(capsys, read_only / "run", data, "--epochs", "1"), 2, str(read_only))
    one_line(command(capsys, "copy-task", "--out", str(read_only / "copy"), "--epochs", "1"), 2, str(read_only))
    assert snapshot(read_only) == {"kept.txt": b"kept\n"}


def test_a_damaged_gz_input_is_one_line(tmp_path, stand_in):
    data = bytearray(gzip.compress(("Ein Hund läuft durch den Schnee.\n" * 200).encode()))
    data[len(data) // 2] ^= 0xFF  # a byte in the middle of the compressed data
    (tmp_path / "in.de.gz").write_bytes(bytes(data))
    res = subprocess.run([*stand_in, "translate", "--input", str(tmp_path / "in.de.gz"), "--output",
                          str(tmp_path / "out.txt")], capture_output=True, text=True)
    one_line(res, 2, "in.de.gz")
    assert not (tmp_path / "out.txt").exists()
