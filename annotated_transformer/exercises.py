"""The exercises' checker, `check`: written by hand, outside the book.

Docs: https://annotated-transformer.github.io/annotated-transformer/07_exercises.html"""

# The checker is not the paper's, and its references and messages would bury the exercises, so no page exports it:
# nbs/07_exercises.ipynb shows what it says, `nbdev-export` leaves this file alone, and it imports only PyTorch and the
# standard library. Each exercise is one table, `Exercise`, whose wrong answers name the mistake in a wrong result.

__all__ = ["EXERCISES", "Exercise", "Oracle", "check"]

import contextlib
import functools
import inspect
import io
import math
import os
import re
import signal
import threading
import traceback
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# --- Running the reader's code (a crash is reported as theirs; the check always ends) and comparing its results -----
class Wrong(Exception):
    "A property the answer lacks; the message is what the reader reads."

class Crash(Wrong):
    "The reader's code raised; the message names the error, their line, and what the checker was doing."

class _Timeout(BaseException):
    "The time limit passed; not an Exception, so that the reader's `except Exception` cannot swallow it."

def call(when: str, fn, *args):  # when: what the checker is doing, for the report ("with a padding mask")
    """Run the reader's `fn`. What it raises, SystemExit and KeyboardInterrupt too, becomes a Crash (never the end of
    the reader's process); the default dtype and grad mode it sets are put back; an input changed in place is Wrong."""
    before, dtype = [a.detach().clone() if torch.is_tensor(a) else None for a in args], torch.get_default_dtype()
    try:
        with torch.enable_grad():
            result = fn(*args)
    except (Exception, SystemExit, KeyboardInterrupt) as e:
        raise Crash(_crash_report(when, e)) from None
    finally:
        torch.set_default_dtype(dtype)
    if any(b is not None and not torch.equal(a.detach(), b) for a, b in zip(args, before)):
        raise Wrong("it changed an input in place: compute new tensors (x / s, masked_fill), not x /= s, masked_fill_.")
    return result

_NOT_THEIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, os)) + (__file__,)  # torch, Python, here

def _crash_report(when: str, e: BaseException) -> str:
    "The error, then the reader's line (the traceback's last outside _NOT_THEIRS) and what the checker was doing."
    if isinstance(e, NotImplementedError):
        return "not written yet (it raises NotImplementedError): fill in its body, run that cell, then this one."
    f = ([f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(_NOT_THEIRS)] or [None])[-1]
    where = "inside a library it called" if f is None else f"in {f.name}, line {f.lineno}" + (
        "" if re.match(r"<|.*ipykernel_", f.filename) else f" of {os.path.basename(f.filename)}") + f": {f.line}"
    error = ": ".join([type(e).__name__] + [str(e).strip()[:200]] * bool(str(e).strip()))
    return f"your code raised {error}\n  {where} (the check was running it {when})"

def _within(seconds: float, run) -> None:
    "run(), stopped by SIGALRM after `seconds`: a thread could only leave a loop running. Main thread, Unix only."
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return run()
    previous = signal.signal(signal.SIGALRM, _late)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)  # then every 0.5 s, should the reader's loop catch the first
    try:
        run()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous or signal.SIG_DFL)

def _late(*_):
    raise _Timeout

def _describe(x) -> str:
    return f"a tensor {tuple(x.shape)} of {str(x.dtype)[6:]}" if torch.is_tensor(x) else " ".join(repr(x).split())[:50]

def _gap(got, want, atol=1e-5, nan=False) -> str | None:
    "None when `got` is close to `want` in float64 (rtol 1e-4, `atol`; NaN only if `nan`); else where they differ most."
    try:
        torch.testing.assert_close(got.detach().double(), want.detach().double(), rtol=1e-4, atol=atol, equal_nan=nan)
    except AssertionError as e:
        return next(("differs by " + s[30:] for s in str(e).split("\n") if s.startswith("Greatest abs")), str(e))

