"""Your own language pair, end to end, as a user runs it (subprocesses): a corpus folder of plain files is trained on
for a few steps, and the checkpoint it wrote is evaluated (--corpus-dir, --src/--ref) and translates a file. Also: the
shipped model scored through --src/--ref gives sacreBLEU's own score of its translations; bad test files get one line
and exit 2; translate streams its output batch by batch and keeps the finished lines after Ctrl-C. A language code
spaCy has no tokenizer for is refused before anything is read."""
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from annotated_transformer import cli as commands
from annotated_transformer.data import read_lines
from annotated_transformer.decoding import shipped_model_dir
from conftest import ROOT, Upper, cli, command, done, one_line


@pytest.fixture(scope="module")
def french() -> Path:
    "The French side of Multi30k, as CI holds it: beside the checkout, or beside $ANNOTATED_TRANSFORMER_DATA's folder."
    folder = ROOT.parent / "shared" / "data" / "multi30k-fr"
    if not folder.is_dir() and os.environ.get("ANNOTATED_TRANSFORMER_DATA"):
        folder = Path(os.environ["ANNOTATED_TRANSFORMER_DATA"]).resolve().parent / "multi30k-fr"
    if not folder.is_dir():
        pytest.fail(f"the French side of Multi30k is not at {folder}", pytrace=False)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, multi30k, french):
    "A small English-French corpus folder in the layout `train --corpus-dir` reads: {train,val,test}.{en,fr}[.gz]."
    folder = tmp_path_factory.mktemp("corpus")
    for split, name, n in (("train", "train", 300), ("val", "val", 40), ("test", "test_2016_flickr", 30)):
        for lang, source in (("en", multi30k[f"{name}.en.gz"]), ("fr", french / f"{name}.fr.gz")):
            text = "\n".join(read_lines(source)[:n]) + "\n"
            if (split, lang) == ("train", "fr"):  # plain and gzip files are both read
                (folder / "train.fr.gz").write_bytes(gzip.compress(text.encode()))
            else:
                (folder / f"{split}.{lang}").write_text(text)
    return folder


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    "A few training steps on the corpus folder: the run folder, with best/ and last/."
    out = tmp_path_factory.mktemp("run") / "en-fr"
    res = cli("train", "--corpus-dir", str(corpus), "--src-lang", "en", "--tgt-lang", "fr", "--out-dir", str(out),
              "--N", "1", "--d-model", "32", "--d-ff", "64", "--h", "2", "--subwords", "300", "--max-steps", "6",
              "--epochs", "2", "--warmup", "2", "--max-tokens", "800", "--val-bleu-sentences", "4", "--device", "cpu",
              "--threads", "2")
    done(res)
    assert (out / "best" / "config.json").is_file() and (out / "last" / "config.json").is_file()
    return out


def test_a_corpus_folder_trains_evaluates_and_translates(corpus, run, tmp_path, capsys):
    # evaluate on the folder's test split: the languages come from the checkpoint, the JSON is written whole
    report = tmp_path / "scores.json"
    lines = done(cli("evaluate", "--checkpoint", str(run / "best"), "--corpus-dir", str(corpus), "--split", "test",
                     "--beam-size", "1", "--json", str(report))).splitlines()
    assert lines[0].startswith("BLEU = ") and "nrefs:1" in lines[1], lines  # sacreBLEU's score and signature
    assert any(line.startswith("chrF2 = ") for line in lines), lines
    result = json.loads(report.read_text())
    assert result["sentences"] == 30 and result["beam_size"] == 1 and result["split"] == "test"
    assert result["checkpoint"] == str((run / "best").resolve())
    for key in ("bleu", "chrf", "tokenized_bleu"):
        assert 0 <= result[key] <= 100, (key, result[key])
    assert result["signature"].startswith("nrefs:1") and result["chrf_signature"].startswith("nrefs:1")
    # the same sentences through --src/--ref (the run's last/ this time), and --json alone prints the JSON
    by_files = json.loads(done(cli("evaluate", "--checkpoint", str(run / "last"), "--src", str(corpus / "test.en"), "--ref",
                                   str(corpus / "test.fr"), "--beam-size", "1", "--json")))
    assert by_files["sentences"] == 30 and by_files["split"] is None
    # translate a file: line N for line N, blank lines kept
    source = tmp_path / "in.en"
    source.write_text("A dog runs.\n\nTwo men play soccer.\n")
    assert done(cli("translate", "--checkpoint", str(run / "best"), "--input", str(source), "--output",
                    str(tmp_path / "out.fr"), "--beam-size", "1")) == ""
    out = (tmp_path / "out.fr").read_text().split("\n")
    assert len(out) == 4 and out[1] == "" and out[3] == "", out
    assert not (tmp_path / "out.fr.partial").exists()
    # a German test set is refused before anything is translated: the file names say which languages they hold
    (tmp_path / "test.de").write_text("Ein Hund.\n")
    (tmp_path / "test.fr").write_text("Un chien.\n")
    one_line(command(capsys, "evaluate", "--checkpoint", str(run / "best"), "--src", str(tmp_path / "test.de"), "--ref",
                     str(tmp_path / "test.fr")), 2, "test.de")
    one_line(command(capsys, "evaluate", "--checkpoint", str(run / "best")), 2, "Multi30k")


