"""The exercises' checker, `check`. Written by hand outside the book: a thousand lines of tests would bury the exercises.

Docs: https://annotated-transformer.github.io/annotated-transformer/07_exercises.html"""

# Every other module is exported from a page of the book, which explains its code line by line. This one is not:
# the checker is not part of the paper, and its tests, references and messages would bury the exercises on the page
# that lists them. So nbs/07_exercises.ipynb shows the exercises and what `check` says about right and wrong answers,
# and the code lives here. `nbdev-export` leaves this file alone, since no notebook exports to it, and it is not in
# `_modidx.py`. It imports only PyTorch and the standard library, so it serves the paper's part of the book without
# the toolkit. tests/test_exercises.py tests it.
#
# An exercise is a list of properties, checked in order from the simplest to the finest: is the answer a class or a
# function, does it take the page's arguments, are the shapes right, then the values, the masks, dropout in train and
# eval mode, gradients and edge cases. The first property that fails stops the check. Its message says what differs
# and what was expected and, where a known mistake explains the difference, names that mistake. The references never
# come from the package: they are PyTorch's own layers and functions, the paper's formulas computed here in float64,
# and a stand-in model whose greedy output is known in closed form.

__all__ = ['EXERCISES', 'Wrong', 'Crash', 'call', 'Exercise', 'exercise', 'prop', 'check', 'Oracle']

import contextlib
import inspect
import io
import linecache
import math
import os
import re
import sysconfig
import traceback
import warnings
from dataclasses import dataclass

import torch
from torch import nn
import torch.nn.functional as F

# --- Wrong answers and crashes -----------------------------------------------------------------------------------
# A property that does not hold raises `Wrong`, whose message is what the reader reads. The reader's code is only ever
# run through `call`: whatever it raises becomes a `Crash`, which keeps the error and what the checker was doing, so a
# crash is never mistaken for a wrong answer, nor the other way round.
class Wrong(Exception):
    "A property the reader's answer lacks; the message says what differs and what was expected."

class Crash(Exception):
    "The reader's code raised `error` while the checker ran it `when` (\"with a padding mask\", ...)."
    def __init__(self, when: str, error: Exception):
        super().__init__(when)
        self.when, self.error = when, error

def call(when: str,  # what the checker is doing, for the report: "with a padding mask (2, 1, 1, 6)"
         fn, *args, **kwargs):
    "Run the reader's `fn`: what it raises becomes a `Crash`, so it is never mistaken for a wrong answer."
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise Crash(when, e) from e

# A crash report names the reader's own line: the last line of the traceback that is neither the checker's (the
# stand-in model of `greedy_decode` included) nor PyTorch's or Python's. A stub that still raises
# `NotImplementedError` is not written yet, which the report says in plain words.
_LIBRARIES = tuple(os.path.abspath(p) + os.sep for p in (os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"]))
_OWN_CODE = set()  # code of the checker that the reader's code calls (the model given to greedy_decode): never "their line"

def _reader_frame(error: Exception) -> tuple[str, str, int] | None:
    """(function, file, line) of the reader's code where `error` was raised: the last frame below `call` that is
    neither the checker's own nor in torch or the standard library."""
    frames = [(f.f_code, n) for f, n in traceback.walk_tb(error.__traceback__)][1:]  # the first one is `call`
    theirs = [(c, n) for c, n in frames if c not in _OWN_CODE and not os.path.abspath(c.co_filename).startswith(_LIBRARIES)]
    if not theirs:
        return None
    code, line = theirs[-1]
    return code.co_name, code.co_filename, line

def _place(frame: tuple[str, str, int] | None) -> str:
    "Where `frame` is, as a reader finds it: the line of their notebook cell or file, and its code."
    if frame is None:
        return "inside a library it called"
    name, filename, line = frame
    in_cell = re.search(r"ipykernel_\d+|<ipython-input-|^<", filename)
    where = f"line {line} of your cell" if in_cell else f"{os.path.basename(filename)}, line {line}"
    code = linecache.getline(filename, line).strip()
    code = code if len(code) <= 100 else code[:97] + "..."
    return f"in {name}, {where}" + (f": {code}" if code else "")

def _crash_report(name: str, crash: Crash) -> str:
    "One or two lines for a reader whose code raised: the error, where in their code, what the checker was doing."
    e = crash.error
    if isinstance(e, NotImplementedError):
        return f"{name} is not written yet (it raises NotImplementedError): fill in its body, run that cell, then this one."
    message = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(message) > 200:
        message = message[:197] + "..."
    return (f"{name}: your code raised {type(e).__name__}{': ' + message if message else ''}\n"
            f"  {_place(_reader_frame(e))} (the check was running it {crash.when})")

# --- Exercises and `check` --------------------------------------------------------------------------------------
# `exercise` registers an exercise with the notebook that teaches it and its signature; `@prop(name)` adds a property
# to it. Every exercise starts with two: the kind of answer (a class or a function) and its signature, whose parameter
# names must be the chapter's, since the package calls some of them by name (`mask=`, `dropout=`). `check` runs the
# properties with PyTorch's random state saved and restored, so that a check does not change the reader's random
# numbers, and with the reader's own prints and warnings silenced.
@dataclass
class Exercise:
    "One exercise: the piece to write, the chapter that teaches it, and the properties an answer must have, in order."
    name: str  # the package's name for the piece, which the reader's answer also has
    chapter: str  # the notebook that teaches it, e.g. "01_attention"
    signature: str  # its parameters, as the chapter defines them
    kind: str  # "function" or "class"
    properties: list  # functions of the answer, run in order; each raises `Wrong` when its property does not hold
    aliases: dict  # other names accepted for a parameter: {"size": ("seq_len",)}

EXERCISES: dict[str, Exercise] = {}

def exercise(name: str, chapter: str, signature: str, kind: str, aliases: dict | None = None) -> Exercise:
    "Register an exercise; its properties are added with `@prop(name)`, after two on the kind of answer and its signature."
    EXERCISES[name] = ex = Exercise(name, chapter, signature, kind, [], aliases or {})
    ex.properties.append(lambda answer: _is_kind(answer, ex))
    ex.properties.append(lambda answer: _has_signature(answer, ex))
    return ex

def prop(name: str):
    "Decorator: add the function as the next property of exercise `name`."
    def add(f):
        EXERCISES[name].properties.append(f)
        return f
    return add

def _is_kind(answer, ex: Exercise) -> None:
    "A class for a class exercise (not an instance of it), a function for a function exercise."
    if ex.kind == "class" and not inspect.isclass(answer):
        got = f"an instance of {type(answer).__name__}" if isinstance(answer, nn.Module) else _describe(answer)
        raise Wrong(f"expected the class itself, as in check({ex.name!r}, {ex.name}); got {got}.")
    if ex.kind == "function" and not callable(answer):
        raise Wrong(f"expected a function, as in check({ex.name!r}, {ex.name}); got {_describe(answer)}.")

def _has_signature(answer, ex: Exercise) -> None:
    "The parameters of `answer` have the chapter's names, in its order; those with a default in the chapter have one."
    if ex.kind == "function" and inspect.isclass(answer) and hasattr(answer, ex.name):
        answer = getattr(answer, ex.name)  # a class holding the function, as Batch holds make_std_mask
    try:
        params = list(inspect.signature(answer).parameters.values())
    except (TypeError, ValueError):  # a builtin: nothing to compare
        return
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return  # (*args, **kwargs): the calls tell
    expected = [part.strip() for part in ex.signature.split(",")]
    names = [part.split("=")[0] for part in expected]
    got = [p.name for p in params]
    aliases = ex.aliases
    if len(got) < len(names) or any(g != n and g not in aliases.get(n, ()) for g, n in zip(got, names)):
        raise Wrong(f"its parameters are ({', '.join(got)}); the chapter's are ({ex.signature}): "
                    "use the same names in the same order, so that code written for the package can call yours.")
    for p, want in zip(params, expected):
        if "=" in want and p.default is p.empty:
            raise Wrong(f"{p.name} should be optional, as in ({ex.signature}): the package calls {ex.name} without it.")
    extra = [p.name for p in params[len(names):] if p.default is p.empty and p.kind != p.KEYWORD_ONLY]
    if extra:
        raise Wrong(f"it requires a parameter `{extra[0]}`, which the chapter's ({ex.signature}) does not have: give it a default.")

def _find(name) -> Exercise | None:
    "The exercise called `name`, forgiving case, spaces and underscores (\"multi_headed_attention\", \"Batch.make_std_mask\")."
    key = re.sub(r"[^a-z0-9]", "", str(name).lower())
    for ex in EXERCISES.values():
        if key in (re.sub(r"[^a-z0-9]", "", ex.name.lower()), "batch" + re.sub(r"[^a-z0-9]", "", ex.name.lower())):
            return ex
    return None

def check(name: str,  # the exercise: "attention", "MultiHeadedAttention", ... (see `EXERCISES`)
          answer,  # your function or class, with the chapter's name and signature
          ) -> bool:  # True when every property holds
    """Check `answer` against the properties of exercise `name`, in order. Prints the first that fails, what was
    expected and the likely mistake, and returns False; prints one line and returns True when all hold."""
    ex = _find(name)
    if ex is None:
        print(f"There is no exercise named {name!r}; the exercises are: {', '.join(EXERCISES)}.")
        return False
    try:
        with torch.random.fork_rng(devices=[]), torch.enable_grad(), warnings.catch_warnings(), \
                contextlib.redirect_stdout(io.StringIO()):  # the reader's prints and warnings, 20 times over, would bury the answer
            warnings.simplefilter("ignore")
            for i, prop in enumerate(ex.properties):
                torch.manual_seed(i)
                prop(answer)
    except Wrong as w:
        print(f"{ex.name}: {w}")
        return False
    except Crash as c:
        print(_crash_report(ex.name, c))
        return False
    except Exception as e:  # the checker's own failure: reported, never a traceback in the reader's notebook
        print(f"{ex.name}: the checker failed on your answer ({type(e).__name__}: {e}); please report this as a bug.")
        return False
    print(f"{ex.name}: correct, all {len(ex.properties)} checks pass.")
    return True

# --- Comparing tensors ------------------------------------------------------------------------------------------
# Helpers the properties share: a short description of what the reader's code returned, the largest difference
# between two tensors, a closeness test, and checks of type and shape that raise `Wrong` with a message naming the
# axes.
def _describe(x) -> str:
    "A short description of what the reader's code returned, for a message."
    if torch.is_tensor(x):
        return f"a tensor of shape {tuple(x.shape)} ({str(x.dtype).replace('torch.', '')})"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}: " + ", ".join(_describe(e) for e in x[:3])
    if x is None:
        return "None"
    if inspect.isclass(x) or inspect.isroutine(x):
        return f"the {'class' if inspect.isclass(x) else 'function'} {getattr(x, '__name__', '?')}"
    return f"{type(x).__name__} {x!r:.40}"

def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    "The largest absolute difference of two tensors (inf when their shapes differ or a value is not finite)."
    if a.shape != b.shape:
        return math.inf
    d = (a.detach().double() - b.detach().double()).abs()
    return math.inf if d.numel() and not torch.isfinite(d).all() else (d.max().item() if d.numel() else 0.0)

def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    "Equal up to `tol`, absolute and relative to b's largest value."
    return _gap(a, b) <= tol * max(1.0, b.detach().abs().max().item() if b.numel() else 0.0)

def _tensor(x, what: str) -> torch.Tensor:
    "`x` when it is a tensor; otherwise a `Wrong` that says what it was."
    if x is None:
        raise Wrong(f"{what} is None: is a `return` missing?")
    if not torch.is_tensor(x):
        raise Wrong(f"{what} should be a tensor; got {_describe(x)}.")
    return x

def _shaped(x, what: str, shape: tuple, meaning: str) -> torch.Tensor:
    "`x` when it is a tensor of `shape`; `meaning` names the axes for the message."
    if tuple(_tensor(x, what).shape) != tuple(shape):
        raise Wrong(f"{what} has shape {tuple(x.shape)}; expected {meaning} = {tuple(shape)}.")
    return x

def _build(cls, *args):
    "An instance of the reader's class, built as the chapter builds it."
    return call(f"while building {cls.__name__}({', '.join(map(repr, args))})", cls, *args)

def _backward(out: torch.Tensor, *leaves: torch.Tensor) -> None:
    "Back-propagate a random projection of `out` (so no gradient cancels out), from fresh gradients."
    if not out.requires_grad:
        raise Wrong("the output carries no gradient: is it computed through .detach(), .data, numpy or torch.no_grad()?")
    for t in leaves:
        t.grad = None
    call("while back-propagating through it", (out * torch.randn_like(out)).sum().backward)

def _no_gradient(named: dict) -> str | None:
    "The name of the first tensor of `named` that received no gradient, else None."
    return next((n for n, t in named.items() if t.grad is None or not t.grad.abs().sum() > 0), None)

# --- Attention (nbs/01_attention.ipynb) ---------------------------------------------------------------------------
# The inputs have every axis of a different size (batch 2, 3 heads, 5 queries, 6 keys, d_k = 8, d_v = 4), so that a
# transposed or swapped axis shows as a wrong shape rather than a wrong value. `scaled_dot_product_attention` is
# PyTorch's fused attention: it computes equation 1 without the package's code.
exercise("attention", "01_attention", "query, key, value, mask=None, dropout=None", "function")

def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    "Query (2, 3, 5, 8), key (2, 3, 6, 8), value (2, 3, 6, 4): batch 2, 3 heads, 5 queries, 6 keys, d_k = 8, d_v = 4."
    return torch.randn(2, 3, 5, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 4)

def _padding_mask() -> torch.Tensor:
    "(2, 1, 1, 6), True = may attend: the first sequence has 5 real keys, the second 3."
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 5:] = False
    mask[1, ..., 3:] = False
    return mask