def _compare(ex, got, how, what: str, otherwise=None, atol=1e-5):
    """Raise Wrong unless `got` is a tensor like how(ex.reference), the reference's result on the case. Else name the
    mistake whose wrong answer gives `got`, or say what differs (or `otherwise`, a message)."""
    want = how(ex.reference)
    if not torch.is_tensor(got):
        raise Wrong(f"{what} should be a tensor; it is {_describe(got)}" + ": is a `return` missing?" * (got is None))
    if want.requires_grad and not got.requires_grad:
        raise Wrong(f"{what} carries no gradient: compute it with torch, not through .detach(), .item() or numpy.")
    right_values = got.shape == want.shape and not _gap(got, want, atol)  # whatever the dtype
    if right_values and got.dtype == want.dtype:
        return
    for key in () if right_values else ex.mistakes:  # a wrong answer that gives `want` cannot give `got`
        try:
            theirs = how(ex.wrong(key))
        except Exception:  # a wrong answer of ours may fail on the case
            continue
        if theirs.shape == got.shape and not _gap(got, theirs, atol, nan=True):
            raise Wrong(ex.mistakes[key][0])
    if got.shape != want.shape or got.dtype != want.dtype:
        raise Wrong(f"{what} should be {_describe(want)}; it is {_describe(got)}: a "
                    f"{'dtype' if got.shape == want.shape else 'shape'} mistake.")
    raise Wrong(otherwise or f"{what} {_gap(got, want, atol)}.")

# --- Exercises and `check` -----------------------------------------------------------------------------------------
@dataclass
class Exercise:
    "One exercise as a table: the piece to write, the cases tried, the reference, the known mistakes, the properties."
    name: str  # the package's name for the piece, which the reader's answer also has
    chapter: str  # the notebook that teaches it, e.g. "01_attention"
    signature: str  # its parameters as the chapter names them; "=" marks an optional one, "|" another accepted name
    cases: list  # inputs of several sizes and values, so that a number written into the code shows
    reference: object  # a right answer: the paper's formula written here (never the package's), computed in float64
    mistakes: dict  # key word of the message -> (one-line message, the switches of `reference` that make the mistake)
    properties: list  # functions (exercise, answer) checked in order; each raises Wrong when its property fails
    def wrong(self, key: str):  # the wrong answer that makes mistake `key`: a subclass, or a partial, of the reference
        switches, right = self.mistakes[key][1], self.reference
        return type(self.name, (right,), switches) if inspect.isclass(right) else functools.partial(right, **switches)

def _kind_and_signature(ex: Exercise, answer) -> None:
    "An nn.Module class or a function, its parameters named as the chapter's, in order, with its defaults."
    is_class = inspect.isclass(ex.reference)
    if not callable(answer) or is_class and not (inspect.isclass(answer) and issubclass(answer, nn.Module)):
        raise Wrong(f"expected {'an nn.Module class' if is_class else 'a function'}, not {_describe(answer)}.")
    answer = getattr(answer, ex.name) if inspect.isclass(answer) and not is_class else answer  # as Batch holds it
    with contextlib.suppress(TypeError, ValueError):  # a builtin has no signature to read: its calls tell
        got, wanted = list(inspect.signature(answer).parameters.values()), ex.signature.split(", ")
        if len(got) < len(wanted) or any(p.name not in w.split("=")[0].split("|") or "=" in w and p.default is p.empty
                                         for p, w in zip(got, wanted)):
            raise Wrong(f"its parameters are ({', '.join(map(str, got))}); the chapter's are ({ex.signature}): use "
                        "the same names, order and defaults, so that the package can call yours.")

def _find(name) -> Exercise | None:
    "The exercise called `name`, forgiving case, spaces and underscores (\"label smoothing\", \"Batch.make_std_mask\")."
    key = re.sub(r"[^a-z0-9]", "", str(name).lower()).removeprefix("batch")
    return next((ex for ex in EXERCISES.values() if key == ex.name.lower().replace("_", "")), None)

def check(name: str,  # the exercise: "attention", "MultiHeadedAttention", ... (see `EXERCISES`)
          answer,  # your function or class, with the chapter's name and signature
          seconds: float = 30,  # the time the whole check may take: a loop that never ends is stopped then
          ) -> bool:  # True when every property holds
    """Check `answer` against the properties of exercise `name`, in order. Prints one line: that all hold, or the first
    that fails and the likely mistake (a crash in your code: a second line shows your line)."""
    ex = _find(name)
    if ex is None:
        print(f"There is no exercise named {name!r}; the exercises are: {', '.join(EXERCISES)}.")
        return False
    message, properties = None, [_kind_and_signature, *ex.properties]
    try:  # random state and grad mode are put back after; the reader's prints and warnings are silenced
        with torch.random.fork_rng(devices=range(torch.cuda.device_count() if torch.cuda.is_initialized() else 0)), \
                torch.enable_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            _within(seconds, lambda: [(torch.manual_seed(i), prop(ex, answer)) for i, prop in enumerate(properties)])
    except Wrong as w:
        message = str(w)
    except _Timeout:
        message = f"your code did not finish in {seconds:g} s: is there a loop that never ends?"
    except Exception as e:  # the checker's own failure: one line, never a traceback in the reader's notebook
        message = f"the checker failed on your answer ({type(e).__name__}: {e}); please report this as a bug."
    print(f"{ex.name}: {message or f'correct, all {len(properties)} checks pass.'}")
    return message is None

