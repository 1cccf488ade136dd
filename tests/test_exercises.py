"""The exercises' checker, `annotated_transformer.exercises.check`, tested through its own tables.

* Every reference passes, and so do the package's definitions and the chapters' solutions; every stub is not written.
* Every known mistake of a table (the reference with one switch turned) fails, with the table's key word.
* The references agree with PyTorch's own layers and functions.
* The checker always answers: a loop that never ends, `sys.exit`, global state, numbers written into the code,
  inputs changed in place, results of another dtype, crashes in the reader's code.
"""
import functools
import math
import re
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.exercises import EXERCISES, Oracle, check
from conftest import ROOT, cells, notebook, script


def verdict(capsys, name, answer, **kwargs) -> tuple[bool, str]:
    "What check returns and prints for `answer`."
    capsys.readouterr()
    ok = check(name, answer, **kwargs)
    return ok, capsys.readouterr().out


def fails(capsys, name, answer, word, **kwargs) -> str:
    "check fails `answer` in one or two lines, without a traceback, and names `word` (case ignored)."
    ok, out = verdict(capsys, name, answer, **kwargs)
    assert ok is False, f"{name}: a wrong answer passed: {out}"
    assert 1 <= len(out.strip().splitlines()) <= 2 and "Traceback" not in out, out
    assert word.lower() in out.lower(), f"expected {word!r} in: {out}"
    return out


def package_answer(name):
    "The package's definition, the solution of exercise `name`."
    from annotated_transformer.attention import MultiHeadedAttention, attention
    from annotated_transformer.batches import Batch
    from annotated_transformer.layers import LayerNorm, PositionalEncoding
    from annotated_transformer.model import subsequent_mask
    from annotated_transformer.training import LabelSmoothing, greedy_decode, rate
    return {"attention": attention, "MultiHeadedAttention": MultiHeadedAttention,
            "PositionalEncoding": PositionalEncoding, "LayerNorm": LayerNorm, "subsequent_mask": subsequent_mask,
            "make_std_mask": Batch, "rate": rate, "LabelSmoothing": LabelSmoothing,
            "greedy_decode": greedy_decode}[name]


# --- the tables -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(EXERCISES))
@pytest.mark.parametrize("whose", ["reference", "package"])
def test_the_reference_and_the_packages_definition_pass(capsys, name, whose):
    answer = EXERCISES[name].reference if whose == "reference" else package_answer(name)
    ok, out = verdict(capsys, name, answer)
    assert ok is True and out.count("\n") == 1, out


MISTAKES = [(name, key) for name, ex in EXERCISES.items() for key in ex.mistakes]


@pytest.mark.parametrize("name, key", MISTAKES, ids=[f"{n}: {k}" for n, k in MISTAKES])
def test_each_known_mistake_is_named(capsys, name, key):
    fails(capsys, name, EXERCISES[name].wrong(key), key)


def test_the_references_agree_with_pytorch():
    "The references, written for the checker, agree with PyTorch's own attention, multi-head attention and losses."
    ex = EXERCISES
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 4)
    pad = torch.rand(2, 1, 1, 6) > 0.3
    pad[..., 0] = True
    torch.testing.assert_close(ex["attention"].reference(q, k, v, pad)[0], F.scaled_dot_product_attention(q, k, v, pad))
    ours = ex["MultiHeadedAttention"].reference(4, 32, 0.0).eval()
    torchs = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    with torch.no_grad():  # the same projections: W^Q, W^K, W^V stacked in in_proj, then W^O
        torchs.in_proj_weight.copy_(torch.cat([m.weight for m in ours.linears[:3]]))
        torchs.in_proj_bias.copy_(torch.cat([m.bias for m in ours.linears[:3]]))
        torchs.out_proj.load_state_dict(ours.linears[3].state_dict())
    x, keep = torch.randn(2, 5, 32), torch.rand(2, 1, 5) > 0.3
    keep[..., 0] = True
    torch.testing.assert_close(ours(x, x, x, keep), torchs(x, x, x, key_padding_mask=~keep[:, 0])[0])
    torch.testing.assert_close(ex["subsequent_mask"].reference(6), torch.triu(torch.ones(1, 6, 6), 1) == 0)
    x, target = torch.randn(6, 7).log_softmax(-1), torch.tensor([3, 1, 4, 3, 0, 6])
    t = torch.full((6, 7), 0.1 / 5).scatter(1, target[:, None], 0.9)  # section 5.4's target distribution
    t[:, 3], t[target == 3] = 0, 0
    kl_divergence = nn.KLDivLoss(reduction="sum")
    torch.testing.assert_close(ex["LabelSmoothing"].reference(7, 3, 0.1)(x, target), kl_divergence(x, t))
    torch.testing.assert_close(ex["LabelSmoothing"].reference(7, 3, 0.0)(x, target),
                               F.nll_loss(x, target, ignore_index=3, reduction="sum"))


