"""The exercises' checker, `annotated_transformer.exercises.check`, on answers written here from scratch.

* The package's own definitions, and correct versions written here independently of them, pass every exercise.
* Wrong versions of the kinds learners write fail, each with a message that names its mistake (a distinctive word of
  the message is asserted: the message is what a learner acts on), in at most two lines.
* A reader's code that raises is reported as such, with the reader's own line; odd answers (wrong types, shapes,
  names) get a clear message; nothing ever lets a traceback through.
* The exercise cells of chapters 1-5: each exercise has a stub, a check and a solution folded away in Colab; every stub
  says it is not written yet, every solution passes.
"""
import inspect
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
import torch.nn.functional as F

from annotated_transformer.exercises import EXERCISES, check
import annotated_transformer.exercises as exercises_module

ROOT = Path(__file__).resolve().parents[1]


def verdict(capsys, name, answer) -> tuple[bool, str]:
    "What check returns and prints for `answer`."
    capsys.readouterr()
    ok = check(name, answer)
    return ok, capsys.readouterr().out


def assert_fails(capsys, name, answer, *words):
    "check fails `answer` in one or two lines that contain every one of `words` (case ignored)."
    ok, out = verdict(capsys, name, answer)
    assert ok is False, f"{name}: a wrong answer passed: {out}"
    assert 1 <= len(out.strip().splitlines()) <= 2, f"not one or two lines: {out}"
    assert "Traceback" not in out, out
    for word in words:
        assert word.lower() in out.lower(), f"expected {word!r} in: {out}"
    return out


# --- correct answers, written here -------------------------------------------------------------------------------------

def my_attention(query, key, value, mask=None, dropout=None):
    "Equation 1, written independently of the package."
    scores = torch.matmul(query, key.transpose(-1, -2)) / query.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = F.softmax(scores, dim=-1)
    if dropout is not None:
        weights = dropout(weights)
    return torch.matmul(weights, value), weights


class MyMHA(nn.Module):
    "Multi-head attention written here; class attributes switch on one mistake at a time."
    split, scale, join, head_axis, keep, drop, refuse, use_module_dropout = "seq-first", "d_k", "transpose", True, True, True, True, True

    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        if self.refuse:
            assert d_model % h == 0, "h must divide d_model"
        self.h, self.d_k = h, d_model // h
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)
        self.p = dropout
        self.attn = None

    def forward(self, query, key, value, mask=None):
        b = query.size(0)
        def cut(x):
            if self.split == "seq-first":
                return x.reshape(b, -1, self.h, self.d_k).permute(0, 2, 1, 3)
            return x.reshape(b, self.h, -1, self.d_k)  # mistake: heads from a plain view
        q, k, v = (cut(lin(x)) for lin, x in zip(self.linears, (query, key, value)))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k if self.scale == "d_k" else self.h * self.d_k)
        if mask is not None:
            scores = scores.masked_fill((mask.unsqueeze(1) if self.head_axis else mask) == 0, -1e9)
        weights = scores.softmax(-1)
        if self.drop:
            weights = self.dropout(weights) if self.use_module_dropout else F.dropout(weights, self.p, training=True)
        if self.keep:
            self.attn = weights
        x = weights @ v  # (b, h, seq, d_k)
        x = x.permute(0, 2, 1, 3).reshape(b, -1, self.h * self.d_k) if self.join == "transpose" else x.reshape(b, -1, self.h * self.d_k)
        return self.linears[3](x)