# --- Attention (nbs/01_attention.ipynb): equation 1, whose arguments after `dropout` switch on the mistakes ----------
def _attention(query, key, value, mask=None, dropout=None, scale=-0.5, dim=-1, fill=-1e9, hide=0, after=False,
               drop=True, d_k=None):
    scores = query @ key.transpose(-2, -1) * (d_k or query.size(-1)) ** scale  # (..., queries, keys)
    scores = scores.masked_fill(mask == hide, fill) if mask is not None and not after else scores
    weights = scores.softmax(dim)
    weights = weights.masked_fill(mask == 0, 0.0) if mask is not None and after else weights
    weights = dropout(weights) if dropout is not None and drop else weights
    return weights @ value, weights

def _attention_values(ex, attention):
    "Equation 1 for each d_k: no mask, padding or 0/1 masks, a row all masked (no NaN), dropout on the weights."
    for b, h, nq, nk, d_k, d_v in ex.cases:  # each axis of its own size, so that a swapped axis shows
        q, k, v = torch.randn(b, h, nq, d_k), torch.randn(b, h, nk, d_k), torch.randn(b, h, nk, d_v)
        pad = torch.arange(nk) < (nk - 1 - torch.arange(b)).view(b, 1, 1, 1)  # a length of its own for each sentence
        for when, mask in ("", None), (" with a padding mask", pad), (" with a 0/1 mask (test mask == 0)", pad.long()):
            result = call(f"on query {tuple(q.shape)}, key {tuple(k.shape)}{when}", attention, q, k, v, mask)
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise Wrong(f"it should return (output, weights), the weights for the charts, not {result!r:.50}")
            for i, what in ((1, "the weights"), (0, "the output")):
                _compare(ex, result[i], lambda a: a(q.double(), k.double(), v.double(), mask)[i].float(), what + when)
    hidden = pad & (torch.arange(b) > 0).view(b, 1, 1, 1)  # the first sentence's queries may attend to nothing
    if not all(torch.isfinite(t).all() for t in call("with a mask that hides every key", attention, q, k, v, hidden)):
        raise Wrong(ex.mistakes["-inf"][0])
    out, w = call("with dropout=nn.Dropout(0.5) in train mode", attention, q, k, v, None, nn.Dropout(0.5))
    eval_w, want = call("in eval mode", attention, q, k, v, None, nn.Dropout(0.5).eval())[1], ex.reference(q, k, v)[1]
    if not _gap(w, want) or _gap(w[w != 0], 2 * want[w != 0]) or _gap(out, w @ v) or _gap(eval_w, want):
        raise Wrong(ex.mistakes["dropout(weights)"][0])

_ATTENTION = Exercise("attention", "01_attention", "query, key, value, mask=None, dropout=None",
    cases=[(2, 3, 5, 6, 8, 4), (1, 2, 4, 7, 5, 3), (2, 1, 3, 4, 16, 5)],  # batch, heads, queries, keys, d_k, d_v
    reference=_attention, properties=[_attention_values], mistakes={
        "not scaled": ("the scores are not scaled: divide Q K^T by sqrt(d_k) (equation 1).", dict(scale=0)),
        "divided by d_k": ("the scores are divided by d_k; equation 1 divides them by sqrt(d_k).", dict(scale=-1)),
        "written into the code": ("d_k is written into the code: it is query.size(-1).", dict(d_k=8)),
        "over the keys": ("the softmax runs over the queries; take it over the keys, softmax(dim=-1).", dict(dim=-2)),
        "inverted": ("the mask is inverted: True (or 1) means may attend; fill where mask == 0.", dict(hide=1)),
        "-1e9": ("masked scores are set to 0, so padding gets weight: fill them with -1e9.", dict(fill=0.0)),
        "before the softmax": ("the mask acts on the weights: mask the scores, before the softmax.", dict(after=True)),
        "-inf": ("a query with every key masked gets NaN: fill with -1e9, not -inf (0/0).", dict(fill=-math.inf)),
        "dropout(weights)": ("apply the dropout module given (off in eval mode): dropout(weights).", dict(drop=False))})

