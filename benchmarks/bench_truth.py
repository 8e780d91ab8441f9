#!/usr/bin/env python3
"""How far the numbers can be trusted, for each timing source side by side, measured in one
run on this machine:
(a) five independent profiler runs of the seed's sweep (matmul 768x512x1024 f32): each
    configuration's speedup over default, its spread across the runs, how often another run's
    speedup falls inside a run's 95% interval, and the profiler's wall time over the timed work;
(b) A/A comparisons (the same vmfb twice, interleaved): how many are called different;
(c) the profiler's per-dispatch time against iree-benchmark-module --dispatch_statistics;
(d) the profiler's numpy row against a bare `a @ b` in this process;
(e) between sessions: five profiler sessions of the seed's sweep with the default timing source,
    their calibrations (the machine's state at each session's start and end), each
    configuration's speedup spread among sessions whose calibrations agree and among all,
    coverage, and compare.py --csv on every ordered pair (A/A: the same build): how many
    differences it claims, and how many it leaves to a machine shift the calibrations show."""
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
from iree_dispatch_profiler.measure import calibration
from iree_dispatch_profiler.sweep import comparison
from iree_dispatch_profiler.measure.calibration import MachineState
from iree_dispatch_profiler.sweep.performance_report import (MACHINE_STATE, MACHINE_STATE_DURING,
                                                             MACHINE_STATE_END, PROVIDER_IREE,
                                                             sessions)
from iree_dispatch_profiler.iree.process import run
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.iree.timers import DEFAULT_SOURCE, TIMING_SOURCES, Timers
from iree_dispatch_profiler.sweep.build import CompileRecord
from iree_dispatch_profiler.sweep.manifest import Manifest
from iree_dispatch_profiler.measure.protocol import Candidate, Protocol, measure
from iree_dispatch_profiler.measure.verification import ReferenceCache

SHAPE = (768, 512, 1024)  # the seed's own command line


def spread(values) -> float:
    values = [v for v in values if v == v]
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else np.nan


def sweep(work: Path) -> Manifest:
    """The seed operation's configurations, generated and compiled once (later: up to date)."""
    m, n, k = SHAPE
    script("generator.py", "--generated-dir", work, f"--problem-m={m}", f"--problem-n={n}",
           f"--problem-k={k}", "--data-types=f32t_f32t_f32t")
    script("compile.py", "--generated-dir", work)
    return Manifest.load(work)


def part_a(work: Path, sources: list[str], runs: int) -> None:
    m, n, k = SHAPE
    sweep(work)
    print(f"(a) {runs} independent profiler runs of matmul_{m}x{n}x{k}_f32 per timing source "
          "(runs of the sources alternate); spread = (max - min) / median of a configuration's "
          "speedup over default")
    results = {source: [] for source in sources}
    walls = {source: [] for source in sources}
    for i in range(runs):
        for source in sources:
            csv = work / f"run_{source}_{i}.csv"
            walls[source].append(script("profiler.py", "--generated-dir", work, "--output", csv,
                                        f"--timing-source={source}"))
            results[source].append(pd.read_csv(csv).set_index("Configuration"))
    protocol = Protocol()
    print(f"    {'source':<20} {'median spread':>13} {'worst spread':>12} {'coverage':>9} "
          f"{'wall / timed':>12}  worst configuration")
    for source in sources:
        frames = results[source]
        configs = [c for c in frames[0].index if c not in ("default", "numpy")]
        spreads = {c: spread([f.at[c, "speedup"] for f in frames if c in f.index]) for c in configs}
        inside = total = 0
        for c in configs:
            for a in frames:
                for b in frames:
                    if a is not b and c in a.index and c in b.index:
                        total += 1
                        inside += a.at[c, "speedup_ci_low"] <= b.at[c, "speedup"] <= a.at[c, "speedup_ci_high"]
        # timed work: each row's rounds of about seconds_per_sample of computation
        timed = [f["repetitions"].sum() * protocol.seconds_per_sample for f in frames]
        overhead = statistics.median(w / t for w, t in zip(walls[source], timed))
        worst = max(spreads, key=lambda c: spreads[c])
        print(f"    {source:<20} {statistics.median(spreads.values()):>13.1%} "
              f"{spreads[worst]:>12.1%} {inside / total:>9.0%} {overhead:>11.2f}x  {worst}")
    print("    targets: spread <= 5% for every configuration, coverage >= 80%, wall <= 1.2x timed")
    for source in sources:
        print(f"    {source} speedups per configuration, run by run:")
        for c in results[source][0].index:
            if c != "default":
                print(f"      {c:<30} " + " ".join(f"{f.at[c, 'speedup']:.3f}"
                                                for f in results[source] if c in f.index))