class MyPE(nn.Module):
    "Section 3.5 written here, with switches for the usual mistakes."
    swap = halves = from_one = learned = loose = ignore_x = dropout_first = False
    exponent, base, dropout_on = "2i", 10000.0, True

    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        pos = torch.arange(max_len).float()[:, None] + (1 if self.from_one else 0)
        if self.exponent == "dimension":
            j = torch.arange(d_model).float()
            angle = pos / self.base ** (j / d_model)
            table = torch.where(j % 2 == 0, angle.sin(), angle.cos())
        else:
            i = torch.arange(0, d_model, 2).float() if self.exponent == "2i" else torch.arange(d_model // 2).float()
            angle = pos / self.base ** (i / d_model)
            first, second = (angle.cos(), angle.sin()) if self.swap else (angle.sin(), angle.cos())
            table = torch.cat([first, second], 1) if self.halves else torch.stack([first, second], -1).flatten(1)
        if self.learned:
            self.pe = nn.Parameter(table)
        elif self.loose:
            self.pe = table
        else:
            self.register_buffer("pe", table)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        pe = self.pe[: x.size(1)]
        if self.ignore_x:
            return self.dropout(pe.expand_as(x))
        if not self.dropout_on:
            return x + pe
        return self.dropout(x) + pe if self.dropout_first else self.dropout(x + pe)


class MyLayerNorm(nn.Module):
    "The chapter's LayerNorm written here, with switches for the usual mistakes."
    unbiased, eps_inside, use_eps, fixed_eps, axis, params, divide_by = True, False, True, None, -1, True, "std"

    def __init__(self, features, eps=1e-6):
        super().__init__()
        if self.params:
            self.gain = nn.Parameter(torch.ones(features))
            self.shift = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        eps = (self.fixed_eps if self.fixed_eps is not None else self.eps) if self.use_eps else 0.0
        mu = x.mean(self.axis, keepdim=True)
        var = x.var(self.axis, keepdim=True, unbiased=self.unbiased)
        if self.divide_by == "var":
            y = (x - mu) / (var + eps)
        elif self.eps_inside:
            y = (x - mu) / torch.sqrt(var + eps)
        else:
            y = (x - mu) / (var.sqrt() + eps)
        return self.gain * y + self.shift if self.params else y


def my_subsequent_mask(size):
    return torch.ones(1, size, size).triu(1) == 0


def my_make_std_mask(tgt, pad):
    return (tgt != pad)[:, None, :] & my_subsequent_mask(tgt.size(-1))


def my_rate(step, model_size, factor, warmup):
    if step == 0:
        step = 1
    return factor * (model_size ** -0.5 * min(step ** -0.5, step * warmup ** -1.5))


class MyLabelSmoothing(nn.Module):
    "Section 5.4 written here (the KL divergence by torch.xlogy), with switches for the usual mistakes."
    spread_over, zero_pad_column, zero_pad_rows, confidence_reduced, reduction, loss_kind, fixed_pad = \
        "size-2", True, True, True, "sum", "kl", None

    def __init__(self, size, padding_idx, smoothing=0.0):
        super().__init__()
        self.size, self.padding_idx, self.smoothing = size, padding_idx, smoothing

    def forward(self, x, target):
        pad = self.fixed_pad if self.fixed_pad is not None else self.padding_idx
        others = {"size-2": self.size - 2, "size-1": self.size - 1}[self.spread_over]
        t = torch.full_like(x, self.smoothing / others).detach()
        t[torch.arange(len(target)), target] = 1 - self.smoothing if self.confidence_reduced else 1.0
        if self.zero_pad_column:
            t[:, pad] = 0
        if self.zero_pad_rows:
            t[target == pad] = 0
        if self.loss_kind == "kl":
            per_entry = torch.xlogy(t, t) - t * x
        elif self.loss_kind == "kl-naive":
            per_entry = t * (t.log() - x)  # NaN where t = 0
        else:
            per_entry = -t * x  # cross-entropy
        return per_entry.sum() if self.reduction == "sum" else per_entry.mean()


def my_greedy(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.shape[0], 1), start_symbol, dtype=torch.long)
    while ys.shape[1] < max_len:
        causal = torch.tril(torch.ones(ys.shape[1], ys.shape[1], dtype=torch.bool))[None]
        logp = model.generator(model.decode(memory, src_mask, ys, causal)[:, -1])
        ys = torch.cat([ys, logp.argmax(-1, keepdim=True)], 1)
    return ys


class MyBatch:
    "A batch class of one's own that holds make_std_mask, as the package's Batch does."
    make_std_mask = staticmethod(my_make_std_mask)


def package_answers():
    from annotated_transformer.attention import attention, MultiHeadedAttention
    from annotated_transformer.layers import PositionalEncoding, LayerNorm
    from annotated_transformer.model import subsequent_mask
    from annotated_transformer.batches import Batch
    from annotated_transformer.training import rate, LabelSmoothing, greedy_decode
    return {"attention": attention, "MultiHeadedAttention": MultiHeadedAttention, "PositionalEncoding": PositionalEncoding,
            "LayerNorm": LayerNorm, "subsequent_mask": subsequent_mask, "make_std_mask": Batch, "rate": rate,
            "LabelSmoothing": LabelSmoothing, "greedy_decode": greedy_decode}


MINE = {"attention": my_attention, "MultiHeadedAttention": MyMHA, "PositionalEncoding": MyPE, "LayerNorm": MyLayerNorm,
        "subsequent_mask": my_subsequent_mask, "make_std_mask": my_make_std_mask, "rate": my_rate,
        "LabelSmoothing": MyLabelSmoothing, "greedy_decode": my_greedy}


@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_packages_definitions_pass(capsys, name):
    ok, out = verdict(capsys, name, package_answers()[name])
    assert ok is True, out
    assert out.strip() == f"{name}: correct, all {len(EXERCISES[name].properties)} checks pass."


@pytest.mark.parametrize("name", list(EXERCISES))
def test_correct_versions_written_independently_pass(capsys, name):
    ok, out = verdict(capsys, name, MINE[name])
    assert ok is True, out


def test_make_std_mask_takes_a_function_or_a_class_that_has_it(capsys):
    assert verdict(capsys, "make_std_mask", MyBatch)[0] is True
    assert verdict(capsys, "Batch.make_std_mask", my_make_std_mask)[0] is True


# --- wrong answers: attention -----------------------------------------------------------------------------------------

