"""Hostile input, run as a user runs the commands (real processes): corpora, checkpoints, options, folders, pipes,
Ctrl-C and training settings. Each case ends in one line on stderr naming the input and what was expected (exit 2), a
quiet end, or 130; never a traceback and never a silently wrong result. A diverging run stops at once and reports no
checkpoint it did not write; a refused resume changes no file. Inputs are read once, as streams; outputs are written
whole, or as they are when they are not regular files, and never onto an input (a stand-in model: `stand_in`)."""
import gzip
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from annotated_transformer.decoding import shipped_model_dir
from annotated_transformer.train import run_lock
from conftest import (DE, EN, TINY_TRAIN, cli, command, corpus, done, one_line, run_as_user, snapshot,
                      swapped_vocabulary)


# ---------------------------------------------------------------- corpora

GOOD = "ein Hund\nzwei Katzen\n"
CORPUS_ERRORS = {  # (files written over a good corpus, None: removed; the file the one line names; its key word)
    "empty": ({"train.de": b"", "train.en": b""}, "train.de", "empty"),
    "counts": ({"train.en": b"a dog\n"}, "train.en", "aligned"),
    "truncated gzip": ({"train.de": None, "train.de.gz": gzip.compress(GOOD.encode())[:-10]}, "train.de.gz", ""),
    "no English": ({"train.en": None}, "train.en", "missing"),
    "not UTF-8": ({"train.de": b"ein \xff Hund\n"}, "train.de", "UTF-8")}


@pytest.mark.parametrize("case", CORPUS_ERRORS)
def test_corpus_errors_name_the_file_and_exit_2(tmp_path, case):
    files, named, says = CORPUS_ERRORS[case]
    folder = corpus(tmp_path / "corpus", GOOD, "a dog\ntwo cats\n")
    for name, content in files.items():
        (folder / name).unlink() if content is None else (folder / name).write_bytes(content)
    one_line(cli("train", "--corpus-dir", str(folder), "--out-dir", str(tmp_path / "run"), "--epochs", "1", *TINY_TRAIN),
             2, str(folder / named), says)


def test_a_data_folder_that_is_a_file_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    one_line(cli("evaluate", "--split", "val", "--limit", "2", env={"ANNOTATED_TRANSFORMER_DATA": str(tmp_path / "afile")}),
             2, "ANNOTATED_TRANSFORMER_DATA", str(tmp_path / "afile"))


# ---------------------------------------------------------------- options and the environment

@pytest.mark.parametrize("name,value", [("ANNOTATED_TRANSFORMER_DEVICE", "banana"), ("WORLD_SIZE", "two")])
def test_odd_environment_values_are_one_line_exit_2(name, value):
    one_line(cli("translate", "x", env={name: value}), 2, name)


# ---------------------------------------------------------------- stdin and stdout

def test_empty_stdin_gives_no_output_and_a_byte_order_mark_is_not_part_of_the_first_sentence():
    res = cli("translate", stdin=b"")
    assert (res.returncode, res.stdout, res.stderr) == (0, b"", b"")
    plain, marked = (done(cli("translate", "--beam-size", "1", stdin=f"{bom}Ein Hund läuft.\nZwei Männer.\n".encode()))
                     for bom in ("", "\ufeff"))
    assert marked == plain and len(plain.splitlines()) == 2


