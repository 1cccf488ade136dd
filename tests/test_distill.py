"""The package's ensemble decoding and tools/distill.py: an ensemble decodes what the models' mean log-probabilities
pick (one model: what that model's greedy and beam search give), rows that end leave the batch without disturbing the
others, beam search scores an output by the mean of the models' scores; the first student's corpus is the training set
with its references, then again with the ensemble's translations, the second student's (the shipped model's) the
training German with the ensemble's greedy translations alone, the third's with its beam-search translations, each beside
val and test as they are."""
import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import distill  # noqa: E402
from annotated_transformer.data import BOS, EOS, PAD, UNK  # noqa: E402
from annotated_transformer.decoding import beam_search, greedy_decode_cached, sequence_score  # noqa: E402
from annotated_transformer.model import make_model  # noqa: E402
from annotated_transformer.decoding import Ensemble  # noqa: E402
from annotated_transformer.pretrained import RECIPE  # noqa: E402
from annotated_transformer.pretrained import STUDENT as SHIPPED_STUDENT  # noqa: E402
import annotated_transformer.pretrained as pretrained  # noqa: E402
from distill import STUDENT, STUDENT_ENSEMBLE_ONLY, STUDENT_WIDE, TEACHER_BEAM, collect, teach, teach_with_beam  # noqa: E402


def models(n: int, eos: float, vocab: int = 13) -> list:
    "`n` small random models; `eos` raises </s>'s logit, so that some sentences end early and others run to the limit."
    result = []
    for seed in range(n):
        torch.manual_seed(seed)
        model = make_model(vocab, vocab, N=2, d_model=32, d_ff=64, h=4).eval()
        with torch.no_grad():
            model.generator.proj.bias[EOS] += eos
        result.append(model)
    return result


def source(batch: int = 6, length: int = 7, vocab: int = 13) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(10)
    src = torch.randint(4, vocab, (batch, length))
    src[1, 4:] = PAD  # a shorter sentence
    return src, (src != PAD).unsqueeze(-2)


def outputs(ys: torch.Tensor) -> list[list[int]]:
    "Rows of `greedy_decode_cached` without <s>, up to and including the first </s> (or to the limit)."
    rows = [row[1:] for row in ys.tolist()]
    return [row[:row.index(EOS) + 1] if EOS in row else row for row in rows]


def ended(outputs: list[list[int]]) -> list[bool]:
    return [out[-1] == EOS for out in outputs]


def assert_each_step_follows_the_mean(ensemble: list, src, mask, got: list[list[int]]) -> None:
    "Every step of each greedy output again, with whole forward passes and no cache: the argmax of the mean log-probabilities."
    for i, out in enumerate(got):
        ys = torch.tensor([[BOS] + out])
        for t in range(len(out)):
            tgt_mask = torch.tril(torch.ones(1, t + 1, t + 1, dtype=torch.bool))
            step = torch.stack([m.generator(m(src[i:i + 1], ys[:, :t + 1], mask[i:i + 1], tgt_mask))[0, -1]
                                for m in ensemble]).mean(0)
            step[UNK] = float("-inf")
            assert int(step.argmax()) == out[t], (i, t)


def assert_scores_are_the_mean(ensemble: list, src, mask, best: list[list[int]], scores: torch.Tensor) -> None:
    "Each beam-search output's score is the mean of the members' teacher-forced scores (with the length penalty)."
    for i, out in enumerate(best):
        one = lambda m: sequence_score(m, src[i:i + 1], mask[i:i + 1], out)
        assert abs(float(scores[i]) - sum(one(m) for m in ensemble) / len(ensemble)) < 1e-4, i


def test_an_ensemble_of_one_decodes_as_its_model():
    (model,), (src, mask) = models(1, eos=2.0), source()
    expected = greedy_decode_cached(model, src, mask, 10, BOS, EOS, banned=UNK)
    got = greedy_decode_cached(Ensemble([model]), src, mask, 10, BOS, EOS, banned=UNK)
    assert any(ended(outputs(got))) and not all(ended(outputs(got)))  # rows leave the batch while others go on
    assert torch.equal(got, expected)
    best, scores = beam_search(model, src, mask, beam_size=3, max_extra=4, banned=UNK)
    got_best, got_scores = beam_search(Ensemble([model]), src, mask, beam_size=3, max_extra=4, banned=UNK)
    assert got_best == best and torch.allclose(got_scores, scores)