def attention_variant(scale="sqrt", softmax_dim=-1, fill=-1e9, invert=False, after_softmax=False, dropout_use="weights",
                      returns="pair", detach_query=False, in_place=False, bool_only=False):
    "Equation 1 with one of the mistakes learners make."
    def attention(query, key, value, mask=None, dropout=None):
        d_k = query.size(-1)
        if in_place:
            query /= math.sqrt(d_k)
            scores = query @ key.transpose(-2, -1)
        else:
            q = query.detach() if detach_query else query
            scores = q @ key.transpose(-2, -1)
            scores = {"sqrt": scores / math.sqrt(d_k), "none": scores, "d_k": scores / d_k}[scale]
        if mask is not None and not after_softmax:
            hide = (mask != 0) if invert else ~mask if bool_only else (mask == 0)
            scores = scores.masked_fill(hide, fill)
        weights = scores.softmax(dim=softmax_dim)
        if mask is not None and after_softmax:
            weights = weights.masked_fill(mask == 0, 0.0)
        if dropout is not None and dropout_use == "weights":
            weights = dropout(weights)
        if dropout is not None and dropout_use == "functional":
            weights = F.dropout(weights, p=dropout.p, training=True)
        out = weights @ value
        if dropout is not None and dropout_use == "output":
            out = dropout(out)
        return out if returns == "output" else (out, weights)
    return attention


def unscaled_sqrt_multiplied(query, key, value, mask=None, dropout=None):
    weights = (query @ key.transpose(-2, -1) * math.sqrt(query.size(-1))).softmax(-1)
    return weights @ value, weights


ATTENTION_MISTAKES = [
    ("no scaling", attention_variant(scale="none"), ["not scaled", "sqrt(d_k)"]),
    ("scaled by d_k", attention_variant(scale="d_k"), ["divided by d_k"]),
    ("multiplied by sqrt(d_k)", unscaled_sqrt_multiplied, ["multiplied by sqrt(d_k)"]),
    ("softmax over the queries", attention_variant(softmax_dim=-2), ["wrong dimension"]),
    ("softmax over the heads", attention_variant(softmax_dim=1), ["do not sum to 1 over the keys"]),
    ("mask filled with 0", attention_variant(fill=0.0), ["set to 0", "large negative"]),
    ("mask inverted", attention_variant(invert=True), ["inverted"]),
    ("mask applied after the softmax", attention_variant(after_softmax=True), ["before the softmax"]),
    ("mask filled with -inf", attention_variant(fill=float("-inf")), ["NaN", "-inf"]),
    ("mask as bools only", attention_variant(bool_only=True), ["your code raised", "0/1 integer"]),
    ("dropout ignored", attention_variant(dropout_use="none"), ["not applied"]),
    ("dropout on the output", attention_variant(dropout_use="output"), ["not applied"]),
    ("F.dropout always on", attention_variant(dropout_use="functional"), ["eval mode"]),
    ("only the output returned", attention_variant(returns="output"), ["one tensor", "(output, weights)"]),
    ("query detached", attention_variant(detach_query=True), ["no gradient", "query"]),
    ("query scaled in place", attention_variant(in_place=True), ["in place"]),
]


@pytest.mark.parametrize("what, answer, words", ATTENTION_MISTAKES, ids=[m[0] for m in ATTENTION_MISTAKES])
def test_wrong_attention_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "attention", answer, *words)


def test_a_crash_is_reported_with_the_readers_line(capsys):
    def attention(query, key, value, mask=None, dropout=None):
        scores = query @ key / math.sqrt(query.size(-1))  # the key is not transposed
        return scores.softmax(-1) @ value, scores.softmax(-1)
    out = assert_fails(capsys, "attention", attention, "your code raised RuntimeError")
    line = inspect.getsourcelines(attention)[1] + 1
    assert f"test_exercises.py, line {line}: scores = query @ key" in out, out
    assert "in attention" in out and "(the check was running it on query (2, 3, 5, 8)" in out, out


def test_a_crash_in_a_helper_of_the_reader_names_the_helpers_line(capsys):
    def helper(x):
        raise ValueError("helper is unhappy")
    def attention(query, key, value, mask=None, dropout=None):
        return helper(query)
    out = assert_fails(capsys, "attention", attention, "your code raised ValueError: helper is unhappy", "in helper")
    assert f"line {inspect.getsourcelines(helper)[1] + 1}" in out


def test_a_stub_is_not_written_yet(capsys):
    def attention(query, key, value, mask=None, dropout=None):
        raise NotImplementedError("write me")
    assert_fails(capsys, "attention", attention, "not written yet")
    def attention(query, key, value, mask=None, dropout=None):
        ...
    assert_fails(capsys, "attention", attention, "returned None", "return")


# --- wrong answers: multi-head attention -------------------------------------------------------------------------------

def mha(**mistake):
    return type("MultiHeadedAttention", (MyMHA,), mistake)


