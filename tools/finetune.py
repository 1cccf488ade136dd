"""The shipped model, trained a little further on the human references: does it gain on val?

The shipped model is a student: it learned from its teachers' translations of the training German only
(distill.json), never from Multi30k's own English. This script continues its training on Multi30k's 29,000 human
pairs for a few epochs, with its own shared BPE vocabulary, a small learning rate that warms up for WARMUP steps
and falls in a straight line to 0, the recipe's label smoothing, dropout and batches, and the student's precision (bf16). It scores every
epoch, and the average of the last epochs, by greedy BLEU on the validation split; the test sets are not used.

    python tools/finetune.py run --runs-dir runs/finetune       # trains (once) and writes runs/finetune/results.json
    python tools/finetune.py collect --runs-dir runs/finetune   # writes results/finetune.json
"""
import json
import time
from pathlib import Path

import torch
from torch.optim.lr_scheduler import LambdaLR

from ablation import run_or_collect, write_json  # tools/ablation.py: the command line, JSON written atomically

from annotated_transformer.checkpoint import save_model
from annotated_transformer.data import PAD, TokenBucketSampler, batches
from annotated_transformer.decoding import Translator, shipped_model_dir
from annotated_transformer.evaluation import average_checkpoints, evaluate_translator
from annotated_transformer.devices import resolve_precision, set_seed
from annotated_transformer.fast import FastLossCompute, speed_up
from annotated_transformer.loop import train_epoch
from annotated_transformer.subwords import TranslationData, vocabulary_texts
from annotated_transformer.pretrained import RECIPE, STUDENT, hardware
from annotated_transformer.train import planned_steps
from annotated_transformer.training import LabelSmoothing

LR = 2e-4  # the peak learning rate: about a quarter of the recipe's rate where its cooldown begins
EPOCHS = 5  # passes over the 29,000 pairs
WARMUP = 100  # optimizer steps: Adam's moments start from zero, so the first steps are kept small
AVERAGE_LAST = 3  # the last epochs are also averaged, 2 and 3 of them
SEED = 0  # batches and dropout
ROOT = Path(__file__).resolve().parents[1]


def rate_factor(step: int,  # optimizer steps taken
                total: int,  # optimizer steps of the whole fine-tuning
                ) -> float:
    "The learning rate as a fraction of LR: up in a straight line over WARMUP steps, then down in one to 0 at `total`."
    return min((step + 1) / WARMUP, max(0.0, (total - step) / (total - WARMUP)))


def training_pairs(translator: Translator) -> list[tuple[list[int], list[int]]]:
    "Multi30k's training pairs encoded with the model's own vocabulary, as a training run encodes them."
    return TranslationData(src_vocab=translator.src_vocab, tgt_vocab=translator.tgt_vocab, progress=False).encoded("train")


def val_bleu(translator: Translator) -> float:
    "Greedy BLEU on val, as `choose_on_val` scores a run's candidates."
    return round(evaluate_translator(translator, "val", beam_size=1)["bleu"], 2)


def run(out: Path, lr: float = LR, epochs: int = EPOCHS, average_last: int = AVERAGE_LAST, seed: int = SEED) -> dict:
    if (out / "results.json").exists():
        print(f"{out} holds a finished run: nothing to train")
        return json.loads((out / "results.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    translator = Translator.from_checkpoint(shipped_model_dir())
    model, vocab = translator.model, translator.tgt_vocab
    train_pairs = training_pairs(translator)
    sampler = TokenBucketSampler([max(len(s), len(t)) for s, t in train_pairs], RECIPE.max_tokens, seed=seed)
    total = sum(planned_steps(sampler, epochs))  # each epoch's shuffle cuts the batches anew
    precision = resolve_precision(next(model.parameters()).device, STUDENT.precision)  # as the student trained
    set_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda step: rate_factor(step, total))
    loss = FastLossCompute(model.generator, speed_up(LabelSmoothing(len(vocab), PAD, RECIPE.smoothing)))
    files = vocabulary_texts(translator.src_vocab, translator.tgt_vocab)
    history = [{"epoch": 0, "val_bleu": val_bleu(translator)}]
    print(f"shipped model: val BLEU {history[0]['val_bleu']:.2f}", flush=True)
    for epoch in range(epochs):
        t0 = time.perf_counter()
        sampler.set_epoch(epoch)
        model.train()
        train_loss, _ = train_epoch(batches(train_pairs, sampler), model, loss, optimizer, scheduler,
                                    precision=precision, progress=False)
        model.eval()
        record = {"epoch": epoch + 1, "train_loss": round(train_loss, 4), "val_bleu": val_bleu(translator),
                  "lr": optimizer.param_groups[0]["lr"], "seconds": round(time.perf_counter() - t0, 1)}
        history.append(record)
        save_model(model, out / f"epoch_{epoch + 1:03d}", extra_config={"src_lang": "de", "tgt_lang": "en"}, files=files)
        print(json.dumps(record), flush=True)
    averages = {}
    for k in range(2, min(average_last, epochs) + 1):
        folder = average_checkpoints([out / f"epoch_{e:03d}" for e in range(epochs - k + 1, epochs + 1)], out / f"avg{k}")
        averages[f"last {k}"] = val_bleu(Translator.from_checkpoint(folder))
        print(f"average of the last {k}: val BLEU {averages[f'last {k}']:.2f}", flush=True)
    result = {"lr": lr, "epochs": epochs, "warmup": WARMUP, "seed": seed, "smoothing": RECIPE.smoothing,
              "max_tokens": RECIPE.max_tokens, "dropout": model.config.dropout, "precision": precision,
              "history": history, "averages": averages, "torch": torch.__version__}
    write_json(out / "results.json", result)
    return result


def collect(runs_dir: Path, out: Path) -> dict:
    "The run's record, with the machine it ran on (collect where the run ran)."
    return {"metric": "greedy sacreBLEU on the val split (1,014 sentences)", **json.loads((runs_dir / "results.json").read_text()),
            "hardware": hardware()}


if __name__ == "__main__":
    run_or_collect(__doc__, run, collect, "runs/finetune", ROOT / "results" / "finetune.json")
