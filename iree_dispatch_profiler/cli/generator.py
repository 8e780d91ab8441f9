"""Generate MLIR dispatches: operations (predefined or user shapes) x tuning configurations.

Writes `<generated-dir>/generated/linalg/<kind>/<operation>/<dispatch>.mlir` and the manifest
that compile.py and profiler.py read.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.cli import options
from iree_dispatch_profiler.core.library import TensorDescription, UserError
from iree_dispatch_profiler.core.values import parse_choices
from iree_dispatch_profiler.iree.target import resolve_target
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.ops import matmul, registry
from iree_dispatch_profiler.ops.known_failures import KnownFailure, known_failure
from iree_dispatch_profiler.sweep.manifest import DispatchCollection, Manifest, select


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


def parse_kinds(text: str) -> list[str]:
    kinds = list(registry.KINDS)
    return kinds if "all" in text.split(",") else parse_choices(text, kinds, "operation kind")


def parser() -> options.ArgumentParser:
    p = options.script_parser(__doc__, target_recorded=False)
    group = p.add_argument_group("operations")
    group.add_argument("--operation-kind", type=parse_kinds, default=["matmul"], metavar="KIND,...",
                       help=f"{', '.join(registry.KINDS)} or all (default: matmul)")
    group.add_argument("--data-types", default=None, metavar="LHS_RHS_RESULT,...",
                       help="element types and layouts, e.g. f32t_f32t_f32t,f16t_f16t_f32t,"
                            "f16t_f16n_f16t; `f16` means f16t_f16t_f16t (convolutions use the "
                            "types, not the layout letters) (default: every combination the "
                            "device supports)")
    group.add_argument("--problems-file", type=Path, default=None, metavar="CSV",
                       help="read shapes from a CSV with named columns (see problems.py), e.g. "
                            "workloads/deepbench_gemm.csv")
    group.add_argument("--problems-file-columns", default=None, metavar="FIELD=COLUMN,...",
                       help="map the file's column names to fields (m,n,k,b; n,h,w,c,f,kh,kw,"
                            "stride_h,stride_w,pad_h,pad_w,dil_h,dil_w)")
    for family in registry.families():
        family.add_options(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    target = options.target_from_args(args)
    options.runtime_device(args, target)  # refuse an impossible pairing now, not when profiling
    data_types = parse_data_types(args.data_types, target.device)
    tools = IreeTools.locate(args.iree_bin_dir)
    target = resolve_target(tools, target)  # tuning spaces depend on the concrete CPU

    operations = []
    for kind in args.operation_kind:
        operations += registry.KINDS[kind].operations(args, kind, data_types)
    operations = list(dict.fromkeys(operations))
    collections = [DispatchCollection(op, registry.tuning_configurations(op, target))
                   for op in operations]
    # --dispatches narrows what is emitted and what IREE is known to abort on is left out; an
    # operation keeps the rest of its configurations.
    chosen = {d.name for d in select((d for c in collections for d in c.dispatches), args.dispatches)}
    left_out: dict[KnownFailure, int] = {}
    for collection in collections:
        kept = []
        for config in (d.configuration for d in collection.dispatches if d.name in chosen):
            rule = known_failure(collection.operation.inputs[0][1], config, target.cpu_target)
            if rule is None:
                kept.append(config)
            else:
                left_out[rule] = left_out.get(rule, 0) + 1
        collection.configurations = kept
    collections = [c for c in collections if c.configurations]

    manifest = Manifest.open_for_generation(args.generated_dir, target, tools.version())
    manifest.emit(collections)
    count = sum(len(c.configurations) for c in collections)
    print(f"Generated {count} dispatches of {len(collections)} operations for {target.name} "
          f"in {manifest.root}")
    if target.cpu_target is not None:
        print(f"Target CPU: {target.cpu_target.summary}")
    for rule, count in left_out.items():
        print(f"Left out {count} dispatches IREE aborts on for this target: {rule.what} "
              f"({rule.message})")
    return 0


def run() -> None:
    options.run_main(main)
