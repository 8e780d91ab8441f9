"""Matmul: the operation, its MLIR, its numpy reference and its tuning space per target."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from library import (DATA_TILING_CONFIGURATION, DEFAULT_CONFIGURATION, DataType, Device, Layout,
                     OperationKind, Target, TensorDescription, TuningConfiguration,
                     make_configuration)


@dataclass(frozen=True)
class MatmulOperation:
    """C[m, n] = sum_k A[m, k] * B[k, n]; operands stored in the layouts of their descriptions."""

    m: int
    n: int
    k: int
    lhs: TensorDescription
    rhs: TensorDescription
    result: TensorDescription
    kind = OperationKind.Matmul

    @property
    def name(self) -> str:
        return f"matmul_{self.m}x{self.n}x{self.k}_{self.lhs.name}_{self.rhs.name}_{self.result.name}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        return (self.m * self.k * self.lhs.dtype.bytes + self.k * self.n * self.rhs.dtype.bytes
                + self.m * self.n * self.result.dtype.bytes)

    @property
    def reduction_length(self) -> int:
        return self.k

    @property
    def inputs(self) -> list[tuple[tuple[int, ...], DataType]]:
        """Shapes as stored (a column-major operand is its transpose in row-major storage)."""
        lhs = (self.m, self.k) if self.lhs.layout is Layout.RowMajor else (self.k, self.m)
        rhs = (self.k, self.n) if self.rhs.layout is Layout.RowMajor else (self.n, self.k)
        return [(lhs, self.lhs.dtype), (rhs, self.rhs.dtype)]

    @property
    def output(self) -> tuple[tuple[int, ...], DataType]:
        return (self.m, self.n), self.result.dtype

    @property
    def arguments(self) -> str:
        """The old profiler's `Arguments` text."""
        return (f"--batch_count=1 --m={self.m} --n={self.n} --k={self.k} --lhs={self.lhs.name} "
                f"--rhs={self.rhs.name} --result={self.result.name}\n"
                "--split_k_mode=N/A --split_k_slices=N/A")

    def report_fields(self) -> dict:
        return {"op_kind": self.kind.value, "m": self.m, "n": self.n, "k": self.k, "batch_count": 1,
                "lhs": self.lhs.name, "rhs": self.rhs.name, "result": self.result.name,
                "split_k_mode": "N/A", "split_k_slices": "N/A"}

    def reference(self, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        """Exact for the integer-valued inputs we feed: float64 BLAS, never numpy's f16/int loops."""
        a = lhs.astype(np.float64)
        b = rhs.astype(np.float64)
        if self.lhs.layout is Layout.ColumnMajor:
            a = a.T
        if self.rhs.layout is Layout.ColumnMajor:
            b = b.T
        return a @ b

    def emit_mlir(self, function_name: str, config: TuningConfiguration) -> str:
        (lhs_shape, lhs_t), (rhs_shape, rhs_t) = self.inputs
        lhs_type = f"tensor<{lhs_shape[0]}x{lhs_shape[1]}x{lhs_t.mlir}>"
        rhs_type = f"tensor<{rhs_shape[0]}x{rhs_shape[1]}x{rhs_t.mlir}>"
        out_t = self.result.dtype
        out_type = f"tensor<{self.m}x{self.n}x{out_t.mlir}>"
        attributes = []
        prologue = ""
        if config.compilation_info is not None:
            prologue = f"#compilation = {config.compilation_info}\n\n"
            attributes.append("compilation_info = #compilation")
        maps = ""
        if (self.lhs.layout, self.rhs.layout) != (Layout.RowMajor, Layout.RowMajor):
            a = "(d0, d2)" if self.lhs.layout is Layout.RowMajor else "(d2, d0)"
            b = "(d2, d1)" if self.rhs.layout is Layout.RowMajor else "(d1, d2)"
            maps = (f" indexing_maps = [affine_map<(d0, d1, d2) -> {a}>, "
                    f"affine_map<(d0, d1, d2) -> {b}>, affine_map<(d0, d1, d2) -> (d0, d1)>]")
        attr_text = f" {{{', '.join(attributes)}}}" if attributes else ""
        return (
            f"{prologue}"
            f"func.func @{function_name}(%lhs: {lhs_type}, %rhs: {rhs_type}) -> {out_type} {{\n"
            f"  %zero = arith.constant {out_t.zero} : {out_t.mlir}\n"
            f"  %init = tensor.empty() : {out_type}\n"
            f"  %acc = linalg.fill ins(%zero : {out_t.mlir}) outs(%init : {out_type}) -> {out_type}\n"
            f"  %result = linalg.matmul{maps}{attr_text}\n"
            f"      ins(%lhs, %rhs : {lhs_type}, {rhs_type}) outs(%acc : {out_type}) -> {out_type}\n"
            f"  return %result : {out_type}\n"
            "}\n")

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "m": self.m, "n": self.n, "k": self.k,
                "lhs": self.lhs.name, "rhs": self.rhs.name, "result": self.result.name}

    @classmethod
    def from_json(cls, data: dict) -> "MatmulOperation":
        return cls(data["m"], data["n"], data["k"], TensorDescription.parse(data["lhs"]),
                   TensorDescription.parse(data["rhs"]), TensorDescription.parse(data["result"]))


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


