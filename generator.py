#!/usr/bin/env python3
"""Generate MLIR dispatches: operations (predefined or user shapes) x tuning configurations.

Writes `<generated-dir>/generated/linalg/<kind>/<operation>/<dispatch>.mlir` and the manifest
that compile.py and profiler.py read.
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import conv
import matmul
import options
import problems
from launchers import IreeTools, resolve_target
from library import Layout, TensorDescription, UserError
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


KINDS = ("matmul", "batch_matmul", "split_k_matmul", "conv2d", "fused_matmul")


def parse_kinds(text: str) -> list[str]:
    return list(KINDS) if "all" in text.split(",") else options.parse_choices(text, KINDS, "operation kind")


def parser() -> options.ArgumentParser:
    p = options.script_parser(__doc__, target_recorded=False)
    sizes = options.parse_sizes
    group = p.add_argument_group("operations")
    group.add_argument("--operation-kind", type=parse_kinds, default=["matmul"], metavar="KIND,...",
                       help=f"{', '.join(KINDS)} or all (default: matmul)")
    group.add_argument("--data-types", default=None, metavar="LHS_RHS_RESULT,...",
                       help="element types and layouts, e.g. f32t_f32t_f32t,f16t_f16t_f32t,"
                            "f16t_f16n_f16t; `f16` means f16t_f16t_f16t (convolutions use the "
                            "types, not the layout letters) (default: every combination the "
                            "device supports)")
    group.add_argument("--problems-file", type=Path, default=None, metavar="CSV",
                       help="read shapes from a CSV with named columns (see problems.py), e.g. "
                            "../shared/workloads/deepbench_gemm.csv")
    group.add_argument("--problems-file-columns", default=None, metavar="FIELD=COLUMN,...",
                       help="map the file's column names to fields (m,n,k,b; n,h,w,c,f,kh,kw,"
                            "stride_h,stride_w,pad_h,pad_w,dil_h,dil_w)")
    group = p.add_argument_group("matmul family (sizes: 768, 64,128 or start:end:step, end included)")
    for dim in "mnk":
        group.add_argument(f"--problem-{dim}", type=sizes, default=None, metavar="SIZES",
                           help=f"{dim.upper()} sizes (default: predefined shapes)")
    group.add_argument("--problem-b", type=sizes, default=None, metavar="SIZES",
                       help=f"batch sizes of batch_matmul (default: {PREDEFINED_BATCH})")
    group.add_argument("--split-k-slices", type=sizes, default=[2, 4], metavar="SIZES",
                       help="reduction splits of split_k_matmul (default: 2,4)")
    group.add_argument("--epilogues", type=options.choices(matmul.EPILOGUES, "epilogue"),
                       default=list(matmul.EPILOGUES),
                       metavar="NAME,...", help="fused_matmul epilogues: bias_relu, bias_gelu "
                       "(tanh approximation; floats only) (default: both)")
    group = p.add_argument_group("conv2d")
    for name, text in (("input-n", "batch"), ("input-h", "input height"), ("input-w", "input width"),
                       ("input-c", "input channels"), ("filter-h", "filter height"),
                       ("filter-w", "filter width"), ("filter-f", "output channels")):
        group.add_argument(f"--{name}", type=sizes, default=None, metavar="SIZES", help=text)
    group.add_argument("--stride", type=sizes, default=[1], metavar="SIZES", help="(default: 1)")
    group.add_argument("--padding", type=options.parse_sizes_or_zero, default=[0], metavar="SIZES",
                       help="zero padding on each side (default: 0)")
    group.add_argument("--dilation", type=sizes, default=[1], metavar="SIZES", help="(default: 1)")
    group.add_argument("--conv-layouts", type=options.choices(conv.LAYOUTS, "conv layout"),
                       default=list(conv.LAYOUTS),
                       metavar="LAYOUT,...", help="nhwc_hwcf, nchw_fchw (default: both)")
    return p


PREDEFINED_BATCH = 4
PREDEFINED_SPLIT_K_SHAPES = [(64, 64, 8192)]


def matmul_problems(args, kind: str) -> list[problems.MatmulProblem]:
    """Problems from the file, the command line, or the kind's predefined shapes."""
    if args.problems_file is not None:
        found = problems.matmul_problems(args.problems_file,
                                         problems.parse_column_map(args.problems_file_columns))
    elif any(v is not None for v in (args.problem_m, args.problem_n, args.problem_k)):
        if any(v is None for v in (args.problem_m, args.problem_n, args.problem_k)):
            raise UserError("--problem-m, --problem-n and --problem-k go together")
        found = [problems.MatmulProblem(m, n, k) for m in args.problem_m for n in args.problem_n
                 for k in args.problem_k]
    else:
        shapes = PREDEFINED_SPLIT_K_SHAPES if kind == "split_k_matmul" else matmul.PREDEFINED_SHAPES
        found = [problems.MatmulProblem(*shape) for shape in shapes]
    if kind != "batch_matmul":
        return [p for p in found if not p.b]  # a file's batched rows are batch_matmuls
    if any(p.b for p in found):
        return [p for p in found if p.b]
    return [replace(p, b=b) for p in found for b in args.problem_b or [PREDEFINED_BATCH]]


