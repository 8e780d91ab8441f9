#!/usr/bin/env python3
"""Side by side, in one run on llvm-cpu: IREE default vs best tuning configuration vs numpy
(OpenBLAS) on real matmul shapes from ../shared/workloads, and compile wall time -j1 vs -jN.

Drives generator.py, compile.py and profiler.py as a user would; prints ratios.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT.parent / "shared" / "workloads"


def workload_shapes() -> list[tuple[str, int, int, int]]:
    """(source, m, n, k): one mmperf square, one DeepBench training GEMM, two SDXL UNet mms."""
    def rows(name):
        with open(WORKLOADS / name, newline="") as handle:
            return list(csv.DictReader(handle))

    mmperf = next(r for r in rows("mmperf_sizes.csv") if r["raw"] == "1024x1024x1024")
    deepbench = next(r for r in rows("deepbench_gemm.csv")
                     if (r["m"], r["n"], r["k"], r["transA"], r["transB"]) == ("1760", "128", "1760", "0", "0"))
    sdxl = rows("sdxl_unet_mm_shapes.csv")
    return [("mmperf", int(mmperf["m"]), int(mmperf["n"]), int(mmperf["k"])),
            ("deepbench", int(deepbench["m"]), int(deepbench["n"]), int(deepbench["k"])),
            *(("sdxl-unet", int(r["M"]), int(r["N"]), int(r["K"])) for r in sdxl[:3:2])]


def script(name: str, *args) -> float:
    """Run one of our scripts; returns its wall time."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / name), *map(str, args)], cwd=ROOT,
                            capture_output=True, text=True)
    if result.returncode not in (0, 1):
        sys.exit(f"{name} failed:\n{result.stderr}")
    return time.perf_counter() - start


def numpy_ms(m: int, n: int, k: int, repetitions: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    a @ b  # warm-up
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        a @ b
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--work-dir", type=Path, default=None, help="keep generated files here")
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_matmul_"))
    shapes = workload_shapes()
    for _, m, n, k in shapes:
        script("generator.py", "--generated-dir", work, f"--problem-m={m}", f"--problem-n={n}",
               f"--problem-k={k}", "--data-types=f32t_f32t_f32t")

    cores = os.cpu_count() or 1
    serial = script("compile.py", "--generated-dir", work, "-j", "1", "--force-compile")
    parallel = script("compile.py", "--generated-dir", work, "-j", str(cores), "--force-compile")
    output = work / "bench.csv"
    script("profiler.py", "--generated-dir", work, "--output", output,
           f"--benchmark-repetitions={args.repetitions}")
    data = pd.read_csv(output)
    dispatches = len(data)

    print(f"llvm-cpu, {data['cpu model'].iloc[0]}, {data['threads'].iloc[0]} threads, "
          f"IREE {data['IREE version'].iloc[0]}, numpy {np.__version__}")
    header = (f"{'source':10} {'shape (f32)':16} {'default':>8} {'data-tiling':>11} {'best tiles':>10} "
              f"{'numpy':>8} {'tiles/def':>9} {'best/def':>8} {'best/numpy':>10}  best configuration")
    print(header + "\n" + "-" * len(header))
    for source, m, n, k in shapes:
        rows = data[(data["m"] == m) & (data["n"] == n) & (data["k"] == k)]
        ok = rows[(rows["Verification"] == "SUCCESS") & (rows["GFLOPs"] > 0)].set_index("Configuration")
        tiles = ok[ok.index.str.startswith("tile_config_")]
        default = ok["GFLOPs"].get("default", np.nan)
        data_tiling = ok["GFLOPs"].get("default_data_tiling", np.nan)
        best_tiles = tiles["GFLOPs"].max() if len(tiles) else np.nan
        best_name = ok["GFLOPs"].idxmax() if len(ok) else "none"
        best = ok["GFLOPs"].max() if len(ok) else np.nan
        numpy_gflops = 2 * m * n * k / (numpy_ms(m, n, k, args.repetitions) * 1e6)
        print(f"{source:10} {f'{m}x{n}x{k}':16} {default:8.1f} {data_tiling:11.1f} {best_tiles:10.1f} "
              f"{numpy_gflops:8.1f} {best_tiles / default:9.2f} {best / default:8.2f} "
              f"{best / numpy_gflops:10.2f}  {best_name}")
    print(f"(GFLOP/s; median of {args.repetitions}; failed/unverified rows: "
          f"{int((data['Verification'] != 'SUCCESS').sum())} of {dispatches})")
    print(f"compile of {dispatches} dispatches: -j1 {serial:.1f} s, -j{cores} {parallel:.1f} s, "
          f"speedup {serial / parallel:.2f}x")


if __name__ == "__main__":
    main()