_SHAPES = "query (2, 3, 5, 8), key (2, 3, 6, 8), value (2, 3, 6, 4)"

def _attend(attention, when: str, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    "The reader's attention called `when`; its result checked to be two tensors, (output, weights)."
    result = call(when, attention, *args, **kwargs)
    if result is None:
        raise Wrong("it returned None; expected (output, weights): is a `return` missing?")
    if torch.is_tensor(result):
        raise Wrong("it returned one tensor; expected two, (output, weights): return the weights too (the charts read them).")
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise Wrong(f"it should return (output, weights), two tensors; it returned {_describe(result)}.")
    return _tensor(result[0], "the output"), _tensor(result[1], "the weights")

@prop("attention")
def _attention_shapes(attention):
    "Returns (output, weights) of shapes (..., queries, d_v) and (..., queries, keys), and leaves its inputs as they were."
    q, k, v = _qkv()
    before = [t.clone() for t in (q, k, v)]
    out, w = _attend(attention, f"on {_SHAPES}", q, k, v)
    if w.shape != (2, 3, 5, 6):
        raise Wrong(f"the weights have shape {tuple(w.shape)}; expected (..., queries, keys) = (2, 3, 5, 6): "
                    "the scores are query @ key.transpose(-2, -1).")
    _shaped(out, "the output", (2, 3, 5, 4), "(..., queries, d_v)")
    for name, now, then in zip(("query", "key", "value"), (q, k, v), before):
        if not torch.equal(now, then):
            raise Wrong(f"it changed its input `{name}` in place: compute new tensors "
                        "(query / x, masked_fill), not in-place ones (query /= x, masked_fill_ on an input).")

@prop("attention")
def _attention_rows_sum_to_one(attention):
    "Each query's weights sum to 1 over the keys: the softmax runs over the last axis."
    q, k, v = _qkv()
    _, w = _attend(attention, f"on {_SHAPES}", q, k, v)
    if not _close(w.sum(-1), torch.ones(2, 3, 5)):
        if _close(w.sum(-2), torch.ones(2, 3, 6)):
            raise Wrong("the weights do not sum to 1 over the keys (the last axis) but over the queries: "
                        "softmax over the wrong dimension? Use softmax(dim=-1).")
        raise Wrong("the weights do not sum to 1 over the keys (the last axis): is the softmax missing, or over another dimension?")

@prop("attention")
def _attention_equation_1(attention):
    "The weights are softmax(Q K^T / sqrt(d_k)) and the output is weights @ V: PyTorch's scaled_dot_product_attention agrees."
    q, k, v = _qkv()
    out, w = _attend(attention, f"on {_SHAPES}", q, k, v)
    scores = q @ k.transpose(-2, -1)
    if not _close(w, (scores / math.sqrt(8)).softmax(-1)):
        for wrong, mistake in ((scores, "the scores are not scaled: divide Q K^T by sqrt(d_k) (equation 1)."),
                               (scores / 8, "the scores are divided by d_k; equation 1 divides them by sqrt(d_k)."),
                               (scores * math.sqrt(8), "the scores are multiplied by sqrt(d_k); equation 1 divides them by it.")):
            if _close(w, wrong.softmax(-1)):
                raise Wrong(mistake)
        raise Wrong(f"the weights differ from softmax(Q K^T / sqrt(d_k)) by up to {_gap(w, (scores / math.sqrt(8)).softmax(-1)):.3g}: "
                    "check equation 1 (scores, then scaling, then softmax over the keys).")
    if not _close(out, F.scaled_dot_product_attention(q, k, v)):
        raise Wrong(f"the weights are right, but the output differs from weights @ value by up to {_gap(out, w @ v):.3g}.")

@prop("attention")
def _attention_padding_mask(attention):
    """With a padding mask (False = padding), padded keys get weight exactly 0, every row still sums to 1, and the output
    is what scaled_dot_product_attention gives with the same mask."""
    q, k, v = _qkv()
    mask = _padding_mask()
    out, w = _attend(attention, "with a padding mask of shape (2, 1, 1, 6) (True = may attend)", q, k, v, mask=mask)
    _shaped(w, "with a mask, the weights", (2, 3, 5, 6), "(..., queries, keys)")
    hidden = ~mask.expand(2, 3, 5, 6)
    if w[hidden].abs().max() > 1e-6:
        if w[~hidden].abs().max() < 1e-6:
            raise Wrong("the mask is inverted: padded keys get all the weight and real keys none. "
                        "True (or 1) means may attend: fill the scores where mask == 0.")
        if _close(w, (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(hidden, 0).softmax(-1)):
            raise Wrong("padded keys still get weight: their scores are set to 0. Fill them with a large negative number "
                        "(-1e9) before the softmax, so that their weight is 0.")
        raise Wrong(f"padded keys get weight up to {w[hidden].abs().max().item():.3g}; expected exactly 0: "
                    "fill their scores with a large negative number (-1e9) before the softmax.")
    if not _close(w.sum(-1), torch.ones(2, 3, 5)):
        raise Wrong("with a mask, the weights of a row no longer sum to 1: apply the mask to the scores before the softmax, "
                    "not to the weights after it.")
    if not _close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)):
        raise Wrong(f"with a padding mask the output differs from scaled_dot_product_attention by up to "
                    f"{_gap(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)):.3g}.")

