"""The contract of every command, run as a user runs it (a subprocess): exit 0 on success; bad input exits 2 with
one line naming the option or input line and what was expected; a fault exits 1 with one line and a hint to --debug."""
import os
import subprocess
import sys

import pytest

from annotated_transformer.decoding import shipped_model_dir


def cli(*args, stdin=None, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "annotated_transformer.cli", *args], input=stdin, capture_output=True,
                          cwd=cwd, timeout=300, env={**os.environ, "TQDM_DISABLE": "1", **(env or {})})


BAD_OPTIONS = [  # (arguments, what the one line must say)
    (["translate", "--checkpoint", "/no/such/folder", "x"], "--checkpoint: /no/such/folder: no such folder"),
    (["translate", "--device", "banana", "x"], "--device: expected cpu, cuda, cuda:N or mps, got 'banana'"),
    (["translate", "--beam-size", "0", "x"], "--beam-size: expected a whole number 1..64, got '0'"),
    (["translate", "--beam-size", "-1", "x"], "--beam-size: expected a whole number 1..64, got '-1'"),
    (["translate", "--alpha", "nan", "x"], "--alpha: expected a finite number 0..5.0, got 'nan'"),
    (["train", "--warmup", "0"], "--warmup: expected a whole number >= 1, got '0'"),
    (["train", "--preset", "tiny"], "--preset: expected one of small, base, big, got 'tiny'"),
    (["train", "--dropout", "1.5"], "--dropout: expected a finite number 0..1 (excluded), got '1.5'"),
    (["evaluate", "--limit", "0"], "--limit: expected a whole number >= 1, got '0'"),
    (["evaluate", "--limit", "-5"], "--limit: expected a whole number >= 1, got '-5'"),
    (["average", "--out", "x", "--run-dir", ".", "--last", "0"], "--last: expected a whole number >= 1, got '0'"),
    (["average", "--out", "x", "--run-dir", ".", "--last", "-1"], "--last: expected a whole number >= 1, got '-1'"),
    (["copy-task", "--epochs", "0"], "--epochs: expected a whole number >= 1, got '0'"),
    (["copy-task", "--d-model", "30", "--h", "4"], "d_model=30 must be a positive multiple of the number of heads h=4"),
    (["translate", "--threads", "0", "x"], "--threads: expected a whole number of threads 1.."),
    (["translate", "--threads", "65536", "x"], "--threads: expected a whole number of threads 1.."),
    (["translate", "--beam-size", "100000", "x"], "--beam-size: expected a whole number 1..64, got '100000'"),
    (["translate", "--alpha", "50", "x"], "--alpha: expected a finite number 0..5.0, got '50'"),
    (["train", "--max-len", "10000000"], "--max-len: expected a whole number 1..65536, got '10000000'"),
    (["train", "--d-model", "1e9"], "--d-model: expected a whole number 2..65536, got '1e9'"),
    (["copy-task", "--seq-len", "1"], "--seq-len: expected a whole number 2..65536, got '1'"),
    (["evaluate", "--data-dir", "/tmp/" + "x" * 300], "--data-dir: /tmp/" + "x" * 300 + ": File name too long"),
    (["translate", "--checkpoint", "", "x"], "--checkpoint: an empty path: give a folder"),
    (["evaluate", "--checkpoint", ""], "--checkpoint: an empty path: give a folder"),
    (["train", "--corpus-dir", ""], "--corpus-dir: an empty path: give a folder"),
]


@pytest.mark.parametrize("args,says", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_input_is_one_line_and_exit_2(args, says):
    res = cli(*args)
    err = res.stderr.decode()
    assert res.returncode == 2, (res.returncode, err)
    assert says in err and err.strip().count("\n") == 0, err


def test_translate_keeps_one_line_per_line():
    res = cli("translate", "--beam-size", "1", stdin="Ein Hund.\n\n   \nZwei Männer.\n\n".encode())
    assert res.returncode == 0, res.stderr.decode()
    out = res.stdout.decode().split("\n")[:-1]
    assert len(out) == 5 and out[1] == out[2] == out[4] == "" and out[0] and out[3], out
    res = cli("translate", "")
    assert res.returncode == 0 and res.stdout.decode() == "\n"


def test_translate_names_the_bad_line_and_translates_nothing():
    res = cli("translate", stdin=b"Ein Hund.\n\xff\xfe oops\nZwei.\n")
    assert res.returncode == 2 and res.stdout == b""
    assert "stdin line 2: not valid UTF-8" in res.stderr.decode()
    res = cli("translate", stdin=("Ein Hund.\n" + "Hund " * 5000 + "\n").encode())
    assert res.returncode == 2 and res.stdout == b""
    assert "stdin line 2: 5002 tokens, more than this model takes" in res.stderr.decode()


def test_average_refuses_to_overwrite_an_input_or_a_last_folder(tmp_path):
    model = str(shipped_model_dir())
    res = cli("average", "--inputs", model, model, "--out", model)
    assert res.returncode == 2 and "is one of the checkpoints to average" in res.stderr.decode()
    res = cli("average", "--inputs", model, "--out", str(tmp_path / "run" / "last"))
    assert res.returncode == 2 and "last/ folder" in res.stderr.decode()


def test_a_fault_is_one_line_exit_1_with_a_debug_hint(tmp_path):
    # no data on disk and no way to download it: the proxy refuses every connection
    env = {"ANNOTATED_TRANSFORMER_DATA": str(tmp_path), "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    res = cli("evaluate", "--split", "val", "--limit", "2", env=env)
    err = res.stderr.decode()
    assert res.returncode == 1 and "could not download val.de.gz" in err and "--debug" in err, err
    assert err.strip().count("\n") == 0
    res = cli("evaluate", "--split", "val", "--limit", "2", "--debug", env=env)
    assert res.returncode == 1 and "Traceback" in res.stderr.decode()


def test_a_replaced_vocabulary_is_refused(tmp_path):
    "A vocabulary file swapped for another of the same size would decode garbage: the manifest catches it."
    import json
    import shutil
    ckpt = tmp_path / "model"
    shutil.copytree(shipped_model_dir(), ckpt)
    name = "tokenizer.json" if (ckpt / "tokenizer.json").exists() else "tgt_vocab.json"  # subwords, or words
    data = json.loads((ckpt / name).read_text())
    if name == "tokenizer.json":  # two pieces swap their ids: same size, other meaning
        vocab = data["model"]["vocab"]
        a, b = list(vocab)[100:102]
        vocab[a], vocab[b] = vocab[b], vocab[a]
    else:
        data = data[:4] + data[4:][::-1]
    (ckpt / name).write_text(json.dumps(data, ensure_ascii=False))
    res = cli("translate", "--checkpoint", str(ckpt), "Ein Hund.")
    assert res.returncode == 2 and res.stdout == b""
    assert f"{name} is not the file the checkpoint was written with" in res.stderr.decode()


def test_the_shipped_model_is_the_default_checkpoint():
    "Without --checkpoint, translate uses the shipped model: the same lines as --checkpoint of its folder."
    sentences = ["Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball."]
    default, named = (cli("translate", "--beam-size", "1", *args, *sentences)
                      for args in ([], ["--checkpoint", str(shipped_model_dir())]))
    for res in (default, named):
        assert res.returncode == 0 and len(res.stdout.decode().splitlines()) == 2, res.stderr.decode()[-2000:]
    assert default.stdout == named.stdout