def test_a_language_code_spacy_has_no_tokenizer_for_is_refused_first(run, tmp_path, capsys):
    """train accepts the codes spaCy has tokenizer rules for (en and fr trained above), and evaluate the codes the
    model's folder names. Any other is one line and exit status 2 from the command, and a ValueError from Python: before
    a file is read or a folder written."""
    from annotated_transformer.train import TrainConfig, train
    empty = tmp_path / "corpus"
    empty.mkdir()  # no files: the code is refused before the folder is read
    out = tmp_path / "run"
    res = cli("train", "--corpus-dir", str(empty), "--src-lang", "english", "--tgt-lang", "fr", "--out-dir", str(out))
    one_line(res, 2, "src_lang", "english")
    assert not out.exists()
    with pytest.raises(ValueError, match="src_lang"):
        train(TrainConfig(corpus_dir=str(empty), src_lang="english", tgt_lang="fr", out_dir=str(out)), device="cpu")
    assert not out.exists()
    one_line(command(capsys, "train", "--corpus-dir", str(empty), "--src-lang", "en", "--tgt-lang", "EN", "--out-dir",
                     str(out)), 2, "tgt_lang", "en?")  # a suggestion
    # evaluate reads the codes from the model's folder: one that names another code is refused before the test set is read
    odd = tmp_path / "odd"
    shutil.copytree(run / "best", odd)
    config = json.loads((odd / "config.json").read_text())
    config["extra"]["tgt_lang"] = "french"
    (odd / "config.json").write_text(json.dumps(config))
    one_line(command(capsys, "evaluate", "--checkpoint", str(odd), "--corpus-dir", str(empty)), 2, "tgt_lang", "french")


def test_scores_are_sacrebleus(multi30k, french, tmp_path):
    "The shipped model through --src/--ref, on files it never saw: the BLEU and chrF sacreBLEU gives its translations."
    import sacrebleu
    de, en = (read_lines(multi30k[f"test_2016_flickr.{lang}.gz"])[:40] for lang in ("de", "en"))
    (tmp_path / "mine.de").write_text("\n".join(de) + "\n")
    (tmp_path / "mine.en.gz").write_bytes(gzip.compress(("\n".join(en) + "\n").encode()))
    done(cli("evaluate", "--src", str(tmp_path / "mine.de"), "--ref", str(tmp_path / "mine.en.gz"), "--beam-size", "1",
             "--json", str(tmp_path / "r.json")))
    result = json.loads((tmp_path / "r.json").read_text())
    from annotated_transformer.decoding import Translator
    hyps = Translator.from_checkpoint(shipped_model_dir(), "cpu").translate(de, beam_size=1)  # what translate writes
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [en]).score, abs=1e-9)
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [en]).score, abs=1e-9)
    assert result["sentences"] == 40 and result["checkpoint"] == str(shipped_model_dir().resolve())
    # the English-French run's recorded beam-4 translations of test2016 score the test BLEU its record states
    root = ROOT / "results" / "en-fr"
    hyps = (root / "test2016_beam4.fr").read_text(encoding="utf-8").splitlines()
    refs = read_lines(french / "test_2016_flickr.fr.gz")
    recorded = next(s["bleu"] for s in json.loads((root / "scores.json").read_text())["scores"]
                    if s["split"] == "test" and s["beam_size"] == 4)
    assert len(hyps) == len(refs) == 1000
    assert round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2) == recorded


