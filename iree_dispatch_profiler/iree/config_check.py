"""The config-applied check: did IREE compile with the configuration we asked for, or silently
choose its own? Read from the executable configurations IREE dumped
(--iree-hal-dump-executable-configurations-to)."""
from __future__ import annotations

import functools
import threading
from pathlib import Path

from iree_dispatch_profiler.core.library import TuningConfiguration

# The MLIR Python bindings are not used from several threads at once.
_IR_LOCK = threading.Lock()


@functools.cache
def _ir_context():
    """One context for every check: making one costs ~9 ms, more than parsing a dump (a sweep
    restored from the compile cache is mostly these checks)."""
    from iree.compiler import ir
    return ir.Context()


def configuration_applied(dump_folder: Path, config: TuningConfiguration) -> str:
    """`yes` if an op of the dumped executables carries the requested lowering config and its
    function the requested translation info; `no` if IREE silently chose something else."""
    if config.lowering_config is None:
        return "n.a."
    from iree.compiler import ir

    with _IR_LOCK:
        context = _ir_context()
        wanted = {"lowering_config": str(ir.Attribute.parse(config.lowering_config, context)),
                  "translation_info": str(ir.Attribute.parse(config.translation_info, context))}
        found = set()

        def visit(op) -> ir.WalkResult:
            # Operation.walk gives generic ops: no dialect's Python classes get imported.
            for name, value in wanted.items():
                if name in op.attributes and str(op.attributes[name]) == value:
                    found.add(name)
            return ir.WalkResult.ADVANCE

        for dump in sorted(dump_folder.glob("*.mlir")):
            try:
                ir.Module.parse(dump.read_text(), context).operation.walk(visit)
            except ir.MLIRError:
                continue
    return "yes" if found == wanted.keys() else "no"