# --- Multi-head attention (section 3.2.2): the reference, given the reader's projections; attributes switch mistakes --
class _MultiHeadedAttention(nn.Module):
    plain_view = by_d_model = joined_by_view = no_head_axis = forgets = False
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0, "h must divide d_model"
        self.h, self.d_k, self.attn, self.dropout = h, d_model // h, None, nn.Dropout(dropout)
        self.linears = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(4))  # W^Q, W^K, W^V, W^O
    def forward(self, query, key, value, mask=None):  # (batch, queries, d_model), (batch, keys, d_model) twice
        b, h, d_k = query.size(0), self.h, self.d_k
        q, k, v = (lin(x).view(b, h, -1, d_k) if self.plain_view else lin(x).view(b, -1, h, d_k).transpose(1, 2)
                   for lin, x in zip(self.linears, (query, key, value)))  # (batch, h, seq, d_k)
        mask = mask if mask is None or self.no_head_axis else mask.unsqueeze(1)
        x, w = _attention(q / math.sqrt(h) if self.by_d_model else q, k, v, mask, self.dropout)
        self.attn = None if self.forgets else w
        return self.linears[3]((x.reshape if self.joined_by_view else x.transpose(1, 2).reshape)(b, -1, h * d_k))

def _mha_values(ex, cls):
    "With one head, then several, with and without a padding mask, given the same projections; self.attn."
    for h, d, b, nq, nk in [(1, *ex.cases[0][1:])] + ex.cases:  # batch, queries, keys
        layer = call(f"while building MultiHeadedAttention({h}, {d}, 0.0)", cls, h, d, 0.0).eval()
        lin = [m for m in layer.modules() if isinstance(m, nn.Linear)]
        if len(lin) != 4 or any(m.weight.shape != (d, d) or m.bias is None for m in lin):
            raise Wrong("expected four nn.Linear(d_model, d_model), W^Q, W^K, W^V and W^O, in this order.")
        q, k, v = torch.randn(b, nq, d), torch.randn(b, nk, d), torch.randn(b, nk, d)
        pad = torch.arange(nk) < (nk - 1 - torch.arange(b)).view(b, 1, 1)  # (batch, 1, keys), as Batch.src_mask
        def ours(cls, *args):  # our answer `cls`, given the reader's projections, computed in float64
            (m := cls(h, d, 0.0).eval()).linears.load_state_dict(nn.ModuleList(lin).state_dict())
            return m.double()(*(a.double() if a.is_floating_point() else a for a in args)).float(), m.attn
        for when, args in (("", (q, k, v)), (" with a padding mask (batch, 1, keys)", (q, k, v, pad))):
            out = call(f"with h={h}, d_model={d}{when} (one mask for every head: mask.unsqueeze(1))", layer, *args)
            _compare(ex, out, lambda cls: ours(cls, *args)[0], f"with {h} heads{when}, the output")
            attn = getattr(layer, "attn", None)
            if not when and not (torch.is_tensor(attn) and not _gap(attn, ours(ex.reference, *args)[1])):
                raise Wrong(ex.mistakes["self.attn"][0])

_MULTI_HEADED_ATTENTION = Exercise("MultiHeadedAttention", "01_attention", "h, d_model, dropout",  # cases: h, d_model,
    cases=[(4, 32, 2, 5, 7), (2, 20, 3, 4, 6)], reference=_MultiHeadedAttention, properties=[_mha_values], mistakes={
        "cut wrongly": ("the heads are cut wrongly: view (batch, seq, h, d_k), transpose(1, 2).", dict(plain_view=1)),
        "sqrt(d_model)": ("the scores are divided by sqrt(d_model); divide them by sqrt(d_k).", dict(by_d_model=True)),
        "joined": ("heads joined wrongly: transpose(1, 2), then view (batch, seq, d_model).", dict(joined_by_view=1)),
        "unsqueeze(1)": ("a mask is given to every head with mask.unsqueeze(1).", dict(no_head_axis=True)),
        "self.attn": ("self.attn should keep every head's weights (batch, h, queries, keys).", dict(forgets=True))})

