#!/usr/bin/env bash
# The project's one test command: the README, CI and every contributor run exactly this.
# Fails when (a) nbdev-clean would change a notebook, (b) nbdev-export would change or add a
# file in the package, (c) a notebook fails under nbdev-test, (d) the documentation site does not build without warnings,
# (e) a pytest test fails (the site's browser test included).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== 1/5 notebooks are clean (nbdev-clean)"
before=$(git status --porcelain -- annotated_transformer nbs)
nbdev-clean
echo "== 2/5 package is in sync with the notebooks (nbdev-export)"
nbdev-export
after=$(git status --porcelain -- annotated_transformer nbs)
if [ "$before" != "$after" ]; then
  echo "FAIL: nbdev-clean / nbdev-export changed or added files. Run them and commit the result:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  git --no-pager diff --stat -- annotated_transformer nbs >&2 || true
  exit 1
fi

echo "== 3/5 notebooks run (nbdev-test; cells flagged slow/gpu are skipped)"
nbdev-test --n-workers "${NBDEV_TEST_WORKERS:-2}" --timing

echo "== 4/5 documentation site (python tools/build_docs.py -> site/)"
python tools/build_docs.py

echo "== 5/5 pytest (the docs site's browser test needs /usr/bin/chromium)"
python -m pytest -q tests
