"""bench_model.py's summary names the models short of issue 30's goals, by their medians;
bench_matmul.py's table puts each configuration in its family's column."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from iree_dispatch_profiler.core.stats import Estimate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_model  # noqa: E402
import common  # noqa: E402


def ratio(median: float) -> Estimate:
    return Estimate(median, median * 0.9, median * 1.1, 0.01, 10)


def test_a_model_short_of_either_goal_is_named_and_one_past_both_is_not():
    default = {"IREE default": SimpleNamespace(runtime=SimpleNamespace(median=9.0), reason="")}
    floor = {"ms": 3.0}  # the default at 3x its floor: 2x over it is within reach
    assert bench_model.goals_missed("m", ratio(1.30), ratio(2.5), default, floor) == []
    assert bench_model.goals_missed("m", ratio(1.20), ratio(2.5), default, floor) == [
        "m 1.20x PyTorch eager's speed (goal 1.25x)"]
    # judged as printed: 1.2496x is shown, and met, as 1.25x; 1.244x is shown as 1.24x
    assert bench_model.goals_missed("m", ratio(1.2496), ratio(1.9996), default, floor) == []
    assert bench_model.goals_missed("m", ratio(1.244), ratio(2.5), default, floor) == [
        "m 1.24x PyTorch eager's speed (goal 1.25x)"]
    assert bench_model.goals_missed("m", ratio(1.30), ratio(1.8), default, floor) == [
        "m 1.80x IREE default's speed (goal 2.0x; the default is 3.0x its floor)"]
    # a default already within 2x of its floor cannot be beaten 2x: not a miss
    assert bench_model.goals_missed("m", ratio(1.30), ratio(1.4), default, {"ms": 6.0}) == []
    # untimed (no PyTorch, no floor, a default that failed): nothing claimed
    failed = {"IREE default": SimpleNamespace(runtime=None, reason="compile-failed")}
    assert bench_model.goals_missed("m", None, ratio(1.0), failed, floor) == []
    assert bench_model.goals_missed("m", None, ratio(1.0), default, None) == []


def test_peeled_tiles_stay_in_their_family_column():
    names = pd.Index(["tile_config_128x128_8x32x16_peel", "tile_config_256x256_64x64x64_8x32x1_peel",
                      "tile_config_256x256_64x64x64_8x32x1", "tile_config_128x128_8x16x16",
                      "data_tiling_256x16_16x16x1", "default"])
    families = {column: list(names[picked.to_numpy()]) for column, picked in common._families(names).items()}
    assert families["tiles"] == ["tile_config_128x128_8x32x16_peel", "tile_config_128x128_8x16x16"]
    assert families["cache"] == ["tile_config_256x256_64x64x64_8x32x1_peel",
                                 "tile_config_256x256_64x64x64_8x32x1"]
    assert families["dt-tiles"] == ["data_tiling_256x16_16x16x1"]