# --- Positional encoding and layer normalization (nbs/02_layers.ipynb); class attributes switch on the mistakes ------
class _PositionalEncoding(nn.Module):
    swapped = halves = by_i = learned = ignores_x = False
    def __init__(self, d_model, dropout, max_len=5000):  # section 3.5's table, computed in float64
        super().__init__()
        pos, j, half = torch.arange(max_len, dtype=torch.float64)[:, None], torch.arange(d_model), d_model // 2
        i = j % half if self.halves else j // 2  # the index of dimension j's (sine, cosine) pair
        angle = pos / 10000.0 ** ((1 if self.by_i else 2) * i / d_model)  # (max_len, d_model)
        pe = torch.where((j < half if self.halves else j % 2 == 0) != self.swapped, angle.sin(), angle.cos()).float()
        self.dropout = nn.Dropout(dropout)
        self.register_parameter("pe", nn.Parameter(pe)) if self.learned else self.register_buffer("pe", pe)
    def forward(self, x):  # (batch, seq, d_model)
        return self.dropout((0 * x if self.ignores_x else x) + self.pe[: x.size(1)])

def _pe_values(ex, cls):
    "The table of section 3.5, added to the input, for several sizes; fixed: a buffer, not a parameter."
    for d, max_len in ex.cases:
        pe = call(f"while building PositionalEncoding({d}, 0.0, {max_len})", cls, d, 0.0, max_len).eval()
        for x in torch.zeros(2, max_len, d), torch.randn(2, 7, d):
            _compare(ex, call(f"on {_describe(x)}", pe, x), lambda a: a(d, 0.0, max_len)(x), "x + PE", atol=1e-4)
    if list(pe.parameters()) or not any(t.numel() == max_len * d for t in pe.buffers()):
        raise Wrong(ex.mistakes["register_buffer"][0])

_POSITIONAL_ENCODING = Exercise("PositionalEncoding", "02_layers", "d_model, dropout, max_len",  # d_model, max_len
    cases=[(16, 60), (6, 20)], reference=_PositionalEncoding, properties=[_pe_values], mistakes={
        "swapped": ("sine and cosine are swapped: dimension 2i gets the sine, 2i+1 the cosine.", dict(swapped=True)),
        "interleave": ("sines and cosines interleave (sin, cos, sin, ...), not a half each.", dict(halves=True)),
        "i/d_model": ("the exponent is 2i/d_model, i the (sine, cosine) pair's index, not i/d_model.", dict(by_i=True)),
        "ignores": ("the output ignores the input: return x + PE[:seq_len].", dict(ignores_x=True)),
        "register_buffer": ("the table is fixed, and moves with the module: register_buffer.", dict(learned=True))})

class _LayerNorm(nn.Module):
    biased, eps_inside, eps_used = False, False, "given"
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.eps = {"given": eps, "none": 0.0, "fixed": 1e-6}[self.eps_used]
        self.a, self.b = nn.Parameter(torch.ones(features)), nn.Parameter(torch.zeros(features))  # gain, bias
    def forward(self, x):  # (..., features): the chapter's formula, with the unbiased standard deviation
        var = x.var(-1, keepdim=True, unbiased=not self.biased)
        std = (var + self.eps).sqrt() if self.eps_inside else var.sqrt() + self.eps
        return self.a * (x - x.mean(-1, keepdim=True)) / std + self.b

def _ln_values(ex, cls):
    "A gain of ones and a bias of zeros; the chapter's formula for several sizes; a row of equal values; a large eps."
    for f in ex.cases:
        norm, x = call(f"while building LayerNorm({f}, 1e-6)", cls, f, 1e-6), torch.randn(3, 4, f) * 3 + 1
        if sorted(p.tolist() for p in norm.parameters()) != [[0.0] * f, [1.0] * f]:
            raise Wrong("expected two parameters (features,): a gain of ones and a bias of zeros.")
        for eps, rows in ((1e-6, x), (1e-6, torch.ones(2, f)), (0.5, x / 6)):  # a row of equal values; a large eps
            _compare(ex, call(f"with eps={eps} on {_describe(rows)}", call("while building it", cls, f, eps), rows),
                     lambda a: a(f, eps).double()(rows.double()).float(), "(x - mean) / (std + eps)", atol=1e-4)