@prop("attention")
def _attention_other_masks(attention):
    "A causal mask (1, queries, keys) broadcasts over batch and heads; a 0/1 integer mask works as the same bool mask."
    q, k, v = _qkv()
    causal = torch.tril(torch.ones(1, 5, 6, dtype=torch.bool))
    out, _ = _attend(attention, "with a causal mask of shape (1, 5, 6)", q, k, v, mask=causal)
    if not _close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=causal)):
        raise Wrong("with a causal mask (1, queries, keys) the output differs from scaled_dot_product_attention: "
                    "the mask must broadcast against the scores (..., queries, keys).")
    out, _ = _attend(attention, "with a 0/1 integer padding mask (masks may be 0/1 tensors: compare mask == 0)",
                    q, k, v, mask=_padding_mask().long())
    if not _close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=_padding_mask())):
        raise Wrong("with a 0/1 integer mask the output differs from the same mask as booleans: test mask == 0, "
                    "which works for both.")

@prop("attention")
def _attention_fully_masked_row(attention):
    """A query whose keys are all masked gets finite weights, not NaN (the chapter's large finite negative score spreads
    them evenly)."""
    q, k, v = _qkv()
    mask = _padding_mask().expand(2, 1, 5, 6).clone()
    mask[0, 0, 2] = False  # query 2 of the first sequence may attend to nothing
    out, w = _attend(attention, "with a mask that hides every key from one query", q, k, v, mask=mask)
    if not (torch.isfinite(w).all() and torch.isfinite(out).all()):
        raise Wrong("a query whose keys are all masked gets NaN: fill masked scores with a large finite negative number "
                    "(-1e9, as the chapter does), not -inf, whose softmax is 0/0.")

@prop("attention")
def _attention_dropout(attention):
    """The `dropout` module given drops attention weights (in train mode some are 0, the rest scaled by 1/(1-p)), the
    output is computed from the dropped weights, and in eval mode nothing changes."""
    q, k, v = _qkv()
    ref = (q @ k.transpose(-2, -1) / math.sqrt(8)).softmax(-1)
    out, w = _attend(attention, "with dropout=nn.Dropout(0.5) in train mode", q, k, v, dropout=nn.Dropout(0.5).train())
    if _close(w, ref):
        raise Wrong("the dropout given was not applied to the weights: after the softmax, weights = dropout(weights).")
    kept = w != 0
    if kept.all() or not _close(w[kept], 2 * ref[kept]):
        raise Wrong("with dropout(p=0.5) the weights should be the softmax weights, some set to 0 and the others "
                    "multiplied by 1 / (1 - p), as dropout(weights) gives.")
    if not _close(out, w @ v):
        raise Wrong("the output should be computed from the weights after dropout: dropout(weights) @ value.")
    out, w = _attend(attention, "with dropout=nn.Dropout(0.5) in eval mode", q, k, v, dropout=nn.Dropout(0.5).eval())
    if not _close(w, ref):
        raise Wrong("with the dropout module in eval mode the weights still change: call the module you were given "
                    "(it is off in eval mode), not F.dropout.")

@prop("attention")
def _attention_gradients(attention):
    "Gradients flow back to query, key and value."
    q, k, v = (t.requires_grad_() for t in _qkv())
    out, _ = _attend(attention, f"on {_SHAPES}, with gradients", q, k, v, mask=_padding_mask())
    _backward(out, q, k, v)
    missing = _no_gradient({"query": q, "key": k, "value": v})
    if missing:
        raise Wrong(f"no gradient reaches `{missing}`: is it used through .detach(), .data or numpy?")

# `MultiHeadedAttention` is compared with `nn.MultiheadAttention`, PyTorch's own layer, after copying the reader's
# four projections into it. One head comes first: if it matches, the projections are right, and a difference with
# four heads lies in how the heads are cut, scaled or joined.
exercise("MultiHeadedAttention", "01_attention", "h, d_model, dropout", "class")

def _mha_inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    "Query (2, 5, 32) and key, value (2, 7, 32): 5 queries, 7 keys, d_model = 32."
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, n, 32, generator=g) for n in (5, 7, 7))

_MHA_CALL = "on query (2, 5, 32), key and value (2, 7, 32)"

def _projections(layer: nn.Module, d_model: int) -> list[nn.Linear]:
    "W^Q, W^K, W^V, W^O of the reader's layer: its `linears`, as in the chapter, else its nn.Linear layers in the order built."
    found = list(getattr(layer, "linears", []))
    if not (len(found) == 4 and all(isinstance(m, nn.Linear) for m in found)):
        found = [m for m in layer.modules() if isinstance(m, nn.Linear)]
    if len(found) != 4 or any((m.in_features, m.out_features) != (d_model, d_model) for m in found):
        shapes = ", ".join(f"Linear({m.in_features}, {m.out_features})" for m in found) or "none"
        raise Wrong(f"expected four nn.Linear(d_model, d_model) layers, W^Q, W^K, W^V and W^O in this order "
                    f"(the chapter keeps them in self.linears); found {shapes}.")
    return found

def _bias(linear: nn.Linear) -> torch.Tensor:
    return linear.bias if linear.bias is not None else torch.zeros(linear.out_features)

def _torch_mha(layers: list[nn.Linear], h: int) -> nn.MultiheadAttention:
    "PyTorch's own multi-head attention, given the reader's weights: the independent reference."
    d_model = layers[0].in_features
    ref = nn.MultiheadAttention(d_model, h, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([m.weight for m in layers[:3]]))
        ref.in_proj_bias.copy_(torch.cat([_bias(m) for m in layers[:3]]))
        ref.out_proj.weight.copy_(layers[3].weight)
        ref.out_proj.bias.copy_(_bias(layers[3]))
    return ref

def _by_hand(layers, q, k, v, h, scale=None, split="right", concat="right") -> torch.Tensor:
    "Multi-head attention written out with the reader's weights, rightly or with one of the mistakes learners make."
    b, d_model = q.size(0), q.size(-1)
    d_k = d_model // h
    def heads(x):  # (b, seq, d_model) -> (b, h, seq, d_k); "wrong" views the memory as (b, h, seq, d_k) directly
        return x.view(b, -1, h, d_k).transpose(1, 2) if split == "right" else x.view(b, h, -1, d_k)
    Q, K, V = heads(layers[0](q)), heads(layers[1](k)), heads(layers[2](v))
    x = (Q @ K.transpose(-2, -1) * (scale or d_k ** -0.5)).softmax(-1) @ V
    x = x.transpose(1, 2).reshape(b, -1, d_model) if concat == "right" else x.reshape(b, -1, d_model)
    return layers[3](x)

@prop("MultiHeadedAttention")
def _mha_is_a_module(cls):
    "An nn.Module with four nn.Linear(d_model, d_model) projections, whose output has the query's shape."
    if not issubclass(cls, nn.Module):
        raise Wrong("it should be an nn.Module (class MultiHeadedAttention(nn.Module)), "
                    "so that its weights are found, trained and saved.")
    layer = _build(cls, 4, 32, 0.0)
    _projections(layer, 32)
    out = call(_MHA_CALL, layer, *_mha_inputs())
    _shaped(out, "the output", (2, 5, 32), "(batch, queries, d_model)")

