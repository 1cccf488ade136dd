"""Cached greedy equals uncached greedy, beam 1 equals greedy, translation errors, averaging."""
import pytest
import torch

from annotated_transformer.checkpoint import load_model, save_model
from annotated_transformer.data import BOS, EOS, SPECIALS, Vocab
from annotated_transformer.decoding import beam_search, greedy_decode_cached, translate
from annotated_transformer.evaluation import average_checkpoints
from annotated_transformer.model import ModelConfig, build_model
from annotated_transformer.training import greedy_decode


@pytest.mark.parametrize("pre_norm", [True, False])
def test_cached_greedy_matches_uncached(pre_norm):
    torch.manual_seed(0)
    model = build_model(ModelConfig(30, 40, N=2, d_model=32, d_ff=64, h=4, pre_norm=pre_norm)).eval()
    src = torch.randint(4, 30, (5, 9)); src[1, 6:] = 2; src[4, 3:] = 2
    mask = (src != 2).unsqueeze(-2)
    assert torch.equal(greedy_decode_cached(model, src, mask, 15, BOS, EOS), greedy_decode(model, src, mask, 15, BOS, EOS))


def test_beam_one_is_greedy():
    torch.manual_seed(1)
    model = build_model(ModelConfig(30, 40, N=2, d_model=32, d_ff=64, h=4)).eval()
    with torch.no_grad():  # make </s> likely enough to appear
        model.generator.proj.bias[EOS] += 3.0
    src = torch.randint(4, 30, (6, 7)); mask = torch.ones(6, 1, 7, dtype=torch.bool)
    greedy = greedy_decode(model, src, mask, 7 + 50 + 1, BOS, EOS)
    beam, _ = beam_search(model, src, mask, beam_size=1)
    for g, b in zip(greedy.tolist(), beam):
        g = g[1:]
        assert b == (g[: g.index(EOS)] if EOS in g else g)


def test_beam_respects_length_limit():
    torch.manual_seed(2)
    model = build_model(ModelConfig(30, 40, N=1, d_model=16, d_ff=32, h=2)).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] -= 50.0  # never wants to stop
    src = torch.randint(4, 30, (2, 4)); mask = torch.ones(2, 1, 4, dtype=torch.bool)
    out, _ = beam_search(model, src, mask, beam_size=3, max_extra=5)
    assert all(len(o) <= 4 + 5 - 1 for o in out)  # </s> is the 9th token at most


def test_translate_rejects_too_long_input():
    vocab = Vocab(list(SPECIALS) + ["ein", "hund", "a", "dog"])
    model = build_model(ModelConfig(len(vocab), len(vocab), N=1, d_model=16, d_ff=32, h=2, max_len=60))
    with pytest.raises(ValueError, match="too long"):
        translate(model, ["ein " * 20], vocab, vocab)
    assert isinstance(translate(model, ["ein hund"], vocab, vocab, beam_size=2)[0], str)


def test_average_of_two_known_checkpoints(tmp_path):
    cfg = ModelConfig(9, 9, N=1, d_model=8, d_ff=16, h=2)
    a, b = build_model(cfg), build_model(cfg)
    with torch.no_grad():
        for p in a.parameters(): p.fill_(1.0)
        for p in b.parameters(): p.fill_(3.0)
    save_model(a, tmp_path / "a"); save_model(b, tmp_path / "b")
    avg = load_model(average_checkpoints([tmp_path / "a", tmp_path / "b"], tmp_path / "avg"))
    assert all(torch.all(p == 2.0) for p in avg.parameters())