def part_b(work: Path, sources: list[str], count: int) -> None:
    manifest = sweep(work)
    dispatch = next(d for d in manifest.dispatches if d.configuration.name == "default")
    paths = manifest.paths(dispatch)
    cache = ReferenceCache(manifest.reference_folder(dispatch.operation), dispatch.operation)
    inputs = [b.flag for b in cache.ensure_inputs()]
    repeats = CompileRecord.load(paths.compile_record).repeat_count
    tools = IreeTools.locate()
    print(f"(b) {count} A/A comparisons of {dispatch.name} per timing source (target 0 called "
          "different)")
    for source in sources:
        significant, ratios = 0, []
        with Timers(source, tools, log_dir=work) as timers:
            for _ in range(count):
                pair = [timers.benchmark(paths.vmfb, dispatch.name, "local-task", inputs,
                                         repeats) for _ in range(2)]
                result = measure([Candidate("A", pair[0].sample), Candidate("A'", pair[1].sample)],
                                 "A", Protocol(time_budget=5))
                ratio = result.outcomes["A'"].speedup
                ratios.append(ratio)
                significant += stats.significant(ratio, stats.MIN_EFFECT)
        print(f"    {source:<20} {significant} of {count} called different; speedups "
              + " ".join(f"{r.median:.3f}" for r in ratios))


def part_c(tools: IreeTools, work: Path) -> None:
    print("(c) profiler per-dispatch time vs iree-benchmark-module --dispatch_statistics "
          "(IREE's HAL profiling times each repeated run), measured alternately")
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
            direct.append(dispatch_statistics(tools, paths.vmfb, dispatch.name, inputs))
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


