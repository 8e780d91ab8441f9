#!/usr/bin/env python3
"""The results store: summary, merge, and a CPU's default tuning spec.

The work is in iree_dispatch_profiler/cli/store.py; installed, this is `iree-dispatch-store`.
"""
from iree_dispatch_profiler.cli.store import run

if __name__ == "__main__":
    run()