def test_the_stand_in_model_decodes_greedily_by_its_rule():
    "The Oracle's greedy output, decoded by the package, follows its rule: y_(i+1) = (3 y_i + i + s) mod 11."
    from annotated_transformer.training import greedy_decode
    src = torch.tensor([[4, 7, 1, 9, 2], [0, 3, 3, 5, 10]])
    out = greedy_decode(Oracle(), src, torch.ones(2, 1, 5, dtype=torch.bool), max_len=8, start_symbol=2)
    for row, s in zip(out.tolist(), src.sum(1).tolist()):
        expected = [2]
        for i in range(7):
            expected.append((3 * expected[-1] + i + s) % 11)
        assert row == expected


# --- a checker that always answers ----------------------------------------------------------------------------------

def test_a_loop_that_never_ends_is_stopped(capsys):
    def attention(query, key, value, mask=None, dropout=None):
        end = time.monotonic() + 60  # stopped long before; should the limit fail, the test fails, but ends
        while time.monotonic() < end:
            pass
    fails(capsys, "attention", attention, "finish", seconds=1)


@pytest.mark.parametrize("stop", [SystemExit(3), KeyboardInterrupt()], ids=["sys.exit(3)", "KeyboardInterrupt"])
def test_sys_exit_and_keyboard_interrupt_are_reported_and_the_process_goes_on(capsys, stop):
    def rate(step, model_size, factor, warmup):
        raise stop  # as sys.exit(3) does, or Ctrl-C
    fails(capsys, "rate", rate, type(stop).__name__)


def test_the_global_state_the_answer_changes_is_put_back_and_its_prints_silenced(capsys):
    def attention(query, key, value, mask=None, dropout=None):
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        torch.manual_seed(123)
        return package_answer("attention")(query, key, value, mask, dropout)
    torch.manual_seed(7)
    state = torch.random.get_rng_state()
    try:
        verdict(capsys, "attention", attention)
        assert (torch.get_default_dtype(), torch.is_grad_enabled()) == (torch.float32, True)
        assert torch.equal(torch.random.get_rng_state(), state)
    finally:
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
    def rate(step, model_size, factor, warmup):  # and what it prints is silenced
        print("debugging", step)
        return package_answer("rate")(step, model_size, factor, warmup)
    ok, out = verdict(capsys, "rate", rate)
    assert ok and "debugging" not in out, out


def test_numbers_written_into_the_code_fail(capsys):
    def attention(query, key, value, mask=None, dropout=None):
        scores = query @ key.transpose(-2, -1) / math.sqrt(8)  # d_k = 8 written in
        weights = (scores if mask is None else scores.masked_fill(mask == 0, -1e9)).softmax(-1)
        weights = weights if dropout is None else dropout(weights)
        return weights @ value, weights
    fails(capsys, "attention", attention, "written into")
    def make_std_mask(tgt, pad):
        return package_answer("make_std_mask").make_std_mask(tgt, 3)  # the padding id written in
    fails(capsys, "make_std_mask", make_std_mask, "written into")


def test_an_input_changed_in_place_is_named(capsys):
    class MultiHeadedAttention(package_answer("MultiHeadedAttention")):
        def forward(self, query, key, value, mask=None):  # right, but the caller's mask keeps the axis for the heads
            return super().forward(query, key, value, mask if mask is None else mask.unsqueeze_(1)[:, 0])
    fails(capsys, "MultiHeadedAttention", MultiHeadedAttention, "in place")


@pytest.mark.parametrize("name, change", [
    ("attention", lambda out: (out[0].double(), out[1].double())),
    ("make_std_mask", lambda mask: mask.long()),
    ("greedy_decode", lambda ys: ys.float())], ids=["float64 attention", "integer mask", "float ids"])
def test_a_result_of_another_dtype_is_a_dtype_mistake(capsys, name, change):
    right = package_answer(name)
    right = getattr(right, "make_std_mask", right)
    fails(capsys, name, functools.wraps(right)(lambda *args, **kw: change(right(*args, **kw))), "dtype mistake")


# --- the reader's code and odd answers ------------------------------------------------------------------------------

def test_a_crash_is_reported_with_the_readers_line(capsys):
    def attention(query, key, value, mask=None, dropout=None):
        scores = query @ key / math.sqrt(query.size(-1))  # the key is not transposed
        return scores.softmax(-1) @ value, scores.softmax(-1)
    out = fails(capsys, "attention", attention, "RuntimeError")
    assert f"line {attention.__code__.co_firstlineno + 1}" in out, out


