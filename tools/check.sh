#!/usr/bin/env bash
# The project's one test command: the README, CI and every contributor run exactly this.
# Fails when (a) nbdev-clean would change a notebook, (b) nbdev-export would change or add a
# file in the package (or tools/make_readme.py would change README.md, or tools/paper_script.py would change
# the_annotated_transformer.py), (c) ruff finds a mistake (an unused or undefined name: the rules are in pyproject.toml),
# (d) a notebook fails under nbdev-test, (e) the documentation site does not build without warnings,
# (f) a pytest test fails (the site's browser tests included: `-m "not browser"` leaves them out, CI never does;
# tests marked `slow` are left out here).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== 0/5 Multi30k data (\$ANNOTATED_TRANSFORMER_DATA, the user cache, the bundled test set, or a verified download)"
# CI keeps a copy beside the checkout (offline); a newcomer's machine downloads 1.3 MB once into the cache.
if [ -z "${ANNOTATED_TRANSFORMER_DATA:-}" ] && [ -d ../shared/data/multi30k ]; then
  export ANNOTATED_TRANSFORMER_DATA="$(cd ../shared/data/multi30k && pwd)"
fi
python - <<'EOF'
import sys
from annotated_transformer.data import DataError, ensure_multi30k
try:
    found = ensure_multi30k(progress=False)
except DataError as e:
    sys.exit(f"FAIL: the tests need Multi30k and cannot get it: {e}")
print("Multi30k found in", ", ".join(sorted({str(p.parent) for p in found.values()})))
EOF

echo "== 1/6 notebooks are clean (nbdev-clean)"
before=$(git status --porcelain -- annotated_transformer nbs README.md the_annotated_transformer.py)
nbdev-clean
echo "== 2/6 package, README and script are in sync with the notebooks (nbdev-export, tools/make_readme.py, tools/paper_script.py)"
nbdev-export
python tools/make_readme.py
python tools/paper_script.py
after=$(git status --porcelain -- annotated_transformer nbs README.md the_annotated_transformer.py)
if [ "$before" != "$after" ]; then
  echo "FAIL: nbdev-clean / nbdev-export / tools/make_readme.py / tools/paper_script.py changed or added files. Run them and commit the result:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  git --no-pager diff --stat -- annotated_transformer nbs README.md the_annotated_transformer.py >&2 || true
  exit 1
fi

echo "== 3/6 no unused or undefined names (ruff check)"
ruff check .

# Steps 4 and 6 run two notebooks, or two test processes, at once: each gets its share of the cores. Two processes
# with a thread for every core each make the threads wait on one another, and run several times slower.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))}"

echo "== 4/6 notebooks run (nbdev-test; cells flagged slow/gpu are skipped)"
nbdev-test --n-workers "${NBDEV_TEST_WORKERS:-2}" --timing

echo "== 5/6 documentation site (python tools/build_docs.py -> site/)"
python tools/build_docs.py

echo "== 6/6 pytest (the browser tests of the site need /usr/bin/chromium)"
# two processes that take the next test as they finish one; `slow` tests left out, as nbdev-test leaves out slow cells
python -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist worksteal -m "not slow" tests --durations=15
