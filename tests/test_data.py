"""Multi30k files, tokenization, vocabularies and batching. Downloads are faked: these tests never use the network."""
import io
import urllib.error

import pytest

from annotated_transformer import data as D



class FakeResponse(io.BytesIO):
    headers = {}
    def __enter__(self): return self
    def __exit__(self, *a): self.close()


def test_download_goes_through_a_temporary_file_and_verifies(tmp_path, monkeypatch, multi30k):
    payload = multi30k["val.en.gz"].read_bytes()
    monkeypatch.setattr(D.urllib.request, "urlopen", lambda url, timeout: FakeResponse(payload))
    path = D.multi30k_file("val.en.gz", cache_dir=tmp_path, progress=False)
    assert path == tmp_path / "val.en.gz" and path.read_bytes() == payload
    assert [p.name for p in tmp_path.iterdir()] == ["val.en.gz"]  # no temporary file left


def test_corrupt_download_is_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(D.urllib.request, "urlopen", lambda url, timeout: FakeResponse(b"not the file"))
    with pytest.raises(D.DataError, match="the bad file was removed"):
        D.multi30k_file("val.en.gz", cache_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_network_failure_says_how_to_get_the_files(tmp_path, monkeypatch):
    def fail(url, timeout): raise urllib.error.URLError("no route to host")
    monkeypatch.setattr(D.urllib.request, "urlopen", fail)
    with pytest.raises(D.DataError) as err:
        D.multi30k_file("train.de.gz", cache_dir=tmp_path, progress=False)
    msg = str(err.value)
    assert "Download it by hand from https://raw.githubusercontent.com/multi30k/dataset" in msg and str(tmp_path) in msg
    assert list(tmp_path.iterdir()) == []


def test_missing_split_file_is_named(tmp_path):
    with pytest.raises(D.DataError, match="missing data file .*test_2016_flickr.de.gz"):
        D.load_multi30k("test", data_dir=tmp_path)


def test_cache_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("ANNOTATED_TRANSFORMER_DATA", str(tmp_path))
    assert D.default_cache_dir() == tmp_path


def test_splits_and_vocab_from_training_split_only(multi30k):
    data = D.TranslationData(progress=False)
    assert [len(data.raw(s)) for s in ("train", "val", "test")] == [29000, 1014, 1000]
    assert data.src_vocab.itos[:4] == list(D.SPECIALS) and data.tgt_vocab.itos[:4] == list(D.SPECIALS)
    train_words = {w for _, en in data.tokens("train") for w in en}
    assert set(data.tgt_vocab.itos[4:]) <= train_words


def test_detokenize_round_trips_common_english():
    tok = D.Tokenizer("en")
    for s in ["A man in a blue shirt is standing on a ladder.", "Two dogs aren't playing (yet)!",
              'The sign reads "Welcome".', "A woman's bag, a man's hat."]:
        assert D.detokenize(tok(s)) == s


def test_sampler_shards_cover_all_batches_once():
    lengths = [(i * 7) % 23 + 1 for i in range(200)]
    full = D.TokenBucketSampler(lengths, max_tokens=60, seed=3)
    full.set_epoch(2)
    shards = []
    for r in range(3):
        s = D.TokenBucketSampler(lengths, max_tokens=60, seed=3, num_replicas=3, rank=r)
        s.set_epoch(2)
        shards.append(list(s))
    assert len({len(sh) for sh in shards}) == 1  # same number of steps on every rank
    seen = sorted(i for sh in shards for b in sh for i in b)
    assert set(seen) == set(range(200))
    assert all(len(b) * max(lengths[i] for i in b) <= 60 for sh in shards for b in sh)


def test_test2016_is_bundled_and_found_offline(tmp_path, monkeypatch):
    "The test set the shipped model is scored on needs no network: an empty cache and no download still find it."
    def fail(url, timeout): raise AssertionError("no download expected")
    monkeypatch.setattr(D.urllib.request, "urlopen", fail)
    pairs = D.load_multi30k("test", cache_dir=tmp_path, progress=False)
    assert len(pairs) == 1000 and list(tmp_path.iterdir()) == []


def test_resolution_order(tmp_path, monkeypatch, multi30k):
    "An explicit data_dir wins over the cache, the cache over the bundled copy."
    (tmp_path / "mine").mkdir(); (tmp_path / "cache").mkdir()
    for folder in ("mine", "cache"):
        (tmp_path / folder / "test_2016_flickr.de.gz").write_bytes(multi30k["test_2016_flickr.de.gz"].read_bytes())
    assert D.multi30k_file("test_2016_flickr.de.gz", tmp_path / "mine", tmp_path / "cache").parent == tmp_path / "mine"
    assert D.multi30k_file("test_2016_flickr.de.gz", None, tmp_path / "cache").parent == tmp_path / "cache"
    monkeypatch.setenv("ANNOTATED_TRANSFORMER_DATA", str(tmp_path / "cache"))
    assert D.multi30k_file("test_2016_flickr.de.gz").parent == tmp_path / "cache"
    assert D.multi30k_file("test_2016_flickr.en.gz").parent == D.bundled_dir()
