#!/usr/bin/env python3
"""How far the numbers can be trusted, measured in one run on this machine:
(a) five independent profiler runs of one operation's sweep: spread of each configuration's
    speedup over default and of its median, the old protocol (each configuration alone, five
    repetitions, invocation time for large ops) beside the new one (interleaved rounds);
(b) A/A comparisons (the same vmfb twice): how many are called significant;
(c) the profiler's per-dispatch time against iree-benchmark-module --dispatch_statistics;
(d) the profiler's numpy row against a bare `a @ b` in this process."""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from common import script

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.iree.launchers import Benchmark, IreeTools, run
from iree_dispatch_profiler.sweep.build import CompileRecord
from iree_dispatch_profiler.sweep.manifest import Manifest
from iree_dispatch_profiler.sweep.measurement import Candidate, Protocol, measure
from iree_dispatch_profiler.sweep.verification import ReferenceCache

SHAPE = (768, 512, 1024)  # the seed's own command line


def spread(values) -> float:
    values = [v for v in values if v == v]
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else np.nan


def old_protocol(manifest: Manifest, tools: IreeTools, repeat_one: bool) -> dict[str, float]:
    """Each configuration alone, five 0.1 s repetitions back to back, then the next one; the
    invocation of a large op timed whole (repeat count 1)."""
    medians = {}
    for dispatch in manifest.dispatches:
        paths = manifest.paths(dispatch)
        cache = ReferenceCache(manifest.reference_folder(dispatch.operation), dispatch.operation)
        vmfb = paths.verify_vmfb if repeat_one else paths.profile_vmfb
        repeats = 1 if repeat_one else CompileRecord.load(paths.compile_record).repeat_count
        bench = Benchmark(tools, vmfb, dispatch.name, "local-task",
                          [b.flag for b in cache.ensure_inputs()], repeats)
        medians[dispatch.configuration.name] = statistics.median(
            bench.sample(0.1).ms for _ in range(5))
    return medians


def sweep(work: Path) -> Manifest:
    """The seed operation's configurations, generated and compiled once (later: up to date)."""
    m, n, k = SHAPE
    script("generator.py", "--generated-dir", work, f"--problem-m={m}", f"--problem-n={n}",
           f"--problem-k={k}", "--data-types=f32t_f32t_f32t")
    script("compile.py", "--generated-dir", work)
    return Manifest.load(work)


def part_a(work: Path, tools: IreeTools, runs: int) -> None:
    m, n, k = SHAPE
    manifest = sweep(work)
    old, new = [], []
    for i in range(runs):
        old.append(old_protocol(manifest, tools, repeat_one=True))
        csv = work / f"run{i}.csv"
        script("profiler.py", "--generated-dir", work, "--output", csv)
        data = pd.read_csv(csv).set_index("Configuration")
        new.append({c: (data.at[c, "Runtime(ms)"], data.at[c, "speedup"], data.at[c, "precision_reached"])
                    for c in data.index})
    print(f"(a) {runs} independent runs of matmul_{m}x{n}x{k}_f32: spread = (max - min) / median")
    print(f"    {'configuration':<30} {'old speedup':>11} {'new speedup':>11} "
          f"{'old median':>10} {'new median':>10}  new speedups")
    worst = {"old": 0.0, "new": 0.0}
    for config in new[0]:
        if config == "default":
            old_s = new_s = np.nan
        else:
            old_s = spread([r["default"] / r[config] for r in old])
            new_s = spread([r[config][1] for r in new])
            worst = {"old": max(worst["old"], old_s), "new": max(worst["new"], new_s)}
        print(f"    {config:<30} {old_s:>11.1%} {new_s:>11.1%} {spread([r[config] for r in old]):>10.1%} "
              f"{spread([r[config][0] for r in new]):>10.1%}  "
              + " ".join(f"{r[config][1]:.3f}" for r in new))
    print(f"    worst speedup spread: old {worst['old']:.1%}, new {worst['new']:.1%} (target <= 5%)")