# ---------------------------------------------------------------------------------------------
# llvm-cpu: DoubleTilingExpert tiles (distribution M x N, then vector M x N x K).
# The product of the vector tiles must stay <= 4096 elements ("large vector sizes" otherwise).
# The set spans small/large and square/skinny tiles; IREE's default for 512^3 f32 is
# 64x64 / 8x16x16 and the 128x128 / 8x32x8 one beat it by ~25% here.
CPU_MAX_VECTOR_ELEMENTS = 4096
CPU_TILES = [
    (64, 64, 8, 32, 8),
    (128, 128, 8, 32, 8),
    (64, 128, 8, 32, 16),
    (128, 64, 16, 16, 16),
    (32, 128, 8, 64, 8),
    (128, 256, 8, 32, 16),
    (256, 128, 16, 32, 8),
    (64, 256, 4, 64, 16),
    (32, 32, 8, 16, 16),
    (128, 128, 16, 16, 8),
]
CPU_MIN_TILED_DIMENSION = 64


def cpu_configuration(dm: int, dn: int, vm: int, vn: int, vk: int) -> TuningConfiguration:
    if vm * vn * vk > CPU_MAX_VECTOR_ELEMENTS:
        raise ValueError(f"vector tile {vm}x{vn}x{vk} exceeds {CPU_MAX_VECTOR_ELEMENTS} elements")
    lowering = (f"#iree_cpu.lowering_config<distribution = [{dm}, {dn}, 0], "
                f"vector_common_parallel = [{vm}, {vn}, 0], vector_reduction = [0, 0, {vk}]>")
    translation = "#iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>"
    return make_configuration(f"tile_config_{dm}x{dn}_{vm}x{vn}x{vk}", lowering, translation)


# ---------------------------------------------------------------------------------------------
# CUDA: TileAndFuse. Names follow the old profiler: workgroup tile M x N, K tile x stages.
@dataclass(frozen=True)
class MmaIntrinsic:
    name: str
    m: int
    n: int
    k: int


NV_MMA = {
    (_F16, _F32): MmaIntrinsic("NV_MMA_SYNC_F32_16x8x16_F16", 16, 8, 16),
    (_F16, _F16): MmaIntrinsic("NV_MMA_SYNC_F16_16x8x16_F16", 16, 8, 16),
    (_BF16, _F32): MmaIntrinsic("NV_MMA_SYNC_F32_16x8x16_BF16", 16, 8, 16),
}
# Per-workgroup shared memory and thread limits, as IREE's own target description states them.
CUDA_SHARED_MEMORY = {"sm_80": 166912, "sm_86": 166912, "sm_89": 101376}
CUDA_MAX_THREADS = 1024
CUDA_SUBGROUP = 32
CUDA_TENSORCORE_TILES = [  # (workgroup M, workgroup N, K tile, pipeline stages)
    (128, 256, 32, 3), (256, 128, 32, 3), (128, 128, 64, 4), (128, 128, 32, 5),
    (128, 64, 32, 5), (64, 128, 32, 5), (64, 64, 64, 5), (64, 64, 32, 10),
]
CUDA_SIMT_TILES = [  # (workgroup M, workgroup N, K tile, thread M, thread N)
    (64, 64, 16, 4, 4), (128, 64, 16, 8, 4), (64, 128, 16, 4, 8), (128, 128, 8, 8, 8), (32, 32, 32, 2, 2),
]


def cuda_shared_memory_bytes(wm: int, wn: int, kt: int, stages: int, element_bytes: int) -> int:
    # Both operands are promoted to shared memory and multi-buffered by the prefetcher.
    return (wm * kt + kt * wn) * element_bytes * max(stages, 1)