@prop("MultiHeadedAttention")
def _mha_one_head(cls):
    "With one head it equals nn.MultiheadAttention given the same weights: the projections are the right ones."
    layer = _build(cls, 1, 32, 0.0).eval()
    q, k, v = _mha_inputs()
    out = call(_MHA_CALL + " with h=1", layer, q, k, v)
    if not _close(out, _torch_mha(_projections(layer, 32), 1)(q, k, v, need_weights=False)[0]):
        raise Wrong("with one head the output differs from nn.MultiheadAttention given the same weights: project query, "
                    "key and value with linears[0], [1] and [2], attend, then apply linears[3] (W^O).")

@prop("MultiHeadedAttention")
def _mha_heads(cls):
    "With four heads it equals nn.MultiheadAttention given the same weights: heads split, scaled by sqrt(d_k) and joined."
    layer = _build(cls, 4, 32, 0.0).eval()
    layers = _projections(layer, 32)
    q, k, v = _mha_inputs()
    out = call(_MHA_CALL + " with h=4", layer, q, k, v)
    ref = _torch_mha(layers, 4)(q, k, v, need_weights=False)[0]
    if _close(out, ref):
        return
    for mistake, kwargs in (
            ("the heads are cut wrongly: view (batch, seq, d_model) as (batch, seq, h, d_k), then transpose(1, 2); "
             "a direct view to (batch, h, seq, d_k) mixes positions into heads.", dict(split="wrong")),
            ("each head's scores are divided by sqrt(d_model); divide them by sqrt(d_k), with d_k = d_model // h "
             "the width of one head.", dict(scale=32 ** -0.5)),
            ("the heads are joined wrongly: transpose(1, 2) back to (batch, seq, h, d_k), then view as "
             "(batch, seq, d_model).", dict(concat="wrong"))):
        if _close(out, _by_hand(layers, q, k, v, 4, **kwargs)):
            raise Wrong(mistake)
    raise Wrong(f"with 4 heads the output differs from nn.MultiheadAttention given the same weights (by up to "
                f"{_gap(out, ref):.3g}), though one head matched: check the split into heads, "
                "view(batch, seq, h, d_k).transpose(1, 2), and the join, transpose(1, 2) then view(batch, seq, d_model).")

@prop("MultiHeadedAttention")
def _mha_masks(cls):
    """A padding mask (batch, 1, keys), as Batch.src_mask, and a causal mask (batch, queries, queries), as
    Batch.tgt_mask, reach every head: nn.MultiheadAttention with the same masks agrees."""
    layer = _build(cls, 4, 32, 0.0).eval()
    ref = _torch_mha(_projections(layer, 32), 4)
    q, k, v = _mha_inputs()
    pad = torch.ones(2, 1, 7, dtype=torch.bool)
    pad[1, :, 4:] = False
    out = call("with a padding mask of shape (2, 1, 7), as Batch.src_mask (one mask for all heads: mask.unsqueeze(1))",
               layer, q, k, v, pad)
    if not _close(out, ref(q, k, v, key_padding_mask=~pad[:, 0], need_weights=False)[0]):
        raise Wrong("with a padding mask (batch, 1, keys) the output differs from nn.MultiheadAttention given the same "
                    "mask: pass it to attention with an axis for the heads, mask.unsqueeze(1).")
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool)).expand(2, 5, 5)
    out = call("as self-attention with a causal mask of shape (2, 5, 5), as Batch.tgt_mask", layer, q, q, q, causal)
    if not _close(out, ref(q, q, q, attn_mask=~causal.repeat_interleave(4, 0), need_weights=False)[0]):
        raise Wrong("with a causal mask (batch, queries, queries) the output differs from nn.MultiheadAttention given the "
                    "same mask: pass it to attention with an axis for the heads, mask.unsqueeze(1).")

@prop("MultiHeadedAttention")
def _mha_keeps_weights(cls):
    "After a call, self.attn holds the weights of every head, (batch, h, queries, keys): the attention-map charts read them."
    layer = _build(cls, 4, 32, 0.0).eval()
    q, k, v = _mha_inputs()
    call(_MHA_CALL, layer, q, k, v)
    ref = _torch_mha(_projections(layer, 32), 4)(q, k, v, need_weights=True, average_attn_weights=False)[1]
    attn = getattr(layer, "attn", None)
    if not torch.is_tensor(attn):
        raise Wrong("after a call, self.attn should hold the attention weights of every head (the attention-map charts "
                    f"read them); it is {_describe(attn)}: keep the weights that attention returns.")
    _shaped(attn, "self.attn", (2, 4, 5, 7), "(batch, h, queries, keys)")
    if not _close(attn, ref):
        raise Wrong(f"self.attn differs from the weights nn.MultiheadAttention computes by up to {_gap(attn, ref):.3g}: "
                    "keep the weights of this call's attention.")

@prop("MultiHeadedAttention")
def _mha_dropout(cls):
    "With dropout=0.5, two calls in train mode differ; in eval mode the output is nn.MultiheadAttention's, call after call."
    layer = _build(cls, 4, 32, 0.5)
    q, k, v = _mha_inputs()
    layer.train()
    if _close(call(_MHA_CALL + " in train mode", layer, q, k, v), call(_MHA_CALL + " in train mode", layer, q, k, v)):
        raise Wrong("with dropout=0.5 in train mode two calls give the same output: apply nn.Dropout(dropout) to the "
                    "attention weights.")
    layer.eval()
    if not _close(call(_MHA_CALL + " in eval mode", layer, q, k, v),
                 _torch_mha(_projections(layer, 32), 4)(q, k, v, need_weights=False)[0]):
        raise Wrong("with dropout=0.5 in eval mode the output still changes: use an nn.Dropout module, which is off in "
                    "eval mode, not F.dropout.")

@prop("MultiHeadedAttention")
def _mha_gradients(cls):
    "Gradients reach the weights of all four projections and the inputs."
    layer = _build(cls, 4, 32, 0.0)
    layers = _projections(layer, 32)
    q, k, v = (t.requires_grad_() for t in _mha_inputs())
    out = call(_MHA_CALL + ", with gradients", layer, q, k, v)
    _backward(out, q, k, v)
    named = {f"linears[{i}].weight ({w})": m.weight for i, (w, m) in enumerate(zip(("W^Q", "W^K", "W^V", "W^O"), layers))}
    missing = _no_gradient({**named, "query": q, "key": k, "value": v})
    if missing:
        raise Wrong(f"no gradient reaches {missing}: is it used, and not through .detach(), .data or numpy?")

@prop("MultiHeadedAttention")
def _mha_refuses_bad_heads(cls):
    "MultiHeadedAttention(3, 32) is refused when built: 3 heads cannot share 32 features equally."
    try:
        cls(3, 32, 0.0)
    except Exception:
        return
    raise Wrong("MultiHeadedAttention(h=3, d_model=32) was built without complaint: refuse a d_model that h does not "
                "divide (assert d_model % h == 0), before it fails later with a puzzling shape error.")

# --- Positional encoding and layer normalization (nbs/02_layers.ipynb) ------------------------------------------------
# The table of section 3.5 is computed here in float64, straight from the formulas. `LayerNorm` is checked against the
# chapter's formula (the unbiased standard deviation, with eps added to it), which is also The Annotated
# Transformer's; the messages name the other common formulas when they are what the reader wrote.
exercise("PositionalEncoding", "02_layers", "d_model, dropout, max_len", "class")

