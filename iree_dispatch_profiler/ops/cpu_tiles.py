"""llvm-cpu tile sizes: IREE's vector-size legality rule, tile candidates derived from the
target (SIMD width, registers, cache) and the problem instead of fixed lists, and the
`#iree_cpu.lowering_config` text that carries them.

The one validity check for every consumer (generator, compile-time configs, the auto-tuner) is
`is_legal_vector_tile`; the spaces below never return a tile it rejects. The one builder of a
CPU compilation_info (generator, tuner and tuning specs alike) is `configuration`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from iree_dispatch_profiler.core.library import CpuTarget, DataType, TuningConfiguration
from iree_dispatch_profiler.ops.problems import ConvShape

# IREE's default of --iree-llvmcpu-max-allowed-number-of-native-vectors (LLVMCPU/Passes.cpp).
MAX_NATIVE_VECTORS = 512
# Problems smaller than this in some dimension get IREE's defaults only: tiling them is moot.
MIN_TILED_DIMENSION = 64
CONFIGS_PER_OPERATION = 10
# Distribution tiles for targets whose cache we cannot read (cross-compiling): a typical
# server core's L2 (Skylake-SP, Ice Lake, Neoverse N1/V1).
DEFAULT_L2_CACHE_BYTES = 1 << 20


def vector_limit_bytes(cpu: CpuTarget) -> int:
    """getMaxVectorSizeForLargeVectorCheck (LLVMCPU/Utils.cpp): native_vector_size times the
    allowed number of native vectors."""
    return cpu.native_vector_bytes * MAX_NATIVE_VECTORS


def is_legal_vector_tile(cpu: CpuTarget, sizes: Sequence[int], accumulator: DataType) -> bool:
    """IREE's LLVMCPUVerifyVectorSizeLegality pass (LLVMCPU/LLVMCPUVerifyVectorSizeLegality.cpp)
    rejects a vector.contract whose iteration bounds times the accumulator's element bytes
    reach `vector_limit_bytes`, and any other op with a vector that large. Every other vector of
    a tile (operands, accumulator, extensions) spans a sub-box of the contract's iteration
    space in a type no wider than the accumulator, so the contract decides. Checked here against
    iree-compile: f32 8x16x32 fails on haswell (16384 bytes), 8x16x31 compiles; f16->f16 is
    counted in 2 bytes, f16->f32 and i8->i32 in 4."""
    return math.prod(sizes) * accumulator.bytes < vector_limit_bytes(cpu)


def lanes(cpu: CpuTarget, dtype: DataType) -> int:
    """Elements of `dtype` in one native vector register (IREE sizes its own tiles this way)."""
    return max(1, cpu.native_vector_bytes // dtype.bytes)


def vector_registers(cpu: CpuTarget) -> int:
    """Architectural vector registers: 32 on AArch64 and AVX-512, 16 on AVX/AVX2 and SSE."""
    if cpu.arch == "aarch64" or "avx512f" in cpu.enabled_features:
        return 32
    return 16


def pow2_ceil(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def _select(distribution: list, vector: list, compatible, count: int) -> list:
    """Pair the ranked distribution and vector tiles, best rank sums first, so that the chosen
    set mixes both lists instead of exhausting one."""
    pairs = [(i + j, j, i, d, v) for i, d in enumerate(distribution) for j, v in enumerate(vector)
             if compatible(d, v)]
    return [(d, v) for *_, d, v in sorted(pairs, key=lambda p: p[:3])][:count]


# ---------------------------------------------------------------------------------------------
# Matmul family (DoubleTilingExpert): distribution M x N, vector M x N x K.
@dataclass(frozen=True)
class MatmulTile:
    dm: int
    dn: int
    vm: int
    vn: int
    vk: int


# Register-blocked vector tiles in units of the accumulator's lanes L: (rows, N in L, K in L).
# Listed best-first: IREE's own x86 choice (8 x L x L) and its neighbours, then larger blocks
# that only fit 32 registers.
MATMUL_VECTOR_SHAPES = [(8, 1, 1), (8, 2, 1), (4, 2, 1), (4, 4, 1), (16, 1, 1), (8, 2, 0.5),
                        (4, 2, 2), (8, 1, 2), (2, 4, 1), (16, 2, 1), (8, 4, 1)]
DISTRIBUTION_SIZES = (16, 32, 64, 128, 256)


def matmul_vector_tiles(cpu: CpuTarget, m: int, n: int, k: int,
                        accumulator: DataType) -> list[tuple[int, int, int]]:
    width = lanes(cpu, accumulator)
    tiles = []
    for rows, n_units, k_units in MATMUL_VECTOR_SHAPES:
        vm, vn, vk = rows, n_units * width, max(1, int(k_units * width))
        if (rows * n_units > vector_registers(cpu) or vm > pow2_ceil(m) or vn > pow2_ceil(n)
                or vk > k or not is_legal_vector_tile(cpu, (vm, vn, vk), accumulator)):
            continue
        tiles.append((vm, vn, vk))
    return list(dict.fromkeys(tiles))


def matmul_distribution_tiles(cpu: CpuTarget, m: int, n: int, k: int, input_bytes: int,
                              accumulator: DataType, vm: int) -> list[tuple[int, int]]:
    """(dm, dn) ranked: by how many L2 caches the working set spans (fitting first), then those
    giving every core work, then the larger (more reuse) and squarer. Each vector block streams
    a vm x K strip of A and a K x vn strip of B; the K x dn panel of B is reused by every row
    block of the tile."""
    def rank(tile):
        dm, dn = tile
        footprint = k * (dn + vm) * input_bytes + dm * dn * accumulator.bytes
        workgroups = math.ceil(m / dm) * math.ceil(n / dn)
        return (math.ceil(footprint / cpu.l2_cache_bytes), workgroups < 4, -dm * dn,
                abs(math.log2(dm / dn)))

    tiles = [(dm, dn) for dm in DISTRIBUTION_SIZES for dn in DISTRIBUTION_SIZES
             if dm <= pow2_ceil(m) and dn <= pow2_ceil(n)]
    return sorted(tiles, key=rank)


def matmul_tiles(cpu: CpuTarget, m: int, n: int, k: int, input_type: DataType,
                 accumulator: DataType, count: int = CONFIGS_PER_OPERATION) -> list[MatmulTile]:
    """Up to `count` distinct legal tiles for an M x N x K problem; none below MIN_TILED_DIMENSION."""
    if min(m, n, k) < MIN_TILED_DIMENSION:
        return []
    vector = matmul_vector_tiles(cpu, m, n, k, accumulator)
    smallest_vm = min((v[0] for v in vector), default=1)
    distribution = matmul_distribution_tiles(cpu, m, n, k, input_type.bytes, accumulator, smallest_vm)
    chosen = _select(distribution, vector, lambda d, v: d[0] % v[0] == 0 and d[1] % v[1] == 0, count)
    return [MatmulTile(*d, *v) for d, v in chosen]


# ---------------------------------------------------------------------------------------------
# conv2d (ConvTileAndDecomposeExpert): distribution (output rows, output columns, output
# channels), vector (columns, channels, input channels); kh and kw stay 1 so IREE decomposes to
# 1-D convolutions, whose vector.contract spans columns x channels x input channels.
@dataclass(frozen=True)
class ConvTile:
    doh: int
    dow: int
    df: int
    vw: int
    vf: int
    vc: int


# (columns, output channels in L, input channels in L), best-first as above.
CONV_VECTOR_SHAPES = [(8, 1, 1), (4, 2, 1), (8, 2, 1), (16, 1, 1), (4, 1, 2), (8, 1, 0.5),
                      (2, 4, 1), (4, 4, 1), (16, 2, 1)]


def conv_tiles(cpu: CpuTarget, p: ConvShape, input_type: DataType, accumulator: DataType,
               count: int = CONFIGS_PER_OPERATION) -> list[ConvTile]:
    width = lanes(cpu, accumulator)
    vector = []
    for columns, f_units, c_units in CONV_VECTOR_SHAPES:
        vw, vf, vc = columns, f_units * width, max(1, int(c_units * width))
        if (columns * f_units <= vector_registers(cpu) and vw <= pow2_ceil(p.ow)
                and vf <= pow2_ceil(p.f) and vc <= p.c
                and is_legal_vector_tile(cpu, (vw, vf, vc), accumulator)):
            vector.append((vw, vf, vc))

    def rank(tile):
        doh, dow, df = tile
        rows_in = (doh - 1) * p.stride[0] + (p.kh - 1) * p.dilation[0] + 1
        cols_in = (dow - 1) * p.stride[1] + (p.kw - 1) * p.dilation[1] + 1
        footprint = ((rows_in * cols_in * p.c + p.kh * p.kw * p.c * df) * input_type.bytes
                     + doh * dow * df * accumulator.bytes)
        workgroups = p.n * math.ceil(p.oh / doh) * math.ceil(p.ow / dow) * math.ceil(p.f / df)
        return (math.ceil(footprint / cpu.l2_cache_bytes), workgroups < 4, -doh * dow * df, doh)

    distribution = sorted(((doh, dow, df) for doh in (1, 2, 4, 8) for dow in (8, 16, 32, 64)
                           for df in (16, 32, 64, 128)
                           if doh <= p.oh and dow <= pow2_ceil(p.ow) and df <= pow2_ceil(p.f)),
                          key=rank)
    chosen = _select(distribution, list(dict.fromkeys(vector)),
                     lambda d, v: d[1] % v[0] == 0 and d[2] % v[1] == 0, count)
    return [ConvTile(*d, *v) for d, v in chosen]


# ---------------------------------------------------------------------------------------------
# Attention (LinalgExtTileAndVectorize) over (batch, m, k1, k2, n): distribution m x n, vector
# m x n, reduction k2; k1 stays whole, as in IREE's own config. Decomposed, an online attention
# holds two vector.contracts, Q K^T over m x k2 x k1 and P V over m x n x k2, both in f32.
@dataclass(frozen=True)
class AttentionTile:
    dm: int
    dn: int
    vm: int
    vn: int
    vk2: int


ATTENTION_ACCUMULATOR = DataType.f32
# Best-first. IREE's own choice is 1 row, which reloads K and V for every query row: on a 2-core
# Emerald Rapids a 12x128x64x128x64 f32 attention took 17.2 ms so, 1.39 ms with 8 rows, the
# whole head dim and 8 keys at a time.
ATTENTION_VECTOR_ROWS = (8, 4, 16, 2)
ATTENTION_KEY_TILES = (8, 16, 4, 32, 2)
ATTENTION_ROW_TILES = (64, 32, 128, 16)


def is_legal_attention_tile(cpu: CpuTarget, k1: int, vm: int, vn: int, vk2: int) -> bool:
    return (is_legal_vector_tile(cpu, (vm, vk2, k1), ATTENTION_ACCUMULATOR)
            and is_legal_vector_tile(cpu, (vm, vn, vk2), ATTENTION_ACCUMULATOR))


def attention_vector_tiles(cpu: CpuTarget, m: int, n: int, k1: int,
                           k2: int) -> list[tuple[int, int, int]]:
    """(vm, vn, vk2) legal for the target, the whole head dim and 8 rows first."""
    width = lanes(cpu, ATTENTION_ACCUMULATOR)
    columns = list(dict.fromkeys(c for c in (n, 4 * width, 2 * width, width) if c <= n and n % c == 0))
    ranked = []
    for i, vm in enumerate(ATTENTION_VECTOR_ROWS):
        for j, vn in enumerate(columns):
            for k, vk2 in enumerate(ATTENTION_KEY_TILES):
                if vm <= pow2_ceil(m) and vk2 <= k2 and is_legal_attention_tile(cpu, k1, vm, vn, vk2):
                    ranked.append(((i + j + k, i, j, k), (vm, vn, vk2)))
    return [tile for _, tile in sorted(ranked)]


def attention_tiles(cpu: CpuTarget, m: int, n: int, k1: int, k2: int,
                    count: int = CONFIGS_PER_OPERATION) -> list[AttentionTile]:
    vector = attention_vector_tiles(cpu, m, n, k1, k2)
    distribution = [(dm, dn) for dm in ATTENTION_ROW_TILES if dm <= pow2_ceil(m)
                    for dn in dict.fromkeys((n, 64, 32)) if dn <= n]
    chosen = _select(distribution, vector, lambda d, v: d[0] % v[0] == 0 and d[1] % v[1] == 0, count)
    return [AttentionTile(*d, *v) for d, v in chosen]


# ---------------------------------------------------------------------------------------------
def configuration(name: str, distribution: Sequence[int], vector: Sequence[int],
                  reduction: Sequence[int], pipeline: str, peel: bool = False) -> TuningConfiguration:
    """The compilation_info of an llvm-cpu tile config: one entry per loop at each level
    (distribution, vector_common_parallel, vector_reduction) and the codegen pipeline, with
    IREE's loop peeling when asked."""
    def tiles(sizes: Sequence[int]) -> str:
        return "[" + ", ".join(map(str, sizes)) + "]"

    lowering = (f"#iree_cpu.lowering_config<distribution = {tiles(distribution)}, "
                f"vector_common_parallel = {tiles(vector)}, vector_reduction = {tiles(reduction)}>")
    translation = ("#iree_codegen.translation_info<"
                   f"pipeline = #iree_cpu.pipeline<{pipeline}>"
                   + (", {enable_loop_peeling}>" if peel else ">"))
    return TuningConfiguration(name, lowering, translation)
