#!/usr/bin/env bash
# The project's GPU check, for any CUDA machine (a cloud GPU, Colab's terminal): everything CI cannot run.
#
#   bash tools/gpu_check.sh [--data-dir DIR] [--log FILE] [--no-bench] [--steps 1,2,3,4,5,6,7] [--dry-run]
#
# Prints the GPU, torch and the precision "auto" picks, then runs, each as a named step:
#   1. the notebooks with their `#| gpu` cells (nbdev-test --flags gpu, a few at a time), and the `#| slow` cell of
#      24_train (the tutorial's model; the slow cell of 26_pretrained is left out: it rebuilds the shipped models),
#      whose best validation BLEU may be at most 1 below the lowest of the recipe's CPU runs (tools/experiment.py experiments/seeds.json --compare);
#   2. `annotated-transformer copy-task` with its defaults: every example must be an exact copy;
#   3. a short `annotated-transformer train` on Multi30k in the default precision, then `translate` with it;
#   4. `translate` and `evaluate` (test2016, beam 4) of the shipped model on the GPU: BLEU within 0.5 of results.json;
#   5. the GPU benchmarks: benchmarks/train_step.py --device cuda (tokens/s, memory and MFU of the plain, default and
#      torch.nn.Transformer paths at 128 and 1,024 pairs) and benchmarks/decode.py --device cuda (a sweep);
#   6. the training step under torch.compile: benchmarks/train_step.py --device cuda --compile, one process per
#      implementation at 128 pairs (compiling takes minutes, so it is a step of its own);
#   7. the training step probed: benchmarks/gpu_step.py (one step at 128 pairs profiled: operators, kernels, launches,
#      host time, reads of the device; each dropout's masks compiled; eager and compiled training step by step).
# --steps runs only the numbered steps (all by default), e.g. --steps 1 or --steps 2,3,4,5 to split the check;
# --steps 5,7 is what a GPU lent for about ten minutes can run. --no-bench leaves out the benchmarks and the probe,
# steps 5, 6 and 7 (whatever the order of the two options); --dry-run prints the steps and stops.
# (`python benchmarks/gpu_step.py --dry-run` runs step 7's script on a CPU with a tiny model; CI does.)
# Exits 1 if any step failed (all steps run), 2 on a bad option, 3 without a CUDA GPU.
# Stopped by Ctrl-C or by a time limit on its process group (timeout), it logs the step in flight and its seconds.
# Everything printed also goes to --log (default: benchmarks/results_gpu.txt, with the date, GPU and torch).
# No internet needed when the Multi30k files are on disk: --data-dir DIR, or $ANNOTATED_TRANSFORMER_DATA,
# or ../shared/data/multi30k beside the checkout; otherwise they are downloaded once into the cache.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DATA_DIR="${ANNOTATED_TRANSFORMER_DATA:-}"
LOG=benchmarks/results_gpu.txt
STEPS=",1,2,3,4,5,6,7,"
NO_BENCH=0
DRY_RUN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) DATA_DIR="${2:?--data-dir needs a folder}"; shift 2 ;;
    --log) LOG="${2:?--log needs a file name}"; shift 2 ;;
    --no-bench) NO_BENCH=1; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    --steps)
      [[ "${2:-}" =~ ^[1-7](,[1-7])*$ ]] || { echo "gpu_check.sh: --steps needs step numbers 1-7 separated by commas, got '${2:-}'" >&2; exit 2; }
      STEPS=",$2,"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;  # the comment above
    *) echo "gpu_check.sh: unknown option '$1' (expected --data-dir DIR, --log FILE, --no-bench, --steps LIST, --dry-run)" >&2; exit 2 ;;
  esac
