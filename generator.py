#!/usr/bin/env python3
"""Generate MLIR dispatches: operations (predefined or user shapes) x tuning configurations.

Writes `<generated-dir>/generated/linalg/<kind>/<operation>/<dispatch>.mlir` and the manifest
that compile.py and profiler.py read.
"""
from __future__ import annotations

from typing import Sequence

import matmul
import options
from launchers import IreeTools
from library import TensorDescription, UserError
from manifest import TUNING_SPACES, DispatchCollection, Manifest, select


def parse_data_types(text: str | None, device) -> list[tuple]:
    """`f16t_f16t_f32t,...` (or `f16` for f16t_f16t_f16t); default: all the device supports."""
    supported = matmul.DATA_TYPES[device]
    if text is None:
        return [tuple(TensorDescription(t) for t in combo) for combo in supported]
    chosen = []
    for item in (i.strip() for i in text.split(",")):
        parts = item.split("_") if "_" in item else [f"{item}t"] * 3
        if len(parts) != 3:
            raise UserError(f"--data-types entry '{item}' must be lhs_rhs_result, e.g. f16t_f16t_f32t")
        descriptions = tuple(TensorDescription.parse(p) for p in parts)
        if tuple(d.dtype for d in descriptions) not in supported:
            names = ", ".join(matmul.data_type_name(c) for c in supported)
            raise UserError(f"--data-types entry '{item}' is not supported on {device.value} "
                            f"(supported: {names})")
        if descriptions[2].layout.value != "t":
            raise UserError(f"--data-types entry '{item}': the result must be row-major (t)")
        chosen.append(descriptions)
    return chosen


def parser() -> options.ArgumentParser:
    p = options.script_parser(__doc__, target_recorded=False)
    group = p.add_argument_group("operations")
    group.add_argument("--operation-kind", choices=["matmul"], default="matmul",
                       help="operation family to generate (default: matmul)")
    for dim in "mnk":
        group.add_argument(f"--problem-{dim}", type=options.parse_sizes, default=None,
                           metavar="SIZES",
                           help=f"{dim.upper()} sizes: 768, 64,128 or start:end:step (end included) "
                                f"(default: predefined shapes {matmul.PREDEFINED_SHAPES})")
    group.add_argument("--data-types", default=None, metavar="LHS_RHS_RESULT,...",
                       help="element types and layouts, e.g. f32t_f32t_f32t,f16t_f16t_f32t,"
                            "f16t_f16n_f16t; `f16` means f16t_f16t_f16t "
                            "(default: every combination the device supports)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    target = options.target_from_args(args)
    options.runtime_device(args, target)  # refuse an impossible pairing now, not when profiling
    data_types = parse_data_types(args.data_types, target.device)

    sizes = [args.problem_m, args.problem_n, args.problem_k]
    if any(s is not None for s in sizes):
        if any(s is None for s in sizes):
            raise UserError("--problem-m, --problem-n and --problem-k go together")
        shapes = [(m, n, k) for m in args.problem_m for n in args.problem_n for k in args.problem_k]
    else:
        shapes = matmul.PREDEFINED_SHAPES

    tuning_space = TUNING_SPACES[args.operation_kind]
    collections = []
    for m, n, k in shapes:
        for lhs, rhs, result in data_types:
            operation = matmul.MatmulOperation(m, n, k, lhs, rhs, result)
            collections.append(DispatchCollection(operation, tuning_space(operation, target)))
    # --dispatches narrows what is emitted; an operation keeps only its selected configurations.
    chosen = {d.name for d in select((d for c in collections for d in c.dispatches), args.dispatches)}
    collections = [DispatchCollection(c.operation, [d.configuration for d in c.dispatches if d.name in chosen])
                   for c in collections]
    collections = [c for c in collections if c.configurations]

    tools = IreeTools.locate(args.iree_bin_dir)
    manifest = Manifest.open_for_generation(args.generated_dir, target, tools.version())
    manifest.emit(collections)
    count = sum(len(c.configurations) for c in collections)
    print(f"Generated {count} dispatches of {len(collections)} operations for {target.name} "
          f"in {manifest.root}")
    return 0


if __name__ == "__main__":
    options.run_main(main)