def part_b(work: Path, tools: IreeTools, count: int) -> None:
    manifest = sweep(work)
    dispatch = next(d for d in manifest.dispatches if d.configuration.name == "default")
    paths = manifest.paths(dispatch)
    cache = ReferenceCache(manifest.reference_folder(dispatch.operation), dispatch.operation)
    inputs = [b.flag for b in cache.ensure_inputs()]
    repeats = CompileRecord.load(paths.compile_record).repeat_count
    significant, ratios = 0, []
    for _ in range(count):
        a = Benchmark(tools, paths.profile_vmfb, dispatch.name, "local-task", inputs, repeats)
        b = Benchmark(tools, paths.profile_vmfb, dispatch.name, "local-task", inputs, repeats)
        result = measure([Candidate("A", a.sample), Candidate("A'", b.sample)], "A",
                         Protocol(time_budget=8))
        ratio = result.outcomes["A'"].speedup
        ratios.append(ratio)
        significant += stats.significant(ratio, stats.MIN_EFFECT)
    print(f"(b) {count} A/A comparisons of {dispatch.name}: {significant} called significant "
          "(target 0)")
    print("    speedups: " + " ".join(f"{r.median:.3f}{r.interval('.3f')}" for r in ratios))


def part_c(tools: IreeTools, work: Path) -> None:
    print("(c) profiler per-dispatch time vs iree-benchmark-module --dispatch_statistics "
          "(plain vmfb), measured alternately")
    for m, n, k in ((128, 128, 128), (512, 512, 512), (1024, 1024, 1024)):
        folder = work / f"c_{m}"
        script("generator.py", "--generated-dir", folder, f"--problem-m={m}", f"--problem-n={n}",
               f"--problem-k={k}", "--data-types=f32t_f32t_f32t", "--dispatches=_default$")
        script("compile.py", "--generated-dir", folder)
        manifest = Manifest.load(folder)
        dispatch = manifest.dispatches[0]
        paths = manifest.paths(dispatch)
        cache = ReferenceCache(manifest.reference_folder(dispatch.operation), dispatch.operation)
        inputs = [f"--input={b.flag}" for b in cache.ensure_inputs()]
        ours, direct = [], []
        for i in range(5):
            csv = folder / f"c{i}.csv"
            script("profiler.py", "--generated-dir", folder, "--output", csv,
                   "--verification-enabled=false", "--time-budget=3")
            ours.append(float(pd.read_csv(csv)["Runtime(ms)"].iloc[0]))
            direct.append(dispatch_statistics(tools, paths.verify_vmfb, dispatch.name, inputs))
        ratio = statistics.median(o / d for o, d in zip(ours, direct))
        print(f"    {m}x{n}x{k}: profiler {statistics.median(ours):.3f} ms, dispatch statistics "
              f"{statistics.median(direct):.3f} ms, ratio {ratio:.3f} (target within 5%)")


def dispatch_statistics(tools: IreeTools, vmfb: Path, function: str, inputs: list[str]) -> float:
    """ms per dispatch as IREE's own HAL profiling reports it."""
    result = run([str(tools.benchmark_module), f"--module={vmfb}", f"--function={function}",
                  "--device=local-task", *inputs, "--dispatch_statistics",
                  "--benchmark_repetitions=3", "--benchmark_min_time=0.1s",
                  "--benchmark_format=console"], timeout=300)
    rows = [line for line in result.stdout.splitlines() if "_dispatch_" in line and "calls=" in line]
    if not rows:
        sys.exit(f"no dispatch statistics for {vmfb}:\n{result.stderr[-2000:]}")
    value, unit = rows[-1].split()[1:3]
    return float(value) * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def part_d(work: Path) -> None:
    m, n, k = SHAPE
    sweep(work)
    rows = []
    for i in range(5):
        csv = work / f"d{i}.csv"
        script("profiler.py", "--generated-dir", work, "--output", csv, "--providers=numpy")
        rows.append(float(pd.read_csv(csv)["Runtime(ms)"].iloc[0]))
        a = np.random.default_rng(0).random((m, k), dtype=np.float32)
        b = np.random.default_rng(1).random((k, n), dtype=np.float32)
        a @ b
        bare = []
        for _ in range(20):
            start = time.perf_counter()
            a @ b
            bare.append((time.perf_counter() - start) * 1e3)
        rows[-1] = (rows[-1], statistics.median(bare))
    ratio = statistics.median(r / b for r, b in rows)
    print(f"(d) numpy row vs bare a @ b ({m}x{n}x{k} f32), 5 alternations: row "
          f"{statistics.median(r for r, _ in rows):.3f} ms, bare {statistics.median(b for _, b in rows):.3f} ms, "
          f"ratio {ratio:.3f} (target within 5%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--aa", type=int, default=20)
    parser.add_argument("--parts", default="abcd")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_truth_"))
    tools = IreeTools.locate()
    if "a" in args.parts:
        part_a(work, tools, args.runs)
    if "b" in args.parts:
        part_b(work, tools, args.aa)
    if "c" in args.parts:
        part_c(tools, work)
    if "d" in args.parts:
        part_d(work)


if __name__ == "__main__":
    main()
