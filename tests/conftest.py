"""Shared fixtures. The Multi30k files are found as the library finds them ($ANNOTATED_TRANSFORMER_DATA, the
user cache, the copy bundled with the package for test2016, then a verified download); `tools/check.sh`
points $ANNOTATED_TRANSFORMER_DATA at ../shared/data/multi30k when that folder exists (CI, offline)."""
import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
if not os.environ.get("ANNOTATED_TRANSFORMER_DATA") and SHARED.is_dir():  # `pytest` run on its own, beside CI's data
    os.environ["ANNOTATED_TRANSFORMER_DATA"] = str(SHARED)


@pytest.fixture(scope="session")
def multi30k():
    "{file name: verified path} of every Multi30k file; a one-line failure, not a traceback, when unreachable."
    from annotated_transformer.data import DataError, ensure_multi30k
    try:
        return ensure_multi30k(progress=False)
    except DataError as e:
        pytest.fail(f"Multi30k is not reachable: {e}", pytrace=False)
