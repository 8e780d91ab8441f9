#!/usr/bin/env python3
"""How fast each search strategy finds a good config, replayed on recorded exhaustive spaces.

  python benchmarks/bench_tuner.py            replay the spaces in benchmarks/data (committed)
  python benchmarks/bench_tuner.py --record   measure them again on this machine (autotune.py
                                              --tuner grid over every point), then replay

Each strategy is replayed --replays times with different seeds, proposing in batches of 4 as
autotune.py does; a trial's score is the recorded speedup over IREE's default. Printed per
strategy: the median number of trials (and share of the space) needed to reach 95% and 99% of
the exhaustive best. Also plotted (bench_tuner.png)."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from common import ROOT, script

from iree_dispatch_profiler.tuning import strategies
from iree_dispatch_profiler.iree import tunable
from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.sweep.plots import plt

DATA = ROOT / "benchmarks" / "data"
# f32 GEMMs: a multiple of every tile, a shape that is not, and a larger square one.
SHAPES = [(256, 384, 512), (500, 300, 700), (1024, 1024, 1024)]
# Reduction tiles as IREE's own x86 configs use them; the full list (4..64) doubles the time.
RECORD_CONFIG = """[SearchSpace]
tile_k = [8, 16]
[SearchStrategy]
tuner = grid
n_trial = 100000
"""
BATCH = 4
# Features are scaled by the L2 size; a fixed value keeps replays independent of this machine.
L2_BYTES = 1 << 20


def module_text(m: int, n: int, k: int) -> str:
    return f"""func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %c = linalg.matmul ins(%a, %b : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>)
                     outs(%init : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %c : tensor<{m}x{n}xf32>
}}
"""


def record(shape: tuple[int, int, int], work: Path) -> None:
    """Every point of the shape's space measured by autotune.py; the trials CSV and the module
    are kept in benchmarks/data (the rest of autotune.py's outputs stay in `work`)."""
    name = "matmul_{}x{}x{}_f32".format(*shape)
    module = DATA / f"{name}.mlir"
    module.write_text(module_text(*shape))
    (work / "record.cfg").write_text(RECORD_CONFIG)
    print(f"recording {name} (every point of its space; resumes if interrupted)", flush=True)
    script("autotune.py", "--config", work / "record.cfg", "--input", module,
           "--output", work / f"{name}.csv", "--flags=", "--batch-size", "8", "--batch-seconds", "3",
           "--confirm-seconds", "1", "--store=off")
    shutil.copyfile(work / f"{name}.csv", DATA / f"{name}.csv")


def replay(path: Path, replays: int) -> dict[str, list[tuple[int, int]]]:
    """strategy -> per seed (trials to 95%, trials to 99%) of the best recorded speedup."""
    op = tunable.find(path.with_suffix(".mlir"))[0]
    trials = pd.read_csv(path)
    trials = trials[trials["candidate"].str.startswith("tile_config_")].reset_index(drop=True)
    points = [tuning_space.Point(*(int(r.get(k, 0)) for k in tuning_space.TILE_KNOBS))
              for _, r in trials.iterrows()]
    score = np.where(trials["status"] == "ok", trials["speedup"], np.nan)
    features = np.array([tuning_space.features(op, p, L2_BYTES) for p in points])
    best = np.nanmax(score)
    found = {}
    for name in strategies.NAMES:
        found[name] = []
        for seed in range(replays):
            strategy = strategies.make(name, [p.knobs() for p in points], features, seed)
            reached, tried, top = [None, None], 0, 0.0
            while strategy.untried() and reached[1] is None:
                for index in strategy.ask(BATCH):
                    tried += 1
                    value = None if np.isnan(score[index]) else float(score[index])
                    strategy.tell(index, value)
                    top = max(top, value or 0.0)
                    for i, level in enumerate((0.95, 0.99)):
                        if reached[i] is None and top >= level * best:
                            reached[i] = tried
            found[name].append((reached[0] or tried, reached[1] or tried))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help="measure the spaces on this machine")
    parser.add_argument("--replays", type=int, default=20, help="seeds per strategy (default: 20)")
    parser.add_argument("--work-dir", type=Path, default=ROOT / "benchmarks" / "record-work",
                        help="autotune.py's outputs while recording (default: benchmarks/record-work)")
    args = parser.parse_args()
    if args.record:
        DATA.mkdir(parents=True, exist_ok=True)
        args.work_dir.mkdir(parents=True, exist_ok=True)
        for shape in SHAPES:
            record(shape, args.work_dir)
    spaces = sorted(DATA.glob("matmul_*_f32.csv"))
    if not spaces:
        sys.exit("no recorded spaces in benchmarks/data: run with --record")
    figure, axes = plt.subplots(1, len(spaces), figsize=(5 * len(spaces), 4), squeeze=False)
    print(f"{'space':<26} {'points':>6} {'strategy':<8} {'to 95%':>13} {'to 99%':>13}  "
          "(median trials over seeds, share of the space)")
    for axis, path in zip(axes[0], spaces):
        found = replay(path, args.replays)
        size = len(pd.read_csv(path).query("candidate.str.startswith('tile_config_')",
                                           engine="python"))
        for name, runs in found.items():
            to95, to99 = (float(np.median([r[i] for r in runs])) for i in (0, 1))
            print(f"{path.stem:<26} {size:>6} {name:<8} {to95:>6.0f} ({to95 / size:>4.0%}) "
                  f"{to99:>6.0f} ({to99 / size:>4.0%})")
            axis.bar([f"{name}\n95%", f"{name}\n99%"], [to95 / size, to99 / size])
        axis.set_title(f"{path.stem} ({size} points)", fontsize=9)
        axis.set_ylabel("median share of the space tried")
        axis.axhline(0.15, color="black", linewidth=0.8, linestyle="--")
        axis.tick_params(axis="x", labelsize=7)
    figure.tight_layout()
    plot = ROOT / "benchmarks" / "bench_tuner.png"
    figure.savefig(plot, dpi=100)
    print(f"Plot: {plot} (dashed: the goal, 95% within 15% of the space)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