_LAYER_NORM = Exercise("LayerNorm", "02_layers", "features, eps", cases=[8, 5],  # features
    reference=_LayerNorm, properties=[_ln_values], mistakes={
        "biased": ("you divide by the biased std (nn.LayerNorm's); the chapter's is x.std(-1).", dict(biased=True)),
        "square root": ("eps is added under the square root; the chapter's is std + eps.", dict(eps_inside=True)),
        "not used": ("the eps given is not used: divide by std + self.eps.", dict(eps_used="fixed")),
        "add eps": ("a row of equal values gives NaN: add eps to the standard deviation.", dict(eps_used="none"))})

# --- The masks (nbs/03_model.ipynb, nbs/04_batches.ipynb); the arguments after the chapter's switch on the mistakes --
def _subsequent_mask(size, batch_axis=True, diagonal=0, upper=False, inverted=False):
    mask = torch.ones(*(1,) * batch_axis, size, size, dtype=torch.bool)  # (1, size, size): True where key j <= query i
    mask = mask.triu() if upper else mask.tril(diagonal)
    return ~mask if inverted else mask

def _subsequent_values(ex, subsequent_mask):
    "Row i allows keys 0..i, for several sizes."
    for n in ex.cases:
        _compare(ex, call(f"as subsequent_mask({n})", subsequent_mask, n), lambda a: a(n), f"subsequent_mask({n})")

_SUBSEQUENT_MASK = Exercise("subsequent_mask", "03_model", "size|seq_len", cases=[5, 1, 2, 7],  # or seq_len
    reference=_subsequent_mask, properties=[_subsequent_values], mistakes={
        "broadcasts": ("expected (1, size, size): the leading 1 broadcasts over the batch.", dict(batch_axis=False)),
        "inverted": ("the mask is inverted: True means may attend, so position i sees keys 0..i.", dict(inverted=1)),
        "diagonal": ("the diagonal is hidden: position i may attend to itself (torch.tril).", dict(diagonal=-1)),
        "upper": ("the upper triangle, the future, is shown: keys 0..i are the lower triangle.", dict(upper=True))})

def _make_std_mask(tgt, pad, padding=True, future=True, axis=-2, fixed_pad=None):
    mask = torch.ones(1, tgt.size(-1), tgt.size(-1), dtype=torch.bool).tril(0 if future else tgt.size(-1))
    return mask & (tgt != (pad if fixed_pad is None else fixed_pad)).unsqueeze(axis) if padding else mask

def _std_mask_values(ex, answer):
    "Padding keys, for several padding ids, and future keys are hidden: (batch, tgt_len, tgt_len)."
    for tgt, pad in ex.cases:
        got = call(f"as make_std_mask(tgt, {pad}), tgt = {tgt.tolist()}", getattr(answer, ex.name, answer), tgt, pad)
        _compare(ex, got, lambda a: a(tgt, pad), f"make_std_mask(tgt, {pad})")

_MAKE_STD_MASK = Exercise("make_std_mask", "04_batches", "tgt, pad", cases=[  # (target ids, padding id)
        (torch.tensor([[0, 2, 5, 4, 3, 3], [0, 6, 2, 3, 3, 3]]), 3), (torch.tensor([[1, 3, 4, 0], [1, 5, 0, 0]]), 0),
        (torch.tensor([[2, 7, 1, 1, 1]]), 1)],
    reference=_make_std_mask, properties=[_std_mask_values], mistakes={
        "padding part": ("the padding part is missing: & (tgt != pad).unsqueeze(-2).", dict(padding=False)),
        "future part": ("the future part is missing: & subsequent_mask(tgt.size(-1)).", dict(future=False)),
        "wrong axis": ("padding is hidden along the wrong axis: hide a padded key from every query.", dict(axis=-1)),
        "`pad` argument": ("the padding id is written into the code: use the `pad` argument.", dict(fixed_pad=3))})

# --- Training (nbs/05_training.ipynb) ------------------------------------------------------------------------------
def _rate(step, model_size, factor, warmup, larger=False, first=1, size_power=-0.5, fixed_warmup=None, use_factor=1):
    step, warmup, factor = max(step, first), fixed_warmup or warmup, factor if use_factor else 1.0  # step 0 is step 1
    return factor * model_size ** size_power * (max if larger else min)(step ** -0.5, step * warmup ** -1.5)

