"""The package's ensemble decoding (chapter 11): an ensemble decodes what the models' mean log-probabilities pick (one
model: what that model's greedy and beam search give), rows that end leave the batch without disturbing the others, and
beam search scores an output by the mean of the models' scores."""
import pytest
import torch

from annotated_transformer.data import BOS, EOS, PAD, UNK
from annotated_transformer.decoding import Ensemble, beam_search, greedy_decode_cached, sequence_score
from annotated_transformer.model import make_model
from conftest import eos_model

def models(n: int, eos: float) -> list:
    "`n` small random models (`eos_model`): some sentences end early and others run to the limit."
    return [eos_model(seed, eos, vocab=13) for seed in range(n)]


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
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])
    with pytest.raises(ValueError, match="vocabularies"):
        Ensemble(models(1, eos=0.0) + [make_model(13, 17, N=1, d_model=32, d_ff=64, h=4)])
    with pytest.raises(ValueError, match="dtype"):
        Ensemble(models(1, eos=0.0) + [models(1, eos=0.0)[0].to(torch.bfloat16)])