class PlainMHA:
    "Not an nn.Module."
    def __init__(self, h, d_model, dropout=0.1):
        pass


class RenamedMHA(MyMHA):
    def __init__(self, heads, d_model, dropout=0.1):
        super().__init__(heads, d_model, dropout)


class ThreeLinears(nn.Module):
    "No output projection W^O."
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(3))
    def forward(self, query, key, value, mask=None):
        return self.linears[2](value)[:, : query.size(1)]


class SwappedProjections(MyMHA):
    "The key projected with W^V and the value with W^K."
    def forward(self, query, key, value, mask=None):
        return super().forward(query, value, key, mask)


MHA_MISTAKES = [
    ("heads from a plain view", mha(split="view"), ["cut wrongly", "transpose(1, 2)"]),
    ("scaled by sqrt(d_model)", mha(scale="d_model"), ["sqrt(d_model)", "d_k"]),
    ("heads joined without transposing", mha(join="view"), ["joined wrongly"]),
    ("mask without a head axis", mha(head_axis=False), ["your code raised", "unsqueeze(1)"]),
    ("weights not kept", mha(keep=False), ["self.attn"]),
    ("no dropout", mha(drop=False), ["train mode"]),
    ("F.dropout always on", mha(use_module_dropout=False), ["eval mode"]),
    ("a bad head count accepted", mha(refuse=False), ["without complaint", "d_model % h"]),
    ("not an nn.Module", PlainMHA, ["nn.Module"]),
    ("parameters renamed", RenamedMHA, ["(heads, d_model, dropout)", "same names"]),
    ("no output projection", ThreeLinears, ["four nn.Linear"]),
    ("key and value swapped", SwappedProjections, ["one head", "linears[0]"]),
]


@pytest.mark.parametrize("what, answer, words", MHA_MISTAKES, ids=[m[0] for m in MHA_MISTAKES])
def test_wrong_multi_head_attention_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "MultiHeadedAttention", answer, *words)


def test_an_instance_instead_of_the_class(capsys):
    assert_fails(capsys, "MultiHeadedAttention", MyMHA(4, 32), "the class itself")


# --- wrong answers: positional encoding and layer norm -----------------------------------------------------------------

def pe(**mistake):
    return type("PositionalEncoding", (MyPE,), mistake)


PE_MISTAKES = [
    ("sin and cos swapped", pe(swap=True), ["swapped"]),
    ("in two halves", pe(halves=True), ["interleave"]),
    ("exponent i/d", pe(exponent="i"), ["frequencies", "i/d_model"]),
    ("exponent per dimension", pe(exponent="dimension"), ["frequencies", "share the exponent"]),
    ("positions from 1", pe(from_one=True), ["start at 0"]),
    ("base 1000", pe(base=1000.0), ["differs from section 3.5", "position"]),
    ("no dropout", pe(dropout_on=False), ["nothing was dropped"]),
    ("dropout before the addition", pe(dropout_first=True), ["after the addition"]),
    ("a learned table", pe(learned=True), ["fixed", "register_buffer"]),
    ("a plain tensor attribute", pe(loose=True), ["plain tensor attribute", "register_buffer"]),
    ("input ignored", pe(ignore_x=True), ["ignores the input"]),
]


@pytest.mark.parametrize("what, answer, words", PE_MISTAKES, ids=[m[0] for m in PE_MISTAKES])
def test_wrong_positional_encoding_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "PositionalEncoding", answer, *words)


def ln(**mistake):
    return type("LayerNorm", (MyLayerNorm,), mistake)


class TorchLayerNorm(nn.LayerNorm):
    "PyTorch's own layer norm: the biased standard deviation, eps under the square root."
    def __init__(self, features, eps=1e-6):
        super().__init__(features, eps=eps)


LN_MISTAKES = [
    ("biased std", ln(unbiased=False), ["biased standard deviation", "x.std(-1)"]),
    ("nn.LayerNorm", TorchLayerNorm, ["biased standard deviation"]),
    ("eps under the root", ln(eps_inside=True), ["under the square root"]),
    ("no eps", ln(use_eps=False), ["NaN", "add eps"]),
    ("eps fixed at 1e-6", ln(fixed_eps=1e-6), ["not used"]),
    ("over the first axis", ln(axis=0), ["mean 0", "last axis"]),
    ("divided by the variance", ln(divide_by="var"), ["variance"]),
    ("no gain or bias", ln(params=False), ["two parameters", "gain"]),
]


@pytest.mark.parametrize("what, answer, words", LN_MISTAKES, ids=[m[0] for m in LN_MISTAKES])
def test_wrong_layer_norm_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "LayerNorm", answer, *words)


class BiasFirstLayerNorm(MyLayerNorm):
    "The bias added before normalising, the gain after."
    def forward(self, x):
        x = x + self.shift
        mu, sd = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.gain * (x - mu) / (sd + self.eps)


