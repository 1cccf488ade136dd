#!/usr/bin/env bash
# Not part of CI: proves the browser tests of the documentation site are deterministic. Runs them N times
# (default 10) in a row while a CPU-heavy job keeps every core busy, and prints how many runs passed.
#   bash tools/repeat_site_tests.sh [N]
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-10}
[ -f site/index.html ] || python tools/build_docs.py
# the CPU-heavy job: one busy process per core, stopped when this script ends
pids=()
for _ in $(seq "$(nproc)"); do python -c "while True: sum(i * i for i in range(10000))" & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
passed=0
for i in $(seq "$N"); do
  if python -m pytest -q -p no:cacheprovider tests/test_docs_site.py > "build/site_test_run_$i.log" 2>&1; then
    passed=$((passed + 1)); echo "run $i: passed"
  else
    echo "run $i: FAILED (build/site_test_run_$i.log)"; tail -5 "build/site_test_run_$i.log"
  fi
done
echo "$passed of $N runs passed, next to $(nproc) busy processes on $(nproc) cores"
[ "$passed" -eq "$N" ]