done
if [ "$NO_BENCH" = 1 ]; then STEPS=${STEPS/,5,/,}; STEPS=${STEPS/,6,/,}; STEPS=${STEPS/,7,/,}; fi
if [ "$STEPS" = "," ]; then echo "gpu_check.sh: --no-bench leaves out the benchmark steps 5, 6 and 7, all that --steps asked for" >&2; exit 2; fi
if [ "$DRY_RUN" = 1 ]; then echo "steps     ${STEPS:1:${#STEPS}-2} (of 1-7)"; exit 0; fi
if [ -z "$DATA_DIR" ] && [ -d ../shared/data/multi30k ]; then DATA_DIR=../shared/data/multi30k; fi
if [ -n "$DATA_DIR" ]; then
  [ -d "$DATA_DIR" ] || { echo "gpu_check.sh: --data-dir '$DATA_DIR' is not a folder" >&2; exit 2; }
  DATA_DIR=$(cd "$DATA_DIR" && pwd)
  export ANNOTATED_TRANSFORMER_DATA="$DATA_DIR"  # the notebooks and every command find the files here
  DATA_ARG=(--data-dir "$DATA_DIR")
else
  DATA_ARG=()
fi
export TQDM_DISABLE=1  # progress bars would fill the log
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check.sh: no CUDA GPU is visible to torch; this check is for GPU machines (CI covers the CPU)" >&2
  exit 3
fi
mkdir -p "$(dirname "$LOG")"
exec > >(trap '' TERM INT; exec tee "$LOG") 2>&1  # tee outlives a stop, so the stop's line below is logged

