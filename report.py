#!/usr/bin/env python3
"""One self-contained HTML report from results already on disk (a profiler CSV, an autotune.py
trial CSV, a model summary, compare.py results).

The work is in iree_dispatch_profiler/cli/report.py; installed, this is `iree-dispatch-report`.
"""
from iree_dispatch_profiler.cli.report import run

if __name__ == "__main__":
    run()
