#!/usr/bin/env python3
"""A/B comparison of compile variants, configurations or profiler CSVs.

The work is in iree_dispatch_profiler/cli/compare.py; installed, this is `iree-dispatch-compare`.
"""
from iree_dispatch_profiler.cli.compare import run

if __name__ == "__main__":
    run()
