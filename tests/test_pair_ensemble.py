"""tools/pair_ensemble.py decodes two recipe runs together and stores them in 8 bits: the 8-bit form of a matrix is
within half a step of each row's scale, the size it reports is the size of the file, and pair_ensemble.json chose
on val among what fits the size limit, and scored test2016 for nothing else."""
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.model import make_model  # noqa: E402
from annotated_transformer.pretrained import Ensemble  # noqa: E402
from pair_ensemble import LIMIT_MB, OUT, int8_rows, store_in_8_bits  # noqa: E402


def test_int8_rows_is_within_half_a_step_of_each_row():
    torch.manual_seed(0)
    weight = torch.randn(64, 32) * torch.logspace(-3, 1, 64)[:, None]  # rows of very different sizes
    weight[5] = 0.0  # a row of zeros has no scale to divide by
    q, scale = int8_rows(weight)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (64,)
    assert q.abs().max() <= 127 and (q.abs().amax(dim=1)[torch.arange(64) != 5] == 127).all()  # each row uses the full range
    error = (weight - q.float() * scale[:, None]).abs()
    assert (error <= scale[:, None] * (0.5 + 1e-5)).all()  # rounding to the nearest step, and float32's own
    assert (q[5] == 0).all()


def test_store_in_8_bits_keeps_the_shapes_and_reports_the_file_size():
    torch.manual_seed(0)
    models = [make_model(50, 50, N=1, d_model=32, d_ff=64, h=4, dropout=0.0).eval() for _ in range(2)]
    before = [{n: p.detach().clone() for n, p in m.named_parameters()} for m in models]
    size = store_in_8_bits(Ensemble(models))
    matrices = vectors = 0
    for model, old in zip(models, before):
        for name, p in model.named_parameters():
            if p.dim() == 2:
                matrices += p.numel()
                assert not torch.equal(p, old[name])  # replaced by its 8-bit form
                assert (p - old[name]).abs().max() <= old[name].abs().max() / 127
            else:
                vectors += p.numel()
                assert torch.equal(p, old[name])  # biases and norms are left as they are
    rows = sum(p.shape[0] for m in models for p in m.parameters() if p.dim() == 2)
    data = matrices + 4 * rows + 2 * vectors  # int8 matrices, a float32 scale a row, float16 vectors
    tensors = sum(2 if p.dim() == 2 else 1 for m in models for p in m.parameters())
    assert data < size < data + 8 + 200 * tensors  # safetensors' header: its length, then names, dtypes, shapes, offsets


def test_the_file_chose_on_val_among_what_fits():
    record = json.loads(OUT.read_text())
    rows = record["rows"]
    assert record["limit_megabytes"] == LIMIT_MB
    members = list(record["members"])
    assert len(members) == 2 and all(name in rows for name in members)
    together = sum(rows[m]["megabytes"] for m in members)
    assert abs(rows["pair, 16 bits"]["megabytes"] - together) <= 0.011 and rows["pair, 16 bits"]["megabytes"] > LIMIT_MB
    assert rows["pair, 8 bits"]["megabytes"] <= LIMIT_MB
    fits = [name for name, row in rows.items() if row["megabytes"] <= LIMIT_MB]
    chosen = record["chosen_on_val"]
    assert chosen == max(fits, key=lambda name: rows[name]["val"]["beam_1"]["bleu"])
    assert {name for name, row in rows.items() if "test" in row} == {"shipped model", chosen}  # test for nothing else
    for row in rows.values():
        assert all(row[split][beam]["unk"] == 0 for split in ("val", "test") if split in row for beam in row[split])
