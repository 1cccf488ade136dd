"""The package's decoders (chapter 11). The cached decoders against the plain loop of 05_training: the fused
projections, the written-out attention for one query, greedy's argmax of the scores and the caches that beams keep give
the same tokens as `greedy_decode`, which recomputes the whole prefix with the model's own layers, for many sentences
and lengths. Ensembles: an ensemble decodes what the models' mean log-probabilities pick (one model: what that model's
greedy and beam search give), rows that end leave the batch without disturbing the others, and beam search scores an
output by the mean of the models' scores."""
import pytest
import torch

from annotated_transformer.data import BOS, EOS, PAD, UNK
from annotated_transformer.decoding import Ensemble, beam_search, greedy_decode_cached, sequence_score
from annotated_transformer.fast import speed_up
from annotated_transformer.model import make_model
from annotated_transformer.training import greedy_decode
from conftest import eos_model


def sources(seed: int, batch: int = 24, vocab: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    "Sentences of 2 to 12 tokens, padded on the right."
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 13, (batch,), generator=g)
    src = torch.randint(4, vocab, (batch, int(lengths.max())), generator=g)
    src[torch.arange(src.size(1)) >= lengths.unsqueeze(1)] = PAD
    return src, (src != PAD).unsqueeze(-2)


def strip(ys: torch.Tensor) -> list[list[int]]:
    "Each row up to its first </s> (rows that ended earlier are padded differently by the two loops)."
    return [row[: row.index(EOS)] if EOS in row else row for row in ys.tolist()]


# (seed, </s> boost, pre-norm): models whose sentences end at many different lengths, in both norm placements
CASES = [(2, 0.0, True), (3, 1.5, True), (8, 0.0, False), (11, 1.0, False)]


@pytest.mark.parametrize("seed,eos,pre_norm", CASES)
@pytest.mark.parametrize("fast", [False, True])
def test_cached_greedy_equals_plain_loop(seed, eos, pre_norm, fast):
    m = eos_model(seed, eos, pre_norm=pre_norm)
    if fast:
        speed_up(m)  # the toolkit's layers, as `Translator.from_checkpoint` loads a model
    src, src_mask = sources(seed)
    cached = greedy_decode_cached(m, src, src_mask, 20)
    assert strip(cached) == strip(greedy_decode(m, src, src_mask, 20, 0, EOS))
    assert len({len(row) for row in strip(cached)}) > 3  # sentences ended at many lengths: rows left the batch
    assert greedy_decode_cached(m, src, src_mask, 20, end_symbol=None).tolist() == \
        greedy_decode(m, src, src_mask, 20, 0, None).tolist()


def test_beam_of_one_decodes_as_greedy_and_a_banned_token_never_comes_out():
    "(An ensemble of one decodes as its model: below.)"
    m = eos_model(3, eos=3.0)
    src, src_mask = sources(3)
    plain = strip(greedy_decode(m, src, src_mask, 20, 0, EOS))
    found, _ = beam_search(m, src, src_mask, beam_size=1, max_extra=20)
    assert [row[1:] for row in plain] == [f[:19] for f in found]
    m = eos_model(2, eos=0.0)  # a banned token is never output
    src, src_mask = sources(2)
    free = greedy_decode_cached(m, src, src_mask, 20)
    words = free[:, 1:].flatten()
    common = int(words[words != EOS].mode().values)  # the word the model outputs most
    banned = greedy_decode_cached(m, src, src_mask, 20, banned=common)
    assert common != EOS and common in free and common not in banned


# ---------------------------------------------------------------- ensembles

def models(n: int, eos: float) -> list:
    "`n` small random models (`eos_model`): some sentences end early and others run to the limit."
    return [eos_model(seed, eos, vocab=13) for seed in range(n)]


def of_different_sizes() -> list:
    "Three models of other widths, depths, heads and lengths: each member reads its own slice of features and caches."
    torch.manual_seed(3)
    return [make_model(13, 13, N=n, d_model=d, d_ff=2 * d, h=h, max_len=m).eval()
            for n, d, h, m in ((1, 32, 4, 60), (3, 48, 6, 40), (2, 16, 2, 80))]