def matmul_operations(args, kind: str, data_types: list[tuple]) -> list:
    operations = []
    for problem in matmul_problems(args, kind):
        for lhs, rhs, result in data_types:
            if problem.trans_a or problem.trans_b:  # the file says how operands are stored
                lhs = TensorDescription(lhs.dtype, Layout.ColumnMajor if problem.trans_a else Layout.RowMajor)
                rhs = TensorDescription(rhs.dtype, Layout.ColumnMajor if problem.trans_b else Layout.RowMajor)
            base = matmul.MatmulOperation(problem.m, problem.n, problem.k, lhs, rhs, result)
            if kind == "batch_matmul":
                if lhs.layout is Layout.RowMajor and rhs.layout is Layout.RowMajor:
                    operations.append(replace(base, batch=problem.b))
            elif kind == "split_k_matmul":
                operations += [replace(base, split_k_slices=s) for s in args.split_k_slices]
            elif kind == "fused_matmul":
                operations += [replace(base, epilogue=e) for e in args.epilogues
                               if result.dtype.is_float or e == "bias_relu"]
            else:
                operations.append(base)
    return operations


def conv_problems(args) -> list[problems.ConvProblem]:
    if args.problems_file is not None:
        return problems.conv_problems(args.problems_file,
                                      problems.parse_column_map(args.problems_file_columns))
    given = [args.input_n, args.input_h, args.input_w, args.input_c, args.filter_f,
             args.filter_h, args.filter_w]
    if all(v is None for v in given):
        return [problems.ConvProblem(n, h, w, c, f, kh, kw, (s, s), (p, p))
                for n, h, w, c, f, kh, kw, s, p in conv.PREDEFINED_SHAPES]
    if any(v is None for v in given):
        raise UserError("--input-n, --input-h, --input-w, --input-c, --filter-h, --filter-w and "
                        "--filter-f go together")
    return [problems.ConvProblem(*shape, (s, s), (p, p), (d, d))
            for shape in itertools.product(*given)
            for s in args.stride for p in args.padding for d in args.dilation]


def conv_operations(args, data_types: list[tuple]) -> list:
    types = list(dict.fromkeys((a.dtype, c.dtype) for a, b, c in data_types if a.dtype == b.dtype))
    return [conv.Conv2dOperation(**vars(p), input_type=input_type, output_type=output_type,
                                 layout=layout)
            for p in conv_problems(args) for input_type, output_type in types
            for layout in args.conv_layouts]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    target = options.target_from_args(args)
    options.runtime_device(args, target)  # refuse an impossible pairing now, not when profiling
    data_types = parse_data_types(args.data_types, target.device)
    tools = IreeTools.locate(args.iree_bin_dir)
    target = resolve_target(tools, target)  # tuning spaces depend on the concrete CPU

    operations = []
    for kind in args.operation_kind:
        if kind == "conv2d":
            operations += conv_operations(args, data_types)
        else:
            operations += matmul_operations(args, kind, data_types)
    operations = list(dict.fromkeys(operations))
    collections = [DispatchCollection(op, TUNING_SPACES[op.kind.value](op, target)) for op in operations]
    # --dispatches narrows what is emitted; an operation keeps only its selected configurations.
    chosen = {d.name for d in select((d for c in collections for d in c.dispatches), args.dispatches)}
    collections = [DispatchCollection(c.operation, [d.configuration for d in c.dispatches if d.name in chosen])
                   for c in collections]
    collections = [c for c in collections if c.configurations]

    manifest = Manifest.open_for_generation(args.generated_dir, target, tools.version())
    manifest.emit(collections)
    count = sum(len(c.configurations) for c in collections)
    print(f"Generated {count} dispatches of {len(collections)} operations for {target.name} "
          f"in {manifest.root}")
    if target.cpu_target is not None:
        print(f"Target CPU: {target.cpu_target.summary}")
    return 0


if __name__ == "__main__":
    options.run_main(main)
