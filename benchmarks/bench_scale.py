#!/usr/bin/env python3
"""How the toolkit scales, in one run: generation time for 10,000 dispatches; compile throughput
with -j1, -jN and a Dask LocalCluster of N worker processes (paired rounds, so the ratios come
with intervals); the speedup of a compile-cache-hit rerun; and the profiler's overhead per
dispatch (its wall time against the timed work)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from common import ROOT

from iree_dispatch_profiler.core import stats

# ~10,000 dispatches: 106 x 4 x 2 f32 matmul shapes, each with its CPU's tile configs.
SWEEP = ["--problem-m=32:3392:32", "--problem-n=128,256,384,512", "--problem-k=64,128",
         "--data-types=f32t_f32t_f32t"]
# What is compiled and profiled: two operations' dispatches (two dozen on an AVX2 CPU).
SAMPLE = ["--problem-m=64,128", "--problem-n=64", "--problem-k=64", "--data-types=f32t_f32t_f32t"]


def run(script: str, *args) -> tuple[float, str]:
    """One of our scripts as a user runs it: (wall seconds, stdout)."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], cwd=ROOT,
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{script} {' '.join(map(str, args))} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return time.perf_counter() - start, result.stdout


def dispatch_count(gen: Path) -> int:
    manifest = json.loads((gen / "generated" / "manifest.json").read_text())
    return sum(len(o["configurations"]) for o in manifest["operations"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="paired compile rounds (>= 3)")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    cores = os.cpu_count() or 1
    from distributed import LocalCluster

    seconds, _ = run("generator.py", "--generated-dir", work / "sweep", *SWEEP)
    count = dispatch_count(work / "sweep")
    print(f"generation: {count} dispatches in {seconds:.1f} s ({count / seconds:.0f} dispatches/s, "
          f"MLIR and manifest on disk)")

    sample = work / "sample"
    run("generator.py", "--generated-dir", sample, *SAMPLE)
    count = dispatch_count(sample)
    no_cache = ["--generated-dir", sample, "--force-compile", "--no-cache"]
    walls: dict[str, list[float]] = {"-j1": [], f"-j{cores}": [], "LocalCluster": []}
    with LocalCluster(n_workers=cores, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster:
        for _ in range(args.rounds):  # one of each per round: drift hits all three alike
            walls["-j1"].append(run("compile.py", *no_cache, "-j", "1")[0])
            walls[f"-j{cores}"].append(run("compile.py", *no_cache, "-j", str(cores))[0])
            walls["LocalCluster"].append(run("compile.py", *no_cache, "--scheduler",
                                             cluster.scheduler_address)[0])
    print(f"\ncompile throughput, {count} dispatches (one build each), {args.rounds} "
          f"rounds, whole compile.py runs:")
    for name, values in walls.items():
        rate = stats.estimate([count / w for w in values])
        print(f"  {name + (f' ({cores} workers)' if name == 'LocalCluster' else ''):24} "
              f"{rate.median:6.2f} dispatches/s {rate.interval('.2f')}")
    local = walls[f"-j{cores}"]
    for name, values in (("-j1", walls["-j1"]), ("LocalCluster", walls["LocalCluster"])):
        ratio = stats.speedup(values, local)
        print(f"  -j{cores} against {name}: {ratio.median:.2f}x {ratio.interval('.2f')} "
              f"(above 1: -j{cores} faster)")

    cache = ["--cache-dir", work / "cache"]
    cold, _ = run("compile.py", "--generated-dir", sample, "--force-compile", *cache)
    rerun = work / "rerun"
    run("generator.py", "--generated-dir", rerun, *SAMPLE)
    hit, text = run("compile.py", "--generated-dir", rerun, *cache)
    loop = float(re.search(r"from cache \d+, up-to-date \d+, failed \d+ in ([\d.]+) s", text).group(1))
    print(f"\ncompile cache: cold {cold:.1f} s, rerun from the cache {hit:.2f} s -> "
          f"{cold / hit:.1f}x faster ({loop:.2f} s of it restoring {count} dispatches, the rest "
          "Python's start)")
    print("  " + next(line for line in text.splitlines() if line.startswith("Compile cache:")))

    csv = work / "profile.csv"
    budget, min_time = 2.0, 0.05
    wall, _ = run("profiler.py", "--generated-dir", sample, "--output", csv,
                  f"--time-budget={budget}", f"--benchmark-min-time={min_time}")
    data = pd.read_csv(csv)
    timed = float(data["repetitions"].sum()) * min_time  # each round times ~min_time of work
    print(f"\nprofiler: {len(data)} dispatches in {wall:.1f} s = {wall / len(data):.2f} s each; "
          f"timed work {timed / len(data):.2f} s each; overhead {wall / timed:.2f}x the timed work "
          f"(verification, reference, process starts; --time-budget={budget:g} per operation)")
    print(f"work folder: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
