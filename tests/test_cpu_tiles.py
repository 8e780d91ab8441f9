"""Tuning spaces derived from the target: legal for IREE on AVX2, AVX-512 and NEON, and rich enough."""
import itertools
from dataclasses import replace

import pytest

from helpers import AVX2, AVX512, NEON
from iree_dispatch_profiler.core.library import (DataType, Device, Layout, Target, TensorDescription,
                                                 TuningConfiguration)
from iree_dispatch_profiler.ops import cpu_tiles, matmul
from iree_dispatch_profiler.ops.conv import Conv2dOperation

CPUS = {"avx2": AVX2, "avx512": AVX512, "neon": NEON}
F32, F16, BF16, I8, I32 = DataType.f32, DataType.f16, DataType.bf16, DataType.i8, DataType.i32
TYPES = [(F32, F32), (F16, F16), (F16, F32), (BF16, BF16), (BF16, F32), (I8, I32)]


def test_legality_is_iree_rule_measured_at_its_boundary():
    # Seen with iree-compile on haswell: f32 8x16x31 compiles, 8x16x32 hits 16384 bytes.
    assert cpu_tiles.is_legal_vector_tile(AVX2, (8, 16, 31), F32)
    assert not cpu_tiles.is_legal_vector_tile(AVX2, (8, 16, 32), F32)
    # f16 accumulates in 2 bytes (8x32x16 compiles, 8x32x32 fails); f16->f32 counts 4.
    assert cpu_tiles.is_legal_vector_tile(AVX2, (8, 32, 16), F16)
    assert not cpu_tiles.is_legal_vector_tile(AVX2, (8, 32, 32), F16)
    assert not cpu_tiles.is_legal_vector_tile(AVX2, (8, 32, 16), F32)
    # The old fixed list's 8x64x8 f32: fine on AVX-512, rejected on AVX2 and NEON.
    assert cpu_tiles.is_legal_vector_tile(AVX512, (8, 64, 8), F32)
    assert not cpu_tiles.is_legal_vector_tile(AVX2, (8, 64, 8), F32)
    assert not cpu_tiles.is_legal_vector_tile(NEON, (8, 16, 16), F32)


def test_vector_tiles_follow_the_simd_width():
    for cpu, lanes in ((AVX2, 8), (AVX512, 16), (NEON, 4)):
        tiles = cpu_tiles.matmul_vector_tiles(cpu, 512, 512, 512, F32)
        assert all(vn % lanes == 0 for _, vn, _ in tiles), cpu.name
        assert tiles[0] == (8, lanes, lanes)  # IREE's own x86 shape leads
    assert cpu_tiles.matmul_vector_tiles(AVX2, 512, 512, 512, F16)[0] == (8, 16, 16)


@pytest.mark.parametrize("cpu", CPUS.values(), ids=CPUS.keys())
@pytest.mark.parametrize("shape", [(64, 64, 64), (67, 131, 64), (128, 128, 256), (768, 512, 1024),
                                   (64, 4096, 4096), (3456, 1024, 2048), (1024, 64, 64)])
def test_every_matmul_kind_and_type_gets_at_least_8_legal_configs(cpu, shape):
    target = Target(Device.LLVMCPU, cpu_target=cpu)
    for (a, c), batch, epilogue in itertools.product(TYPES, (0, 2), ("", "bias_relu")):
        op = matmul.MatmulOperation(*shape, TensorDescription(a), TensorDescription(a),
                                    TensorDescription(c), batch=batch, epilogue=epilogue)
        tiled = [cfg for cfg in matmul.tuning_configurations(op, target) if cfg.lowering_config]
        assert len({(cfg.lowering_config, cfg.flags) for cfg in tiled}) == len(tiled) >= 8, (op.name, cpu.name)
        data_tiled = [cfg for cfg in tiled if cfg.spec_root]
        packed = [cfg for cfg in tiled if cfg.packing]
        assert all(cfg.name.startswith("data_tiling_") for cfg in data_tiled)
        assert all(cfg.name.startswith("packed_") for cfg in packed)
        assert all(cfg.name.startswith("tile_config_") for cfg in tiled
                   if not cfg.spec_root and not cfg.packing)
        # data-tiled configs: plain large f32 matmuls only; packed ones also where only one
        # of M and N is short (64x4096x4096, not 1024x64x64: its K is short too)
        plain = (a, c) == (F32, F32) and not batch and not epilogue
        large = min(shape) >= cpu_tiles.MIN_LARGE_DIMENSION
        assert bool(data_tiled) == (plain and large), op.name
        assert bool(packed) == (plain and (large or shape == (64, 4096, 4096))), op.name
        for tile in cpu_tiles.matmul_tiles(cpu, *shape, a, c):
            assert cpu_tiles.is_legal_vector_tile(cpu, (tile.vm, tile.vn, tile.vk), c)
            assert tile.dm % tile.vm == 0 and tile.dn % tile.vn == 0


