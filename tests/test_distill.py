"""tools/distill.py: the ensemble decodes what each model's mean log-probabilities pick (one model: what greedy
decoding gives), and the student is the recipe with half the epochs of a corpus twice as large."""
import sys
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.data import BOS, EOS, PAD, UNK  # noqa: E402
from annotated_transformer.decoding import greedy_decode_cached  # noqa: E402
from annotated_transformer.model import make_model  # noqa: E402
from annotated_transformer.pretrained import RECIPE  # noqa: E402
from distill import STUDENT, ensemble_greedy, write_lines  # noqa: E402


def models(n: int, vocab: int = 13) -> list:
    result = []
    for seed in range(n):
        torch.manual_seed(seed)
        result.append(make_model(vocab, vocab, N=2, d_model=32, d_ff=64, h=4).eval())
    return result


def source(batch: int = 5, length: int = 7, vocab: int = 13) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(10)
    src = torch.randint(4, vocab, (batch, length))
    src[1, 4:] = PAD  # a shorter sentence
    return src, (src != PAD).unsqueeze(-2)


def test_an_ensemble_of_one_is_greedy_decoding():
    (model,), (src, mask) = models(1), source()
    expected = greedy_decode_cached(model, src, mask, 12, BOS, EOS, banned=UNK)
    got = ensemble_greedy([model], src, mask, 12)
    for row, out in zip(expected.tolist(), got):
        row = row[1:]
        assert out == (row[:row.index(EOS) + 1] if EOS in row else row)


def test_each_step_follows_the_mean_of_the_log_probabilities():
    ensemble, (src, mask) = models(3), source()
    got = ensemble_greedy(ensemble, src, mask, 10)
    for i, out in enumerate(got):  # recompute every step with whole forward passes, no cache
        ys = torch.tensor([[BOS] + out[:-1]])
        for t in range(len(out)):
            prefix = ys[:, :t + 1]
            tgt_mask = torch.tril(torch.ones(1, t + 1, t + 1, dtype=torch.bool))
            step = torch.stack([m.generator(m(src[i:i + 1], prefix, mask[i:i + 1], tgt_mask))[0, -1] for m in ensemble]).mean(0)
            step[UNK] = float("-inf")
            assert int(step.argmax()) == out[t], (i, t)
        assert out[-1] == EOS or len(out) == 9


def test_the_student_is_the_recipe_on_twice_the_pairs():
    recipe, student = asdict(RECIPE), asdict(STUDENT)
    assert {k for k in recipe if recipe[k] != student[k]} == {"epochs", "cooldown", "precision"}
    assert (2 * STUDENT.epochs, 2 * STUDENT.cooldown, STUDENT.precision) == (RECIPE.epochs, RECIPE.cooldown, "bf16")


def test_corpus_files_are_written_whole(tmp_path):
    write_lines(tmp_path / "train.en", ["A dog.", "Zwei Männer."])
    assert (tmp_path / "train.en").read_text(encoding="utf-8") == "A dog.\nZwei Männer.\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.en"]
