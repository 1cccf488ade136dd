"""Score the shipped model on Multi30k test2016 as the tutorials score, beside sacreBLEU, and write the record
results/shipped_tutorial_metrics.json (chapter 14 renders it next to results/tutorials.json). Runs on a CPU in minutes.

    python tools/tutorial_metrics.py
"""
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from annotated_transformer.decoding import Translator, shipped_model_dir  # noqa: E402
from annotated_transformer.evaluation import TOKENIZED_BLEU, evaluate_translator  # noqa: E402

OUT = ROOT / "results" / "shipped_tutorial_metrics.json"


def main():
    import sacrebleu
    import torch
    translator = Translator.from_checkpoint(shipped_model_dir(), "cpu")
    scores = {}
    for beam in (1, 4):
        r = evaluate_translator(translator, "test", beam_size=beam)
        scores[f"beam_{beam}"] = {"sacrebleu": round(r["bleu"], 2), "tokenized_bleu": round(r["tokenized_bleu"], 2),
                                  "chrf": round(r["chrf"], 2), "sentences": r["sentences"]}
        print(beam, scores[f"beam_{beam}"], flush=True)
    record = {"model": "the shipped model (annotated_transformer/pretrained/multi30k-de-en)", "split": "test2016",
              "scores": scores, "tokenized_bleu_is": TOKENIZED_BLEU, "signature": r["signature"],
              "chrf_signature": r["chrf_signature"], "device": f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
              "torch": torch.__version__, "sacrebleu": sacrebleu.__version__,
              "command": "python tools/tutorial_metrics.py"}
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
