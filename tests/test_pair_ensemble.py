"""tools/pair_ensemble.py decodes two recipe runs together and stores them in 8 bits (chapter 7 tests the 8-bit form
itself): the models hold what the file it measures holds, each matrix within half a step of its row, and pair_ensemble.json chose
on val among what fits the size limit, and scored test2016 for nothing else."""
import json
import sys
from contextlib import nullcontext
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.checkpoint import SCALE_SUFFIX, weights_to_save  # noqa: E402
from annotated_transformer.fast import speed_up  # noqa: E402
from annotated_transformer.model import make_model  # noqa: E402
from annotated_transformer.decoding import Ensemble  # noqa: E402
from pair_ensemble import LIMIT_MB, OUT, store_in_8_bits  # noqa: E402


def test_store_in_8_bits_leaves_the_models_as_the_file_holds_them(tmp_path, monkeypatch):
    from safetensors.torch import load_file
    import pair_ensemble
    torch.manual_seed(0)
    models = [speed_up(make_model(50, 50, N=1, d_model=32, d_ff=64, h=4, dropout=0.0, tie_embeddings=True)).eval()
              for _ in range(2)]
    before = [{n: t.clone() for n, t in weights_to_save(m).items()} for m in models]
    monkeypatch.setattr(pair_ensemble.tempfile, "TemporaryDirectory", lambda: nullcontext(tmp_path))  # keep the file
    size = store_in_8_bits(Ensemble(models))
    assert size == (tmp_path / "model.safetensors").stat().st_size
    stored = load_file(tmp_path / "model.safetensors")
    for i, (model, old) in enumerate(zip(models, before)):
        assert model.src_embed[0].lut.weight is model.generator.proj.weight  # still tied: one tensor, replaced once
        for name, tensor in weights_to_save(model).items():
            if tensor.dim() == 2:  # the matrix the file holds, within half a step of its row
                q, scale = stored[f"{i}.{name}"], stored[f"{i}.{name}{SCALE_SUFFIX}"]
                assert q.dtype == torch.int8 and scale.dtype == torch.float32
                torch.testing.assert_close(tensor, q.float() * scale[:, None], rtol=0, atol=1e-6)
                assert ((tensor - old[name]).abs() <= scale[:, None] * (0.5 + 1e-5)).all()
                assert not torch.equal(tensor, old[name])
            else:  # biases and norms as float16 holds them
                assert stored[f"{i}.{name}"].dtype == torch.float16
                assert torch.equal(tensor, stored[f"{i}.{name}"].float())


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