def test_layer_norm_with_the_bias_in_the_wrong_place(capsys):
    assert_fails(capsys, "LayerNorm", BiasFirstLayerNorm, "after normalising")


# --- wrong answers: the masks -----------------------------------------------------------------------------------------

SUBSEQUENT_MISTAKES = [
    ("no batch axis", lambda size: torch.tril(torch.ones(size, size, dtype=torch.bool)), ["(1, 5, 5)", "broadcasts"]),
    ("floats", lambda size: torch.tril(torch.ones(1, size, size)), ["bools", "float32"]),
    ("inverted", lambda size: torch.triu(torch.ones(1, size, size, dtype=torch.bool), diagonal=1), ["inverted"]),
    ("diagonal hidden", lambda size: torch.tril(torch.ones(1, size, size, dtype=torch.bool), diagonal=-1), ["diagonal"]),
    ("upper triangle", lambda size: torch.triu(torch.ones(1, size, size, dtype=torch.bool)), ["upper", "torch.tril"]),
    ("one too many", lambda size: torch.tril(torch.ones(1, size, size, dtype=torch.bool), diagonal=1), ["row 0", "expected"]),
]


@pytest.mark.parametrize("what, answer, words", SUBSEQUENT_MISTAKES, ids=[m[0] for m in SUBSEQUENT_MISTAKES])
def test_wrong_subsequent_mask_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "subsequent_mask", answer, *words)


def causal_mask(n):
    return torch.tril(torch.ones(1, n, n, dtype=torch.bool))


STD_MASK_MISTAKES = [
    ("no padding part", lambda tgt, pad: causal_mask(tgt.size(-1)), ["padding part is missing"]),
    ("no causal part", lambda tgt, pad: (tgt != pad).unsqueeze(-2), ["future part is missing"]),
    ("padding expanded, no causal part",
     lambda tgt, pad: (tgt != pad).unsqueeze(-2).expand(-1, tgt.size(-1), -1), ["future positions are not hidden"]),
    ("padding not applied", lambda tgt, pad: causal_mask(tgt.size(-1)).expand(tgt.size(0), -1, -1), ["padding is not hidden"]),
    ("padding on the query axis", lambda tgt, pad: (tgt != pad).unsqueeze(-1) & causal_mask(tgt.size(-1)), ["wrong axis"]),
    ("pad id written in", lambda tgt, pad: (tgt != 2).unsqueeze(-2) & causal_mask(tgt.size(-1)), ["hides id 2", "`pad`"]),
    ("inverted", lambda tgt, pad: ~((tgt != pad).unsqueeze(-2) & causal_mask(tgt.size(-1))), ["inverted"]),
    ("integers", lambda tgt, pad: ((tgt != pad).unsqueeze(-2) & causal_mask(tgt.size(-1))).long(), ["bools"]),
]


@pytest.mark.parametrize("what, answer, words", STD_MASK_MISTAKES, ids=[m[0] for m in STD_MASK_MISTAKES])
def test_wrong_make_std_mask_fails_naming_its_mistake(capsys, what, answer, words):
    def make_std_mask(tgt, pad):
        return answer(tgt, pad)
    assert_fails(capsys, "make_std_mask", make_std_mask, *words)


# --- wrong answers: training ------------------------------------------------------------------------------------------

def rate_no_warmup(step, model_size, factor, warmup):
    return factor * model_size ** -0.5 * max(step, 1) ** -0.5

def rate_no_model_size(step, model_size, factor, warmup):
    step = max(step, 1)
    return factor * min(step ** -0.5, step * warmup ** -1.5)

def rate_max(step, model_size, factor, warmup):
    step = max(step, 1)
    return factor * model_size ** -0.5 * max(step ** -0.5, step * warmup ** -1.5)

def rate_step_0_crashes(step, model_size, factor, warmup):
    return factor * model_size ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)

def rate_step_0_is_0(step, model_size, factor, warmup):
    return 0.0 if step == 0 else rate_step_0_crashes(step, model_size, factor, warmup)

def rate_factor_unused(step, model_size, factor, warmup):
    return rate_step_0_crashes(max(step, 1), model_size, 1.0, warmup)

def rate_warmup_written_in(step, model_size, factor, warmup):
    return rate_step_0_crashes(max(step, 1), model_size, factor, 4000)

def rate_as_a_list(step, model_size, factor, warmup):
    return [rate_step_0_crashes(max(step, 1), model_size, factor, warmup)]

def rate_warmup_power_wrong(step, model_size, factor, warmup):
    step = max(step, 1)
    return factor * model_size ** -0.5 * min(step ** -0.5, step * warmup ** -1.0)


