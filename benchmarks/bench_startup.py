#!/usr/bin/env python3
"""How long each script takes to start (its --help, which is also how long a one-line error on
bad input takes): this checkout side by side with another revision (--against, checked out in a
temporary git worktree) and with a bare interpreter that imports numpy, all interleaved in
rounds so that the machine's state is the same for each. Medians with 95% intervals."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

from iree_dispatch_profiler.core import stats

SCRIPTS = ("generator.py", "compile.py", "profiler.py", "autotune.py", "compare.py")


def started(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", default="", metavar="REV",
                        help="a git revision to compare with (e.g. HEAD~3); none by default")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    trees = {"this checkout": ROOT}
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as temporary:
        if args.against:
            other = Path(temporary) / "other"
            subprocess.run(["git", "worktree", "add", "--detach", str(other), args.against],
                           cwd=ROOT, check=True, capture_output=True, timeout=120)
            trees[args.against] = other
        try:
            measure(trees, args.rounds)
        finally:
            if args.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT,
                               capture_output=True, timeout=120)


def measure(trees: dict[str, Path], rounds: int) -> None:
    floor = [sys.executable, "-c", "import numpy"]
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        samples.setdefault(("python + numpy", ""), []).append(started(floor, ROOT))
        for script in SCRIPTS:
            for name, tree in trees.items():
                # each tree's script imports its own package (the script's folder comes first)
                command = [sys.executable, str(tree / script), "--help"]
                samples.setdefault((script, name), []).append(started(command, tree))
    print(f"Start-up time (--help), {rounds} interleaved rounds, median s [95% interval]")
    base = samples[("python + numpy", "")]
    floor_name = 'python -c "import numpy"'
    print(f"  {floor_name:<34} {stats.estimate(base).median:.3f}")
    for script in SCRIPTS:
        for name in trees:
            times = samples[(script, name)]
            estimate = stats.estimate(times)
            line = (f"  {script:<13} {name:<20} {estimate.median:.3f} [{estimate.low:.3f}, "
                    f"{estimate.high:.3f}]")
            if name != "this checkout":
                ratio = stats.speedup(times, samples[(script, 'this checkout')])
                line += f"  this checkout faster by {ratio.median:.2f}x [{ratio.low:.2f}, {ratio.high:.2f}]"
            print(line)


if __name__ == "__main__":
    main()