def test_a_closed_pipe_ends_quietly():
    p = subprocess.Popen([sys.executable, "-m", "annotated_transformer.cli", "translate", "--beam-size", "1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    p.stdout.close()  # the reader is gone before anything is written (as with `| head -0`)
    _, err = p.communicate(("Ein Hund.\n" * 20).encode(), timeout=300)
    assert p.returncode == 128 + signal.SIGPIPE and err == b"", (p.returncode, err.decode()[-2000:])


def test_the_largest_accepted_alpha_writes_no_unk():
    out = done(cli("translate", "--alpha", "5", "--beam-size", "8",
                   "Zwei Männer spielen Fußball vor einem großen Haus mit vielen Fenstern.", "Ein Hund.")).splitlines()
    assert len(out) == 2 and all(out) and "<unk>" not in "".join(out), out


def test_ctrl_c_while_the_command_is_loading_is_one_line_and_130():
    """SIGINT while the command is still loading PyTorch, before main() runs (what Ctrl-C during start-up hits): the
    script does what the console script does, and the signal arrives just as the command starts importing torch."""
    script = ("import builtins, os, signal, sys; sys.argv = ['/usr/bin/annotated-transformer', 'translate', 'x']\n"
              "real_import = builtins.__import__\n"
              "def importing(name, *args, **kwargs):\n"
              "    if name == 'torch' and 'torch' not in sys.modules:\n"
              "        os.kill(os.getpid(), signal.SIGINT)\n"  # delivered here, in the middle of loading
              "    return real_import(name, *args, **kwargs)\n"
              "builtins.__import__ = importing\n"
              "from annotated_transformer.cli import main\n"
              "raise SystemExit(main())\n")
    one_line(subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300), 130, "interrupted")


def test_ctrl_c_while_a_command_runs_is_one_line_and_130(capsys):
    from unittest import mock
    from annotated_transformer import cli as commands
    with mock.patch.object(commands.Translator, "from_checkpoint", side_effect=KeyboardInterrupt):
        one_line(command(capsys, "translate", "x"), 130, "interrupted")


# ---------------------------------------------------------------- checkpoints

def test_a_checkpoint_without_manifest_needs_trust_and_floating_point_weights(model_copy):
    (model_copy / "manifest.json").unlink()
    one_line(cli("translate", "--checkpoint", str(model_copy), "Ein Hund."), 2, "manifest.json", "--trust")
    assert done(cli("translate", "--checkpoint", str(model_copy), "--trust", "--beam-size", "1", "Ein Hund.")).strip()
    from safetensors.torch import load_file, save_file  # trusted, integer weights are still refused
    f = model_copy / "model.safetensors"
    save_file({k: v.long() for k, v in load_file(str(f)).items()}, str(f))
    one_line(cli("translate", "--checkpoint", str(model_copy), "--trust", "Ein Hund."), 2, "floating point")


@pytest.mark.parametrize("key,value,says", [
    ("d_model", 4096, "model.safetensors"),  # refused from the file headers, before any memory is allocated
    ("d_model", "garbage", "d_model"),
    ("max_len", 10**9, "max_len"),
])
def test_an_edited_config_is_refused_before_building(model_copy, key, value, says):
    config = json.loads((model_copy / "config.json").read_text())
    config["model"][key] = value
    (model_copy / "config.json").write_text(json.dumps(config))
    one_line(cli("translate", "--checkpoint", str(model_copy), "Ein Hund."), 2, "config.json")
    (model_copy / "manifest.json").unlink()
    one_line(cli("translate", "--checkpoint", str(model_copy), "--trust", "Ein Hund."), 2, says)


def test_commands_do_not_write_into_a_run(tmp_path):
    run = tmp_path / "run"
    with run_lock(run):  # a training run's folder as `train` leaves it: claimed, with a checkpoint in last/ and epoch_001/
        for name in ("last", "epoch_001"):
            shutil.copytree(shipped_model_dir(), run / name)
    before = snapshot(run)
    one_line(cli("copy-task", "--out", str(run / "last"), "--epochs", "1", "--batches-per-epoch", "1", "--threads", "1"),
             2, "training run")
    one_line(cli("average", "--inputs", str(run / "epoch_001"), "--out", str(run / "epoch_002")), 2, "training run")
    one_line(cli("average", "--run-dir", str(run), "--last", "1", "--out", str(run / "best")), 2, "training run")
    assert snapshot(run) == before


def test_averaging_refuses_different_vocabularies(tmp_path):
    from annotated_transformer.checkpoint import load_model, save_model
    save_model(load_model(shipped_model_dir()), tmp_path / "other", files={"tokenizer.json": swapped_vocabulary(shipped_model_dir())})
    one_line(cli("average", "--inputs", str(shipped_model_dir()), str(tmp_path / "other"), "--out", str(tmp_path / "avg")),
             2, "vocabularies")
    assert not (tmp_path / "avg").exists()


def test_two_averages_into_one_folder_both_leave_a_whole_checkpoint(tmp_path):
    from annotated_transformer.files import check_manifest
    out = tmp_path / "avg"
    args = [sys.executable, "-m", "annotated_transformer.cli", "average", "--inputs", str(shipped_model_dir()),
            str(shipped_model_dir()), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read().decode()) for p in runs]
    assert all(status == 0 for status, _ in results), results
    manifest = check_manifest(out)  # every file the manifest lists is there and unchanged
    assert manifest is not None and {"model.safetensors", "config.json", "tokenizer.json"} <= set(manifest["files"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".avg.lock", "avg"]  # no temporary folder left


# ---------------------------------------------------------------- training settings

def train(data, run, *extra):
    return cli("train", "--corpus-dir", str(data), "--out-dir", str(run), *TINY_TRAIN, *extra, text=True)


@pytest.mark.parametrize("setting", [["--factor", "1e30"], ["--rdrop", "1e300"]])
def test_a_diverging_run_stops_at_once_and_reports_nothing_it_did_not_write(tmp_path, setting):
    run = tmp_path / "run"
    res = train(corpus(tmp_path / "corpus"), run, "--epochs", "3", *setting)
    one_line(res, 1, setting[0], last=True)  # the setting to change, under the progress bar of the epoch
    assert "done:" not in res.stdout and "best checkpoint" not in res.stdout
    assert not (run / "best").exists() and not (run / "last").exists() and not (run / "history.jsonl").exists()


def test_a_max_len_too_short_for_the_data_is_refused_before_training(tmp_path):
    data = corpus(tmp_path / "corpus", DE + "Ein " + "sehr " * 40 + "langer Satz.\n", EN + "A " + "very " * 40 + "long.\n")
    res = train(data, tmp_path / "run", "--epochs", "1", "--max-len", "30")
    one_line(res, 2, "--max-len", last=True)
    assert "epoch" not in res.stdout  # nothing was trained
    assert not (tmp_path / "run" / "train_config.json").exists() and not (tmp_path / "run" / "last").exists()


def test_a_refused_resume_changes_no_file(trained_copy):
    data, run = trained_copy  # one epoch trained
    before = snapshot(run)
    for changed in (["--epochs", "2", "--d-model", "32"], ["--epochs", "2", "--max-len", "12"]):
        refused = train(data, run, *changed)
        assert refused.returncode == 2, (changed, refused.stdout[-2000:], refused.stderr[-2000:])
        assert snapshot(run) == before, changed
    assert "resuming" in done(train(data, run, "--epochs", "2"))  # the original settings still resume


# ---------------------------------------------------------------- inputs read once, outputs written whole

LINES = "ein hund läuft.\n\nzwei männer.\n"
UPPER = LINES.upper()


def streamed(command, *args, cwd, stdin=None, timeout=120):
    return run_as_user([*command, *args], stdin=stdin, cwd=cwd, timeout=timeout)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.de"
    path.write_text(LINES)
    return path


def test_a_pipe_is_read_once(stand_in, source, tmp_path):
    done(streamed(["bash", "-c", f"{shlex.join(stand_in)} translate --input <(cat in.de) --output out.en"], cwd=tmp_path))
    assert (tmp_path / "out.en").read_text() == UPPER


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_stdin_by_any_name_is_read_once(stand_in, tmp_path, name):
    assert done(streamed(stand_in, "translate", "--input", name, cwd=tmp_path, stdin=LINES.encode())) == UPPER


def test_a_named_pipe_is_read_like_a_stream(stand_in, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(LINES,), daemon=True)
    writer.start()
    assert done(streamed(stand_in, "translate", "--input", str(fifo), cwd=tmp_path, timeout=60)) == UPPER


@pytest.mark.parametrize("link", [False, True], ids=["/dev/stdout", "a link to it"])
def test_stdout_by_another_name_is_written_as_it_is(stand_in, source, tmp_path, link):
    out = "/dev/stdout"
    if link:
        (tmp_path / "out.en").symlink_to("/proc/self/fd/1")
        out = "out.en"
    assert done(streamed(stand_in, "translate", "--input", str(source), "--output", out, cwd=tmp_path)) == UPPER
    assert Path("/dev/stdout").is_symlink() and (not link or (tmp_path / "out.en").is_symlink())


def test_a_pipe_as_output_is_written_not_renamed_over(stand_in, source, tmp_path):
    fifo = tmp_path / "out.en"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    res = streamed(stand_in, "translate", "--input", str(source), "--output", str(fifo), cwd=tmp_path)
    reader.join(timeout=30)
    assert res.returncode == 0 and got == [UPPER], (got, res.stderr.decode()[-2000:])
    assert fifo.is_fifo()


def test_an_output_that_is_an_input_by_another_name_is_refused(stand_in, source, tmp_path):
    (tmp_path / "link.de").symlink_to(source)
    os.link(source, tmp_path / "hard.de")
    for output in ("link.de", "hard.de", "./in.de"):
        one_line(streamed(stand_in, "translate", "--input", "in.de", "--output", output, cwd=tmp_path), 2, "translated")
    # a file inside the checkpoint being read
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"")
    one_line(streamed(stand_in, "translate", "--checkpoint", "ckpt", "--output", "ckpt/config.json", "x", cwd=tmp_path),
             2, "checkpoint")
    assert source.read_text() == LINES and (ckpt / "config.json").read_text() == "{}"


