"""Compatibility with the 2022 Annotated Transformer: same state_dict keys, same outputs.

The reference below is written from scratch in functional form from the published description
of that notebook (unbiased-std LayerNorm with eps added to the std, pre-norm sublayers, final
norm on both stacks, sqrt(d_model)-scaled embeddings, the `pe` buffer). It reads nothing but
the raw state_dict, so it shares no code with the package.
"""
import math

import torch
import torch.nn.functional as F

from annotated_transformer.model import make_model, subsequent_mask


def expected_keys(N, enc_sub=2, dec_sub=3):
    keys = {"src_embed.0.lut.weight", "src_embed.1.pe", "tgt_embed.0.lut.weight", "tgt_embed.1.pe",
            "generator.proj.weight", "generator.proj.bias"}
    for stack, attns, subs in (("encoder", ["self_attn"], enc_sub), ("decoder", ["self_attn", "src_attn"], dec_sub)):
        keys |= {f"{stack}.norm.a_2", f"{stack}.norm.b_2"}
        for i in range(N):
            p = f"{stack}.layers.{i}"
            for a in attns:
                keys |= {f"{p}.{a}.linears.{j}.{w}" for j in range(4) for w in ("weight", "bias")}
            keys |= {f"{p}.feed_forward.{l}.{w}" for l in ("w_1", "w_2") for w in ("weight", "bias")}
            keys |= {f"{p}.sublayer.{j}.norm.{g}" for j in range(subs) for g in ("a_2", "b_2")}
    return keys


def test_state_dict_keys_and_module_names_match_2022():
    sd = make_model(30, 40).state_dict()  # defaults: N=6, d_model=512
    assert set(sd) == expected_keys(6)
    assert sd["src_embed.1.pe"].shape == (1, 5000, 512)
    assert sd["decoder.layers.5.src_attn.linears.3.bias"].shape == (512,)
    model = make_model(30, 40, N=2, d_model=32, d_ff=64, h=4)
    kinds = {name: type(m).__name__ for name, m in model.named_modules()}
    expected = {"": "EncoderDecoder", "encoder": "Encoder", "decoder": "Decoder", "encoder.layers.0": "EncoderLayer",
                "decoder.layers.1": "DecoderLayer", "encoder.layers.0.self_attn": "MultiHeadedAttention",
                "decoder.layers.0.feed_forward": "PositionwiseFeedForward", "encoder.layers.0.sublayer.0": "SublayerConnection",
                "src_embed": "Sequential", "src_embed.0": "Embeddings", "src_embed.1": "PositionalEncoding",
                "generator": "Generator"}
    assert {name: kinds.get(name) for name in expected} == expected


# ---- independent functional reference -------------------------------------------------------
def _ln(sd, p, x, eps=1e-6):
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)
    return sd[p + ".a_2"] * (x - mean) / (std + eps) + sd[p + ".b_2"]


def _mha(sd, p, q_in, kv_in, mask, h):
    lin = lambda j, x: F.linear(x, sd[f"{p}.linears.{j}.weight"], sd[f"{p}.linears.{j}.bias"])
    b, d = q_in.size(0), q_in.size(-1)
    heads = lambda x: x.reshape(b, -1, h, d // h).permute(0, 2, 1, 3)
    q, k, v = heads(lin(0, q_in)), heads(lin(1, kv_in)), heads(lin(2, kv_in))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1).bool())
    return lin(3, out.permute(0, 2, 1, 3).reshape(b, -1, d))


def _ffn(sd, p, x):
    hid = F.relu(F.linear(x, sd[p + ".w_1.weight"], sd[p + ".w_1.bias"]))
    return F.linear(hid, sd[p + ".w_2.weight"], sd[p + ".w_2.bias"])


def _embed(sd, p, ids):
    w = sd[p + ".0.lut.weight"]
    return w[ids] * math.sqrt(w.size(1)) + sd[p + ".1.pe"][0, : ids.size(1)]