@pytest.mark.parametrize("cpu", CPUS.values(), ids=CPUS.keys())
def test_tiles_that_leave_a_remainder_are_peeled(cpu):
    """1760 rows are no multiple of 64, 128 or 256, nor K = 1000 of a 16-deep K step: those tiles
    run peeled (unpeeled, every tile runs masked); tiles that divide every loop stay as they are."""
    shapes = {(1760, 128, 1760): True, (3000, 4096, 2048): True, (512, 512, 1000): True,
              (1024, 1024, 1024): False}
    for shape, remainders in shapes.items():
        tiles = cpu_tiles.matmul_tiles(cpu, *shape, F32, F32)
        m, n, k = shape
        peeled = [t for t in tiles if m % t.dm or n % t.dn or k % (t.ck or t.vk)]
        assert bool(peeled) == remainders, shape
        assert all(t.peel == (t in peeled) for t in tiles), shape
        for t in tiles:
            config = matmul.cpu_configuration(cpu, t, F32)
            assert config.name.endswith("_peel") == t.peel
            assert config.translation_info.endswith(
                "DoubleTilingExpert>, {enable_loop_peeling}>" if t.peel else "DoubleTilingExpert>>")


def test_small_dimensions_get_no_tile_configs():
    assert cpu_tiles.matmul_tiles(AVX2, 1, 256, 256, F32, F32) == []
    assert cpu_tiles.matmul_tiles(AVX2, 256, 256, 63, F32, F32) == []


@pytest.mark.parametrize("cpu", CPUS.values(), ids=CPUS.keys())
@pytest.mark.parametrize("shape", [(2, 18, 18, 32, 64, 3, 3), (2, 34, 34, 64, 64, 3, 3),
                                   (2, 66, 66, 320, 320, 3, 3), (1, 130, 130, 64, 128, 3, 3)])
def test_conv_configs_are_legal_and_at_least_8(cpu, shape):
    for (a, c), layout in itertools.product(TYPES, ("nhwc_hwcf", "nchw_fchw")):
        op = Conv2dOperation(*shape, input_type=a, output_type=c, layout=layout)
        tiles = cpu_tiles.conv_tiles(cpu, op, op.input_type, op.output_type)
        assert len(set(tiles)) == len(tiles) >= 8, (op.name, cpu.name)
        for t in tiles:
            assert cpu_tiles.is_legal_vector_tile(cpu, (t.vw, t.vf, t.vc), c)
            assert t.dow % t.vw == 0 and t.df % t.vf == 0 and t.vc <= op.c


def test_distribution_tiles_follow_the_cache():
    """A K x dn panel that outgrows L2 loses its rank: the big-K problem gets narrower panels
    (among the tiles without cache levels, which bring K's slices into cache themselves)."""
    small_k = cpu_tiles.matmul_tiles(AVX2, 1024, 1024, 256, F32, F32)
    big_k = [t for t in cpu_tiles.matmul_tiles(AVX2, 1024, 1024, 8192, F32, F32) if not t.ck]
    assert max(t.dn for t in big_k) < max(t.dn for t in small_k)


@pytest.mark.parametrize("cpu", CPUS.values(), ids=CPUS.keys())
@pytest.mark.parametrize("shape", [(512, 512, 512), (4096, 4096, 4096), (4096, 11008, 4096),
                                   (2048, 1280, 5120)])
def test_large_matmuls_get_cache_blocked_tiles_within_the_rules(cpu, shape):
    m, n, k = shape
    cached = [t for t in cpu_tiles.matmul_tiles(cpu, m, n, k, F32, F32) if t.ck]
    assert len(cached) == cpu_tiles.CACHE_TILED
    for t in cached:
        # the block's accumulator fill is one vector: IREE's size rule applies to it
        assert cpu_tiles.is_legal_vector_tile(cpu, (t.cm, t.cn), F32)
        assert t.dm % t.cm == 0 and t.dn % t.cn == 0 and t.cm % t.vm == 0 and t.cn % t.vn == 0
        assert t.vk == 1 and t.ck < k
        # A and B slices of a block stay well inside L2
        assert (t.cm + t.cn) * t.ck * 4 <= cpu.l2_cache_bytes // 16
    config = matmul.cpu_configuration(cpu, cached[0], F32)
    assert "cache_parallel" in config.lowering_config and "cache_reduction" in config.lowering_config


def test_cache_levels_start_at_the_large_size():
    edge = cpu_tiles.MIN_LARGE_DIMENSION
    assert not any(t.ck for t in cpu_tiles.matmul_tiles(AVX512, edge - 1, edge, edge, F32, F32))
    assert any(t.ck for t in cpu_tiles.matmul_tiles(AVX512, edge, edge, edge, F32, F32))


