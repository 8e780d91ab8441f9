#!/usr/bin/env python3
"""Verify the compiled dispatches and time them, with intervals.

The work is in iree_dispatch_profiler/cli/profiler.py; installed, this is `iree-dispatch-profile`.
"""
from iree_dispatch_profiler.cli.profiler import run

if __name__ == "__main__":
    run()
