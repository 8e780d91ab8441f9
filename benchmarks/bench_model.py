#!/usr/bin/env python3
"""autotune.py --model on two models with random weights, exported from PyTorch with iree-turbine
(tests/data/export_models.py): a transformer encoder block and a ResNet basic block.

For each model it runs the whole loop as a user would (rank the dispatches, tune the hot ones
inside the model, write one spec, check it, verify and time the model) and prints the dispatch
ranking, the per-dispatch speedups of the tuned model, the whole-model speedup against IREE's
default and against IREE's data tiling (95% intervals, interleaved rounds), and the tuning wall
time."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from common import ROOT

MODELS = {
    "encoder_block": "transformer encoder block: seq 128, d 256, 4 heads, FFN 1024, batch 1",
    "basic_block": "ResNet basic block: 64 channels, 28x28, batch 2 (batch-1 convs keep no config)",
}
SHOWN_DISPATCHES = 8
SUMMARY_PREFIXES = ("Tuning spec ", "No tuned config", "dropped from the spec", "Outputs: ",
                    "Model: ", "(IREE data tiling", "(the tuned model")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-trial", type=int, default=12, help="trials per hot target")
    parser.add_argument("--confirm-seconds", type=float, default=10.0,
                        help="interleaved timing of the leaders, and of the whole model")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: "
                        + ", ".join(MODELS))
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="bench_model_"))
    work.mkdir(parents=True, exist_ok=True)
    summary = []
    for name in args.models.split(","):
        if name not in MODELS:
            sys.exit(f"bench_model.py: unknown model {name!r} (choose from {', '.join(MODELS)})")
        output = work / f"{name}.csv"
        command = [sys.executable, str(ROOT / "autotune.py"), "--input",
                   str(ROOT / "benchmarks" / "data" / f"{name}_torch.mlir"), "--model",
                   "--output", str(output), "--n-trial", str(args.n_trial),
                   "--confirm-seconds", str(args.confirm_seconds)]
        start = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        lines = result.stdout.splitlines()
        if result.returncode not in (0, 1) or not any(line.startswith("Model: ") for line in lines):
            sys.exit(f"autotune.py --model failed on {name} (exit {result.returncode}):\n"
                     + result.stderr[-2000:])
        if name == args.models.split(",")[0]:
            print(lines[0].split(", for ", 1)[-1])  # the CPU the figures are for
        print(f"\n== {name}: {MODELS[name]}")
        print(f"tuning wall time {seconds:.0f} s (autotune.py --model --n-trial {args.n_trial}), "
              f"exit {result.returncode}")
        ranking = pd.read_csv(work / f"{name}_dispatches.csv", keep_default_na=False)
        print(f"\ndispatch ranking (of {len(ranking)}; IREE's default):")
        print(f"{'rank':>4} {'dispatch':<50} {'root op and shape':<58} {'calls':>5} {'ms':>8} "
              f"{'share':>6}  target")
        for row in ranking.head(SHOWN_DISPATCHES).itertuples():
            target = (f"{row.target}{' (hot)' if row.hot == 'yes' else ''}" if row.target != ""
                      else "not tunable")
            print(f"{row.rank:>4} {row.dispatch[:50]:<50} {(row.root + ' ' + row.shape)[:58]:<58} "
                  f"{int(row.calls):>5} {row.ms:>8.4f} {row.share:>6.1%}  {target}")
        print("\nper target, inside the model:")
        for line in lines:
            if line.startswith("target ") or line.startswith("  answer:"):
                print("  " + line.strip())
        report = (work / f"{name}_model_report.md").read_text().splitlines()
        table = [line for line in report if line.startswith("|")]
        print("\nper dispatch, the final interleaved session (from the model report):")
        print("\n".join(table[:2 + SHOWN_DISPATCHES]))
        print()
        kept = [line for line in lines if line.startswith(SUMMARY_PREFIXES)]
        print("\n".join(kept))
        summary.append((name, seconds, next(line for line in kept if line.startswith("Model: ")),
                        next((line for line in kept if line.startswith("(the tuned")), "")))
    print("\n== summary")
    for name, seconds, model, over_tiling in summary:
        print(f"{name:<14} {seconds:>5.0f} s  {model}  {over_tiling}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