RATE_MISTAKES = [
    ("no warmup", rate_no_warmup, ["no warmup"]),
    ("no model_size", rate_no_model_size, ["model_size ** -0.5 is missing"]),
    ("max instead of min", rate_max, ["max", "min"]),
    ("step 0 raises", rate_step_0_crashes, ["rate(0, 512, 1.0, 4000) raised ZeroDivisionError", "max(step, 1)"]),
    ("step 0 gives 0", rate_step_0_is_0, ["treat step 0 as step 1"]),
    ("factor unused", rate_factor_unused, ["factor is not used"]),
    ("warmup written in", rate_warmup_written_in, ["warmup argument is not used"]),
    ("a list", rate_as_a_list, ["should be a number"]),
    ("warmup ** -1", rate_warmup_power_wrong, ["equation 3 gives"]),
]


@pytest.mark.parametrize("what, answer, words", RATE_MISTAKES, ids=[m[0] for m in RATE_MISTAKES])
def test_wrong_rate_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "rate", answer, *words)


def smoothing(**mistake):
    return type("LabelSmoothing", (MyLabelSmoothing,), mistake)


class DetachedLabelSmoothing(MyLabelSmoothing):
    def forward(self, x, target):
        return super().forward(x.detach(), target)


class NoAxisLabelSmoothing(MyLabelSmoothing):
    "Returns the loss per token instead of its sum."
    def forward(self, x, target):
        t = torch.full_like(x, self.smoothing / (self.size - 2))
        t[torch.arange(len(target)), target] = 1 - self.smoothing
        t[:, self.padding_idx] = 0
        t[target == self.padding_idx] = 0
        return (torch.xlogy(t, t) - t * x).sum(-1)


SMOOTHING_MISTAKES = [
    ("padding column smoothed", smoothing(spread_over="size-1", zero_pad_column=False), ["padding column"]),
    ("spread over size - 1", smoothing(spread_over="size-1"), ["size - 2", "size - 1"]),
    ("padding rows kept", smoothing(zero_pad_rows=False), ["rows whose target is padding"]),
    ("gold not reduced", smoothing(confidence_reduced=False), ["1 - smoothing"]),
    ("averaged", smoothing(reduction="mean"), ["averaged", "reduction='sum'"]),
    ("cross-entropy", smoothing(loss_kind="cross-entropy"), ["cross-entropy", "KL divergence"]),
    ("0 log 0", smoothing(loss_kind="kl-naive"), ["NaN", "xlogy"]),
    ("padding id written in", smoothing(fixed_pad=0), ["padding_idx=3", "use the padding_idx"]),
    ("detached", DetachedLabelSmoothing, ["no gradient"]),
    ("a loss per token", NoAxisLabelSmoothing, ["one number"]),
]


@pytest.mark.parametrize("what, answer, words", SMOOTHING_MISTAKES, ids=[m[0] for m in SMOOTHING_MISTAKES])
def test_wrong_label_smoothing_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "LabelSmoothing", answer, *words)


def greedy_variant(feed="all", position=-1, steps="max_len - 1", mask="causal", batch="rows", ids="long"):
    "Greedy decoding with one of the mistakes learners make."
    def greedy_decode(model, src, src_mask, max_len, start_symbol):
        memory = model.encode(src, src_mask)
        rows = src.size(0) if batch == "rows" else 1
        ys = torch.full((rows, 1), start_symbol, dtype=torch.long if ids == "long" else torch.float)
        for _ in range(max_len - 1 if steps == "max_len - 1" else max_len):
            fed = ys if feed == "all" else ys[:, :1]
            tgt_mask = {"causal": torch.tril(torch.ones(1, fed.size(1), fed.size(1), dtype=torch.bool)),
                        "none": None, "full": torch.ones(1, fed.size(1), fed.size(1), dtype=torch.bool)}[mask]
            out = model.decode(memory, src_mask, fed, tgt_mask)
            next_word = model.generator(out[:, position]).argmax(-1)
            ys = torch.cat([ys, next_word.unsqueeze(1).to(ys.dtype)], dim=1)
        return ys
    return greedy_decode


def greedy_2022(model, src, src_mask, max_len, start_symbol):
    "The Annotated Transformer 2022's greedy decoding, for one sentence at a time."
    memory = model.encode(src, src_mask)
    ys = torch.zeros(1, 1).fill_(start_symbol).type_as(src.data)
    for i in range(max_len - 1):
        out = model.decode(memory, src_mask, ys, causal_mask(ys.size(1)).type_as(src.data))
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.data[0]
        ys = torch.cat([ys, torch.zeros(1, 1).type_as(src.data).fill_(next_word)], dim=1)
    return ys


def greedy_without_start(model, src, src_mask, max_len, start_symbol):
    return my_greedy(model, src, src_mask, max_len, start_symbol)[:, 1:]


GREEDY_MISTAKES = [
    ("always the start symbol", greedy_variant(feed="start"), ["every new token is the same", "out[:, -1]"]),
    ("the first position", greedy_variant(position=0), ["every new token is the same"]),
    ("one step too many", greedy_variant(steps="max_len"), ["max_len - 1"]),
    ("no causal mask", greedy_variant(mask="none"), ["tgt_mask", "subsequent_mask"]),
    ("a full mask", greedy_variant(mask="full"), ["tgt_mask", "subsequent_mask"]),
    ("float ids", greedy_variant(ids="float"), ["integers"]),
    ("one row for the batch", greedy_variant(batch="one"), ["batch of 3", "one row per source sentence"]),
    ("the 2022 version, one sentence only", greedy_2022, ["batch of 3", "one row per source sentence"]),
    ("without the start symbol", greedy_without_start, ["start symbol included"]),
]


