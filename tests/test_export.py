"""`annotated-transformer export` and translating through an engine: the folder it writes, the outputs it gives,
and bad input (one line, exit 2, nothing left behind). The chapter's own tests check the log-probabilities of both
engines on a tiny model; here the shipped model goes through CTranslate2, which exports in a second."""
import subprocess
import sys

import pytest

from annotated_transformer.files import check_manifest
from annotated_transformer.decoding import Translator, shipped_model_dir
from conftest import command, one_line


def left_in(folder) -> list[str]:
    "What a folder holds besides the lock files that writers of checkpoints keep beside them."
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


@pytest.fixture(scope="module")
def ct2_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("engines") / "ct2"
    from annotated_transformer import cli as commands
    assert commands.main(["export", "--to", "ctranslate2", "--out", str(out)]) == 0
    return out


def test_ct2_greedy_outputs_equal_the_packages_on_held_out_sentences(ct2_folder):
    from annotated_transformer.evaluation import test_set
    sources = [s for s, _ in test_set("de", "en", "test")[0][:100]]  # test2016: never seen in training
    expected = Translator.from_checkpoint(shipped_model_dir(), "cpu").translate(sources, beam_size=1)
    found = Translator.from_checkpoint(ct2_folder).translate(sources, beam_size=1)
    assert sum(a == b for a, b in zip(found, expected)) >= 0.995 * len(sources)


def test_translate_and_evaluate_take_the_exported_folder(ct2_folder, capsys):
    "It holds what translating needs, sealed by its manifest; --quantization needs such a folder."
    assert {"model.bin", "config.json", "tokenizer.json", "manifest.json"} <= set(left_in(ct2_folder))
    assert set(check_manifest(ct2_folder)["files"]) == set(left_in(ct2_folder)) - {"manifest.json"}
    status, out, _ = command(capsys, "translate", "--checkpoint", str(ct2_folder), "--quantization", "int8",
                             "Ein Hund rennt.", "", "Zwei Männer spielen Fußball.")
    lines = out.split("\n")[:-1]
    assert status == 0 and len(lines) == 3 and lines[0] and lines[1] == "" and lines[2], out
    status, out, _ = command(capsys, "evaluate", "--checkpoint", str(ct2_folder), "--limit", "8", "--beam-size", "1")
    assert status == 0 and "BLEU" in out
    one_line(command(capsys, "translate", "--quantization", "int8", "Ein Hund."), 2, "quantization")  # the shipped model


@pytest.mark.parametrize("given", ["empty", "exported"])
def test_export_refuses_a_folder_that_is_not_a_checkpoint(given, ct2_folder, tmp_path, capsys):
    checkpoint = ct2_folder if given == "exported" else tmp_path / "empty"
    checkpoint.mkdir(exist_ok=True)
    one_line(command(capsys, "export", "--to", "onnx", "--out", str(tmp_path / "out"), "--checkpoint", str(checkpoint)),
             2, "--checkpoint")
    assert left_in(tmp_path) == ([] if given == "exported" else ["empty"])


def test_export_refuses_an_existing_folder_and_leaves_it_alone(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    one_line(command(capsys, "export", "--to", "ctranslate2", "--out", str(tmp_path / "out")), 2, "empty")
    assert left_in(tmp_path / "out") == ["mine.txt"] and left_in(tmp_path) == ["out"]


@pytest.mark.parametrize("engine,module", [("ctranslate2", "ctranslate2"), ("onnx", "onnxruntime")])
def test_an_engine_not_installed_names_the_extra(engine, module, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # what Python finds for a package that is not installed
    one_line(command(capsys, "export", "--to", engine, "--out", str(tmp_path / "out")), 2, "deploy")
    assert left_in(tmp_path) == []


def test_a_failed_export_leaves_nothing_that_looks_complete(tmp_path, capsys, monkeypatch):
    from annotated_transformer import export

    def broken(model, folder):
        (folder / "model.bin").write_bytes(b"half")
        raise OSError("disk full")
    monkeypatch.setitem(export.EXPORTERS, "ctranslate2", broken)
    status, _, _ = command(capsys, "export", "--to", "ctranslate2", "--out", str(tmp_path / "out"))
    assert status != 0 and left_in(tmp_path) == []


def test_the_engines_load_only_when_used():
    probe = "import sys, annotated_transformer.export; print(sorted({'ctranslate2', 'onnxruntime', 'onnx'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"

