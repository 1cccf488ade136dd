"""tools/rdrop_run.py trains the shipped recipe with R-Drop: rdrop is the only setting that changes, so the run sees
the recipe's seed-0 batches in the recipe's order and compares with it epoch by epoch."""
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from annotated_transformer.pretrained import RECIPE  # noqa: E402
from rdrop_run import RDROP, RUNS  # noqa: E402


def test_only_rdrop_differs_from_the_recipe():
    recipe, rdrop = asdict(RECIPE), asdict(RDROP)
    assert {k for k in recipe if recipe[k] != rdrop[k]} == {"rdrop", "out_dir"}
    assert RECIPE.rdrop == 0 and RDROP.rdrop == 5.0
    assert RUNS == (RDROP,)