def test_each_greedy_step_follows_the_mean_of_the_log_probabilities():
    ensemble, (src, mask) = models(3, eos=0.5), source()
    got = outputs(greedy_decode_cached(Ensemble(ensemble), src, mask, 10, BOS, EOS, banned=UNK))
    assert any(ended(got)) and not all(ended(got))
    assert_each_step_follows_the_mean(ensemble, src, mask, got)
    assert all(out[-1] == EOS or len(out) == 9 for out in got)


def test_beam_search_scores_an_output_by_the_mean_of_the_models_scores():
    ensemble, (src, mask) = models(2, eos=0.3), source()
    best, scores = beam_search(Ensemble(ensemble), src, mask, beam_size=3, max_extra=5, banned=UNK)
    assert len({len(out) for out in best}) > 1  # outputs of several lengths: sentences end at different steps
    assert_scores_are_the_mean(ensemble, src, mask, best, scores)


def test_members_of_different_sizes():
    "Each member reads its own slice of the features and its own layers' caches, whatever its width, depth and heads."
    torch.manual_seed(3)
    ensemble = [make_model(13, 13, N=n, d_model=d, d_ff=2 * d, h=h, max_len=m).eval()
                for n, d, h, m in ((1, 32, 4, 60), (3, 48, 6, 40), (2, 16, 2, 80))]
    together = Ensemble(ensemble)
    assert together.config.max_len == 40  # the shortest member's
    src, mask = source()
    got = outputs(greedy_decode_cached(together, src, mask, 10, BOS, EOS, banned=UNK))
    assert_each_step_follows_the_mean(ensemble, src, mask, got)
    best, scores = beam_search(together, src, mask, beam_size=3, max_extra=5, banned=UNK)
    assert_scores_are_the_mean(ensemble, src, mask, best, scores)


def test_an_ensemble_needs_models_of_one_vocabulary():
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble([])
    with pytest.raises(ValueError, match=r"must share their vocabularies; got \(source, target\) sizes \[\(13, 13\), \(13, 17\)\]"):
        Ensemble(models(1, eos=0.0) + [make_model(13, 17, N=1, d_model=32, d_ff=64, h=4)])
    with pytest.raises(ValueError, match="one device in one dtype"):
        Ensemble(models(1, eos=0.0) + [models(1, eos=0.0)[0].to(torch.bfloat16)])


def test_the_student_is_the_recipe_with_half_the_epochs_in_bf16():
    recipe, student = asdict(RECIPE), asdict(STUDENT)
    assert {k for k in recipe if recipe[k] != student[k]} == {"epochs", "cooldown", "precision"}
    assert (2 * STUDENT.epochs, 2 * STUDENT.cooldown, STUDENT.precision) == (RECIPE.epochs, RECIPE.cooldown, "bf16")
    only = asdict(STUDENT_ENSEMBLE_ONLY)  # the shipped model's settings: the recipe in bf16, on its own corpus
    assert STUDENT_ENSEMBLE_ONLY is SHIPPED_STUDENT and STUDENT_ENSEMBLE_ONLY.precision == "bf16"
    assert {k for k in recipe if recipe[k] != only[k]} == {"precision", "out_dir", "corpus_dir"}


def test_the_wide_student_is_the_shipped_one_at_384_and_fits_30_mb():
    only, wide = asdict(STUDENT_ENSEMBLE_ONLY), asdict(STUDENT_WIDE)
    assert {k for k in only if only[k] != wide[k]} == {"model"}
    assert {k for k in only["model"] if only["model"][k] != wide["model"][k]} == {"d_model"} and STUDENT_WIDE.model.d_model == 384
    vocab = STUDENT_WIDE.subwords  # one shared BPE vocabulary of this size, one tied matrix
    model = make_model(vocab, vocab, N=STUDENT_WIDE.model.N, d_model=384, d_ff=STUDENT_WIDE.model.d_ff, h=STUDENT_WIDE.model.h,
                       tie_embeddings=True)
    assert 2 * sum(p.numel() for p in model.parameters()) <= 30e6  # float16: two bytes a parameter