def _sinusoids(n: int, d: int, swap=False, halves=False, exponent="2i", first=0) -> torch.Tensor:
    """The table of section 3.5, (n, d) in float64: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...);
    or, for the messages, one of the mistakes learners make (sine and cosine swapped, in two halves, another exponent,
    positions counted from 1)."""
    pos = torch.arange(first, first + n, dtype=torch.float64).unsqueeze(1)  # (n, 1)
    i = torch.arange(d // 2, dtype=torch.float64)  # index of the (sine, cosine) pair
    angles = pos * 10000.0 ** (-(2 * i if exponent == "2i" else i) / d)  # pos / 10000^(2i/d): (n, d/2)
    sin, cos = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if halves:
        return torch.cat([sin, cos], dim=1)
    if exponent == "dimension":  # dimension j with the exponent j/d, its own instead of its pair's
        j = torch.arange(d, dtype=torch.float64)
        return torch.where(j % 2 == 0, (pos * 10000.0 ** (-j / d)).sin(), (pos * 10000.0 ** (-j / d)).cos())
    return torch.stack([sin, cos], dim=2).reshape(n, d)  # interleaved: sin, cos, sin, cos, ...

@prop("PositionalEncoding")
def _pe_table(cls):
    "An nn.Module that, given zeros (batch, seq, d_model), returns the sinusoid table of section 3.5 for every sentence."
    if not issubclass(cls, nn.Module):
        raise Wrong("it should be an nn.Module (class PositionalEncoding(nn.Module)).")
    pe = _build(cls, 16, 0.0, 60).eval()
    out = _shaped(call("on zeros of shape (2, 60, 16)", pe, torch.zeros(2, 60, 16)), "the output", (2, 60, 16),
                 "the input's shape (batch, seq, d_model)")
    table = _sinusoids(60, 16)
    if _close(out[0], table, 1e-4) and _close(out[1], table, 1e-4):
        return
    for mistake, kwargs in (
            ("sine and cosine are swapped: even dimensions 2i get the sine, odd dimensions 2i+1 the cosine (section 3.5).",
             dict(swap=True)),
            ("the sines and cosines should interleave, sine in dimensions 0, 2, 4, ... and cosine in 1, 3, 5, ..., "
             "not fill one half each.", dict(halves=True)),
            ("the frequencies are wrong: the exponent is 2i/d_model, with i the index of the (sine, cosine) pair; "
             "yours is i/d_model.", dict(exponent="i")),
            ("the frequencies are wrong: both dimensions of a pair, 2i and 2i+1, share the exponent 2i/d_model; "
             "yours gives each dimension its own.", dict(exponent="dimension")),
            ("positions start at 0: the encoding of the first position is (0, 1, 0, 1, ...).", dict(first=1))):
        if _close(out[0], _sinusoids(60, 16, **kwargs), 1e-4):
            raise Wrong(mistake)
    row = 0 if not _close(out[0], table, 1e-4) else 1
    diff = (out[row].double() - table).abs()
    pos, dim = divmod(int(diff.argmax()), 16)
    raise Wrong(f"the encoding differs from section 3.5 at position {pos}, dimension {dim}: {out[row, pos, dim].item():.4f} "
                f"instead of {table[pos, dim].item():.4f}. PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), "
                "PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).")

@prop("PositionalEncoding")
def _pe_adds(cls):
    "For an input x of seq positions the output is x + PE[:seq]: the encoding is added to the embeddings."
    pe = _build(cls, 16, 0.0, 60).eval()
    x = torch.randn(2, 7, 16)
    out = _shaped(call("on an input of shape (2, 7, 16), shorter than max_len=60", pe, x), "the output", (2, 7, 16),
                 "the input's shape (batch, seq, d_model)")
    expected = x + _sinusoids(7, 16).float()
    if not _close(out, expected, 1e-4):
        if _close(out, _sinusoids(7, 16).float().expand(2, 7, 16), 1e-4):
            raise Wrong("the output ignores the input: return x + PE[:seq_len], the encoding added to the embeddings.")
        raise Wrong(f"the output should be x + PE[:seq_len] (the encoding added to the embeddings); it differs by up to "
                    f"{_gap(out, expected):.3g}.")

@prop("PositionalEncoding")
def _pe_fixed(cls):
    "The table is fixed, not learned (no parameters), and moves with the module: a buffer, not a plain tensor attribute."
    pe = _build(cls, 16, 0.0, 60)
    learned = [n for n, _ in pe.named_parameters()]
    if learned:
        raise Wrong(f"the encoding is fixed (section 3.5), not learned, but yours has trainable parameters "
                    f"({', '.join(learned)}): store the table with self.register_buffer('pe', table).")
    loose = [n for n, t in vars(pe).items() if torch.is_tensor(t) and t.numel() == 60 * 16]
    if loose:
        raise Wrong(f"the table is a plain tensor attribute (self.{loose[0]}), which stays behind when the model moves to a "
                    f"GPU: store it with self.register_buffer('{loose[0]}', table).")

@prop("PositionalEncoding")
def _pe_dropout(cls):
    """Dropout applies to the sum x + PE (section 5.4): in train mode each output is 0 or (x + PE) / (1 - p); in eval
    mode the output is x + PE."""
    pe = _build(cls, 16, 0.5, 60)
    x = torch.randn(2, 7, 16)
    expected = x + _sinusoids(7, 16).float()
    out = call("with dropout=0.5 in train mode", pe.train(), x)
    if _close(out, expected, 1e-4):
        raise Wrong("with dropout=0.5 in train mode nothing was dropped: apply nn.Dropout(dropout) to x + PE (section 5.4).")
    kept = out != 0
    if kept.all() or not _close(out[kept], 2 * expected[kept], 1e-4):
        raise Wrong("in train mode each output should be 0 or (x + PE) / (1 - p): dropout applies to the sum x + PE, "
                    "after the addition.")
    if not _close(call("with dropout=0.5 in eval mode", pe.eval(), x), expected, 1e-4):
        raise Wrong("with dropout=0.5 in eval mode the output still changes: use an nn.Dropout module, which is off in "
                    "eval mode.")

exercise("LayerNorm", "02_layers", "features, eps", "class")

def _gain_and_bias(norm: nn.Module, features: int) -> tuple[nn.Parameter, nn.Parameter]:
    "The reader's gain (the parameter of ones) and bias (the parameter of zeros), as a freshly built LayerNorm has them."
    params = list(norm.parameters())
    ones = [p for p in params if p.shape == (features,) and bool((p == 1).all())]
    zeros = [p for p in params if p.shape == (features,) and bool((p == 0).all())]
    if len(params) != 2 or len(ones) != 1 or len(zeros) != 1:
        found = ", ".join(f"{tuple(p.shape)}" for p in params) or "none"
        raise Wrong(f"expected two parameters of shape (features,) = ({features},): a gain a of ones and a bias b of zeros "
                    f"(nn.Parameter(torch.ones(features)), nn.Parameter(torch.zeros(features))); found {found}.")
    return ones[0], zeros[0]

def _normalised(x: torch.Tensor, eps: float, unbiased=True, eps_inside=False) -> torch.Tensor:
    "(x - mean) / (std + eps) over the last axis, the chapter's formula; or with the biased std, or eps under the root."
    centred = x - x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=unbiased)
    return centred / (var + eps).sqrt() if eps_inside else centred / (var.sqrt() + eps)

@prop("LayerNorm")
def _ln_parameters(cls):
    "An nn.Module with a learned gain (ones) and bias (zeros) of shape (features,); the output has the input's shape."
    if not issubclass(cls, nn.Module):
        raise Wrong("it should be an nn.Module (class LayerNorm(nn.Module)), so that its gain and bias are trained.")
    norm = _build(cls, 8, 1e-6)
    _gain_and_bias(norm, 8)
    _shaped(call("on an input of shape (3, 5, 8)", norm, torch.randn(3, 5, 8)), "the output", (3, 5, 8), "the input's shape")

@prop("LayerNorm")
def _ln_formula(cls):
    "Each row of the last axis becomes (x - mean) / (std + eps), with the unbiased std as the chapter defines it."
    norm = _build(cls, 8, 1e-6)
    x = torch.randn(3, 5, 8) * 3 + 1
    out = call("on an input of shape (3, 5, 8)", norm, x)
    if not _close(out.mean(-1), torch.zeros(3, 5), 1e-4):
        raise Wrong("the rows do not have mean 0 after normalising: subtract the mean over the last axis, "
                    "x.mean(-1, keepdim=True).")
    if _close(out, _normalised(x, 1e-6), 1e-4):
        return
    if _close(out, _normalised(x, 1e-6, unbiased=False), 1e-4) or _close(out, _normalised(x, 1e-6, False, True), 1e-4):
        raise Wrong("you divide by the biased standard deviation (over n, as nn.LayerNorm does); the chapter's LayerNorm "
                    "uses x.std(-1), the unbiased one (over n - 1), as The Annotated Transformer does.")
    centred = x - x.mean(-1, keepdim=True)
    if _close(out, centred / x.var(-1, keepdim=True), 1e-4):
        raise Wrong("you divide by the variance; divide by the standard deviation plus eps, std + eps.")
    if _close(out, centred, 1e-4):
        raise Wrong("the rows are centred but not scaled: divide by the standard deviation plus eps, std + eps.")
    raise Wrong(f"the output differs from (x - mean) / (std + eps) over the last axis by up to "
                f"{_gap(out, _normalised(x, 1e-6)):.3g} (std the unbiased x.std(-1, keepdim=True)).")