def test_data_tiled_tiles_use_iree_inner_tiles_and_rank_b_panels_in_l2_first():
    assert cpu_tiles.mmt4d_inner_tile(AVX512, F32, F32) == (16, 16, 1)
    assert cpu_tiles.mmt4d_inner_tile(AVX2, F32, F32) == (8, 8, 1)
    assert cpu_tiles.mmt4d_inner_tile(NEON, F32, F32) == (8, 8, 1)
    assert cpu_tiles.mmt4d_inner_tile(AVX512, I8, I8) is None
    for cpu, k in itertools.product(CPUS.values(), (1024, 11008)):
        tiles = cpu_tiles.mmt4d_tiles(cpu, 4096, 4096, k, F32, F32)
        assert tiles, cpu.name
        fits = [t.dn1 * t.n0 * k * 4 <= cpu.l2_cache_bytes // 2 for t in tiles]
        assert fits == sorted(fits, reverse=True), (cpu.name, k)  # B panels in L2 first
        assert fits[0] or k == 11008  # a 16 x 11008 f32 panel outgrows half of 1 MiB
        for t in tiles:
            assert (4096 // t.m0) % t.dm1 == 0 and t.dm1 > t.dn1
    config = cpu_tiles.mmt4d_configuration(cpu_tiles.mmt4d_tiles(AVX512, 4096, 4096, 4096, F32, F32)[0], True)
    assert config.spec_root == "linalg.mmt4d" and config.source_compilation_info is None
    assert "--iree-llvmcpu-enable-ukernels=all" in config.flags
    assert config.name == "data_tiling_512x16_16x16x1_ukernels"


def test_avx512_packs_rows_8_at_a_time_where_12_would_pad_them_more():
    """The M0 register_tile gives a matmul's rows: AVX-512's 12, or 8 where that pads them
    less (12 on a tie); AVX2 and NEON keep theirs."""
    def m0(rows: int) -> int:
        return cpu_tiles.register_tile(AVX512, F32, F32, rows)[0]
    assert [m0(rows) for rows in (128, 256, 64, 196, 1040)] == [8] * 5
    assert [m0(rows) for rows in (384, 768, 48, 1028, 3000)] == [12] * 5
    assert cpu_tiles.register_tile(AVX2, F32, F32, 128) == (6, 16, 1)
    assert cpu_tiles.register_tile(NEON, F32, F32, 128) == (12, 8, 1)


def test_packed_matmuls_take_a_wider_register_tile_and_carry_their_config_in_the_source():
    assert cpu_tiles.register_tile(AVX2, F32, F32) == (6, 16, 1)
    assert cpu_tiles.register_tile(AVX512, F32, F32) == (12, 32, 1)
    assert cpu_tiles.register_tile(NEON, F32, F32) == (12, 8, 1)
    assert cpu_tiles.register_tile(AVX2, F16, F16) is None
    no_fma = replace(AVX2, features=AVX2.features.replace("+fma", "-fma"))
    assert cpu_tiles.register_tile(no_fma, F32, F32) is None
    # a short M or N packs where the GEMM is large enough; not a short K, nor too few FLOPs
    assert cpu_tiles.mmt4d_tiles(AVX2, 128, 1280, 2048, F32, F32, packed=True)
    assert not cpu_tiles.mmt4d_tiles(AVX2, 128, 1280, 2048, F32, F32)  # IREE's data tiling: no
    assert cpu_tiles.mmt4d_tiles(AVX2, 2048, 1280, 511, F32, F32, packed=True) == []
    assert cpu_tiles.mmt4d_tiles(AVX2, 128, 128, 4096, F32, F32, packed=True) == []  # 2^27
    tile = cpu_tiles.mmt4d_tiles(AVX2, 3000, 4096, 2048, F32, F32, packed=True)[0]
    config = cpu_tiles.packed_configuration(tile)
    assert config.packing == (6, 16, 1) and config.name.startswith("packed_")
    assert config.source_compilation_info is not None and not config.spec_root
    assert "--iree-llvmcpu-enable-ukernels=none" in config.flags
    assert TuningConfiguration.from_json(config.to_json()) == config
    assert "packing" not in cpu_tiles.mmt4d_configuration(tile, True).to_json()  # older JSON as it was
    # the source packs both operands, whatever their layouts, and unpacks the result
    row, col = TensorDescription(F32, Layout.RowMajor), TensorDescription(F32, Layout.ColumnMajor)
    op = matmul.MatmulOperation(3000, 4096, 2048, col, col, row)
    text = op.emit_mlir("mm", config)
    assert text.count("linalg.pack") == 2 and "linalg.unpack" in text
    assert "linalg.mmt4d {compilation_info = #compilation}" in text
    assert "tensor<2048x3000xf32> -> tensor<500x2048x6x1xf32>" in text
    assert "tensor<4096x2048xf32> -> tensor<256x2048x16x1xf32>" in text
    names = [c.name for c in matmul.tuning_configurations(
        matmul.MatmulOperation(3000, 4096, 2048, row, row, row), Target(cpu_target=AVX2))]
    assert sum(n.startswith("packed_") for n in names) == cpu_tiles.PACKED
    batched = matmul.MatmulOperation(3000, 4096, 2048, row, row, row, batch=2)
    assert not any(c.packing for c in matmul.tuning_configurations(batched, Target(cpu_target=AVX2)))


def test_what_a_machine_can_run():
    assert AVX2.cannot_run_on(AVX512) is None
    assert "avx512f" in AVX512.cannot_run_on(AVX2)
    assert "aarch64 code" in NEON.cannot_run_on(AVX2)
    assert AVX2.summary == "haswell, x86_64, 32-byte vectors (avx avx2 f16c fma)"
