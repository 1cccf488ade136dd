"""`annotated-transformer train` under hostile settings, run as a user runs it (real processes, the tiny model of
conftest.py): a diverging run stops at once and reports no checkpoint it did not write; a --max-len too short for the
data is refused before training; a refused resume changes no file."""
from conftest import DE, EN, TINY_TRAIN, cli, corpus, snapshot


def train(data, run, *extra):
    return cli("train", "--corpus-dir", str(data), "--out-dir", str(run), *TINY_TRAIN, *extra, text=True)


def test_a_diverging_run_stops_at_once_and_reports_nothing_it_did_not_write(tmp_path):
    run = tmp_path / "run"
    res = train(corpus(tmp_path / "corpus"), run, "--epochs", "3", "--factor", "1e30")
    assert res.returncode == 1, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    err = res.stderr.strip().splitlines()[-1]  # (above it, the progress bar of the epoch)
    assert "--factor" in err and "Traceback" not in res.stderr, err  # the setting to change
    assert "done:" not in res.stdout and "best checkpoint" not in res.stdout
    assert not (run / "best").exists() and not (run / "last").exists() and not (run / "history.jsonl").exists()


def test_a_max_len_too_short_for_the_data_is_refused_before_training(tmp_path):
    data = corpus(tmp_path / "corpus", DE + "Ein " + "sehr " * 40 + "langer Satz.\n", EN + "A " + "very " * 40 + "long.\n")
    res = train(data, tmp_path / "run", "--epochs", "1", "--max-len", "30")
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "--max-len" in res.stderr.strip().splitlines()[-1], res.stderr
    assert "epoch" not in res.stdout  # nothing was trained
    assert not (tmp_path / "run" / "train_config.json").exists() and not (tmp_path / "run" / "last").exists()


def test_a_refused_resume_changes_no_file(trained_copy):
    data, run = trained_copy  # one epoch trained
    before = snapshot(run)
    for changed in (["--epochs", "2", "--d-model", "32"], ["--epochs", "2", "--max-len", "12"]):
        refused = train(data, run, *changed)
        assert refused.returncode == 2, (changed, refused.stdout[-2000:], refused.stderr[-2000:])
        assert snapshot(run) == before, changed
    resumed = train(data, run, "--epochs", "2")  # the original settings still resume
    assert resumed.returncode == 0 and "resuming" in resumed.stdout, resumed.stderr[-2000:]