@prop("LayerNorm")
def _ln_constant_row(cls):
    "A row whose values are all equal gives zeros, not NaN: eps keeps the division finite."
    out = call("on rows whose values are all equal", _build(cls, 8, 1e-6), torch.full((2, 8), 3.0))
    if not torch.isfinite(out).all():
        raise Wrong("a row whose values are all equal gives NaN or inf: add eps to the standard deviation, so that it "
                    "never divides by 0.")
    if not _close(out, torch.zeros(2, 8), 1e-4):
        raise Wrong("a row whose values are all equal should give zeros: x - mean is 0 there.")

@prop("LayerNorm")
def _ln_eps(cls):
    "The eps given is added to the standard deviation, (x - mean) / (std + eps), not under the square root."
    norm = _build(cls, 8, 0.5)
    x = torch.randn(3, 5, 8) * 0.5
    out = call("with eps=0.5", norm, x)
    if _close(out, _normalised(x, 0.5), 1e-4):
        return
    if _close(out, _normalised(x, 0.5, eps_inside=True), 1e-4):
        raise Wrong("eps is added under the square root; the chapter adds it to the standard deviation: "
                    "(x - mean) / (std + eps).")
    if _close(out, _normalised(x, 1e-6), 1e-3) or _close(out, _normalised(x, 0.0), 1e-3):
        raise Wrong("the eps given (0.5) is not used: divide by std + self.eps.")
    raise Wrong(f"with eps=0.5 the output differs from (x - mean) / (std + eps) by up to {_gap(out, _normalised(x, 0.5)):.3g}.")

@prop("LayerNorm")
def _ln_gain_and_bias(cls):
    "The gain multiplies and the bias adds after normalising, a * x_hat + b, and gradients reach both and the input."
    norm = _build(cls, 8, 1e-6)
    a, b = _gain_and_bias(norm, 8)
    with torch.no_grad():
        a.copy_(torch.randn(8))
        b.copy_(torch.randn(8))
    x = torch.randn(3, 5, 8).requires_grad_()
    out = call("with a random gain and bias", norm, x)
    expected = a * _normalised(x, 1e-6) + b
    if not _close(out, expected, 1e-4):
        raise Wrong("the gain and bias should act after normalising: a * (x - mean) / (std + eps) + b.")
    _backward(out, x, a, b)
    missing = _no_gradient({"the gain": a, "the bias": b, "the input": x})
    if missing:
        raise Wrong(f"no gradient reaches {missing}: is it used through .detach(), .data or numpy?")

# --- The masks (nbs/03_model.ipynb, nbs/04_batches.ipynb) --------------------------------------------------------
# `subsequent_mask` is compared with `torch.triu`, and `make_std_mask` with a mask built here from its two parts. The
# target ids of the second test use 0 and 2 as words and 3 as padding, so that a padding id written into the code
# instead of read from `pad` shows.
exercise("subsequent_mask", "03_model", "size", "function", aliases={"size": ("seq_len",)})  # the package says seq_len

def _causal(n: int) -> torch.Tensor:
    "(1, n, n) bool, True = may attend: everything but the strict upper triangle."
    return ~torch.triu(torch.ones(1, n, n, dtype=torch.bool), diagonal=1)

@prop("subsequent_mask")
def _mask_shape(subsequent_mask):
    "Returns a bool tensor of shape (1, size, size), the leading 1 broadcasting over the batch."
    m = _tensor(call("as subsequent_mask(5)", subsequent_mask, 5), "subsequent_mask(5)")
    if m.shape == (5, 5):
        raise Wrong("subsequent_mask(5) has shape (5, 5); expected (1, 5, 5): the leading 1 broadcasts over the batch "
                    "(build it from torch.ones(1, size, size)).")
    _shaped(m, "subsequent_mask(5)", (1, 5, 5), "(1, size, size)")
    if m.dtype != torch.bool:
        raise Wrong(f"subsequent_mask(5) holds {str(m.dtype).replace('torch.', '')}; expected bools (True = may attend): "
                    "compare with == 0, or build it with dtype=torch.bool.")

@prop("subsequent_mask")
def _mask_values(subsequent_mask):
    "Row i allows keys 0..i, itself included, and hides the future: torch.triu agrees, for sizes 1, 2 and 5."
    for n in (5, 1, 2):
        m = _shaped(call(f"as subsequent_mask({n})", subsequent_mask, n), f"subsequent_mask({n})", (1, n, n), "(1, size, size)")
        if torch.equal(m.bool(), _causal(n)):
            continue
        ones = torch.ones(1, n, n, dtype=torch.bool)
        for wrong, mistake in (
                (~_causal(n), "the mask is inverted: True must mean may attend, so that position i sees keys 0..i."),
                (torch.tril(ones, diagonal=-1), "the diagonal is hidden: position i may attend to itself; keep the "
                                               "diagonal (torch.tril, or torch.triu(..., diagonal=1) == 0)."),
                (torch.triu(ones), "the mask shows the future and hides the past: position i may attend to keys 0..i, "
                                   "the lower triangle (torch.tril), not the upper.")):
            if torch.equal(m.bool(), wrong):
                raise Wrong(mistake)
        row = next(i for i in range(n) if not torch.equal(m[0, i].bool(), _causal(n)[0, i]))
        raise Wrong(f"row {row} of subsequent_mask({n}) is {m[0, row].int().tolist()}; expected {_causal(n)[0, row].int().tolist()}: "
                    "row i allows keys 0..i.")

exercise("make_std_mask", "04_batches", "tgt, pad", "function")

_STD_TGT = torch.tensor([[0, 2, 5, 4, 3, 3], [0, 6, 2, 3, 3, 3]])  # two target rows padded with id 3 (0 and 2 are words here)

def _std_mask(answer, tgt: torch.Tensor, pad: int):
    "The reader's mask for `tgt`: `answer` is a function make_std_mask(tgt, pad), or a class such as Batch that has one."
    fn = getattr(answer, "make_std_mask", answer)
    return call(f"as make_std_mask(tgt, pad={pad}) with tgt {tuple(tgt.shape)} = {tgt.tolist()}", fn, tgt, pad)

@prop("make_std_mask")
def _std_mask_shape(answer):
    "Returns a bool tensor (batch, tgt_len, tgt_len): a padding part per sentence, a future part per query."
    m = _tensor(_std_mask(answer, _STD_TGT, 3), "make_std_mask(tgt, pad)")
    if m.shape == (1, 6, 6):
        raise Wrong("the mask has shape (1, tgt_len, tgt_len): the padding part is missing. Combine "
                    "(tgt != pad).unsqueeze(-2) with subsequent_mask(tgt.size(-1)).")
    if m.shape == (2, 1, 6):
        raise Wrong("the mask has shape (batch, 1, tgt_len): the future part is missing. Combine it with "
                    "& subsequent_mask(tgt.size(-1)).")
    _shaped(m, "make_std_mask(tgt, pad)", (2, 6, 6), "(batch, tgt_len, tgt_len)")
    if m.dtype != torch.bool:
        raise Wrong(f"the mask holds {str(m.dtype).replace('torch.', '')}; expected bools (True = may attend).")

@prop("make_std_mask")
def _std_mask_values(answer):
    "A query may attend to a key that is not padding and not in the future: (tgt != pad)[:, None, :] & causal, by hand."
    m = _std_mask(answer, _STD_TGT, 3)
    future = _causal(6)
    expected = (_STD_TGT != 3).unsqueeze(-2) & future
    if torch.equal(m, expected):
        return
    for wrong, mistake in (
            ((_STD_TGT != 3).unsqueeze(-2).expand(2, 6, 6), "future positions are not hidden: combine the padding mask "
                                                          "with & subsequent_mask(tgt.size(-1))."),
            (future.expand(2, 6, 6), "padding is not hidden: combine the causal mask with (tgt != pad).unsqueeze(-2)."),
            ((_STD_TGT != 3).unsqueeze(-1) & future, "padding is hidden along the wrong axis: a padded key must be hidden "
                                                   "from every query, (tgt != pad).unsqueeze(-2), not unsqueeze(-1)."),
            (~expected, "the mask is inverted: True must mean may attend.")):
        if torch.equal(m, wrong):
            raise Wrong(mistake)
    for pad in (0, 2):
        if torch.equal(m, (_STD_TGT != pad).unsqueeze(-2) & future):
            raise Wrong(f"the mask hides id {pad}, not the padding id it was given (3): use the `pad` argument.")
    b, q = next((b, q) for b in range(2) for q in range(6) if not torch.equal(m[b, q], expected[b, q]))
    raise Wrong(f"for tgt {_STD_TGT.tolist()} with pad=3, row {q} of sentence {b} is {m[b, q].int().tolist()}; expected "
                f"{expected[b, q].int().tolist()}: keys that are not padding, up to the query's own position.")

# --- Training (nbs/05_training.ipynb) -----------------------------------------------------------------------------
# `rate` is compared with equation 3 at 13 steps, for the paper's settings and for others, so that an argument left
# unused shows. Step 0 comes last and on its own: it is where a correct formula still fails.
exercise("rate", "05_training", "step, model_size, factor, warmup", "function")

