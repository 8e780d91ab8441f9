"""The matmul family (matmul, batch_matmul, split_k_matmul, fused_matmul): the operation, its
MLIR, its numpy reference, its tuning space per target, and its generator options."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

import numpy as np

from iree_dispatch_profiler.core import values
from iree_dispatch_profiler.core.library import (DATA_TILING_CONFIGURATION, DEFAULT_CONFIGURATION,
                                                 INNER_TILED_CONFIGURATION,
                                                 CpuTarget, DataType, Device, Layout, Target,
                                                 TensorDescription, TuningConfiguration, UserError)
from iree_dispatch_profiler.ops import cpu_tiles, cuda_tiles, problems
from iree_dispatch_profiler.ops.mlir_text import attribute_dictionary, function, tensor_type


EPILOGUES = ("bias_relu", "bias_gelu")


@dataclass(frozen=True)
class MatmulOperation:
    """C[b, m, n] = sum_k A[b, m, k] * B[b, k, n], operands stored in their descriptions' layouts.

    One dataclass for the family: `batch` > 0 makes it a batch_matmul, `split_k_slices` > 0 a
    matmul whose reduction IREE splits into that many parallel partial products, `epilogue`
    a matmul + bias + activation fused into one dispatch.
    """

    m: int
    n: int
    k: int
    lhs: TensorDescription
    rhs: TensorDescription
    result: TensorDescription
    batch: int = 0
    split_k_slices: int = 0
    epilogue: str = ""

    @property
    def kind(self) -> str:
        if self.batch:
            return "batch_matmul"
        if self.split_k_slices:
            return "split_k_matmul"
        if self.epilogue:
            return "fused_matmul"
        return "matmul"

    @property
    def name(self) -> str:
        shape = f"{self.m}x{self.n}x{self.k}"
        if self.batch:
            shape = f"{self.batch}x{shape}"
        suffix = f"_splitk{self.split_k_slices}" if self.split_k_slices else ""
        suffix += f"_{self.epilogue}" if self.epilogue else ""
        return f"{self.kind}_{shape}_{self.lhs.name}_{self.rhs.name}_{self.result.name}{suffix}"

    @property
    def batch_count(self) -> int:
        return max(self.batch, 1)

    @property
    def flops(self) -> int:
        return 2 * self.batch_count * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        return self.batch_count * (self.m * self.k * self.lhs.dtype.bytes
                                   + self.k * self.n * self.rhs.dtype.bytes
                                   + self.m * self.n * self.result.dtype.bytes)

    @property
    def reduction_length(self) -> int:
        return self.k

    @property
    def compile_flags(self) -> tuple[str, ...]:
        """Flags every configuration of this operation is compiled with."""
        if self.split_k_slices:
            return (f"--iree-dispatch-creation-split-matmul-reduction={self.split_k_slices}",)
        return ()

    @property
    def _batch_dims(self) -> tuple[int, ...]:
        return (self.batch,) if self.batch else ()

    @property
    def inputs(self) -> list[tuple[tuple[int, ...], DataType]]:
        """Shapes as stored (a column-major operand is its transpose in row-major storage)."""
        lhs = (self.m, self.k) if self.lhs.layout is Layout.RowMajor else (self.k, self.m)
        rhs = (self.k, self.n) if self.rhs.layout is Layout.RowMajor else (self.n, self.k)
        shapes = [(self._batch_dims + lhs, self.lhs.dtype), (self._batch_dims + rhs, self.rhs.dtype)]
        if self.epilogue:
            shapes.append(((self.n,), self.result.dtype))  # the bias
        return shapes

    @property
    def output(self) -> tuple[tuple[int, ...], DataType]:
        return self._batch_dims + (self.m, self.n), self.result.dtype

    @property
    def arguments(self) -> str:
        """The old profiler's `Arguments` text."""
        fields = self.report_fields()
        return (f"--batch_count={self.batch_count} --m={self.m} --n={self.n} --k={self.k} "
                f"--lhs={self.lhs.name} --rhs={self.rhs.name} --result={self.result.name}\n"
                f"--split_k_mode={fields['split_k_mode']} --split_k_slices={fields['split_k_slices']}"
                + (f" --epilogue={self.epilogue}" if self.epilogue else ""))

    def report_fields(self) -> dict:
        return {"op_kind": self.kind, "m": self.m, "n": self.n, "k": self.k,
                "batch_count": self.batch_count, "lhs": self.lhs.name, "rhs": self.rhs.name,
                "result": self.result.name,
                "split_k_mode": "parallel" if self.split_k_slices else "N/A",
                "split_k_slices": self.split_k_slices or "N/A"}

    def compute(self, lhs: np.ndarray, rhs: np.ndarray, bias: np.ndarray | None = None,
                dtype=np.float64) -> np.ndarray:
        """The result through BLAS in `dtype` (never numpy's slow f16/int loops). float64 is exact
        for the integer-valued inputs we feed: that is the reference. Inputs already in `dtype`
        are not copied: for f32 this is exactly a numpy user's `a @ b`."""
        a, b = lhs.astype(dtype, copy=False), rhs.astype(dtype, copy=False)
        if self.lhs.layout is Layout.ColumnMajor:
            a = np.swapaxes(a, -1, -2)
        if self.rhs.layout is Layout.ColumnMajor:
            b = np.swapaxes(b, -1, -2)
        c = a @ b
        if self.epilogue:
            c = activation(self.epilogue, c + bias.astype(dtype, copy=False))
        return c

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        return self.compute(*inputs)

    @property
    def accumulator(self) -> DataType:
        """The type the products are summed in: linalg's, the result's."""
        return self.result.dtype

    def accumulation_scale(self, lhs: np.ndarray, rhs: np.ndarray, *_) -> np.ndarray:
        """sqrt(K * sum_k (a_ik b_kj)^2) per result element: how large the partial sums that
        a length-K accumulation rounds grow (verification.tolerance)."""
        squares = replace(self, epilogue="").compute(
            np.square(lhs.astype(np.float64)), np.square(rhs.astype(np.float64)))
        return np.sqrt(self.k * squares)

    def emit_mlir(self, function_name: str, config: TuningConfiguration) -> str:
        if config.packing:
            return self._emit_packed(function_name, config)
        types = [tensor_type(shape, dtype) for shape, dtype in self.inputs]
        out_t = self.result.dtype
        out_type = tensor_type(*self.output)
        attributes = ["compilation_info = #compilation"] if config.source_compilation_info else []
        op = "linalg.batch_matmul" if self.batch else "linalg.matmul"
        maps = ""
        if (self.lhs.layout, self.rhs.layout) != (Layout.RowMajor, Layout.RowMajor):
            a = "(d0, d2)" if self.lhs.layout is Layout.RowMajor else "(d2, d0)"
            b = "(d2, d1)" if self.rhs.layout is Layout.RowMajor else "(d1, d2)"
            maps = (f" indexing_maps = [affine_map<(d0, d1, d2) -> {a}>, "
                    f"affine_map<(d0, d1, d2) -> {b}>, affine_map<(d0, d1, d2) -> (d0, d1)>]")
        arguments = ", ".join(f"%{n}: {t}" for n, t in zip(("lhs", "rhs", "bias"), types))
        body = (f"  %zero = arith.constant {out_t.zero} : {out_t.mlir}\n"
                f"  %init = tensor.empty() : {out_type}\n"
                f"  %acc = linalg.fill ins(%zero : {out_t.mlir}) outs(%init : {out_type}) -> {out_type}\n"
                f"  %product = {op}{maps}{attribute_dictionary(attributes)}\n"
                f"      ins(%lhs, %rhs : {types[0]}, {types[1]}) outs(%acc : {out_type}) -> {out_type}\n")
        result = "%product"
        if self.epilogue:
            body += epilogue_mlir(self.epilogue, out_t, len(self.output[0]), out_type, types[2])
            result = "%result"
        return function(config, function_name, arguments, out_type, body, result)

    def _emit_packed(self, function_name: str, config: TuningConfiguration) -> str:
        """The same product with its operands packed into `config.packing`'s (M0, N0, K0) tiles
        (zero-padded), a linalg.mmt4d of them carrying the config, and the result unpacked: data
        tiling written in the source (TuningConfiguration.packing)."""
        m0, n0, k0 = config.packing
        m1, n1, k1 = -(-self.m // m0), -(-self.n // n0), -(-self.k // k0)
        (lhs_shape, lhs_t), (rhs_shape, rhs_t) = self.inputs
        out_t = self.result.dtype
        a, b = tensor_type(lhs_shape, lhs_t), tensor_type(rhs_shape, rhs_t)
        pa, pb = tensor_type((m1, k1, m0, k0), lhs_t), tensor_type((n1, k1, n0, k0), rhs_t)
        pc, out_type = tensor_type((m1, n1, m0, n0), out_t), tensor_type(*self.output)

        def pack(name: str, stored: str, keeps_order: bool, tiles: tuple[int, int], packed: str,
                 element: DataType) -> str:
            # into [outer, K1, inner, K0]: an operand stored (outer, K) keeps its dims' order, one
            # stored (K, outer) swaps them
            order = ("inner_dims_pos = [0, 1]" if keeps_order
                     else "outer_dims_perm = [1, 0] inner_dims_pos = [1, 0]")
            return (f"  %{name}_zero = arith.constant {element.zero} : {element.mlir}\n"
                    f"  %{name}_init = tensor.empty() : {packed}\n"
                    f"  %{name}_packed = linalg.pack %{name} padding_value(%{name}_zero : "
                    f"{element.mlir}) {order} inner_tiles = [{tiles[0]}, {tiles[1]}] into "
                    f"%{name}_init : {stored} -> {packed}\n")

        body = (pack("lhs", a, self.lhs.layout is Layout.RowMajor, (m0, k0), pa, lhs_t)
                + pack("rhs", b, self.rhs.layout is Layout.ColumnMajor, (n0, k0), pb, rhs_t)
                + f"  %zero = arith.constant {out_t.zero} : {out_t.mlir}\n"
                f"  %init = tensor.empty() : {pc}\n"
                f"  %acc = linalg.fill ins(%zero : {out_t.mlir}) outs(%init : {pc}) -> {pc}\n"
                f"  %product = linalg.mmt4d {{compilation_info = #compilation}}\n"
                f"      ins(%lhs_packed, %rhs_packed : {pa}, {pb}) outs(%acc : {pc}) -> {pc}\n"
                f"  %result_init = tensor.empty() : {out_type}\n"
                f"  %result = linalg.unpack %product inner_dims_pos = [0, 1] inner_tiles = "
                f"[{m0}, {n0}] into %result_init {{compilation_info = #unpack}} : "
                f"{pc} -> {out_type}\n")
        unpack = cpu_tiles.unpacked_rows_configuration(m0, n0, self.n).compilation_info
        return (f"#unpack = {unpack}\n"
                + function(config, function_name, f"%lhs: {a}, %rhs: {b}", out_type, body))

    def to_json(self) -> dict:
        return {"kind": self.kind, "m": self.m, "n": self.n, "k": self.k,
                "lhs": self.lhs.name, "rhs": self.rhs.name, "result": self.result.name,
                "batch": self.batch, "split_k_slices": self.split_k_slices, "epilogue": self.epilogue}

    @classmethod
    def from_json(cls, data: dict) -> "MatmulOperation":
        return cls(data["m"], data["n"], data["k"], TensorDescription.parse(data["lhs"]),
                   TensorDescription.parse(data["rhs"]), TensorDescription.parse(data["result"]),
                   data.get("batch", 0), data.get("split_k_slices", 0), data.get("epilogue", ""))


def activation(name: str, x: np.ndarray) -> np.ndarray:
    if name == "bias_relu":
        return np.maximum(x, 0)
    # GELU, tanh approximation (PyTorch's approximate="tanh"), as emitted below.
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def epilogue_mlir(epilogue: str, out_t: DataType, rank: int, out_type: str, bias_type: str) -> str:
    """result = activation(product + bias[n]) as one elementwise linalg.generic IREE fuses into
    the matmul's dispatch (the tuning configuration stays on the matmul, the root)."""
    t = out_t.mlir
    add = "arith.addf" if out_t.is_float else "arith.addi"
    if epilogue == "bias_relu":
        act = (f"      %r = {'arith.maximumf' if out_t.is_float else 'arith.maxsi'} %s, %zero : {t}\n")
    else:
        act = (f"      %c0 = arith.constant 0.044715 : {t}\n"
               f"      %c1 = arith.constant 0.7978845608028654 : {t}\n"
               f"      %half = arith.constant 0.5 : {t}\n"
               f"      %one = arith.constant 1.0 : {t}\n"
               f"      %x2 = arith.mulf %s, %s : {t}\n"
               f"      %x3 = arith.mulf %x2, %s : {t}\n"
               f"      %a = arith.mulf %x3, %c0 : {t}\n"
               f"      %b = arith.addf %s, %a : {t}\n"
               f"      %c = arith.mulf %b, %c1 : {t}\n"
               f"      %th = math.tanh %c : {t}\n"
               f"      %d = arith.addf %th, %one : {t}\n"
               f"      %e = arith.mulf %s, %half : {t}\n"
               f"      %r = arith.mulf %e, %d : {t}\n")
    dims = ", ".join(f"d{i}" for i in range(rank))
    identity = f"affine_map<({dims}) -> ({dims})>"
    bias_map = f"affine_map<({dims}) -> (d{rank - 1})>"
    iterators = ", ".join(['"parallel"'] * rank)
    return (f"  %result = linalg.generic {{indexing_maps = [{identity}, {bias_map}, {identity}], "
            f"iterator_types = [{iterators}]}}\n"
            f"      ins(%product, %bias : {out_type}, {bias_type}) outs(%init : {out_type}) {{\n"
            f"    ^bb0(%p: {t}, %q: {t}, %o: {t}):\n"
            f"      %s = {add} %p, %q : {t}\n{act}"
            f"      linalg.yield %r : {t}\n"
            f"  }} -> {out_type}\n")


# (lhs, rhs, result) element types each device compiles and verifies.
_F32, _F16, _BF16, _I8, _I32 = DataType.f32, DataType.f16, DataType.bf16, DataType.i8, DataType.i32
DATA_TYPES = {
    Device.LLVMCPU: [(_F32, _F32, _F32), (_F16, _F16, _F16), (_F16, _F16, _F32),
                     (_BF16, _BF16, _BF16), (_BF16, _BF16, _F32), (_I8, _I8, _I32)],
    Device.CUDA: [(_F32, _F32, _F32), (_F16, _F16, _F16), (_F16, _F16, _F32), (_BF16, _BF16, _F32)],
    Device.ROCM: [(_F32, _F32, _F32), (_F16, _F16, _F16), (_F16, _F16, _F32), (_BF16, _BF16, _F32)],
    Device.VULKAN: [(_F32, _F32, _F32), (_F16, _F16, _F16), (_F16, _F16, _F32)],
}


def data_type_name(types: tuple[DataType, DataType, DataType]) -> str:
    """`f16t_f16t_f32t`: the form users pass to --data-types."""
    return "_".join(f"{t.short}{Layout.RowMajor.value}" for t in types)


def tile_list(batch: bool, sizes: list[int], batch_tile: int) -> list[int]:
    """A tile-size list, with the batch dimension's entry first for batch_matmul."""
    return ([batch_tile] if batch else []) + sizes


def cpu_configuration(cpu: CpuTarget, tile: cpu_tiles.MatmulTile, accumulator: DataType,
                      batch: bool = False) -> TuningConfiguration:
    """A DoubleTilingExpert config: distribution M x N, the cache levels when the tile has them,
    then vector M x N x K."""
    if not cpu_tiles.is_legal_vector_tile(cpu, (tile.vm, tile.vn, tile.vk), accumulator):
        raise ValueError(f"vector tile {tile.vm}x{tile.vn}x{tile.vk} of {accumulator.short} reaches "
                         f"IREE's {cpu_tiles.vector_limit_bytes(cpu)}-byte limit on {cpu.name}")
    cache = {}
    if tile.ck:
        cache = {"cache_parallel": tile_list(batch, [tile.cm, tile.cn, 0], 1),
                 "cache_reduction": tile_list(batch, [0, 0, tile.ck], 0)}
    return cpu_tiles.configuration(tile.name, tile_list(batch, [tile.dm, tile.dn, 0], 1),
                                   tile_list(batch, [tile.vm, tile.vn, 0], 1),
                                   tile_list(batch, [0, 0, tile.vk], 0), "DoubleTilingExpert",
                                   tile.peel, **cache)


# ---------------------------------------------------------------------------------------------
# CUDA: TileAndFuse. Names follow the old profiler: workgroup tile M x N, K tile x stages.
CUDA_TENSORCORE_TILES = [  # (workgroup M, workgroup N, K tile, pipeline stages)
    (128, 256, 32, 3), (256, 128, 32, 3), (128, 128, 64, 4), (128, 128, 32, 5),
    (128, 64, 32, 5), (64, 128, 32, 5), (64, 64, 64, 5), (64, 64, 32, 10),
]
CUDA_SIMT_TILES = [  # (workgroup M, workgroup N, K tile, thread M, thread N)
    (64, 64, 16, 4, 4), (128, 64, 16, 8, 4), (64, 128, 16, 4, 8), (128, 128, 8, 8, 8), (32, 32, 32, 2, 2),
]


def cuda_tensorcore_configuration(op: MatmulOperation, arch: str, wm: int, wn: int, kt: int,
                                  stages: int) -> TuningConfiguration | None:
    """A tensor-core config, or None when it is invalid for this problem and architecture."""
    mma = cuda_tiles.NV_MMA.get((op.lhs.dtype, op.result.dtype))
    if mma is None or op.lhs.dtype != op.rhs.dtype:
        return None
    # One warp per 64x64 of the workgroup tile; each warp computes a grid of MMA tiles.
    warps_m, warps_n = max(1, wm // 64), max(1, wn // 64)
    if wm % (warps_m * mma.m) or wn % (warps_n * mma.n) or kt % mma.k:
        return None
    if op.m % wm or op.n % wn or op.k % kt:  # non-divisor tiles fail to compile on GPU
        return None
    threads = warps_m * warps_n * cuda_tiles.SUBGROUP
    smem = cuda_tiles.shared_memory_bytes(wm, wn, kt, stages, op.lhs.dtype.bytes)
    if threads > cuda_tiles.MAX_THREADS or smem > cuda_tiles.shared_memory_limit(arch):
        return None
    sg_m, sg_n = wm // (warps_m * mma.m), wn // (warps_n * mma.n)
    batch = bool(op.batch)
    lowering = cuda_tiles.lowering_config(
        workgroup=tile_list(batch, [wm, wn, 0], 1), reduction=tile_list(batch, [0, 0, kt // mma.k], 0),
        subgroup=tile_list(batch, [sg_m, sg_n, 0], 0), mma=mma)
    translation = cuda_tiles.translation_info(threads, f"prefetch_num_stages = {stages}")
    return TuningConfiguration(f"tile_config_{wm}x{wn}_{kt}x{stages}_tensorcore_mmasync",
                              lowering, translation)


def cuda_simt_configuration(op: MatmulOperation, arch: str, wm: int, wn: int, kt: int, tm: int,
                            tn: int) -> TuningConfiguration | None:
    if op.m % wm or op.n % wn or op.k % kt or wm % tm or wn % tn:
        return None
    threads = (wm // tm) * (wn // tn)
    if threads > cuda_tiles.MAX_THREADS or threads % cuda_tiles.SUBGROUP:
        return None
    if cuda_tiles.shared_memory_bytes(wm, wn, kt, 1, op.lhs.dtype.bytes) > cuda_tiles.shared_memory_limit(arch):
        return None
    lowering = cuda_tiles.lowering_config(workgroup=[wm, wn, 0], reduction=[0, 0, kt],
                                          thread=[tm, tn, 0])
    translation = cuda_tiles.translation_info(threads)
    return TuningConfiguration(f"tile_config_{wm}x{wn}_{kt}x1_{tm}x{tn}_simt", lowering, translation)


def tuning_configurations(op: MatmulOperation, target: Target) -> list[TuningConfiguration]:
    """IREE's default first (the baseline of every sweep), then flag variants, then tile configs.

    Split-k gets the default only: IREE's split turns the matmul into a 4-loop op that a
    3-entry config does not fit.
    """
    if op.split_k_slices:
        return [DEFAULT_CONFIGURATION]
    if target.device is Device.LLVMCPU:
        cpu = target.resolved_cpu()
        tiles = cpu_tiles.matmul_tiles(cpu, op.m, op.n, op.k, op.lhs.dtype, op.result.dtype)
        data_tiled = []
        if op.kind == "matmul":  # batch and fused forms make other ops of the mmt4d
            data_tiled = [cpu_tiles.mmt4d_configuration(t, ukernels)
                          for ukernels in (True, False)
                          for t in cpu_tiles.mmt4d_tiles(cpu, op.m, op.n, op.k, op.lhs.dtype, op.rhs.dtype)]
            data_tiled += [INNER_TILED_CONFIGURATION] if data_tiled else []
            data_tiled += [cpu_tiles.packed_configuration(t) for t in cpu_tiles.mmt4d_tiles(
                cpu, op.m, op.n, op.k, op.lhs.dtype, op.rhs.dtype, cpu_tiles.PACKED, packed=True)]
        return [DEFAULT_CONFIGURATION, DATA_TILING_CONFIGURATION,
                *(cpu_configuration(cpu, t, op.result.dtype, bool(op.batch)) for t in tiles),
                *data_tiled]
    configs = [DEFAULT_CONFIGURATION]
    if target.device is Device.CUDA:
        if op.lhs.dtype is DataType.f32:
            if op.batch:
                return configs
            candidates = [cuda_simt_configuration(op, target.cuda_arch, *t) for t in CUDA_SIMT_TILES]
        else:
            candidates = [cuda_tensorcore_configuration(op, target.cuda_arch, *t)
                          for t in CUDA_TENSORCORE_TILES]
        configs += [c for c in candidates if c is not None]
    return configs


# ---------------------------------------------------------------------------------------------
# The generator's part: options and operations of each kind (ops.registry).
OPERATION = MatmulOperation
# Predefined problems: small enough for a 2-core laptop, big enough to tile.
PREDEFINED_SHAPES = [(128, 128, 256), (256, 256, 512)]
PREDEFINED_BATCH = 4
PREDEFINED_SPLIT_K_SHAPES = [(64, 64, 8192)]


def add_options(parser: argparse.ArgumentParser) -> None:
    sizes = values.parse_sizes
    group = parser.add_argument_group("matmul family (sizes: 768, 64,128 or start:end:step, end included)")
    for dim in "mnk":
        group.add_argument(f"--problem-{dim}", type=sizes, default=None, metavar="SIZES",
                           help=f"{dim.upper()} sizes (default: predefined shapes)")
    group.add_argument("--problem-b", type=sizes, default=None, metavar="SIZES",
                       help=f"batch sizes of batch_matmul (default: {PREDEFINED_BATCH})")
    group.add_argument("--split-k-slices", type=sizes, default=[2, 4], metavar="SIZES",
                       help="reduction splits of split_k_matmul (default: 2,4)")
    group.add_argument("--epilogues", type=values.choices(EPILOGUES, "epilogue"),
                       default=list(EPILOGUES),
                       metavar="NAME,...", help="fused_matmul epilogues: bias_relu, bias_gelu "
                       "(tanh approximation; floats only) (default: both)")


def _problems(args: argparse.Namespace, kind: str) -> list[problems.MatmulProblem]:
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
        shapes = PREDEFINED_SPLIT_K_SHAPES if kind == "split_k_matmul" else PREDEFINED_SHAPES
        found = [problems.MatmulProblem(*shape) for shape in shapes]
    if kind != "batch_matmul":
        return [p for p in found if not p.b]  # a file's batched rows are batch_matmuls
    if any(p.b for p in found):
        return [p for p in found if p.b]
    return [replace(p, b=b) for p in found for b in args.problem_b or [PREDEFINED_BATCH]]


def operations(args: argparse.Namespace, kind: str,
               data_types: list[tuple[TensorDescription, ...]]) -> list[MatmulOperation]:
    """The operations of `kind` the generator's options ask for."""
    found = []
    for problem in _problems(args, kind):
        for lhs, rhs, result in data_types:
            if problem.trans_a or problem.trans_b:  # the file says how operands are stored
                lhs = TensorDescription(lhs.dtype, Layout.ColumnMajor if problem.trans_a else Layout.RowMajor)
                rhs = TensorDescription(rhs.dtype, Layout.ColumnMajor if problem.trans_b else Layout.RowMajor)
            base = MatmulOperation(problem.m, problem.n, problem.k, lhs, rhs, result)
            if kind == "batch_matmul":
                if lhs.layout is Layout.RowMajor and rhs.layout is Layout.RowMajor:
                    found.append(replace(base, batch=problem.b))
            elif kind == "split_k_matmul":
                found += [replace(base, split_k_slices=s) for s in args.split_k_slices]
            elif kind == "fused_matmul":
                found += [replace(base, epilogue=e) for e in args.epilogues
                          if result.dtype.is_float or e == "bias_relu"]
            else:
                found.append(base)
    return found