python - <<'EOF'
import datetime, torch
from annotated_transformer.devices import resolve_precision
print(f"date      {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
print(f"GPU       {torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB)")
print(f"torch     {torch.__version__} (CUDA {torch.version.cuda})")
print(f"precision {resolve_precision(torch.device('cuda'), 'auto')} (what precision='auto' picks here)")
EOF
echo "steps     ${STEPS:1:${#STEPS}-2} (of 1-7)"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
FAILED=()
CURRENT=""  # the step running now, and when it began: a check stopped by a time limit or Ctrl-C logs both
CURRENT_T0=$SECONDS
stopped() {  # stopped STATUS: log the step in flight, exit as a process ended by that signal does
  [ -n "$CURRENT" ] && echo "-- STOPPED after $((SECONDS - CURRENT_T0)) s: $CURRENT"
  exit "$1"
}
trap 'stopped 143' TERM
trap 'stopped 130' INT
step() {  # step NAME COMMAND...: run, report, remember failures
  local name=$1; shift
  echo; echo "== $name"
  CURRENT=$name; CURRENT_T0=$SECONDS
  if "$@"; then echo "-- ok ($((SECONDS - CURRENT_T0)) s): $name"; else echo "-- FAILED ($((SECONDS - CURRENT_T0)) s): $name"; FAILED+=("$name"); fi
  CURRENT=""
}

copy_task() {
  annotated-transformer copy-task --out "$WORK/copy-task" | tee "$WORK/copy.txt"
  grep -Eq '^([0-9]+)/\1 exact copies' "$WORK/copy.txt" || { echo "not every example was copied exactly"; return 1; }
}
short_train() {
  annotated-transformer train --out-dir "$WORK/multi30k" "${DATA_ARG[@]}" --epochs 1 --max-steps 300 --warmup 200 &&
  annotated-transformer translate --checkpoint "$WORK/multi30k/last" --device cuda "Ein Hund rennt durch den Schnee."
}
shipped_model() {  # the shipped model, translated and scored on the GPU
  local model
  for model in annotated_transformer/pretrained/multi30k-de-en; do
    annotated-transformer translate --checkpoint "$model" --device cuda "Ein Hund rennt durch den Schnee." &&
    annotated-transformer evaluate --checkpoint "$model" --device cuda --split test "${DATA_ARG[@]}" --json > "$WORK/eval.json" &&
    python - "$WORK/eval.json" "$model/results.json" <<'EOF' || return 1
import json, sys
got, shipped = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
expected = shipped.get("test2016", {}).get("beam_4", {}).get("bleu")
print(f"{sys.argv[2].split('/')[-2]}: test2016 beam 4 on the GPU: BLEU {got['bleu']:.2f} (shipped results.json: {expected})")
if expected is not None and abs(got["bleu"] - expected) > 0.5:
    sys.exit("BLEU on the GPU differs from the shipped result by more than 0.5")
EOF
  done
}

tutorial_run() {  # the slow cell trains RECIPE into runs/multi30k; its validation BLEU must reach the CPU runs'
  local run="$ROOT/runs/multi30k"
  if [ -e "$run" ]; then  # an earlier run there would be resumed or found finished, and judged instead of this GPU's
    local aside="$run.before-gpu-check-$(date +%Y%m%d-%H%M%S)"
    mv "$run" "$aside" && echo "moved the earlier $run to $aside: the cell trains anew" || return 1
  fi
  nbdev-test --flags slow --n-workers 1 --cell-timeout 7200 nbs/24_train.ipynb &&  # 38 epochs: cell_timeout's 900 s can be too few
    python tools/experiment.py experiments/seeds.json --compare "$run"
}

wanted() { [[ "$STEPS" == *",$1,"* ]]; }
if wanted 1; then
  # a notebook per 4 cores and per 16 GiB of GPU memory (1 to 4 at a time), the cores shared out among them so that
  # their threads do not contend (nproc without OMP_NUM_THREADS, which it would report instead of the cores)
  CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  GPU_GIB=$(python -c "import torch; print(torch.cuda.get_device_properties(0).total_memory // 2**30)")
  NB_WORKERS=$(( CORES / 4 < GPU_GIB / 16 ? CORES / 4 : GPU_GIB / 16 ))
  NB_WORKERS=$(( NB_WORKERS < 1 ? 1 : NB_WORKERS > 4 ? 4 : NB_WORKERS ))
  step "notebooks with #| gpu cells (nbdev-test --flags gpu, $NB_WORKERS at a time)" \
    env OMP_NUM_THREADS=$(( CORES / NB_WORKERS )) nbdev-test --flags gpu --n-workers "$NB_WORKERS" --timing
  step "the tutorial's training run (#| slow cell of 24_train), as good as on the CPU" tutorial_run
fi
wanted 2 && step "copy-task with its defaults reaches exact copies" copy_task
wanted 3 && step "short train on Multi30k (default precision), then translate" short_train
wanted 4 && step "shipped models: translate and evaluate on the GPU" shipped_model
if wanted 5; then
  step "benchmark: training step (base model, batches of 128 and 1024)" \
    python benchmarks/train_step.py --device cuda --models base --batch-sizes 128 1024 --rounds 10 --repeats 2
  step "benchmark: decoding test2016 (batch-size sweep)" \
    python benchmarks/decode.py --checkpoint annotated_transformer/pretrained/multi30k-de-en --device cuda \
      "${DATA_ARG[@]}" --batch-sizes 32 128 512 1000
fi
if wanted 6; then
  step "benchmark: training step with torch.compile (base model, batches of 128)" \
    python benchmarks/train_step.py --device cuda --models base --batch-sizes 128 --rounds 10 --repeats 1 --compile
fi
if wanted 7; then
  step "the training step probed: profile at 128 pairs, dropout masks compiled, eager against compiled step by step" \
    python benchmarks/gpu_step.py --device cuda --profile-model base --model recipe --pairs 128 --steps 150
fi

echo
if [ ${#FAILED[@]} -gt 0 ]; then
  printf 'GPU check FAILED in %d step(s):\n' "${#FAILED[@]}"; printf '  - %s\n' "${FAILED[@]}"
  exit 1
fi
SHOWN=${LOG#"$ROOT"/}  # the log names no folder of this machine: a path in the repository, else the file's name
[[ "$SHOWN" == /* ]] && SHOWN=$(basename "$SHOWN")
echo "GPU check passed (log: $SHOWN)"
