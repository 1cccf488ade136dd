"""`annotated-transformer train` under hostile settings, run as a user runs it (real processes, a small corpus of
your own, models of a few thousand parameters): a diverging run stops at once and reports no checkpoint it did not
write; a --max-len too short for the data is refused before training; a refused resume changes no file."""
from pathlib import Path

from conftest import cli, snapshot

PAIRS = [("Ein Hund läuft.", "A dog runs."), ("Eine Katze schläft.", "A cat sleeps."), ("Zwei Hunde spielen.", "Two dogs play."),
         ("Ein Mann liest ein Buch.", "A man reads a book."), ("Eine Frau singt.", "A woman sings.")] * 8


def corpus(folder: Path, pairs=PAIRS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test"):
        (folder / f"{split}.de").write_text("".join(de + "\n" for de, _ in pairs))
        (folder / f"{split}.en").write_text("".join(en + "\n" for _, en in pairs))
    return folder


def train(tmp_path, *extra, corpus_dir=None):
    args = ["train", "--corpus-dir", str(corpus_dir or corpus(tmp_path / "corpus")), "--out-dir", str(tmp_path / "run"),
            "--subwords", "0", "--min-freq", "1", "--N", "1", "--d-model", "16", "--d-ff", "32", "--h", "2",
            "--max-tokens", "200", "--warmup", "5", "--val-bleu-sentences", "5", "--device", "cpu", "--threads", "1", *extra]
    return cli(*args, text=True)


def test_a_diverging_run_stops_at_once_and_reports_nothing_it_did_not_write(tmp_path):
    res = train(tmp_path, "--epochs", "3", "--factor", "1e30")
    assert res.returncode == 1, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    err = res.stderr.strip().splitlines()[-1]  # (above it, the progress bar of the epoch)
    assert "--factor" in err and "Traceback" not in res.stderr, err  # the setting to change
    assert "done:" not in res.stdout and "best checkpoint" not in res.stdout
    run = tmp_path / "run"
    assert not (run / "best").exists() and not (run / "last").exists() and not (run / "history.jsonl").exists()


def test_a_max_len_too_short_for_the_data_is_refused_before_training(tmp_path):
    long = [("Ein " + "sehr " * 40 + "langer Satz.", "A " + "very " * 40 + "long sentence.")]
    res = train(tmp_path, "--epochs", "1", "--max-len", "30", corpus_dir=corpus(tmp_path / "corpus", PAIRS + long))
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "--max-len" in res.stderr.strip().splitlines()[-1], res.stderr
    assert "epoch" not in res.stdout  # nothing was trained
    assert not (tmp_path / "run" / "train_config.json").exists() and not (tmp_path / "run" / "last").exists()


def test_a_refused_resume_changes_no_file(tmp_path):
    first = train(tmp_path, "--epochs", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    assert (tmp_path / "run" / "best").is_dir()
    before = snapshot(tmp_path / "run")
    for changed in (["--epochs", "2", "--d-model", "32"], ["--epochs", "2", "--max-len", "12"]):
        refused = train(tmp_path, *changed)
        assert refused.returncode == 2, (changed, refused.stdout[-2000:], refused.stderr[-2000:])
        assert snapshot(tmp_path / "run") == before, changed
    resumed = train(tmp_path, "--epochs", "2")  # the original settings still resume
    assert resumed.returncode == 0 and "resuming" in resumed.stdout, resumed.stderr[-2000:]
