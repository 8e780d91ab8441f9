#!/usr/bin/env python3
"""Generate MLIR dispatches: operations x tuning configurations.

The work is in iree_dispatch_profiler/cli/generator.py; installed, this is `iree-dispatch-generate`.
"""
from iree_dispatch_profiler.cli.generator import run

if __name__ == "__main__":
    run()