def source(batch: int = 6, length: int = 7, vocab: int = 13) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(10)
    src = torch.randint(4, vocab, (batch, length))
    src[1, 4:] = PAD  # a shorter sentence
    return src, (src != PAD).unsqueeze(-2)


def outputs(ys: torch.Tensor) -> list[list[int]]:
    "Rows of `greedy_decode_cached` without <s>, up to and including the first </s> (or to the limit)."
    rows = [row[1:] for row in ys.tolist()]
    return [row[:row.index(EOS) + 1] if EOS in row else row for row in rows]


def test_an_ensemble_of_one_decodes_as_its_model():
    (model,), (src, mask) = models(1, eos=2.0), source()
    expected = greedy_decode_cached(model, src, mask, 10, BOS, EOS, banned=UNK)
    got = greedy_decode_cached(Ensemble([model]), src, mask, 10, BOS, EOS, banned=UNK)
    ended = [out[-1] == EOS for out in outputs(got)]
    assert any(ended) and not all(ended)  # rows leave the batch while others go on
    assert torch.equal(got, expected)
    best, scores = beam_search(model, src, mask, beam_size=3, max_extra=4, banned=UNK)
    got_best, got_scores = beam_search(Ensemble([model]), src, mask, beam_size=3, max_extra=4, banned=UNK)
    assert got_best == best and torch.allclose(got_scores, scores)


ENSEMBLES = {  # (the members, what their outputs show: greedy rows that end while others go on, beams of several lengths)
    "three": (lambda: models(3, eos=0.5), "rows end"), "two": (lambda: models(2, eos=0.3), "lengths"),
    "of different sizes": (of_different_sizes, "")}


@pytest.mark.parametrize("members", ENSEMBLES)
def test_an_ensemble_decodes_by_the_mean_of_its_models(members):
    """Greedy: each step again, with whole forward passes and no cache, is the argmax of the mean log-probabilities.
    Beam search: each output's score is the mean of the members' teacher-forced scores (with the length penalty)."""
    (make, shows), (src, mask) = ENSEMBLES[members], source()
    ensemble = make()
    got = outputs(greedy_decode_cached(Ensemble(ensemble), src, mask, 10, BOS, EOS, banned=UNK))
    ended = [out[-1] == EOS for out in got]
    assert "rows end" not in shows or (any(ended) and not all(ended))  # rows leave the batch while others go on
    assert all(end or len(out) == 9 for end, out in zip(ended, got))
    for i, out in enumerate(got):
        ys = torch.tensor([[BOS] + out])
        for t in range(len(out)):
            tgt_mask = torch.tril(torch.ones(1, t + 1, t + 1, dtype=torch.bool))
            step = torch.stack([m.generator(m(src[i:i + 1], ys[:, :t + 1], mask[i:i + 1], tgt_mask))[0, -1]
                                for m in ensemble]).mean(0)
            step[UNK] = float("-inf")
            assert int(step.argmax()) == out[t], (i, t)
    best, scores = beam_search(Ensemble(ensemble), src, mask, beam_size=3, max_extra=5, banned=UNK)
    assert "lengths" not in shows or len({len(out) for out in best}) > 1  # sentences end at different steps
    for i, out in enumerate(best):
        mean = sum(sequence_score(m, src[i:i + 1], mask[i:i + 1], out) for m in ensemble) / len(ensemble)
        assert abs(float(scores[i]) - mean) < 1e-4, i


def test_an_ensemble_takes_one_vocabulary_and_the_shortest_length_of_its_members():
    "(No model, or models of two dtypes: the chapter's own tests.)"
    assert Ensemble(of_different_sizes()).config.max_len == 40
    with pytest.raises(ValueError, match="vocabularies"):
        Ensemble(models(1, eos=0.0) + [make_model(13, 17, N=1, d_model=32, d_ff=64, h=4)])
