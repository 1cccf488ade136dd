"""The contract of every command, run as a user runs it (a subprocess): exit 0 on success; bad input exits 2 with
one line naming the option or input line and what was expected; a fault exits 1 with one line and a hint to --debug.
The copy-task command runs in full and in mixed precision (the training itself is tested in its notebook)."""
import os
import subprocess
import sys

import pytest
import torch

from annotated_transformer.decoding import shipped_model_dir
from annotated_transformer.training import greedy_decode
from conftest import cli, done, one_line, swapped_vocabulary


BAD_OPTIONS = [  # (arguments, the key word the one line must hold: the option, or the setting, it names)
    (["translate", "--checkpoint", "/no/such/folder", "x"], "--checkpoint"),
    (["translate", "--device", "banana", "x"], "--device"),
    (["translate", "--beam-size", "0", "x"], "--beam-size"),
    (["translate", "--beam-size", "-1", "x"], "--beam-size"),
    (["translate", "--alpha", "nan", "x"], "--alpha"),
    (["train", "--warmup", "0"], "--warmup"),
    (["train", "--preset", "tiny"], "--preset"),
    (["train", "--dropout", "1.5"], "--dropout"),
    (["evaluate", "--limit", "0"], "--limit"),
    (["evaluate", "--limit", "-5"], "--limit"),
    (["average", "--out", "x", "--run-dir", ".", "--last", "0"], "--last"),
    (["average", "--out", "x", "--run-dir", ".", "--last", "-1"], "--last"),
    (["copy-task", "--epochs", "0"], "--epochs"),
    (["copy-task", "--d-model", "30", "--h", "4"], "d_model"),
    (["translate", "--threads", "0", "x"], "--threads"),
    (["translate", "--threads", "65536", "x"], "--threads"),
    (["translate", "--beam-size", "100000", "x"], "--beam-size"),
    (["translate", "--alpha", "50", "x"], "--alpha"),
    (["train", "--max-len", "10000000"], "--max-len"),
    (["train", "--d-model", "1e9"], "--d-model"),
    (["copy-task", "--seq-len", "1"], "--seq-len"),
    (["evaluate", "--data-dir", "/tmp/" + "x" * 300], "--data-dir"),  # a path too long for the file system
    (["translate", "--checkpoint", "/tmp/" + "y" * 300, "x"], "y" * 300),
    (["average", "--inputs", str(shipped_model_dir()), "--out", "/tmp/" + "y" * 300 + "/avg"], "y" * 300),
]


@pytest.mark.parametrize("args,says", BAD_OPTIONS, ids=[" ".join(a)[:60] for a, _ in BAD_OPTIONS])
def test_bad_input_is_one_line_and_exit_2(args, says):
    one_line(cli(*args), 2, says)


@pytest.mark.parametrize("args,stdin,lines", [  # lines: x for a translation, . for an empty line
    ([], "Ein Hund.\n\n   \nZwei Männer.\n\n", "x..x."),
    ([], "Ein Hund.\n\u200b\n\ufeff\n   \n\nZwei Männer.\n", "x....x"),  # invisible characters only: a blank line
    ([""], None, ".")], ids=["blank", "invisible", "argument"])
def test_translate_keeps_one_line_per_line(args, stdin, lines):
    out = done(cli("translate", "--beam-size", "1", *args, stdin=stdin and stdin.encode())).split("\n")
    assert out[-1] == "" and "".join("x" if line else "." for line in out[:-1]) == lines, out


def test_translate_names_the_bad_line_and_translates_nothing():
    for stdin, says in ((b"Ein Hund.\n\xff\xfe oops\nZwei.\n", "UTF-8"), (f"Ein Hund.\n{'Hund ' * 5000}\n".encode(), "tokens")):
        res = cli("translate", stdin=stdin)
        one_line(res, 2, "line 2", says)
        assert res.stdout == b""


def test_average_refuses_to_overwrite_an_input_or_a_last_folder(tmp_path):
    model = str(shipped_model_dir())
    one_line(cli("average", "--inputs", model, model, "--out", model), 2, "checkpoints")
    one_line(cli("average", "--inputs", model, "--out", str(tmp_path / "run" / "last")), 2, "last/")


def test_a_fault_is_one_line_exit_1_with_a_debug_hint(tmp_path):
    # no data on disk and no way to download it: the proxy refuses every connection
    env = {"ANNOTATED_TRANSFORMER_DATA": str(tmp_path), "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    one_line(cli("evaluate", "--split", "val", "--limit", "2", env=env), 1, "val.de.gz", "--debug")
    res = cli("evaluate", "--split", "val", "--limit", "2", "--debug", env=env)
    assert res.returncode == 1 and "Traceback" in res.stderr.decode()


def test_a_replaced_vocabulary_is_refused(model_copy):
    "A vocabulary file swapped for another of the same size would decode garbage: the manifest catches it."
    (model_copy / "tokenizer.json").write_text(swapped_vocabulary(model_copy))
    res = cli("translate", "--checkpoint", str(model_copy), "Ein Hund.")
    one_line(res, 2, "tokenizer.json")
    assert res.stdout == b""


def test_the_shipped_model_is_the_default_checkpoint():
    "Without --checkpoint, translate uses the shipped model: the same lines as --checkpoint of its folder."
    sentences = ["Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball."]
    default, named = (done(cli("translate", "--beam-size", "1", *args, *sentences))
                      for args in ([], ["--checkpoint", str(shipped_model_dir())]))
    assert default == named and len(default.splitlines()) == 2


@pytest.mark.parametrize("quiet", [False, True], ids=["bars", "TQDM_DISABLE"])
def test_command_line_runs_and_tqdm_disable_silences_the_progress_bars(tmp_path, quiet):
    """TQDM_DISABLE=1, tqdm's own switch, keeps the bars out of logs (the GPU check sets it); without it they show."""
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"} | ({"TQDM_DISABLE": "1"} if quiet else {})
    res = subprocess.run([sys.executable, "-m", "annotated_transformer.cli", "copy-task", "--epochs", "1",
                          "--batches-per-epoch", "2", "--out", str(tmp_path / "ckpt"), "--device", "cpu"],
                         capture_output=True, text=True, timeout=300, env=env)
    done(res)
    assert ("epoch 1/1" in res.stderr) is not quiet, res.stderr
    assert (tmp_path / "ckpt" / "model.safetensors").is_file() and (tmp_path / "ckpt" / "config.json").is_file()


def test_command_line_trains_in_bf16_and_the_checkpoint_decodes_in_fp32(tmp_path):
    """CPU bf16 autocast applies CUDA's dtype rules: this is the CI proxy for mixed-precision training on a GPU."""
    out = tmp_path / "bf16"
    assert "bf16" in done(cli("copy-task", "--precision", "bf16", "--epochs", "2", "--batches-per-epoch", "3",
                              "--batch-size", "16", "--d-model", "32", "--d-ff", "64", "--out", str(out), "--device",
                              "cpu", "--examples", "2", text=True))
    from annotated_transformer.checkpoint import load_model
    model = load_model(out, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    src = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        ys = greedy_decode(model, src, torch.ones(1, 1, 10, dtype=torch.bool), max_len=10, start_symbol=1)
    assert ys.shape == (1, 10) and ys[0, 0].item() == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())