def test_bad_test_files_are_one_line_and_exit_2(tmp_path, capsys):
    good = tmp_path / "good.de"
    good.write_text("Ein Hund.\nZwei Männer.\n")
    (tmp_path / "three.en").write_text("A dog.\nTwo men.\nA cat.\n")
    (tmp_path / "empty.en").write_text("")
    (tmp_path / "latin1.en").write_bytes(b"Gr\xfc\xdfe\nTwo\n")
    (tmp_path / "folder.en").mkdir()
    for ref, says in (("three.en", "lines"), ("empty.en", "empty"), ("latin1.en", "UTF-8"), ("missing.en", "missing.en"),
                      ("folder.en", "folder")):
        one_line(command(capsys, "evaluate", "--src", str(good), "--ref", str(tmp_path / ref)), 2, ref, says)
    one_line(command(capsys, "evaluate", "--src", str(good)), 2, "--ref")
    one_line(command(capsys, "evaluate", "--src", str(good), "--ref", str(good), "--corpus-dir", str(tmp_path)), 2, "both")
    one_line(command(capsys, "evaluate", "--corpus-dir", str(tmp_path)), 2, "missing")
    one_line(command(capsys, "evaluate", "--src", str(good), "--ref", str(tmp_path / "three.en"), "--json", str(tmp_path)),
             2, "folder")


def test_translate_refuses_a_bad_destination_before_translating(tmp_path, capsys):
    source = tmp_path / "in.de"
    source.write_text("Ein Hund.\n")
    for output, says in ((tmp_path, "folder"), (tmp_path / "no" / "out.en", "no such"), (source, "translated")):
        one_line(command(capsys, "translate", "--input", str(source), "--output", str(output)), 2, "--output", says)
    one_line(command(capsys, "translate", "--input", str(tmp_path)), 2, "folder")
    one_line(command(capsys, "translate", "--input", str(tmp_path / "none.de")), 2, "none.de")
    with open(source, "rb") as f:  # stdin read from the very file --output names
        res = subprocess.run([sys.executable, "-m", "annotated_transformer.cli", "translate", "--output", str(source)],
                             stdin=f, capture_output=True, timeout=600)
    one_line(res, 2, "translated")
    assert source.read_text() == "Ein Hund.\n"  # never overwritten


def test_translation_batches_stream_in_order():
    "Each batch comes out before the next lines are read: memory is one batch, and output follows input line for line."
    read = []
    def lines():
        for i in range(10):
            read.append(i)
            yield "" if i % 4 == 3 else f"line {i}"
    batches = commands.translation_batches(Upper(), lines(), batch_size=3)
    first = next(batches)
    assert first == ["LINE 0", "LINE 1", "LINE 2"] and len(read) == 3
    rest = [line for batch in batches for line in batch]
    assert first + rest == ["" if i % 4 == 3 else f"LINE {i}" for i in range(10)]


def test_ctrl_c_keeps_the_finished_lines(tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.de"
    source.write_text("".join(f"satz {i}\n" for i in range(10)))
    # to a file: FILE is written whole or not at all, and no temporary file is left
    monkeypatch.setattr(commands, "_translator", lambda args: Upper(stop_at=3))
    assert commands.main(["translate", "--input", str(source), "--output", str(tmp_path / "out.en"), "--batch-size", "3"]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de"]
    err = capsys.readouterr().err
    assert "interrupted" in err and err.strip().count("\n") == 0, err
    # to stdout: the lines already written stay
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    assert commands.main(["translate", "--batch-size", "4"]) == 130
    assert capsys.readouterr().out == "".join(f"SATZ {i}\n" for i in range(8))
    # stopped before the first batch is done: no partial file is left behind
    monkeypatch.setattr(commands, "_translator", lambda args: Upper(stop_at=1))
    assert commands.main(["translate", "--input", str(source), "--output", str(tmp_path / "b.en")]) == 130
    assert not (tmp_path / "b.en").exists() and not (tmp_path / "b.en.partial").exists()