def _equation_3(step, model_size, factor, warmup) -> float:
    "factor * model_size^-0.5 * min(step^-0.5, step * warmup^-1.5), step 0 counted as step 1 (section 5.3)."
    step = max(step, 1)
    return factor * model_size ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)

_RATE_POINTS = [(s, 512, 1.0, 4000) for s in (1, 100, 1000, 3999, 4000, 4001, 8000, 100000)] + \
              [(s, 256, 2.0, 400) for s in (1, 50, 400, 1600, 10000)]

def _number(x, what: str) -> float:
    "`x` as a float, if it is a number (a Python or NumPy number, or a tensor of one element)."
    try:
        if torch.is_tensor(x) and x.numel() != 1:
            raise TypeError
        return float(x)
    except (TypeError, ValueError):
        raise Wrong(f"{what} should be a number; it is {_describe(x)}.") from None

@prop("rate")
def _rate_equation_3(rate):
    """Equation 3 at 13 points, for the paper's settings and for others: a linear warmup to the peak at step = warmup,
    then a decay as step^-0.5."""
    got = [_number(call(f"as rate({s}, {d}, {f}, {w})", rate, s, d, f, w), f"rate({s}, {d}, {f}, {w})")
           for s, d, f, w in _RATE_POINTS]
    def matches(formula):
        return all(math.isclose(g, formula(*p), rel_tol=1e-6) for g, p in zip(got, _RATE_POINTS))
    if matches(_equation_3):
        return
    for formula, mistake in (
            (lambda s, d, f, w: f * d ** -0.5 * s ** -0.5,
             "there is no warmup: the rate starts at its highest. Equation 3 takes min(step ** -0.5, step * warmup ** -1.5)."),
            (lambda s, d, f, w: f * d ** -0.5 * max(s ** -0.5, s * w ** -1.5),
             "the rate takes the max of the two terms; equation 3 takes their min."),
            (lambda s, d, f, w: f * min(s ** -0.5, s * w ** -1.5),
             "model_size ** -0.5 is missing: the rate is sqrt(model_size) times too large."),
            (lambda s, d, f, w: f * d ** 0.5 * min(s ** -0.5, s * w ** -1.5),
             "model_size should be raised to the power -0.5, not 0.5."),
            (lambda s, d, f, w: d ** -0.5 * min(s ** -0.5, s * w ** -1.5),
             "the factor is not used: multiply the rate by factor."),
            (lambda s, d, f, w: _equation_3(s, d, f, 4000),
             "the warmup argument is not used: the rate behaves as if warmup were 4000.")):
        if matches(formula):
            raise Wrong(mistake)
    (s, d, f, w), g = next((p, g) for p, g in zip(_RATE_POINTS, got) if not math.isclose(g, _equation_3(*p), rel_tol=1e-6))
    raise Wrong(f"rate({s}, {d}, {f}, {w}) is {g:.6g}; equation 3 gives {_equation_3(s, d, f, w):.6g}: "
                "factor * model_size ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).")

@prop("rate")
def _rate_step_0(rate):
    "rate(0, ...) equals rate(1, ...): LambdaLR asks for the rate at step 0, where step^-0.5 is infinite."
    try:
        r = rate(0, 512, 1.0, 4000)
    except Exception as e:
        raise Wrong(f"rate(0, 512, 1.0, 4000) raised {type(e).__name__}: LambdaLR asks for the rate at step 0, where "
                    "step ** -0.5 is infinite; treat step 0 as step 1 (step = max(step, 1)).") from None
    r = _number(r, "rate(0, 512, 1.0, 4000)")
    if not math.isclose(r, _equation_3(1, 512, 1.0, 4000), rel_tol=1e-6):
        raise Wrong(f"rate(0, 512, 1.0, 4000) is {r:.6g}; expected rate(1, 512, 1.0, 4000) = "
                    f"{_equation_3(1, 512, 1.0, 4000):.6g}: treat step 0 as step 1, since LambdaLR asks for the rate at step 0.")

# The gradient of the label-smoothing loss with respect to the log-probabilities x is -t, the target distribution,
# whatever way the loss is written. So the checker reads the reader's t from the gradient and can say which entry is
# wrong: the padding column, a padding row, the correct token or the others.
exercise("LabelSmoothing", "05_training", "size, padding_idx, smoothing", "class")

def _smoothed(target: torch.Tensor, size: int, padding_idx: int, smoothing: float) -> torch.Tensor:
    """The target distribution t of section 5.4 as the chapter builds it, (tokens, size): 1 - smoothing on the correct
    token, smoothing / (size - 2) on each other token but padding, 0 on padding, and rows of padding targets all 0."""
    t = torch.full((len(target), size), smoothing / (size - 2))
    t[torch.arange(len(target)), target] = 1 - smoothing
    t[:, padding_idx] = 0
    t[target == padding_idx] = 0
    return t

