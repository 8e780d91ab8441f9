#!/usr/bin/env python3
"""Side by side, in one run on llvm-cpu: IREE default vs best tuning configuration vs numpy
(OpenBLAS) on real matmul shapes from ../shared/workloads, and compile wall time -j1 vs -jN."""
from __future__ import annotations

import csv
import os

from common import WORKLOADS, compile_and_profile, parse_args, print_table, script


def workload_shapes() -> list[tuple[int, int, int]]:
    """One mmperf square, one DeepBench training GEMM, two SDXL UNet mms."""
    def rows(name):
        with open(WORKLOADS / name, newline="") as handle:
            return list(csv.DictReader(handle))

    mmperf = next(r for r in rows("mmperf_sizes.csv") if r["raw"] == "1024x1024x1024")
    deepbench = next(r for r in rows("deepbench_gemm.csv")
                     if (r["m"], r["n"], r["k"], r["transA"], r["transB"]) == ("1760", "128", "1760", "0", "0"))
    sdxl = rows("sdxl_unet_mm_shapes.csv")
    return [(int(r[m]), int(r[n]), int(r[k])) for r, (m, n, k) in
            [(mmperf, "mnk"), (deepbench, "mnk"), (sdxl[0], "MNK"), (sdxl[2], "MNK")]]


def main() -> None:
    args, work = parse_args(__doc__)
    for m, n, k in workload_shapes():
        script("generator.py", "--generated-dir", work, f"--problem-m={m}", f"--problem-n={n}",
               f"--problem-k={k}", "--data-types=f32t_f32t_f32t")
    data, serial, parallel = compile_and_profile(work, args.repetitions)
    print_table(data, args.repetitions)
    dispatches = int((data["Provider"] == "IREE Codegen").sum())
    print(f"compile of {dispatches} dispatches: -j1 {serial:.1f} s, -j{os.cpu_count()} {parallel:.1f} s, "
          f"speedup {serial / parallel:.2f}x")


if __name__ == "__main__":
    main()
