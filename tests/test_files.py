"""Inputs are read once, as streams; outputs are written whole, or as they are when they are not regular files, and
never onto an input. The commands run as a user runs them, with a stand-in model (`stand_in` in conftest.py)."""
import json
import os
import shlex
import shutil
import threading
from pathlib import Path

import pytest

from conftest import done, one_line, run_as_user

LINES = "ein hund läuft.\n\nzwei männer.\n"
UPPER = LINES.upper()


def run(command, *args, cwd, stdin=None, timeout=120):
    return run_as_user([*command, *args], stdin=stdin, cwd=cwd, timeout=timeout)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.de"
    path.write_text(LINES)
    return path


def test_a_pipe_is_read_once(stand_in, source, tmp_path):
    done(run(["bash", "-c", f"{shlex.join(stand_in)} translate --input <(cat in.de) --output out.en"], cwd=tmp_path))
    assert (tmp_path / "out.en").read_text() == UPPER


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_stdin_by_any_name_is_read_once(stand_in, tmp_path, name):
    assert done(run(stand_in, "translate", "--input", name, cwd=tmp_path, stdin=LINES.encode())) == UPPER


def test_a_named_pipe_is_read_like_a_stream(stand_in, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(LINES,), daemon=True)
    writer.start()
    assert done(run(stand_in, "translate", "--input", str(fifo), cwd=tmp_path, timeout=60)) == UPPER


@pytest.mark.parametrize("link", [False, True], ids=["/dev/stdout", "a link to it"])
def test_stdout_by_another_name_is_written_as_it_is(stand_in, source, tmp_path, link):
    out = "/dev/stdout"
    if link:
        (tmp_path / "out.en").symlink_to("/proc/self/fd/1")
        out = "out.en"
    assert done(run(stand_in, "translate", "--input", str(source), "--output", out, cwd=tmp_path)) == UPPER
    assert Path("/dev/stdout").is_symlink() and (not link or (tmp_path / "out.en").is_symlink())


def test_a_pipe_as_output_is_written_not_renamed_over(stand_in, source, tmp_path):
    fifo = tmp_path / "out.en"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    res = run(stand_in, "translate", "--input", str(source), "--output", str(fifo), cwd=tmp_path)
    reader.join(timeout=30)
    assert res.returncode == 0 and got == [UPPER], (got, res.stderr.decode()[-2000:])
    assert fifo.is_fifo()


def test_an_output_that_is_an_input_by_another_name_is_refused(stand_in, source, tmp_path):
    (tmp_path / "link.de").symlink_to(source)
    os.link(source, tmp_path / "hard.de")
    for output in ("link.de", "hard.de", "./in.de"):
        one_line(run(stand_in, "translate", "--input", "in.de", "--output", output, cwd=tmp_path), 2, "translated")
    # a file inside the checkpoint being read
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"")
    one_line(run(stand_in, "translate", "--checkpoint", "ckpt", "--output", "ckpt/config.json", "x", cwd=tmp_path),
             2, "checkpoint")
    assert source.read_text() == LINES and (ckpt / "config.json").read_text() == "{}"


def test_an_input_named_like_a_temporary_file_is_kept(stand_in, source, tmp_path):
    shutil.copy(source, tmp_path / "g.partial")
    done(run(stand_in, "translate", "--input", "g.partial", "--output", "g", cwd=tmp_path))
    assert (tmp_path / "g.partial").read_text() == LINES and (tmp_path / "g").read_text() == UPPER


def test_a_stopped_translation_leaves_the_output_as_it_was(stand_in, tmp_path):
    "A line that cannot be read stops the translation after a batch: the old output file stays whole, no temporary."
    (tmp_path / "in.de").write_bytes(b"a\nb\nc\n\xff\n")
    (tmp_path / "out.en").write_text("old\n")
    one_line(run(stand_in, "translate", "--input", "in.de", "--output", "out.en", "--batch-size", "2", cwd=tmp_path),
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