def _rate_values(ex, rate):
    "Equation 3 at 13 steps, for the paper's settings and others, then at step 0, where LambdaLR starts."
    def rates(fn, points, hint=""):  # a rate that is not a number fails in float()
        return torch.tensor([call(f"as float(rate{p}){hint}", lambda: float(fn(*p))) for p in points]).double()
    got, want = rates(rate, ex.cases), rates(ex.reference, ex.cases)
    i = int((got - want).abs().argmax())
    _compare(ex, got, lambda fn: rates(fn, ex.cases), "", atol=0,
             otherwise=f"rate{ex.cases[i]} is {got[i]:.6g}; equation 3 gives {want[i]:.6g}.")
    _compare(ex, rates(rate, [(0, 512, 1.0, 4000)], ": " + ex.mistakes["max(step, 1)"][0]), lambda fn: rates(
        fn, [(1, 512, 1.0, 4000)]), "", atol=0, otherwise="rate(0, ...) should be rate(1, ...): step 0 counts as 1.")

_RATE = Exercise("rate", "05_training", "step, model_size, factor, warmup", cases=[(s, 512, 1.0, 4000) for s in (
        1, 100, 1000, 3999, 4000, 4001, 8000, 100000)] + [(s, 256, 2.0, 400) for s in (1, 50, 400, 1600, 10000)],
    reference=_rate, properties=[_rate_values], mistakes={
        "no warmup": ("there is no warmup: take min(step ** -0.5, step * warmup ** -1.5).", dict(fixed_warmup=1)),
        "the max": ("the rate takes the max of the two terms; equation 3 takes their min.", dict(larger=True)),
        "model_size ** -0.5": ("model_size ** -0.5 is missing.", dict(size_power=0)),
        "factor": ("the factor is not used: multiply the rate by factor.", dict(use_factor=0)),
        "max(step, 1)": ("LambdaLR asks for step 0: count it as step 1, step = max(step, 1)", dict(first=0))})

class _LabelSmoothing(nn.Module):
    over_size_1 = keeps_pad_rows = mean = cross_entropy = naive = False
    fixed_pad = None
    def __init__(self, size, padding_idx, smoothing=0.0):
        super().__init__()
        self.size, self.padding_idx, self.smoothing = size, padding_idx, smoothing
    def forward(self, x, target):  # x: (tokens, size) log-probabilities; target: (tokens,) ids
        pad = self.padding_idx if self.fixed_pad is None else self.fixed_pad
        t = torch.full_like(x, self.smoothing / (self.size - 2 + self.over_size_1)).detach()  # section 5.4's target
        t[torch.arange(len(target)), target] = 1 - self.smoothing
        t[:, pad] = 0
        t[target == pad] = t[target == pad] if self.keeps_pad_rows else 0
        loss = -t * x if self.cross_entropy else t * (t.log() - x) if self.naive else torch.xlogy(t, t) - t * x
        return loss.mean() if self.mean else loss.sum()

def _ls_values(ex, cls):
    "The KL divergence between section 5.4's target distribution and x, summed, for several sizes and padding ids."
    for size, pad, smoothing, target in ex.cases:
        x = torch.randn(len(target), size).log_softmax(-1).requires_grad_()
        loss = call(f"as LabelSmoothing{size, pad, smoothing}(x, target): x {tuple(x.shape)}, target {target.tolist()}",
                    call(f"while building LabelSmoothing{size, pad, smoothing}", cls, size, pad, smoothing), x, target)
        _compare(ex, loss, lambda a: a(size, pad, smoothing)(x.double(), target).float(), "the loss sum t (log t - x)")

