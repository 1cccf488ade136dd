"""Checkpoints: exact resume, shape mismatches, corrupt files."""
import json

import pytest
import torch

from annotated_transformer.checkpoint import load_checkpoint, load_model, load_weights, save_checkpoint, save_model
from annotated_transformer.copy_task import CopyTaskConfig, copy_model, train_copy_task
from annotated_transformer.model import ModelConfig, make_model
from annotated_transformer.training import make_optimizer, set_seed

CFG = CopyTaskConfig(epochs=4, batches_per_epoch=5, batch_size=16, model=ModelConfig(N=2, d_model=32, d_ff=64, h=4), seed=3)


def test_resume_reproduces_uninterrupted_losses(tmp_path):
    torch.set_num_threads(1)  # bitwise-reproducible CPU kernels
    _, full = train_copy_task(CFG, device="cpu", progress=False)

    ckpt = tmp_path / "run"
    half = CopyTaskConfig(**{**CFG.__dict__, "epochs": 2})
    _, first = train_copy_task(half, checkpoint_dir=ckpt, device="cpu", progress=False)
    set_seed(12345)  # scramble the RNGs: the checkpoint must restore them
    torch.rand(100)

    model = copy_model(CFG)
    optimizer, scheduler = make_optimizer(model, CFG.model.d_model, CFG.factor, CFG.warmup)
    state, extra = load_checkpoint(ckpt, model, optimizer, scheduler)
    assert extra["epoch"] == 1 and state.step == 2 * CFG.batches_per_epoch
    _, second = train_copy_task(CFG, device="cpu", progress=False, model=model, optimizer=optimizer,
                                scheduler=scheduler, train_state=state, start_epoch=extra["epoch"] + 1)
    resumed = [h["train_loss"] for h in first + second]
    assert resumed == [h["train_loss"] for h in full]
    assert [h["val_loss"] for h in first + second] == [h["val_loss"] for h in full]


def test_mismatched_shapes_name_the_sizes(tmp_path):
    save_model(make_model(10, 10, N=1, d_model=16, d_ff=32, h=2), tmp_path)
    with pytest.raises(ValueError) as err:
        load_weights(make_model(10, 10, N=1, d_model=16, d_ff=64, h=2), tmp_path)
    msg = str(err.value)
    assert "encoder.layers.0.feed_forward.w_1.weight" in msg and "(32, 16)" in msg and "(64, 16)" in msg
    with pytest.raises(ValueError, match="missing from"):
        load_weights(make_model(10, 10, N=2, d_model=16, d_ff=32, h=2), tmp_path)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)
    save_model(make_model(10, 10, N=1, d_model=16, d_ff=32, h=2), tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="corrupt"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model(tmp_path)


def test_weights_only_checkpoint_cannot_resume(tmp_path):
    m = make_model(10, 10, N=1, d_model=16, d_ff=32, h=2)
    save_model(m, tmp_path)
    opt, sched = make_optimizer(m, 16)
    with pytest.raises(FileNotFoundError, match="cannot be resumed"):
        load_checkpoint(tmp_path, m, opt, sched)


def test_no_pickle_anywhere(tmp_path):
    m = make_model(10, 10, N=1, d_model=16, d_ff=32, h=2)
    opt, sched = make_optimizer(m, 16)
    save_checkpoint(tmp_path, m, opt, sched)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["config.json", "manifest.json", "model.safetensors", "trainer.json", "trainer.safetensors"]
    json.loads((tmp_path / "trainer.json").read_text())
    json.loads((tmp_path / "config.json").read_text())