def reference_forward(sd, src, tgt, src_mask, tgt_mask, N, h):
    x = _embed(sd, "src_embed", src)
    for i in range(N):
        p = f"encoder.layers.{i}"
        y = _ln(sd, p + ".sublayer.0.norm", x); x = x + _mha(sd, p + ".self_attn", y, y, src_mask, h)
        y = _ln(sd, p + ".sublayer.1.norm", x); x = x + _ffn(sd, p + ".feed_forward", y)
    memory = _ln(sd, "encoder.norm", x)
    x = _embed(sd, "tgt_embed", tgt)
    for i in range(N):
        p = f"decoder.layers.{i}"
        y = _ln(sd, p + ".sublayer.0.norm", x); x = x + _mha(sd, p + ".self_attn", y, y, tgt_mask, h)
        y = _ln(sd, p + ".sublayer.1.norm", x); x = x + _mha(sd, p + ".src_attn", y, memory, src_mask, h)
        y = _ln(sd, p + ".sublayer.2.norm", x); x = x + _ffn(sd, p + ".feed_forward", y)
    x = _ln(sd, "decoder.norm", x)
    return F.log_softmax(F.linear(x, sd["generator.proj.weight"], sd["generator.proj.bias"]), -1)


def test_outputs_match_functional_reference_and_strict_load():
    torch.manual_seed(0)
    N, h = 2, 4
    model = make_model(23, 19, N=N, d_model=32, d_ff=64, h=h).eval()
    # perturb norms so that gains and biases matter
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("a_2", "b_2")):
                p.add_(0.1 * torch.randn_like(p))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    src, tgt = torch.randint(0, 23, (3, 9)), torch.randint(0, 19, (3, 6))
    src_mask = torch.ones(3, 1, 9, dtype=torch.bool); src_mask[1, :, 6:] = False
    tgt_mask = subsequent_mask(6)
    expected = reference_forward(sd, src, tgt, src_mask, tgt_mask, N, h)
    got = model.generator(model(src, tgt, src_mask, tgt_mask))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # a fresh model loads these weights strictly and gives the same outputs
    fresh = make_model(23, 19, N=N, d_model=32, d_ff=64, h=h).eval()
    fresh.load_state_dict(sd, strict=True)
    torch.testing.assert_close(fresh.generator(fresh(src, tgt, src_mask, tgt_mask)), expected, atol=1e-5, rtol=1e-5)


def test_forward_signatures_are_those_of_2022():
    """Chapters 1-5 keep The Annotated Transformer 2022's call signatures: what only a later chapter needs (the decoding
    cache, the position offset, the fast kernels) reaches the model by substitution, not by extra arguments."""
    import inspect
    from annotated_transformer.attention import MultiHeadedAttention
    from annotated_transformer.layers import (Embeddings, LayerNorm, PositionalEncoding, PositionwiseFeedForward,
                                              SublayerConnection)
    from annotated_transformer.model import Decoder, DecoderLayer, Encoder, EncoderDecoder, EncoderLayer, Generator
    expected = {  # the 2022 script's parameters, after self
        MultiHeadedAttention.forward: ["query", "key", "value", "mask"],
        PositionalEncoding.forward: ["x"], Embeddings.forward: ["x"], LayerNorm.forward: ["x"],
        PositionwiseFeedForward.forward: ["x"], SublayerConnection.forward: ["x", "sublayer"], Generator.forward: ["x"],
        EncoderLayer.forward: ["x", "mask"], Encoder.forward: ["x", "mask"],
        DecoderLayer.forward: ["x", "memory", "src_mask", "tgt_mask"], Decoder.forward: ["x", "memory", "src_mask", "tgt_mask"],
        EncoderDecoder.forward: ["src", "tgt", "src_mask", "tgt_mask"], EncoderDecoder.encode: ["src", "src_mask"],
        EncoderDecoder.decode: ["memory", "src_mask", "tgt", "tgt_mask"]}
    for method, names in expected.items():
        assert list(inspect.signature(method).parameters)[1:] == names, method.__qualname__