def _kl_by_hand(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    "sum over rows r and tokens j of t_rj (log t_rj - x_rj), with 0 log 0 = 0: the loss of section 5.4, summed."
    return (torch.xlogy(t, t) - t * x).sum()

_LS_TARGET = torch.tensor([2, 0, 5, 1, 6])  # the second target is padding (padding_idx=0)

def _smoothing_loss(cls, size, padding_idx, smoothing, target, grad=False):
    "The reader's loss on random log-probabilities for `target`, with the log-probabilities it was computed from."
    criterion = _build(cls, size, padding_idx, smoothing)
    x = torch.randn(len(target), size).log_softmax(-1).detach().requires_grad_(grad)
    loss = call(f"as LabelSmoothing({size}, {padding_idx}, {smoothing})(x, target) on log-probabilities x "
                f"({len(target)}, {size}) and target {target.tolist()}", criterion, x, target)
    loss = _tensor(loss, "the loss")
    if loss.numel() != 1:
        raise Wrong(f"the loss has shape {tuple(loss.shape)}; expected one number, summed over tokens and vocabulary "
                    "(nn.KLDivLoss(reduction='sum')).")
    if not torch.isfinite(loss).all():
        raise Wrong("the loss is NaN or inf: t log t must count as 0 where t = 0 (nn.KLDivLoss does this; so does torch.xlogy).")
    return loss.reshape(()), x

@prop("LabelSmoothing")
def _ls_distribution(cls):
    """The target distribution, read from the gradient (the loss's gradient with respect to x is -t): 1 - smoothing on
    the correct token, smoothing / (size - 2) on the others, 0 in the padding column and in rows whose target is padding."""
    loss, x = _smoothing_loss(cls, 7, 0, 0.3, _LS_TARGET, grad=True)
    if not loss.requires_grad:
        raise Wrong("the loss carries no gradient: compute it from x with torch operations (nn.KLDivLoss(reduction='sum')), "
                    "not through .detach(), .item() or numpy.")
    call("while back-propagating the loss", loss.backward)
    t, expected = -x.grad, _smoothed(_LS_TARGET, 7, 0, 0.3)
    if _close(t, expected):
        return
    scale = (expected.sum() / t.sum()).item() if t.sum() != 0 else 0.0
    if scale > 1.5 and _close(t * scale, expected):
        raise Wrong(f"the loss is averaged (it is {scale:.3g} times too small): the chapter sums it over tokens and "
                    "vocabulary, nn.KLDivLoss(reduction='sum'), and the training loop divides by the number of tokens.")
    pad_rows = _LS_TARGET == 0
    if t[pad_rows].abs().max() > 1e-6:
        raise Wrong("rows whose target is padding should contribute nothing: set their whole row of the target "
                    "distribution to 0 (t[target == padding_idx] = 0).")
    if t[:, 0].abs().max() > 1e-6:
        raise Wrong("the padding column gets probability: set it to 0 in every row, since padding is never a target.")
    rows = (~pad_rows).nonzero().flatten()
    gold = t[rows, _LS_TARGET[rows]]
    if not _close(gold, torch.full_like(gold, 0.7)):
        raise Wrong(f"the correct token should get 1 - smoothing = 0.7; it gets {gold[0].item():.4g}.")
    other = t[rows[0], 1].item()  # row 0's target is 2: token 1 is an ordinary other token
    for spread, mistake in ((0.3 / 6, "size - 1"), (0.3 / 7, "size")):
        if math.isclose(other, spread, rel_tol=1e-4):
            raise Wrong(f"spread the smoothing over the size - 2 tokens that are neither the correct one nor padding: "
                        f"each gets smoothing / (size - 2) = {0.3 / 5:.4g}, not smoothing / ({mistake}) = {spread:.4g}.")
    raise Wrong(f"the other tokens should each get smoothing / (size - 2) = {0.3 / 5:.4g}; one gets {other:.4g}.")

@prop("LabelSmoothing")
def _ls_kl_divergence(cls):
    "The loss is the KL divergence sum t (log t - x) between t and the model's log-probabilities x, summed, by hand."
    loss, x = _smoothing_loss(cls, 7, 0, 0.3, _LS_TARGET)
    t = _smoothed(_LS_TARGET, 7, 0, 0.3)
    if _close(loss, _kl_by_hand(x, t)):
        return
    if _close(loss, -(t * x).sum()):
        raise Wrong("you compute the cross-entropy -sum t log p; the chapter's loss is the KL divergence "
                    "sum t (log t - log p) (nn.KLDivLoss(reduction='sum')), smaller by the entropy of t.")
    raise Wrong(f"the loss is {loss.item():.6g}; the KL divergence sum t (log t - x), summed over tokens and vocabulary, "
                f"is {_kl_by_hand(x, t).item():.6g}.")

@prop("LabelSmoothing")
def _ls_other_settings(cls):
    "Another padding id and smoothing (3 and 0.1) give the KL divergence to their own target distribution."
    target = torch.tensor([3, 1, 4, 3, 0, 6])
    loss, x = _smoothing_loss(cls, 7, 3, 0.1, target)
    expected = _kl_by_hand(x, _smoothed(target, 7, 3, 0.1))
    if not _close(loss, expected):
        raise Wrong(f"with padding_idx=3 and smoothing=0.1 the loss is {loss.item():.6g}; expected {expected.item():.6g}: "
                    "use the padding_idx and smoothing you were given.")

@prop("LabelSmoothing")
def _ls_no_smoothing(cls):
    "With smoothing 0 the loss is the summed negative log-likelihood of the correct tokens, padding ignored."
    loss, x = _smoothing_loss(cls, 7, 0, 0.0, _LS_TARGET)
    expected = F.nll_loss(x, _LS_TARGET, ignore_index=0, reduction="sum")
    if not _close(loss, expected):
        raise Wrong(f"with smoothing=0 the loss is {loss.item():.6g}; expected the summed negative log-likelihood of the "
                    f"correct tokens, padding ignored: {expected.item():.6g}.")

# `greedy_decode` runs on a stand-in model, `Oracle`, whose most probable next token follows a rule, so that the right
# output is known without decoding: after token y at position i comes (3y + i + s) mod 11, with s the sum of the
# source ids. Feeding the decoder the wrong tokens, or reading the wrong position, breaks the sequence at once.
exercise("greedy_decode", "05_training", "model, src, src_mask, max_len, start_symbol", "function")

class Oracle(nn.Module):
    """A stand-in for a trained model, whose greedy output is known in closed form: after token y at position i, the
    most probable next token is (3 y + i + s) mod 11, with s the sum of the sentence's source ids. Its decoder looks at
    each position's own token only, so it is causal; it notes every target mask that is not the causal mask."""
    V = 11

    def __init__(self):
        super().__init__()
        self.generator = nn.LogSoftmax(dim=-1)  # decoder states are already scores over the 11 tokens
        self.bad_masks = []  # descriptions of the wrong tgt_masks it was given

    def encode(self, src, src_mask):
        if not (torch.is_tensor(src) and src.dim() == 2):
            raise ValueError(f"model.encode expects the source ids (batch, src_len); got {_describe(src)}")
        return src.double().unsqueeze(-1).expand(-1, -1, 4)  # (batch, src_len, 4): the memory, holding the ids

    def decode(self, memory, src_mask, tgt, tgt_mask):
        if not (torch.is_tensor(memory) and memory.dim() == 3 and memory.is_floating_point()):
            raise ValueError(f"model.decode expects the memory from model.encode, (batch, src_len, d_model); got {_describe(memory)}")
        if not (torch.is_tensor(tgt) and tgt.dim() == 2 and tgt.size(0) == memory.size(0)):
            raise ValueError(f"model.decode expects the target ids so far, one row per source sentence "
                             f"({memory.size(0)}, tokens so far); got {_describe(tgt)}")
        t = tgt.size(1)
        try:
            ok = torch.equal((tgt_mask != 0).expand(tgt.size(0), t, t), _causal(t).expand(tgt.size(0), t, t))
        except Exception:
            ok = False
        if not ok:
            self.bad_masks.append(_describe(tgt_mask))
        s = memory[..., 0].sum(1).long()  # (batch,)
        nxt = (3 * tgt.long() + torch.arange(t) + s[:, None]) % self.V  # (batch, t): the next token after each position
        return F.one_hot(nxt, self.V).double() * 5  # (batch, t, V) decoder states

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

_OWN_CODE.update(f.__code__ for f in (Oracle.encode, Oracle.decode, Oracle.forward))

def _oracle_greedy(src: torch.Tensor, max_len: int, start: int) -> torch.Tensor:
    "What greedy decoding of the Oracle gives, computed from its rule: y_0 = start, y_(i+1) = (3 y_i + i + s) mod 11."
    rows = []
    for s in src.sum(1).tolist():
        ys = [start]
        for i in range(max_len - 1):
            ys.append((3 * ys[-1] + i + s) % Oracle.V)
        rows.append(ys)
    return torch.tensor(rows)

def _decoded(greedy_decode, src, max_len, start, when) -> tuple[torch.Tensor, Oracle]:
    "The reader's greedy output on the Oracle for `src`, checked for shape, type and start symbol."
    model = Oracle().eval()
    src_mask = torch.ones(src.size(0), 1, src.size(1), dtype=torch.bool)
    ys = _tensor(call(when, greedy_decode, model, src, src_mask, max_len, start), "the output of greedy_decode")
    if ys.dim() == 2 and ys.size(0) == src.size(0) and ys.size(1) in (max_len - 1, max_len + 1):
        raise Wrong(f"expected max_len = {max_len} ids per sentence, the start symbol included; got {ys.size(1)}: "
                    "the loop adds max_len - 1 tokens.")
    if ys.dim() == 2 and ys.size(0) != src.size(0) and ys.size(1) == max_len:
        raise Wrong(f"with {src.size(0)} sentences the output should have {src.size(0)} rows; it has {ys.size(0)}: start "
                    "ys as one start symbol per sentence, (batch, 1), and append one token per sentence at each step.")
    _shaped(ys, "the output of greedy_decode", (src.size(0), max_len), "(batch, max_len)")
    if ys.is_floating_point():
        raise Wrong(f"the ids should be integers like src ({src.dtype}); they are {ys.dtype}: build ys with src's dtype.")
    if not (ys[:, 0] == start).all():
        raise Wrong(f"each output should begin with the start symbol {start}; the first column is {ys[:, 0].tolist()}.")
    return ys, model

@prop("greedy_decode")
def _greedy_one_sentence(greedy_decode):
    """On one sentence, each token is the argmax of the model's prediction at the last position given the tokens before
    it (a model whose greedy output is known in closed form), with the causal mask for the decoder."""
    src = torch.tensor([[4, 7, 1, 9, 2]])
    ys, model = _decoded(greedy_decode, src, 7, 1, "on one sentence (batch 1) with max_len=7, start_symbol=1")
    expected = _oracle_greedy(src, 7, 1)
    if not torch.equal(ys.long(), expected):
        if len(set(ys[0, 1:].tolist())) == 1:
            raise Wrong("every new token is the same: give the decoder all the tokens written so far (ys), and take the "
                        "prediction at the last position, out[:, -1].")
        t = next(i for i in range(7) if ys[0, i] != expected[0, i])
        raise Wrong(f"token {t} is {ys[0, t].item()}; the greedy choice is {expected[0, t].item()}, the argmax of "
                    "model.generator(out[:, -1]) given the tokens before it.")
    if model.bad_masks:
        raise Wrong(f"the decoder got tgt_mask {model.bad_masks[0]}: give it the causal mask of the tokens so far, "
                    "subsequent_mask(ys.size(1)).")

@prop("greedy_decode")
def _greedy_batch(greedy_decode):
    "A batch of three sentences is decoded at once, each row as if decoded alone."
    src = torch.tensor([[4, 7, 1, 9, 2], [3, 3, 8, 0, 0], [10, 1, 2, 5, 6]])
    ys, _ = _decoded(greedy_decode, src, 6, 2, "on a batch of 3 sentences with max_len=6, start_symbol=2")
    expected = _oracle_greedy(src, 6, 2)
    for b in range(3):
        if not torch.equal(ys[b].long(), expected[b]):
            raise Wrong(f"in a batch of 3, sentence {b} is decoded as {ys[b].tolist()}; alone it gives {expected[b].tolist()}: "
                        "take the argmax for every sentence (argmax(dim=-1)) and append one token per row.")
