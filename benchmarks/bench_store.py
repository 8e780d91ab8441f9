#!/usr/bin/env python3
"""What the results store saves, side by side in one run, from an empty store:

  1. MODEL tuned (autotune.py --model): the first tuning's wall time;
  2. MODEL tuned again: the stored answer re-confirmed; its wall time against the first's;
  3. RELATED (the same blocks at another sequence length) tuned with the store (its targets'
     searches seeded by the stored winners of the nearest shapes) and without it (--store=off),
     each from an empty compile cache:
     wall times, and the two answers' whole calls timed with IREE's default in one interleaved
     session (median ms [95%]), the seeded answer against the unseeded one;
  4. store.py spec: the CPU's default spec from the store (under the flags RELATED was tuned
     under), applied to RELATED and checked (autotune.py --model --spec ... --spec-library).

  python benchmarks/bench_store.py [--n-trial 32] [--model encoder_block]
                                   [--related encoder_block_s256] [--work-dir DIR]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.iree import modules
from iree_dispatch_profiler.iree.timing import INVOCATION, Benchmark
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.measure.protocol import Candidate, Protocol, measure
from iree_dispatch_profiler.tuning.paths import TuningPaths

DATA = ROOT / "benchmarks" / "data"
SHOWN = ("Answer from the results store", "Results store:", "Model: ", "Model times",
         "Tuning spec ", "Answer: ", "Trials by expected gain", "Flags: ", "  flags ",
         "Spec problem", "Phase timings")


def autotune(*args, log: Path) -> tuple[float, list[str]]:
    """autotune.py as a user runs it: its wall time and its output lines (kept in `log`)."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / "autotune.py"), *map(str, args)],
                            cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    log.write_text(result.stdout + result.stderr)
    if result.returncode not in (0, 1):
        sys.exit(f"autotune.py failed (exit {result.returncode}), see {log}:\n"
                 + result.stderr[-2000:])
    return seconds, result.stdout.splitlines()


def shown(lines: list[str]) -> str:
    return "\n".join(f"    {line.strip()}" for line in lines
                     if line.startswith(SHOWN) or "the results store" in line)


def answer_build(output: Path) -> Path:
    """The build a tuning's answer is (IREE's default when no flags or spec won)."""
    work = TuningPaths(output).work
    tuned = work / "model_tuned.vmfb"
    return tuned if tuned.is_file() else work / "default.vmfb"


def whole_calls(builds: dict[str, Path], work: Path, seconds: float) -> dict:
    """The builds' whole model call in one interleaved session, on the tuner's inputs."""
    signature = modules.find_function(work / "model_input.mlir", None)
    inputs = sorted(work.glob("main_input*.npy"), key=lambda p: int(p.stem.split("input")[1]))
    tools = IreeTools.locate()
    candidates = [Candidate(label, Benchmark(tools, vmfb, signature.name, "local-task",
                                             [f"@{p}" for p in inputs], timeout=600,
                                             source=INVOCATION).sample)
                  for label, vmfb in builds.items()]
    return measure(candidates, next(iter(builds)), Protocol(time_budget=seconds)).outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-trial", type=int, default=32, help="autotune.py's default: 32")
    parser.add_argument("--model", default="encoder_block")
    parser.add_argument("--related", default="encoder_block_s256")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="the interleaved session of the related model's answers")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_store_"))
    work.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{work / 'store.sqlite'}"
    model, related = (DATA / f"{name}_torch.mlir" for name in (args.model, args.related))
    # Compile caches: the two tunings of MODEL share one, as a user's runs do; each tuning of
    # RELATED starts from an empty one, so that neither reuses the other's compiles.
    cold = ["--model", "--n-trial", args.n_trial]
    common = [*cold, "--cache-dir", work / "cache"]
    print(f"Store {store}; autotune.py --model --n-trial {args.n_trial}; logs in {work}")

    first, lines = autotune("--input", model, *common, "--store", store, "--output",
                            work / "first.csv", log=work / "first.out")
    print(f"\n1. {args.model}, first tuning (empty store): {first:.0f} s\n{shown(lines)}")
    second, lines = autotune("--input", model, *common, "--store", store, "--output",
                             work / "second.csv", log=work / "second.out")
    print(f"\n2. {args.model}, second tuning: {second:.1f} s = {second / first:.1%} of the "
          f"first\n{shown(lines)}")

    seeded, lines = autotune("--input", related, *cold, "--cache-dir", work / "cache_store",
                             "--store", store, "--output",
                             work / "related_store.csv", log=work / "related_store.out")
    seeds = [line for line in lines if "seed its search" in line]
    kept = [line for line in lines if "kept their default after full searches" in line]
    print(f"\n3. {args.related} with the store: {seeded:.0f} s ({len(seeds)} target(s) seeded, "
          f"{len(kept)} shortened as their nearest shapes kept their default)"
          f"\n{shown(lines)}")
    alone, lines = autotune("--input", related, *cold, "--cache-dir", work / "cache_alone",
                            "--store=off", "--output",
                            work / "related_alone.csv", log=work / "related_alone.out")
    print(f"   {args.related} without it: {alone:.0f} s\n{shown(lines)}")
    print(f"   wall time: with the store {seeded:.0f} s, without {alone:.0f} s: "
          f"{alone / seeded:.2f}x faster with it")
    alone_work = TuningPaths(work / "related_alone.csv").work
    outcomes = whole_calls({"IREE default": alone_work / "default.vmfb",
                            "answer without the store": answer_build(work / "related_alone.csv"),
                            "answer with the store": answer_build(work / "related_store.csv")},
                           alone_work, args.seconds)
    print("   the answers' whole call, one interleaved session (median ms [95%]):")
    for label, outcome in outcomes.items():
        print(f"     {label:<26} " + (f"{outcome.runtime.median:8.3f} "
                                      f"{outcome.runtime.interval('.3f')}"
                                      if not outcome.reason else f"failed: {outcome.reason}"))
    a, b = outcomes["answer without the store"], outcomes["answer with the store"]
    if not (a.reason or b.reason):
        print(f"     with the store against without: "
              f"{stats.direction(stats.speedup(a.samples, b.samples))}")

    # the CPU's spec for the flags the related model was tuned under, applied to that model
    chosen = TuningPaths(work / "related_store.csv").best_flags
    flags = chosen.read_text().strip() if chosen.is_file() else ""
    spec = work / "cpu_spec.mlir"
    made = subprocess.run([sys.executable, str(ROOT / "store.py"), "spec", "--store", store,
                           "--output", str(spec), f"--flags={flags}"],
                          cwd=ROOT, capture_output=True, text=True)
    print(f"\n4. store.py spec --output {spec.name} --flags='{flags}' (exit {made.returncode})\n"
          + "\n".join(f"    {line}" for line in (made.stdout + made.stderr).splitlines()))
    if made.returncode == 0:
        checked, lines = autotune("--input", related, "--model", "--spec", spec, "--spec-library",
                                  f"--base-flags={flags}", "--store=off", "--output",
                                  work / "checked.csv", log=work / "checked.out")
        print(f"   applied to {args.related} ({checked:.0f} s):\n{shown(lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