def test_an_input_named_like_a_temporary_file_is_kept(stand_in, source, tmp_path):
    shutil.copy(source, tmp_path / "g.partial")
    done(streamed(stand_in, "translate", "--input", "g.partial", "--output", "g", cwd=tmp_path))
    assert (tmp_path / "g.partial").read_text() == LINES and (tmp_path / "g").read_text() == UPPER


def test_a_stopped_translation_leaves_the_output_as_it_was(stand_in, tmp_path):
    "A line that cannot be read stops the translation after a batch: the old output file stays whole, no temporary."
    (tmp_path / "in.de").write_bytes(b"a\nb\nc\n\xff\n")
    (tmp_path / "out.en").write_text("old\n")
    one_line(streamed(stand_in, "translate", "--input", "in.de", "--output", "out.en", "--batch-size", "2", cwd=tmp_path),
             2, "UTF-8")
    assert (tmp_path / "out.en").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de", "out.en", "stand_in.py"]


def test_evaluate_refuses_to_write_its_json_onto_an_input(tmp_path, model_copy):
    from annotated_transformer import cli
    src, ref, ckpt = tmp_path / "s.de", tmp_path / "r.en", model_copy
    src.write_text("Ein Hund.\n")
    ref.write_text("A dog.\n")
    config = (ckpt / "config.json").read_text()
    for args in (["--json", str(src)], ["--json", str(ckpt / "config.json"), "--checkpoint", str(ckpt)]):
        assert cli.main(["evaluate", "--src", str(src), "--ref", str(ref), "--beam-size", "1", *args]) == 2, args
    assert src.read_text() == "Ein Hund.\n" and (ckpt / "config.json").read_text() == config
    json.loads(config)  # the checkpoint still loads
