#!/usr/bin/env python3
"""Side by side, in one run on llvm-cpu: IREE default, data tiling, the best of each family of
tuning configurations (tiles, tiles with cache levels, data-tiled, packed, inner_tiled) and numpy
(OpenBLAS at its best kernel) on real matmul shapes from workloads/, a 4096 square and large
shapes that are not multiples of the inner tiles, and compile wall time -j1 vs -jN."""
from __future__ import annotations

import csv
import os

from common import WORKLOADS, compile_and_profile, parse_args, print_table, script


def workload_shapes() -> list[tuple[int, int, int]]:
    """One mmperf square, one DeepBench training GEMM, two SDXL UNet mms, the UNet's two largest
    f32 GEMMs (a feed-forward layer's up and down projections), a 4096 square, and two large
    shapes whose M is no multiple of 16 (3000x4096x2048, 1000^3)."""
    def rows(name):
        with open(WORKLOADS / name, newline="") as handle:
            return list(csv.DictReader(handle))

    mmperf = next(r for r in rows("mmperf_sizes.csv") if r["raw"] == "1024x1024x1024")
    deepbench = next(r for r in rows("deepbench_gemm.csv")
                     if (r["m"], r["n"], r["k"], r["transA"], r["transB"]) == ("1760", "128", "1760", "0", "0"))
    sdxl = rows("sdxl_unet_mm_shapes.csv")
    feed_forward = [r for r in sdxl if r["dtype"] == "f32" and (r["N"], r["K"]) in
                    (("10240", "1280"), ("1280", "5120"))]
    return [(int(r[m]), int(r[n]), int(r[k])) for r, (m, n, k) in
            [(mmperf, "mnk"), (deepbench, "mnk"), (sdxl[0], "MNK"), (sdxl[2], "MNK"),
             *((r, "MNK") for r in feed_forward)]] + [(4096, 4096, 4096), (3000, 4096, 2048),
                                                     (1000, 1000, 1000)]


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