@pytest.mark.parametrize("what, answer, words", GREEDY_MISTAKES, ids=[m[0] for m in GREEDY_MISTAKES])
def test_wrong_greedy_decode_fails_naming_its_mistake(capsys, what, answer, words):
    assert_fails(capsys, "greedy_decode", answer, *words)


def test_a_crash_inside_the_stand_in_model_names_the_readers_call(capsys):
    def greedy_decode(model, src, src_mask, max_len, start_symbol):
        ys = torch.full((src.size(0), 1), start_symbol)
        out = model.decode(src, src_mask, ys, causal_mask(1))  # the source ids instead of the memory
        return out
    out = assert_fails(capsys, "greedy_decode", greedy_decode, "your code raised ValueError", "memory from model.encode")
    assert f"line {inspect.getsourcelines(greedy_decode)[1] + 2}: out = model.decode(src" in out, out


# --- odd answers and names --------------------------------------------------------------------------------------------

ODD_ANSWERS = [
    ("attention", lambda query, key, value, mask=None, dropout=None: (object(), object()), ["should be a tensor"]),
    ("attention", lambda query, key, value, mask=None, dropout=None: "attention", ["(output, weights)"]),
    ("attention", lambda q, k, v, mask=None, dropout=None: my_attention(q, k, v, mask, dropout), ["same names"]),
    ("attention", lambda query, key, value, mask, dropout: my_attention(query, key, value, mask, dropout), ["optional"]),
    ("attention", None, ["expected a function"]),
    ("LayerNorm", my_attention, ["expected the class itself"]),
    ("rate", lambda step, model_size, factor, warmup: "fast", ["should be a number"]),
    ("greedy_decode", lambda model, src, src_mask, max_len, start_symbol: [[1, 2]], ["should be a tensor"]),
    ("subsequent_mask", lambda size, extra: my_subsequent_mask(size), ["requires a parameter `extra`"]),
]


@pytest.mark.parametrize("name, answer, words", ODD_ANSWERS)
def test_odd_answers_get_a_clear_message(capsys, name, answer, words):
    assert_fails(capsys, name, answer, *words)


def test_odd_module_outputs_get_a_clear_message(capsys):
    class Stringy(MyMHA):
        def forward(self, query, key, value, mask=None):
            return "output"
    assert_fails(capsys, "MultiHeadedAttention", Stringy, "should be a tensor")
    class ListLoss(MyLabelSmoothing):
        def forward(self, x, target):
            return [1.0]
    assert_fails(capsys, "LabelSmoothing", ListLoss, "should be a tensor")


def test_names_are_forgiving_and_an_unknown_name_lists_the_exercises(capsys):
    assert verdict(capsys, "multi_headed_attention", MyMHA)[0] is True
    assert verdict(capsys, "Label Smoothing", MyLabelSmoothing)[0] is True
    out = assert_fails(capsys, "attentoin", my_attention, "no exercise named 'attentoin'")
    assert all(name in out for name in EXERCISES), out
    assert_fails(capsys, 42, my_attention, "no exercise named 42")


def test_the_checkers_own_failure_is_reported_not_raised(capsys, monkeypatch):
    def broken_property(answer):
        return {}["missing"]
    monkeypatch.setattr(EXERCISES["rate"], "properties", [broken_property])
    assert_fails(capsys, "rate", my_rate, "checker failed", "KeyError", "report")


def test_the_readers_prints_are_silenced_and_random_state_kept(capsys):
    def chatty(query, key, value, mask=None, dropout=None):
        print("debugging", query.shape)
        return my_attention(query, key, value, mask, dropout)
    state = torch.random.get_rng_state()
    ok, out = verdict(capsys, "attention", chatty)
    assert ok and "debugging" not in out and out.count("\n") == 1, out
    assert torch.equal(torch.random.get_rng_state(), state)


def test_the_stand_in_model_decodes_greedily_by_its_rule():
    "The Oracle's greedy output, decoded by the package, follows its rule: y_(i+1) = (3 y_i + i + s) mod 11."
    from annotated_transformer.training import greedy_decode
    src = torch.tensor([[4, 7, 1, 9, 2], [0, 3, 3, 5, 10]])
    out = greedy_decode(exercises_module.Oracle(), src, torch.ones(2, 1, 5, dtype=torch.bool), max_len=8, start_symbol=2)
    for row, s in zip(out.tolist(), src.sum(1).tolist()):
        expected = [2]
        for i in range(7):
            expected.append((3 * expected[-1] + i + s) % 11)
        assert row == expected