@pytest.mark.parametrize("name, answer, word", [
    ("attention", lambda query, key, value, mask=None, dropout=None: exec("raise NotImplementedError"), "not written"),
    ("attention", lambda query, key, value, mask=None, dropout=None: None, "return"),
    ("attention", lambda query, key, value, mask=None, dropout=None: "attention", "(output, weights)"),
    ("attention", lambda q, k, v, mask=None, dropout=None: None, "same names"),
    ("attention", lambda query, key, value, mask, dropout: None, "defaults"),
    ("LayerNorm", lambda features, eps: None, "nn.Module"),
    ("rate", None, "a function"),
    ("rate", lambda step, model_size, factor, warmup: "fast", "float"),
    ("greedy_decode", lambda model, src, src_mask, max_len, start_symbol: [[1, 2]], "tensor")])
def test_odd_answers_get_a_clear_message(capsys, name, answer, word):
    fails(capsys, name, answer, word)


def test_names_are_forgiving_and_an_unknown_name_lists_the_exercises(capsys):
    assert verdict(capsys, "label smoothing", package_answer("LabelSmoothing"))[0] is True
    # make_std_mask: a function, or a class that has it (the package's Batch, above)
    assert verdict(capsys, "Batch.make_std_mask", package_answer("make_std_mask").make_std_mask)[0] is True
    out = fails(capsys, "attentoin", package_answer("attention"), "no exercise")
    assert all(name in out for name in EXERCISES), out


def test_the_checkers_own_failure_is_reported_not_raised(capsys, monkeypatch):
    monkeypatch.setattr(EXERCISES["rate"], "properties", [lambda ex, answer: {}["missing"]])
    fails(capsys, "rate", package_answer("rate"), "bug")


# --- the exercise cells of the chapters -----------------------------------------------------------------------------

def exercise_cells(chapter: str) -> list[dict]:
    "The code cells after the chapter's '## Exercises' heading."
    every = cells(ROOT / "nbs" / f"{chapter}.ipynb")
    start = next(i for i, c in enumerate(every) if c["source"].startswith("## Exercises"))
    return [c for c in every[start:] if c["cell_type"] == "code"]


CHAPTERS = sorted({ex.chapter for ex in EXERCISES.values()})


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_stub_is_not_written_yet_and_each_folded_solution_passes(capsys, chapter):
    stubs, solutions = {}, {}
    for space in stubs, solutions:
        exec("import math, torch\nfrom torch import nn\nfrom annotated_transformer.model import subsequent_mask", space)
    for cell in exercise_cells(chapter):
        source = cell["source"]
        assert "#| export" not in source, f"{chapter}: an exercise cell is exported"
        if source.startswith("#@title Solution"):
            assert cell["metadata"].get("cellView") == "form", "Colab hides a form cell's code"
            assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, "JupyterLab collapses it"
            exec(source, solutions)
        elif not source.lstrip().startswith("check("):
            exec(source, stubs)
    for name in (n for n, ex in EXERCISES.items() if ex.chapter == chapter):
        assert any(re.fullmatch(rf'check\("{name}", \w+\)', c["source"].strip())
                   for c in exercise_cells(chapter)), f"{chapter}: no check cell for {name}"
        fails(capsys, name, stubs[name], "not written")
        assert verdict(capsys, name, solutions[name])[0] is True, f"{chapter}: the solution of {name} fails"


def test_the_exercise_page_lists_every_exercise_with_a_link_to_its_chapter():
    table = next(c["source"] for c in cells(ROOT / "nbs" / "07_exercises.ipynb") if "| page | exercise |" in c["source"])
    rows, chapter = {}, None
    for line in table.splitlines():
        m = re.match(r"\| (?:\[[^\]]+\]\((\w+)\.ipynb#exercises\))? *\| `(\w+)\(", line)
        if m:
            chapter = m[1] or chapter
            rows[m[2]] = chapter
    assert rows == {name: ex.chapter for name, ex in EXERCISES.items()}


def test_the_site_folds_solutions(tmp_path):
    "tools/build_docs.py turns a Colab solution cell into a cell whose code the site shows under 'Show the solution'."
    prepare_notebook = script("tools/build_docs.py").prepare_notebook
    notebook(tmp_path / "x.ipynb", ("markdown", "# Title"), ("markdown", "The first sentence."),
             ("code", "#@title Solution\ndef f(): return 1", [], {"cellView": "form", "jupyter": {"source_hidden": True}}))
    prepare_notebook(tmp_path / "x.ipynb", tmp_path / "y.ipynb", None)
    cell = cells(tmp_path / "y.ipynb")[-1]
    assert cell["source"] == "def f(): return 1"
    assert "hide-input" in cell["metadata"]["tags"]
    assert cell["metadata"]["mystnb"]["code_prompt_show"] == "Show the solution"