def part_e(work: Path, runs: int) -> None:
    m, n, k = SHAPE
    sweep(work)
    print(f"(e) between sessions: {runs} profiler sessions of matmul_{m}x{n}x{k}_f32 "
          f"({DEFAULT_SOURCE}), one after the other, each calibrated at its start and end")
    paths = []
    for i in range(runs):
        csv = work / f"run_{DEFAULT_SOURCE}_{i}.csv"
        if not csv.is_file():  # part (a)'s sessions of this source, when it ran
            script("profiler.py", "--generated-dir", work, "--output", csv)
        paths.append(csv)
    frames = [pd.read_csv(p) for p in paths]
    states = [sessions(f)[-1] for f in frames]
    print(f"    {'session':<8} {'compute GFLOP/s':>22} {'memory GB/s':>20} {'BLAS GFLOP/s':>20}"
          "  start vs end")
    for i, (start, end) in enumerate(states):
        cells = []
        for name in ("compute", "memory", "blas"):
            r = start.readings.get(name)
            cells.append(f"{r.rate:.4g} [{r.low:.4g}, {r.high:.4g}]" if r else "-")
        print(f"    {i:<8} {cells[0]:>22} {cells[1]:>20} {cells[2]:>20}  "
              f"{calibration.within_session(start, end) if end else 'no end'}")
    # the sessions whose operations' sentinel saw the machine change during their rounds
    moved = {i for i, f in enumerate(frames) if MACHINE_STATE_DURING in f.columns and any(
        calibration.disturbed(*(MachineState.from_json(x) for x in row))
        for row in f[[MACHINE_STATE, MACHINE_STATE_DURING, MACHINE_STATE_END]].itertuples(
            index=False))}
    print(f"    sessions whose sentinel saw the machine change during an operation's rounds: "
          f"{', '.join(map(str, sorted(moved))) or 'none'}")
    # a pair agrees when neither session changed during itself and their states do not differ
    agree = {(a, b): a not in moved and b not in moved and not comparison.machine_shift(
                 [states[a]], [states[b]], "a", "b", stats.MIN_EFFECT)["flagged"]
             for a in range(runs) for b in range(runs) if a != b}
    speedups = [f[f["Provider"] == PROVIDER_IREE].set_index("Configuration") for f in frames]
    for f in speedups:  # sessions profiled before the column existed
        if "speedup_across_sessions_low" not in f.columns:
            across = [stats.across_sessions(stats.Estimate(m, lo, hi, np.nan, 3)) for m, lo, hi in
                      f[["speedup", "speedup_ci_low", "speedup_ci_high"]].itertuples(index=False)]
            f["speedup_across_sessions_low"] = [a.low for a in across]
            f["speedup_across_sessions_high"] = [a.high for a in across]
    configs = [c for c in speedups[0].index if c != "default"]

    def pair_figures(pairs, low="speedup_ci_low", high="speedup_ci_high"):
        worst, inside, total = 0.0, 0, 0
        for c in configs:
            for a, b in pairs:
                x, y = speedups[a], speedups[b]
                if c in x.index and c in y.index and x.at[c, "speedup"] == x.at[c, "speedup"]:
                    worst = max(worst, abs(x.at[c, "speedup"] - y.at[c, "speedup"])
                                / statistics.mean([x.at[c, "speedup"], y.at[c, "speedup"]]))
                    total += 1
                    inside += x.at[c, low] <= y.at[c, "speedup"] <= x.at[c, high]
        return worst, inside / total if total else float("nan")

    agreeing = [p for p, ok in agree.items() if ok]
    flagged = sorted({tuple(sorted(p)) for p, ok in agree.items() if not ok})
    for label, pairs in (("sessions whose calibrations agree", agreeing),
                         ("all sessions", list(agree))):
        worst, coverage = pair_figures(pairs)
        _, across = pair_figures(pairs, "speedup_across_sessions_low", "speedup_across_sessions_high")
        print(f"    {label:<34} {len(pairs):>3} ordered pairs: worst speedup spread {worst:.1%}, "
              f"coverage {coverage:.0%} (within-session interval), {across:.0%} (across-sessions "
              "interval)")
    # the between-session spread beyond within-session noise (stats.SESSION_SD's source)
    between = []
    for c in configs:
        values = np.array([f.at[c, "speedup"] for f in speedups if c in f.index])
        halves = np.array([(f.at[c, "speedup_ci_high"] - f.at[c, "speedup_ci_low"]) / 2
                           for f in speedups if c in f.index])
        if len(values) > 2 and np.isfinite(values).all():
            total = np.std(values, ddof=1) / values.mean()
            within = np.sqrt(np.mean((halves / 1.96 / values) ** 2))
            between.append(max(total ** 2 - within ** 2, 0.0))
    print(f"    between-session spread of a speedup beyond within-session noise: "
          f"{np.sqrt(np.mean(between)):.2%} pooled, {np.sqrt(max(between)):.2%} worst "
          f"(stats.SESSION_SD = {stats.SESSION_SD:.2%})")
    print(f"    session pairs the calibrations flag as a machine shift: "
          f"{', '.join(f'{a}-{b}' for a, b in flagged) or 'none'}")
    claims = unflagged = shifted = 0
    for a, b in agree:
        found, _ = comparison.csv_comparisons(paths[a], paths[b], stats.MIN_EFFECT)
        claimed = sum(c["flag"] in ("REGRESSION", "improved") for c in found)
        claims += claimed
        unflagged += claimed if agree[(a, b)] else 0
        shifted += sum(c["flag"] in ("machine shift", "session noise") for c in found)
    print(f"    compare.py --csv on {len(agree)} ordered pairs (A/A): {claims} differences claimed "
          f"({unflagged} in pairs whose calibrations agree), {shifted} beyond noise within the "
          "sessions left to a machine shift or to the spread between sessions")
    within = sum(1 for start, end in states if end and "CHANGED" in calibration.within_session(start, end))
    print(f"    sessions whose start and end calibrations disagree: {within} of {runs}")
    print("    targets: worst spread <= 5% among agreeing sessions, coverage >= 80%, "
          "0 claimed differences in A/A")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--aa", type=int, default=20)
    parser.add_argument("--parts", default="abcde")
    parser.add_argument("--sources", default=",".join(TIMING_SOURCES),
                        help="timing sources to compare (default: all)")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_truth_"))
    tools = IreeTools.locate()
    sources = args.sources.split(",")
    if "a" in args.parts:
        part_a(work, sources, args.runs)
    if "b" in args.parts:
        part_b(work, sources, args.aa)
    if "c" in args.parts:
        part_c(tools, work)
    if "d" in args.parts:
        part_d(work)
    if "e" in args.parts:
        part_e(work, args.runs)


if __name__ == "__main__":
    main()