def test_a_crash_is_kept_apart_from_a_wrong_answer_and_tensors_are_compared_with_care():
    "`call` turns what the reader's code raises into a `Crash`; the comparing helpers see NaN and shape differences."
    with pytest.raises(exercises_module.Crash) as info:
        exercises_module.call("on the number 1", lambda x: x / 0, 1)
    assert (type(info.value.error), info.value.when) == (ZeroDivisionError, "on the number 1")
    assert exercises_module.call("on two numbers", max, 1, 2) == 2
    assert exercises_module._gap(torch.zeros(3), torch.ones(3)) == 1.0
    assert exercises_module._gap(torch.zeros(3), torch.zeros(2)) == math.inf
    assert exercises_module._close(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0])) is False
    assert exercises_module._describe((torch.zeros(2, 3), None)) == "a tuple of 2: a tensor of shape (2, 3) (float32), None"


# --- the exercise cells of the chapters -------------------------------------------------------------------------------

def exercise_cells(chapter: str) -> list[dict]:
    "The cells after the chapter's '## Exercises' heading."
    cells = json.loads((ROOT / "nbs" / f"{chapter}.ipynb").read_text())["cells"]
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Exercises"))
    return cells[start:]


CHAPTERS = sorted({ex.chapter for ex in EXERCISES.values()})
CHAPTER_NAMESPACE = """
import copy, math, torch
from torch import nn
import torch.nn.functional as F
from annotated_transformer.exercises import check
from annotated_transformer.model import subsequent_mask
"""


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_exercise_has_a_stub_a_check_and_a_folded_solution(chapter):
    cells = exercise_cells(chapter)
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    for name in (n for n, ex in EXERCISES.items() if ex.chapter == chapter):
        checks = [i for i, c in enumerate(code) if re.fullmatch(rf'check\("{name}", \w+\)', c.strip())]
        assert len(checks) == 1, f"{chapter}: one check cell for {name}"
        solutions = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).startswith("#@title Solution")
                     and re.search(rf"^(def|class) {name}\b", "".join(c["source"]), re.M)]
        assert len(solutions) == 1, f"{chapter}: one solution for {name}"
        assert solutions[0]["metadata"].get("cellView") == "form", "Colab hides a form cell's code"
        assert solutions[0]["metadata"].get("jupyter", {}).get("source_hidden") is True, "JupyterLab collapses it"
    assert not any("#| export" in c for c in code), f"{chapter}: an exercise cell is exported"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_stubs_say_not_written_yet_and_solutions_pass(capsys, chapter):
    cells = [c for c in exercise_cells(chapter) if c["cell_type"] == "code"]
    stubs, solutions = {}, {}
    exec(CHAPTER_NAMESPACE, stubs)
    exec(CHAPTER_NAMESPACE, solutions)
    for cell in cells:
        source = "".join(cell["source"])
        if source.startswith("#@title Solution"):
            exec(source, solutions)
        elif not source.lstrip().startswith("check("):
            exec(source, stubs)
    for name in (n for n, ex in EXERCISES.items() if ex.chapter == chapter):
        out = assert_fails(capsys, name, stubs[name], "not written yet")
        ok, out = verdict(capsys, name, solutions[name])
        assert ok, f"{chapter}: the solution of {name} fails: {out}"


def test_the_exercise_page_lists_every_exercise_with_a_link_to_its_chapter():
    cells = json.loads((ROOT / "nbs" / "07_exercises.ipynb").read_text())["cells"]
    table = next("".join(c["source"]) for c in cells if "| page | exercise |" in "".join(c["source"]))
    rows, chapter = {}, None
    for line in table.splitlines():
        m = re.match(r"\| (?:\[[^\]]+\]\((\w+)\.ipynb#exercises\))? *\| `(\w+)\(", line)
        if m:
            chapter = m[1] or chapter
            rows[m[2]] = chapter
    assert rows == {name: ex.chapter for name, ex in EXERCISES.items()}


def test_the_site_folds_solutions(tmp_path):
    "tools/build_docs.py turns a Colab solution cell into a cell whose code the site shows under 'Show the solution'."
    sys.path.insert(0, str(ROOT / "tools"))
    from build_docs import prepare_notebook
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Title"},
                    {"cell_type": "markdown", "metadata": {}, "source": "The first sentence."},
                    {"cell_type": "code", "metadata": {"cellView": "form", "jupyter": {"source_hidden": True}},
                     "source": "#@title Solution\ndef f(): return 1", "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "x.ipynb").write_text(json.dumps(nb))
    prepare_notebook(tmp_path / "x.ipynb", tmp_path / "y.ipynb", None)
    cell = json.loads((tmp_path / "y.ipynb").read_text())["cells"][-1]
    assert cell["source"] == "def f(): return 1"
    assert "hide-input" in cell["metadata"]["tags"]
    assert cell["metadata"]["mystnb"]["code_prompt_show"] == "Show the solution"
