#!/usr/bin/env python3
"""autotune.py against numpy/OpenBLAS on f32 GEMMs, measured side by side in one run.

For each shape (multiples of the tiles and not), autotune.py searches its space; then IREE's
default, IREE's data tiling with ukernels, the best tile config found, and a bare numpy `a @ b`
on the same arrays are timed in interleaved rounds. Printed: each one's speed relative to numpy
(numpy time / its time, with a 95% interval; IREE timed per dispatch, numpy per call)."""
from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from bench_tuner import module_text
from common import script

from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.measure.blas import timed_calls
from iree_dispatch_profiler.iree.launchers import compile_command
from iree_dispatch_profiler.iree.process import run
from iree_dispatch_profiler.iree.target import resolve_target
from iree_dispatch_profiler.iree.timing import Benchmark
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.core.library import Target
from iree_dispatch_profiler.measure.protocol import Candidate, Protocol, measure

SHAPES = [(512, 512, 512), (768, 512, 1024), (500, 300, 700), (1000, 1000, 1000)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-trial", type=int, default=24, help="autotune.py trials per shape")
    parser.add_argument("--seconds", type=float, default=20.0, help="interleaved timing per shape")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_autotune_"))
    work.mkdir(parents=True, exist_ok=True)
    tools = IreeTools.locate()
    target = resolve_target(tools, Target())
    print(f"{target.resolved_cpu().summary}, IREE {tools.version()}, numpy {np.__version__}")
    print(f"{'shape':<16} {'numpy ms':>9}  {'default':<22} {'data tiling':<22} "
          f"{'best tiles':<22} {'best':>5}  best tile config")
    print("(speed relative to numpy, numpy time / IREE time [95% interval]; best: of data tiling "
          "and tiles)")
    for m, n, k in SHAPES:
        name = f"matmul_{m}x{n}x{k}"
        module = work / f"{name}.mlir"
        module.write_text(module_text(m, n, k))
        trials = work / f"{name}.csv"
        script("autotune.py", "--input", module, "--output", trials, "--n-trial", args.n_trial,
               "--confirm-seconds", "1", "--store=off")
        rows = pd.read_csv(trials)
        tiles = rows[(rows["status"] == "ok") & rows["candidate"].str.startswith("tile_config_")]
        best_tile = tiles.sort_values("speedup").iloc[-1]["candidate"] if len(tiles) else None
        rng = np.random.default_rng(0)
        a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
        np.save(work / "a.npy", a)
        np.save(work / "b.npy", b)
        variants = {"default": (module, []),
                    "data tiling": (module, shlex.split(tuning_space.DEFAULT_FLAG_POINTS["data_tiling"]))}
        if best_tile:
            variants["best tiles"] = (work / f"{name}_best.mlir", [])
        candidates = [Candidate("numpy", lambda seconds, a=a, b=b:
                                timed_calls(lambda: a @ b, seconds))]
        for label, (source, flags) in variants.items():
            vmfb = work / f"{name}_{label.replace(' ', '_')}.vmfb"
            result = run(compile_command(tools, target, source, vmfb, flags), 600)
            if not result.ok:
                print(f"{name} {label}: {result.failure('iree-compile', 600)}")
                continue
            bench = Benchmark(tools, vmfb, "main", "local-task",
                              [f"@{work / 'a.npy'}", f"@{work / 'b.npy'}"])
            candidates.append(Candidate(label, bench.sample))
        measured = measure(candidates, "numpy", Protocol(time_budget=args.seconds))
        cells, best = [], 0.0
        for label in ("default", "data tiling", "best tiles"):
            ratio = measured.outcomes[label].speedup if label in measured.outcomes else None
            cells.append(f"{ratio.median:.2f} {ratio.interval('.2f')}" if ratio else "-")
            if ratio and label != "default":
                best = max(best, ratio.median)
        numpy_ms = measured.outcomes["numpy"].runtime.median
        print(f"{f'{m}x{n}x{k}':<16} {numpy_ms:>9.3f}  {cells[0]:<22} {cells[1]:<22} "
              f"{cells[2]:<22} {best:>5.2f}  {best_tile or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
