#!/usr/bin/env python3
"""Compile the generated dispatches with iree-compile over all cores.

The work is in iree_dispatch_profiler/cli/compile.py; installed, this is `iree-dispatch-compile`.
"""
from iree_dispatch_profiler.cli.compile import run

if __name__ == "__main__":
    run()