def test_the_corpus(tmp_path, monkeypatch):
    splits = {"train": [("Ein Hund.", "A dog."), ("Zwei Männer.", "Two men.")], "val": [("Eine Katze.", "A cat.")],
              "test": [("Ein Ball.", "A ball.")]}
    asked = []
    monkeypatch.setattr(distill, "load_multi30k", lambda split: splits[split])
    monkeypatch.setattr(pretrained, "load_multi30k", lambda split, data_dir=None: splits[split])  # distill_corpus reads it
    folders = {"a": tmp_path / "a", "b": tmp_path / "b"}  # two teachers' checkpoint folders
    for folder in folders.values():
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(distill, "teachers", lambda runs=None: folders)
    class Teachers:  # what load_ensemble returns: a translator of the teachers' ensemble
        def translate(self, german, beam_size):
            asked.append((german, beam_size))
            return ["One dog.", "2 men."]
    monkeypatch.setattr(pretrained, "load_ensemble", lambda folders, device: Teachers())  # what distill_corpus calls
    only = teach(tmp_path / "corpus")
    read = lambda name: (tmp_path / "corpus" / name).read_text(encoding="utf-8").splitlines()
    assert asked == [(["Ein Hund.", "Zwei Männer."], 1)]  # the ensemble translates the training German, greedily, and nothing else
    assert read("train.de") == ["Ein Hund.", "Zwei Männer.", "Ein Hund.", "Zwei Männer."]
    assert read("train.en") == ["A dog.", "Two men.", "One dog.", "2 men."]
    assert (read("val.de"), read("val.en"), read("test.de"), read("test.en")) == (["Eine Katze."], ["A cat."], ["Ein Ball."], ["A ball."])
    assert json.loads((tmp_path / "corpus" / "teachers.json").read_text()) == {k: str(v) for k, v in folders.items()}
    assert not list((tmp_path / "corpus").glob("*.tmp"))
    # a stop after the ensemble's pass: its translations are kept and not made again; a complete corpus is left alone
    (tmp_path / "corpus" / "train.en").unlink()
    teach(tmp_path / "corpus")
    assert len(asked) == 1 and read("train.en") == ["A dog.", "Two men.", "One dog.", "2 men."]
    teach(tmp_path / "corpus")
    assert len(asked) == 1
    # the second student's corpus, the package's distill_corpus: the training German once, the ensemble's English, the
    # same val and test, sealed with the teachers' weights and the greedy beam
    assert only == tmp_path / "corpus_ensemble_only" and teach(tmp_path / "corpus") == only
    assert json.loads((only / "teachers.json").read_text()) == pretrained._sealed(list(folders.values()), 1)
    read = lambda name: (only / name).read_text(encoding="utf-8").splitlines()
    assert (read("train.de"), read("train.en")) == (["Ein Hund.", "Zwei Männer."], ["One dog.", "2 men."])
    assert (read("val.de"), read("val.en"), read("test.de"), read("test.en")) == (["Eine Katze."], ["A cat."], ["Ein Ball."], ["A ball."])
    assert not list(only.glob("*.tmp"))
    (only / "train.de").write_text("left alone\n", encoding="utf-8")  # a complete corpus is not written again
    assert teach(tmp_path / "corpus") == only and read("train.de") == ["left alone"] and len(asked) == 1


def test_the_third_corpus_is_the_ensembles_beam(tmp_path, monkeypatch):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "teachers.json").write_text(json.dumps({"fp32, seed 0, last 5 averaged": "/runs/a/avg5",
                                                                    "bf16, seed 1, best epoch": "/runs/b/best"}))
    asked = []
    monkeypatch.setattr(distill, "distill_corpus", lambda folders, out, device, beam_size: asked.append((folders, out, beam_size)) or out)
    assert teach_with_beam(tmp_path) == tmp_path / "corpus_beam"
    assert asked == [(["/runs/a/avg5", "/runs/b/best"], tmp_path / "corpus_beam", 4)] and TEACHER_BEAM == 4


def test_missing_runs_are_named_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(distill, "load_multi30k", lambda split: [("Ein Hund.", "A dog.")])
    monkeypatch.setattr(distill, "teachers", lambda runs=None: {"bf16, seed 1": tmp_path / "seed1" / "best"})
    with pytest.raises(SystemExit, match=r"no teacher weights in .*seed1/best \(bf16, seed 1\): `python tools/precision_run.py run`"):
        teach(tmp_path / "corpus")
    assert not (tmp_path / "corpus" / "train.en").exists()
    with pytest.raises(SystemExit, match=r"no student run in .*student: `python tools/distill.py run"):
        collect(tmp_path)
    first = tmp_path / "student"
    first.mkdir()
    (first / "train_config.json").write_text(json.dumps({"epochs": 1}))
    monkeypatch.setattr(distill, "finished", lambda folder: [{"epoch": 1}])
    with pytest.raises(SystemExit, match=r"no student run in .*student_ensemble_only: `python tools/distill.py run"):
        collect(tmp_path)
    second = tmp_path / "student_ensemble_only"
    second.mkdir()
    (second / "train_config.json").write_text(json.dumps({"epochs": 1}))
    with pytest.raises(SystemExit, match=r"no student run in .*student_beam: `python tools/distill.py run"):
        collect(tmp_path)
