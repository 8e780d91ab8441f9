#!/usr/bin/env python3
"""Auto-tune the linalg ops of your own MLIR module, or a whole model, on llvm-cpu.

The work is in iree_dispatch_profiler/cli/autotune.py; installed, this is `iree-dispatch-autotune`.
"""
from iree_dispatch_profiler.cli.autotune import run

if __name__ == "__main__":
    run()
