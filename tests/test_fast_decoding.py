"""The cached decoders of 22_decoding against the plain loop of 05_training: the fused projections, the written-out
attention for one query, greedy's argmax of the scores and the caches that beams keep give the same tokens as
`greedy_decode`, which recomputes the whole prefix with the model's own layers, for many sentences and lengths."""
import pytest
import torch

from annotated_transformer.data import EOS, PAD
from annotated_transformer.decoding import Ensemble, beam_search, greedy_decode_cached
from annotated_transformer.fast import speed_up
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


def test_ensemble_of_one_and_beam_of_one_decode_as_greedy():
    m = eos_model(3, eos=3.0)
    src, src_mask = sources(3)
    plain = strip(greedy_decode(m, src, src_mask, 20, 0, EOS))
    assert strip(greedy_decode_cached(Ensemble([m]), src, src_mask, 20)) == plain
    found, _ = beam_search(m, src, src_mask, beam_size=1, max_extra=20)
    assert [row[1:] for row in plain] == [f[:19] for f in found]


def test_banned_token_never_output():
    m = eos_model(2, eos=0.0)
    src, src_mask = sources(2)
    free = greedy_decode_cached(m, src, src_mask, 20)
    words = free[:, 1:].flatten()
    common = int(words[words != EOS].mode().values)  # the word the model outputs most
    banned = greedy_decode_cached(m, src, src_mask, 20, banned=common)
    assert common != EOS and common in free and common not in banned


def test_nan_weights_refused():
    m = eos_model(0, eos=0.0)
    with torch.no_grad():
        m.decoder.layers[0].feed_forward.w_1.weight[0, 0] = float("nan")
    src, src_mask = sources(0)
    with pytest.raises(ValueError, match="NaN"):
        greedy_decode_cached(m, src, src_mask, 20)
    with pytest.raises(ValueError, match="NaN"):
        beam_search(m, src, src_mask, beam_size=2, max_extra=5)


def test_weights_changed_after_decoding_are_used():
    "The fused copies of the projections follow the weights: a change after one decoding shows in the next."
    m = speed_up(eos_model(3, eos=1.5))
    src, src_mask = sources(3)
    greedy_decode_cached(m, src, src_mask, 20)  # makes the fused copies
    with torch.no_grad():
        m.generator.proj.bias[EOS] += 100.0  # </s> first everywhere
        m.decoder.layers[0].self_attn.linears[1].weight.mul_(3.0)
    assert strip(greedy_decode_cached(m, src, src_mask, 20)) == strip(greedy_decode(m, src, src_mask, 20, 0, EOS))
    assert greedy_decode_cached(m, src, src_mask, 20)[:, 1].eq(EOS).all()