def cuda_tensorcore_configuration(op: MatmulOperation, arch: str, wm: int, wn: int, kt: int,
                                  stages: int) -> TuningConfiguration | None:
    """A tensor-core config, or None when it is invalid for this problem and architecture."""
    mma = NV_MMA.get((op.lhs.dtype, op.result.dtype))
    if mma is None or op.lhs.dtype != op.rhs.dtype:
        return None
    # One warp per 64x64 of the workgroup tile; each warp computes a grid of MMA tiles.
    warps_m, warps_n = max(1, wm // 64), max(1, wn // 64)
    if wm % (warps_m * mma.m) or wn % (warps_n * mma.n) or kt % mma.k:
        return None
    if op.m % wm or op.n % wn or op.k % kt:  # non-divisor tiles fail to compile on GPU
        return None
    threads = warps_m * warps_n * CUDA_SUBGROUP
    smem = cuda_shared_memory_bytes(wm, wn, kt, stages, op.lhs.dtype.bytes)
    if threads > CUDA_MAX_THREADS or smem > CUDA_SHARED_MEMORY.get(arch, 101376):
        return None
    sg_m, sg_n = wm // (warps_m * mma.m), wn // (warps_n * mma.n)
    lowering = (f"#iree_gpu.lowering_config<{{mma_kind = #iree_gpu.mma_layout<{mma.name}>, "
                f"promote_operands = [0, 1], reduction = [0, 0, {kt // mma.k}], "
                f"subgroup = [{sg_m}, {sg_n}, 0], workgroup = [{wm}, {wn}, 0]}}>")
    translation = ("#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> "
                   f"workgroup_size = [{threads}, 1, 1] subgroup_size = {CUDA_SUBGROUP}, "
                   "{gpu_pipeline_options = #iree_gpu.pipeline_options<"
                   f"prefetch_num_stages = {stages}>}}>")
    return make_configuration(f"tile_config_{wm}x{wn}_{kt}x{stages}_tensorcore_mmasync",
                              lowering, translation)


def cuda_simt_configuration(op: MatmulOperation, arch: str, wm: int, wn: int, kt: int, tm: int,
                            tn: int) -> TuningConfiguration | None:
    if op.m % wm or op.n % wn or op.k % kt or wm % tm or wn % tn:
        return None
    threads = (wm // tm) * (wn // tn)
    if threads > CUDA_MAX_THREADS or threads % CUDA_SUBGROUP:
        return None
    if cuda_shared_memory_bytes(wm, wn, kt, 1, op.lhs.dtype.bytes) > CUDA_SHARED_MEMORY.get(arch, 101376):
        return None
    lowering = (f"#iree_gpu.lowering_config<{{promote_operands = [0, 1], reduction = [0, 0, {kt}], "
                f"thread = [{tm}, {tn}, 0], workgroup = [{wm}, {wn}, 0]}}>")
    translation = ("#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> "
                   f"workgroup_size = [{threads}, 1, 1] subgroup_size = {CUDA_SUBGROUP}>")
    return make_configuration(f"tile_config_{wm}x{wn}_{kt}x1_{tm}x{tn}_simt", lowering, translation)


def tuning_configurations(op: MatmulOperation, target: Target) -> list[TuningConfiguration]:
    """IREE's default first (the baseline of every sweep), then flag variants, then tile configs."""
    if target.device is Device.LLVMCPU:
        configs = [DEFAULT_CONFIGURATION, DATA_TILING_CONFIGURATION]
        if min(op.m, op.n, op.k) >= CPU_MIN_TILED_DIMENSION:
            configs += [cpu_configuration(*tiles) for tiles in CPU_TILES]
        return configs
    configs = [DEFAULT_CONFIGURATION]
    if target.device is Device.CUDA:
        if op.lhs.dtype is DataType.f32:
            candidates = [cuda_simt_configuration(op, target.cuda_arch, *t) for t in CUDA_SIMT_TILES]
        else:
            candidates = [cuda_tensorcore_configuration(op, target.cuda_arch, *t)
                          for t in CUDA_TENSORCORE_TILES]
        configs += [c for c in candidates if c is not None]
    return configs


def operations(m_values: list[int], n_values: list[int], k_values: list[int],
               data_types: list[tuple[DataType, DataType, DataType]]) -> list[MatmulOperation]:
    return [MatmulOperation(m, n, k, TensorDescription(a), TensorDescription(b), TensorDescription(c))
            for m in m_values for n in n_values for k in k_values for a, b, c in data_types]


# The generator's predefined problems: small enough for a 2-core laptop, big enough to tile.
PREDEFINED_SHAPES = [(128, 128, 256), (256, 256, 512)]
