"""llvm-cpu tile sizes: IREE's vector-size legality rule, tile candidates derived from the
target (SIMD width, registers, cache) and the problem instead of fixed lists, and the
`#iree_cpu.lowering_config` text that carries them.

The one validity check for every consumer (generator, compile-time configs, the auto-tuner) is
`is_legal_vector_tile`; the spaces below never return a tile it rejects. The one builder of a
CPU compilation_info (generator, tuner and tuning specs alike) is `configuration`.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Sequence

from iree_dispatch_profiler.core.library import (EARLY_DATA_TILING, NO_UKERNELS, UKERNELS, CpuTarget,
                                                 DataType, TuningConfiguration)
from iree_dispatch_profiler.ops.problems import ConvShape

# IREE's default of --iree-llvmcpu-max-allowed-number-of-native-vectors (LLVMCPU/Passes.cpp).
MAX_NATIVE_VECTORS = 512
# Problems smaller than this in some dimension get IREE's defaults only: tiling them is moot.
MIN_TILED_DIMENSION = 64
CONFIGS_PER_OPERATION = 10
# Caches of targets we cannot read (cross-compiling): a typical server core's L2 (Skylake-SP,
# Ice Lake, Neoverse N1/V1) and its share of L3 (Sapphire Rapids: 1.875 MiB, Zen 3: 4 MiB).
DEFAULT_L2_CACHE_BYTES = 1 << 20
DEFAULT_L3_CACHE_BYTES = 2 << 20
# Problems this large in every dimension also get cache-level and data-tiled configurations;
# they are where tiles sized for registers and L1 alone fall far behind BLAS.
MIN_LARGE_DIMENSION = 512
# A matmul of this many FLOPs also gets packed configurations when only one dimension is short
# (a 128-row or 128-column GEMM): a model's 128-token matmuls ran packed at 104-118% of the
# session's ceiling (BERT, Zen 3), where IREE's data tiling left such GEMMs at 0.6-0.8x BLAS.
MIN_PACKED_FLOPS = 1 << 28


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


def l3_share_bytes(cpu: CpuTarget) -> int:
    return cpu.l3_cache_bytes or DEFAULT_L3_CACHE_BYTES


def is_large(*dimensions: int) -> bool:
    return min(dimensions) >= MIN_LARGE_DIMENSION


def pow2_ceil(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def pow2_floor(value: int) -> int:
    return 1 << max(0, value.bit_length() - 1)


def _select(ranked: Sequence[Sequence], compatible, count: int | None = None) -> list[tuple]:
    """Combine ranked lists (one choice from each), best rank sums first and ties to the better
    rank in the later lists, so that the chosen set mixes every list instead of exhausting one.
    `count` None: all compatible combinations."""
    combos = [(sum(i for i, _ in picks), tuple(i for i, _ in reversed(picks)), tuple(x for _, x in picks))
              for picks in itertools.product(*(list(enumerate(r)) for r in ranked))]
    return [choice for *_, choice in sorted(c for c in combos if compatible(*c[2]))][:count]


# ---------------------------------------------------------------------------------------------
# Matmul family (DoubleTilingExpert): distribution M x N, vector M x N x K.
@dataclass(frozen=True)
class MatmulTile:
    dm: int
    dn: int
    vm: int
    vn: int
    vk: int
    cm: int = 0  # cache_parallel M x N and cache_reduction K; 0: no cache levels
    cn: int = 0
    ck: int = 0
    peel: bool = False  # IREE's loop peeling (matmul_tiles: where a tile leaves a remainder)

    @property
    def name(self) -> str:
        return tile_config_name(self.dm, self.dn, self.vm, self.vn, self.vk, self.cm, self.cn, self.ck,
                                self.peel)


def tile_config_name(dm: int, dn: int, vm: int, vn: int, vk: int, cm: int = 0, cn: int = 0,
                     ck: int = 0, peel: bool = False) -> str:
    """`tile_config_<dist>[_<cache>]_<vector>[_peel]`: the generator's and the tuner's name of a
    tile."""
    cache = f"_{cm}x{cn}x{ck}" if ck else ""
    return f"tile_config_{dm}x{dn}{cache}_{vm}x{vn}x{vk}" + ("_peel" if peel else "")


# Register-blocked vector tiles in units of the accumulator's lanes L: (rows, N in L, K in L).
# Listed best-first: IREE's own x86 choice (8 x L x L) and its neighbours, then larger blocks
# that only fit 32 registers.
MATMUL_VECTOR_SHAPES = [(8, 1, 1), (8, 2, 1), (4, 2, 1), (4, 4, 1), (16, 1, 1), (8, 2, 0.5),
                        (4, 2, 2), (8, 1, 2), (2, 4, 1), (16, 2, 1), (8, 4, 1)]
# One row (a matrix-vector product: an LLM's decode step): wider and deeper blocks instead;
# an LSTM's 1x256x1024 step 8 lanes wide ran the model 1.28x [1.18, 1.34] faster than data
# tiling tuned, 4 lanes wide 1.06x [0.94, 1.20] (one session, Zen 4).
MATVEC_VECTOR_SHAPES = [(1, 1, 1), (1, 2, 1), (1, 4, 1), (1, 1, 4), (1, 2, 4), (1, 4, 2), (1, 8, 1)]
DISTRIBUTION_SIZES = (16, 32, 64, 128, 256)


def matmul_vector_tiles(cpu: CpuTarget, m: int, n: int, k: int,
                        accumulator: DataType) -> list[tuple[int, int, int]]:
    width = lanes(cpu, accumulator)
    tiles = []
    for rows, n_units, k_units in MATVEC_VECTOR_SHAPES if m == 1 else MATMUL_VECTOR_SHAPES:
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
    """Up to `count` distinct legal tiles for an M x N x K problem; none below MIN_TILED_DIMENSION.
    A large problem gets CACHE_TILED of them with cache levels, the rest without. A tile that
    leaves a remainder of M, N or K gets IREE's loop peeling: without it every tile of the loop
    runs masked (1760x128x1760 f32, Zen 5: 64x64 tiles, 8x32x1 vectors, 8.5 ms; peeled 2.05 ms;
    16x128, which divide it, 1.85 ms; IREE's default 2.6 ms)."""
    if min(m, n, k) < MIN_TILED_DIMENSION:
        return []
    cached = matmul_cache_tiles(cpu, m, n, k, input_type, accumulator, CACHE_TILED) if is_large(m, n, k) else []
    vector = matmul_vector_tiles(cpu, m, n, k, accumulator)
    smallest_vm = min((v[0] for v in vector), default=1)
    distribution = matmul_distribution_tiles(cpu, m, n, k, input_type.bytes, accumulator, smallest_vm)
    chosen = _select((distribution, vector), lambda d, v: d[0] % v[0] == 0 and d[1] % v[1] == 0,
                     count - len(cached))
    return cached + peeled([MatmulTile(*d, *v) for d, v in chosen], m, n, k)


def leaves_remainder(m: int, n: int, k: int, dm: int, dn: int, dk: int) -> bool:
    """Whether tiles dm x dn x dk leave part of an M x N x K loop nest: where IREE's loop peeling
    is worth having."""
    return bool(m % dm or n % dn or k % dk)


def peeled(tiles: list[MatmulTile], m: int, n: int, k: int) -> list[MatmulTile]:
    """`tiles`, each with IREE's loop peeling where it leaves a remainder of M, N or K."""
    return [replace(t, peel=leaves_remainder(m, n, k, t.dm, t.dn, t.ck or t.vk)) for t in tiles]


# Cache levels (DoubleTilingExpert's cache_parallel and cache_reduction): inside a distribution
# tile, a cm x cn block of C is accumulated over ck-long slices of K, so that the cm x ck slice
# of A and the ck x cn slice of B stay in cache for every vector tile of the block (GotoBLAS's
# blocking, without its packing). Measured on 4096^3 f32, AVX-512, 2 MiB L2, 2 cores: IREE's
# default 3813 ms; distribution 256x256 with 4x64x1 vector tiles 2082 ms without cache levels,
# 828 ms with 64x64 blocks over 128-long K slices.
CACHE_TILED = 6
CACHE_DISTRIBUTION_SIZES = (256, 128)
CACHE_BLOCKS = ((64, 64), (32, 128), (32, 64), (32, 32))
# The A and B slices of a block, as fractions of L2. Rows of unpacked operands are a power of two
# apart and share cache sets, so slices far below L2 do best: with 2 MiB L2 and 4x64x1 vector
# tiles, 64 KiB slices took 828 ms, 128 KiB 857 ms, 192 KiB 1441 ms.
CACHE_SLICE_FRACTIONS = (1 / 32, 1 / 16)
# Register tiles one K step deep, (rows, N in lanes): the outer-product form that blocked loops
# feed best (4x64x1 828 ms, 8x32x1 975 ms; IREE's 8x16x16 in the same blocks 1737 ms).
CACHE_VECTOR_SHAPES = ((4, 4), (8, 2), (4, 2))


def matmul_cache_tiles(cpu: CpuTarget, m: int, n: int, k: int, input_type: DataType,
                       accumulator: DataType, count: int | None) -> list[MatmulTile]:
    """Up to `count` (None: all) cache-blocked tiles, best-ranked first, peeled where they leave a
    remainder (`peeled`). A block's C is one vector when the accumulator's fill is vectorized at
    the block's size, so it must pass the vector-size rule (measured: 64x256 f32 fails on
    AVX-512, 64x64 compiles); the distribution tile's whole-K panels of A and B should fit the
    core's share of L3."""
    width = lanes(cpu, accumulator)
    vectors = [(rows, units * width, 1) for rows, units in CACHE_VECTOR_SHAPES
               if rows * units <= vector_registers(cpu) and rows <= m and units * width <= n]
    blocks = [(cm, cn) for cm, cn in CACHE_BLOCKS
              if cm <= m and cn <= n and is_legal_vector_tile(cpu, (cm, cn), accumulator)]

    def distribution_rank(tile):
        dm, dn = tile
        panels = (dm + dn) * k * input_type.bytes
        return (math.ceil(panels / l3_share_bytes(cpu)), math.ceil(m / dm) * math.ceil(n / dn) < 4,
                -dm * dn)

    distributions = sorted(((dm, dn) for dm in CACHE_DISTRIBUTION_SIZES for dn in CACHE_DISTRIBUTION_SIZES
                            if dm <= pow2_ceil(m) and dn <= pow2_ceil(n)), key=distribution_rank)

    def tile(distribution, fraction, block, vector) -> MatmulTile:
        (cm, cn), vm, vn, vk = block, *vector
        ck = pow2_floor(int(cpu.l2_cache_bytes * fraction / ((cm + cn) * input_type.bytes)))
        return MatmulTile(*distribution, vm, vn, vk, cm, cn, ck)

    def compatible(*choice) -> bool:
        t = tile(*choice)
        return not (t.dm % t.cm or t.dn % t.cn or t.cm % t.vm or t.cn % t.vn) and t.vk <= t.ck < k

    ranked = _select((distributions, CACHE_SLICE_FRACTIONS, blocks, vectors), compatible)
    tiles = list(dict.fromkeys(tile(*choice) for choice in ranked))[:count]  # tiny L2s repeat a slice
    return peeled(tiles, m, n, k)


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
    chosen = _select((distribution, list(dict.fromkeys(vector))),
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
    for i, vm in enumerate(ATTENTION_VECTOR_ROWS if m > 1 else (1,)):  # 1: a decode step's query
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
    chosen = _select((distribution, vector), lambda d, v: d[0] % v[0] == 0 and d[1] % v[1] == 0, count)
    return [AttentionTile(*d, *v) for d, v in chosen]


# ---------------------------------------------------------------------------------------------
# Data tiling: IREE packs A and B into M0 x K0 and N0 x K0 tiles and multiplies them with a
# linalg.mmt4d over (M1, N1, K1, M0, N0, K0) (Mmt4dTilingExpert), whose config sets how many
# outer tiles one workgroup takes. IREE's own choice keeps every workgroup's panels under
# --iree-llvmcpu-matmul-tile-bytes, which for a long K is one 16x16 tile: each workgroup streams
# two whole-K panels from memory.
@dataclass(frozen=True)
class Mmt4dTile:
    dm1: int  # outer tiles of M and N per workgroup
    dn1: int
    m0: int  # IREE's inner tile for the target
    n0: int
    k0: int

    @property
    def shape(self) -> str:
        return f"{self.dm1 * self.m0}x{self.dn1 * self.n0}_{self.m0}x{self.n0}x{self.k0}"

    def name(self, ukernels: bool) -> str:
        return f"data_tiling_{self.shape}" + ("_ukernels" if ukernels else "")


def mmt4d_inner_tile(cpu: CpuTarget, lhs: DataType, rhs: DataType) -> tuple[int, int, int] | None:
    """IREE's (M0, N0, K0) for a wide f32 matmul (enumerateMatmulTileX86_64 / Arm64 in
    Codegen/ExternalInterfaces/CPUEncodingExternalModels.cpp); None for other element types and
    architectures, whose data-tiled configs are not verified here."""
    if not (lhs is rhs is DataType.f32):
        return None
    if cpu.arch == "x86_64":
        if "avx512f" in cpu.enabled_features:
            return 16, 16, 1
        return (8, 8, 1) if "avx" in cpu.enabled_features else (8, 4, 1)
    return (8, 8, 1) if cpu.arch == "aarch64" else None


def register_tile(cpu: CpuTarget, lhs: DataType, rhs: DataType, rows: int | None = None
                  ) -> tuple[int, int, int] | None:
    """A wider f32 register tile than IREE's, for a matmul that packs its own operands: BLIS's
    sgemm micro-kernel shapes, N0 in vectors and M0 broadcast. AVX2 6x16 (BLIS haswell 16x6):
    12 of the 16 ymm registers accumulate, and each k step loads 2 vectors and broadcasts 6 for
    12 FMAs, where IREE's 8x8x1 loads 9 for 8 (2048^3 on a 2-core Zen 3: 98-123 GFLOP/s against
    8x8x1 with ukernels' 69-88, packs included); AVX-512 12x32 (BLIS skx 32x12); aarch64 12x8
    (BLIS armv8a 8x12). None where there is no such kernel (other types, no FMA). Given the
    `rows` the M0 tiles cover, AVX-512 takes 8x32 where it pads them less (128 tokens, 256 or
    64 channels: 12 pads them 3-12%; 12 on a tie): its 16 accumulators still hide the FMAs'
    latency, and 768x1024x1024 ran as fast either way (Zen 5, packs included); AVX2's 4x16
    would leave 8."""
    if not (lhs is rhs is DataType.f32):
        return None
    features = cpu.enabled_features
    if cpu.arch == "x86_64":
        if "avx512f" in features:
            m0 = 12 if rows is None else min((12, 8), key=lambda m0: -(-rows // m0) * m0)
            return m0, 32, 1
        return (6, 16, 1) if {"avx", "fma"} <= set(features) else None
    return (12, 8, 1) if cpu.arch == "aarch64" else None


# Outer tiles per workgroup (M1, N1), best-first. Measured on 4096^3 f32 with ukernels (16x16x1
# inner tiles, 2 MiB L2): IREE's 1x1 1461 ms; 32x1 724, 32x2 722, 16x1 729, 8x2 773, 8x8 881,
# 2x8 1097: many rows of A against a few columns of B, whose panels stay in L2 while the
# workgroup walks down A.
MMT4D_DISTRIBUTIONS = ((32, 1), (16, 1), (32, 2), (8, 2), (64, 1), (16, 2))
DATA_TILED = 2  # per ukernel choice
PACKED = 2  # with our register tile
MMT4D_OP = "linalg.mmt4d"  # what data tiling makes of a matmul: the op a data-tiled config configures


def mmt4d_tiles(cpu: CpuTarget, m: int, n: int, k: int, lhs: DataType, rhs: DataType,
                count: int | None = DATA_TILED, packed: bool = False) -> list[Mmt4dTile]:
    """Up to `count` workgroup tiles of the outer dimensions (IREE pads them to whole inner
    tiles; the last workgroup of a row or column takes what remains), giving every core work;
    those whose B panels (dn1 x N0 x K) fit half the L2 first, then those that divide the outer
    dimensions. Inner tiles: IREE's, or with `packed` our register_tile (also for a GEMM of
    MIN_PACKED_FLOPS with one short dimension)."""
    inner = (register_tile if packed else mmt4d_inner_tile)(cpu, lhs, rhs)
    if inner is None or not (is_large(m, n, k) or packed and 2 * m * n * k >= MIN_PACKED_FLOPS
                             and min(m, n) >= inner[0] * 4 and k >= MIN_LARGE_DIMENSION):
        return []
    m0, n0, k0 = inner
    m1, n1 = math.ceil(m / m0), math.ceil(n / n0)
    tiles = [Mmt4dTile(dm1, dn1, m0, n0, k0) for dm1, dn1 in MMT4D_DISTRIBUTIONS
             if math.ceil(m1 / dm1) * math.ceil(n1 / dn1) >= 4]
    tiles.sort(key=lambda t: (t.dn1 * n0 * k * rhs.bytes > cpu.l2_cache_bytes // 2,
                              bool(m1 % t.dm1 or n1 % t.dn1)))  # stable
    return tiles[:count]


# ---------------------------------------------------------------------------------------------
def _tiles(sizes: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, sizes)) + "]"


def configuration(name: str, distribution: Sequence[int], vector: Sequence[int],
                  reduction: Sequence[int], pipeline: str, peel: bool = False,
                  cache_parallel: Sequence[int] = (), cache_reduction: Sequence[int] = ()
                  ) -> TuningConfiguration:
    """The compilation_info of an llvm-cpu tile config: one entry per loop at each level
    (distribution, the cache levels when given, vector_common_parallel, vector_reduction) and
    the codegen pipeline, with IREE's loop peeling when asked."""
    levels = [("distribution", distribution), ("cache_parallel", cache_parallel),
              ("cache_reduction", cache_reduction), ("vector_common_parallel", vector),
              ("vector_reduction", reduction)]
    lowering = ("#iree_cpu.lowering_config<"
                + ", ".join(f"{level} = {_tiles(sizes)}" for level, sizes in levels if sizes) + ">")
    translation = ("#iree_codegen.translation_info<"
                   f"pipeline = #iree_cpu.pipeline<{pipeline}>"
                   + (", {enable_loop_peeling}>" if peel else ">"))
    return TuningConfiguration(name, lowering, translation)


def _mmt4d_configuration(name: str, tile: Mmt4dTile) -> TuningConfiguration:
    return configuration(name, [tile.dm1, tile.dn1, 0, 0, 0, 0], [1, 1, 0, tile.m0, tile.n0, 0],
                         [0, 0, 1, 0, 0, tile.k0], "Mmt4dTilingExpert")


def mmt4d_configuration(tile: Mmt4dTile, ukernels: bool) -> TuningConfiguration:
    """A data-tiled config: early data tiling (with or without ukernels) and a tuning spec that
    gives the mmt4d its workgroup tile."""
    return replace(_mmt4d_configuration(tile.name(ukernels), tile),
                   flags=(*EARLY_DATA_TILING, UKERNELS if ukernels else NO_UKERNELS),
                   spec_root=MMT4D_OP)


def unpacked_rows_configuration(m0: int, n0: int, n: int) -> TuningConfiguration:
    """The config of a packed matmul's unpack (M1 x N1 x M0 x N0 -> M x N): a workgroup writes
    M0 whole rows, read in one run from the packed result, where IREE's own 66 x 64 blocks write
    256-byte pieces of rows 40 KiB apart (2048x10240 f32 on a Zen 3: the unpack 64 -> 35 ms in
    the call, a copy's speed; narrower blocks of 6 rows, 2048 and 512 wide, 44-51 ms alone).
    Where N is no multiple of N0, the rows' whole tiles, and the rest in workgroups of their
    own: a block ending in part of a tile is copied through a stack buffer of the block, over
    IREE's 32 KiB limit at 12 rows of 1000 f32 (AVX-512: 49152 bytes, the matmul not built)."""
    return configuration("unpacked_rows", [m0, max(n0, n // n0 * n0)], [m0, n0], [],
                         "DataTiling")


def summed_taps_configuration(cpu: CpuTarget, filters: int, positions: int, batch: bool
                              ) -> TuningConfiguration:
    """The config rewrites.grouped_taps gives its sum of contractions (loops: the images where
    `batch`, groups, `filters`, `positions` (whole vectors), channels): a workgroup takes a
    group's filters over 8 vectors of positions, a register block 4 filters by a vector, one
    channel a step. IREE's own AVX2 config of the op blocks one position at a time (ResNeXt's
    3x3 conv of 32 groups on a Zen 3: 9.74 ms; this block 0.36 ms, the best of the tuner's four
    trials there)."""
    width = lanes(cpu, DataType.f32)
    block = next(rows for rows in (4, 2, 1) if filters % rows == 0)
    tile = next((width * n for n in (8, 4, 2) if positions % (width * n) == 0), width)
    lead = [1] if batch else []
    return configuration("summed_taps", [*lead, 1, filters, tile, 0],
                         [*lead, 1, block, width, 0], [0] * (len(lead) + 3) + [1],
                         "DoubleTilingExpert")


def packed_configuration(tile: Mmt4dTile) -> TuningConfiguration:
    """A matmul that packs its own operands into `tile`'s register tile (mmt4d_tiles(packed=True))
    and carries the mmt4d's config in its source. Without ukernels: IREE's mmt4d ukernel has no
    such tile and falls back to a scalar one (6x16x1: 2.7 GFLOP/s, against 95 vectorized)."""
    return replace(_mmt4d_configuration(f"packed_{tile.shape}", tile), flags=(NO_UKERNELS,),
                   packing=(tile.m0, tile.n0, tile.k0))
