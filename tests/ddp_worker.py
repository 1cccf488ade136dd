"""Run by tests/test_distributed.py: `torchrun --nproc_per_node=2 tests/ddp_worker.py OUT_DIR STEPS [PRECISION]`
(or with WORLD_SIZE unset for the single-process reference; PRECISION defaults to fp32). Trains a tiny model for a few steps on
fixed synthetic batches and writes its final parameters to OUT_DIR/rank{RANK}.safetensors."""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch.nn.parallel import DistributedDataParallel

from annotated_transformer.data import collate
from annotated_transformer.model import ModelConfig, build_model
from annotated_transformer.distributed import global_token_norm, setup_distributed
from annotated_transformer.devices import set_seed
from annotated_transformer.loop import train_epoch
from annotated_transformer.training import LabelSmoothing, SimpleLossCompute, make_optimizer

V, WORLD = 23, 2


def global_batches(steps):
    "For each step, WORLD micro-batches of 3 to 6 id pairs, each side 3 to 11 ids between <s> and </s> (padding differs)."
    g = torch.Generator().manual_seed(7)
    draw = lambda low, high, n=1: torch.randint(low, high, (n,), generator=g).tolist()
    ids = lambda: [0] + draw(4, V, draw(3, 12)[0]) + [1]
    return [[[(ids(), ids()) for _ in range(draw(3, 7)[0])] for _ in range(WORLD)] for _ in range(steps)]


def main(out_dir, steps, precision="fp32"):
    info = setup_distributed("cpu")
    torch.set_num_threads(1)
    set_seed(0)
    model = build_model(ModelConfig(V, V, N=2, d_model=32, d_ff=64, h=4, dropout=0.0))
    optimizer, scheduler = make_optimizer(model, 32, factor=1.0, warmup=4)
    loss_compute = SimpleLossCompute(model.generator, LabelSmoothing(V, 2, 0.1))
    data = global_batches(steps)
    if info.world_size > 1:  # each rank: its own micro-batch of every global batch
        assert info.world_size == WORLD
        ddp = DistributedDataParallel(model)
        my_batches = [collate(micro[info.rank]) for micro in data]
        train_epoch(my_batches, ddp, loss_compute, optimizer, scheduler, progress=False,
                  loss_norm=global_token_norm(info), precision=precision)
    else:  # reference: one process, the whole global batch at once
        whole = [collate(micro[0] + micro[1]) for micro in data]
        train_epoch(whole, model, loss_compute, optimizer, scheduler, progress=False, precision=precision)
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith(".pe")},
              str(Path(out_dir) / f"rank{info.rank}{'' if info.world_size > 1 else '_single'}.safetensors"))
    if info.world_size > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4])