_LABEL_SMOOTHING = Exercise("LabelSmoothing", "05_training", "size, padding_idx, smoothing", cases=[
        (7, 0, 0.3, torch.tensor([2, 0, 5, 1, 6])), (7, 3, 0.1, torch.tensor([3, 1, 4, 3, 0, 6])),
        (6, 2, 0.0, torch.tensor([1, 2, 5, 0]))],
    reference=_LabelSmoothing, properties=[_ls_values], mistakes={
        "xlogy": ("the loss is NaN: t log t is 0 where t = 0 (nn.KLDivLoss or torch.xlogy see to it).", dict(naive=1)),
        "cross-entropy": ("this is the cross-entropy -sum t log p, not the KL divergence.", dict(cross_entropy=True)),
        "averaged": ("the loss is averaged: sum it, nn.KLDivLoss(reduction='sum').", dict(mean=True)),
        "size - 2": ("each other token gets smoothing / (size - 2), not smoothing / (size - 1).", dict(over_size_1=1)),
        "rows whose target": ("rows whose target is padding should be all 0.", dict(keeps_pad_rows=True)),
        "padding_idx": ("the padding id is written into the code: use the padding_idx given.", dict(fixed_pad=0))})

class Oracle(nn.Module):
    """A stand-in for a trained model whose greedy output is known: after token y at position i, the most probable next
    token is (3 y + i + s) mod 11, s the sum of the source ids. Its decoder refuses a target mask that is not causal."""
    generator = nn.LogSoftmax(dim=-1)  # the decoder's states are already scores over the 11 tokens
    def encode(self, src, src_mask):  # (batch, src_len) ids -> (batch, 1), a memory that holds their sum
        return src.sum(-1, keepdim=True).double()
    def decode(self, memory, src_mask, tgt, tgt_mask):  # -> (batch, tokens so far, 11)
        n, causal = tgt.size(1), torch.ones(tgt.size(1), tgt.size(1)).tril()
        if not (torch.is_tensor(tgt_mask) and tgt_mask.shape[-2:] == causal.shape and (tgt_mask == causal).all()):
            raise ValueError(EXERCISES["greedy_decode"].mistakes["subsequent_mask"][0] + f"; got {_describe(tgt_mask)}")
        return F.one_hot((3 * tgt.long() + torch.arange(n) + memory.long()) % 11, 11) * 5.0

def _greedy_decode(model, src, src_mask, max_len, start_symbol, steps=-1, feeds_start=False, full=False):
    memory, ys = model.encode(src, src_mask), torch.full((len(src), 1), start_symbol)  # (batch, 1), then one a step
    for _ in range(max_len + steps):
        fed = ys[:, :1] if feeds_start else ys  # (batch, tokens so far)
        out = model.decode(memory, src_mask, fed, torch.ones(fed.size(1), fed.size(1)).tril(99 * full)[None] > 0)
        ys = torch.cat([ys, model.generator(out[:, -1]).argmax(-1, keepdim=True)], dim=1)
    return ys

def _greedy_values(ex, greedy_decode):
    "On a model whose greedy answer is known, one sentence, then batches; its decoder refuses a mask not causal."
    for src, max_len, start in ex.cases:
        ys = call(f"on {len(src)} sentence(s), max_len={max_len}, start_symbol={start}", greedy_decode, Oracle(), src,
                  src_mask := torch.ones(len(src), 1, src.size(1), dtype=torch.bool), max_len, start)
        _compare(ex, ys, lambda fn: fn(Oracle(), src, src_mask, max_len, start), "the output (batch, max_len)")

_GREEDY_DECODE = Exercise("greedy_decode", "05_training", "model, src, src_mask, max_len, start_symbol", cases=[
        (torch.tensor([[4, 7, 1, 9, 2]]), 7, 1), (torch.tensor([[5, 2], [1, 1]]), 4, 0),  # src, max_len, start_symbol
        (torch.tensor([[4, 7, 1, 9, 2], [3, 3, 8, 0, 0], [10, 1, 2, 5, 6]]), 6, 2)],
    reference=_greedy_decode, properties=[_greedy_values], mistakes={
        "max_len - 1": ("the loop adds max_len - 1 tokens to the start symbol.", dict(steps=0)),
        "the same": ("every new token is the same: decode all tokens so far, take out[:, -1].", dict(feeds_start=1)),
        "subsequent_mask": ("the decoder needs the causal mask of the tokens so far, subsequent_mask(ys.size(1))",
                            dict(full=True))})

EXERCISES: dict[str, Exercise] = {ex.name: ex for ex in (
    _ATTENTION, _MULTI_HEADED_ATTENTION, _POSITIONAL_ENCODING, _LAYER_NORM, _SUBSEQUENT_MASK, _MAKE_STD_MASK, _RATE,
    _LABEL_SMOOTHING, _GREEDY_DECODE)}
