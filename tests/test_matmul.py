import numpy as np
import pytest

from helpers import AVX2
from iree_dispatch_profiler.core.library import (DataType, Device, Layout, Target,
                                                 TensorDescription, TuningConfiguration)
from iree_dispatch_profiler.ops import cuda_tiles, matmul
from iree_dispatch_profiler.ops.cpu_tiles import MatmulTile

CPU = Target(Device.LLVMCPU, cpu_target=AVX2)


def op(m, n, k, a="f32t", b="f32t", c="f32t"):
    return matmul.MatmulOperation(m, n, k, TensorDescription.parse(a), TensorDescription.parse(b),
                                  TensorDescription.parse(c))


def test_names_flops_and_bytes():
    o = op(768, 512, 1024, "f16t", "f16t", "f32t")
    assert o.name == "matmul_768x512x1024_f16t_f16t_f32t"
    assert o.flops == 2 * 768 * 512 * 1024
    assert o.bytes == 768 * 1024 * 2 + 1024 * 512 * 2 + 768 * 512 * 4


def test_operation_round_trips_through_json():
    o = op(64, 96, 128, "bf16t", "bf16n", "f32t")
    assert matmul.MatmulOperation.from_json(o.to_json()) == o


def test_cpu_space_has_default_first_and_at_least_8_distinct_tile_configs():
    configs = matmul.tuning_configurations(op(256, 256, 256), CPU)
    names = [c.name for c in configs]
    assert names[0] == "default" and "default_data_tiling" in names
    tiles = [c for c in configs if c.lowering_config]
    assert len({c.lowering_config for c in tiles}) == len(tiles) >= 8
    assert all("tile_config_" in c.name for c in tiles)


def test_small_dimensions_get_only_the_default_and_flag_variants():
    configs = matmul.tuning_configurations(op(1, 256, 256), CPU)
    assert [c.name for c in configs] == ["default", "default_data_tiling"]
    assert all(c.compilation_info is None for c in configs)


def test_cpu_vector_tiles_respect_the_vector_size_limit():
    with pytest.raises(ValueError, match="16384-byte limit on haswell"):
        matmul.cpu_configuration(AVX2, MatmulTile(64, 64, 16, 32, 16), DataType.f32)


def test_cuda_configs_obey_thread_shared_memory_and_divisibility_rules():
    target = Target(Device.CUDA)
    configs = matmul.tuning_configurations(op(512, 512, 512, "f16t", "f16t", "f32t"), target)
    tiled = [c for c in configs if c.lowering_config]
    assert tiled and all(c.name.endswith("_tensorcore_mmasync") for c in tiled)
    for c in tiled:
        threads = int(c.translation_info.split("workgroup_size = [")[1].split(",")[0])
        assert threads <= cuda_tiles.MAX_THREADS and threads % 32 == 0
    # 384 is not divisible by 256: the 128x256 tile is dropped, others stay.
    names = {c.name for c in matmul.tuning_configurations(op(384, 384, 512, "f16t", "f16t", "f16t"), target)}
    assert "tile_config_128x256_32x3_tensorcore_mmasync" not in names
    assert "tile_config_128x128_32x5_tensorcore_mmasync" in names
    # Ten stages of 64x64x32 f16 tiles need 80 KiB; 256x256x64 with 4 stages needs 256 KiB.
    assert cuda_tiles.shared_memory_bytes(64, 64, 32, 10, 2) == 81920
    assert matmul.cuda_tensorcore_configuration(op(512, 512, 512, "f16t", "f16t", "f16t"), "sm_89",
                                                256, 256, 64, 4) is None


def test_reference_honours_layouts():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-2, 3, (5, 7)), rng.integers(-2, 3, (7, 3))
    assert np.array_equal(op(5, 3, 7).reference(a, b), a @ b)
    assert np.array_equal(op(5, 3, 7, "f32n", "f32n").reference(a.T.copy(), b.T.copy()), a @ b)


def test_emitted_mlir_carries_the_configuration_only_when_asked():
    o = op(64, 64, 64, "f32t", "f32n")
    default = o.emit_mlir("f", TuningConfiguration("default"))
    assert "compilation_info" not in default and "indexing_maps" in default
    tiled = o.emit_mlir("f", matmul.cpu_configuration(AVX2, MatmulTile(64, 64, 8, 16, 8), DataType.f32))
    assert "compilation_info = #compilation" in tiled and "DoubleTilingExpert" in tiled
    assert Layout.ColumnMajor.value == "n"


def test_summary_never_ranks_a_configuration_iree_ignored():
    from iree_dispatch_profiler.sweep.performance_report import PerformanceResult, summary
    from iree_dispatch_profiler.core.stats import Estimate

    def row(config, ms, applied):
        return PerformanceResult(f"op_{config}", "op", config, "", {}, 2_000_000, 1,
                                 runtime=Estimate(ms, ms * 0.99, ms * 1.01, 0.01, 5),
                                 speedup=Estimate(2.0 / ms, 1.9 / ms, 2.1 / ms, 0.01, 5),
                                 samples=[ms] * 5, verification="SUCCESS", config_applied=applied)

    text = summary([row("default", 2.0, "n.a."), row("tile_a", 1.0, "no"), row("tile_b", 1.6, "yes")])
    assert "fastest tile_b" in text and "1.25x [1.19, 1.31] vs default" in text
    assert "best: faster than runner-up default by 1.25x" in text and "tile_a" not in text
    assert "ignored" in row("tile_a", 1.0, "no").block()


def test_a_runtime_without_an_interval_is_said_in_words_and_never_the_fastest():
    """One round of a big problem: no interval, so neither a leader nor `[nan, nan]`."""
    from iree_dispatch_profiler.core.stats import Estimate, estimate
    from iree_dispatch_profiler.sweep.performance_report import PerformanceResult, summary

    ranked = PerformanceResult("op_default", "op", "default", "", {}, 2_000_000, 1,
                               runtime=Estimate(2.0, 1.98, 2.02, 0.01, 6), samples=[2.0] * 6,
                               verification="SUCCESS")
    single = PerformanceResult("op_dt", "op", "dt", "", {}, 2_000_000, 1,
                               runtime=estimate([0.7]), speedup=estimate([2.8]), samples=[0.7],
                               verification="SUCCESS")
    text = summary([ranked, single])
    assert "fastest default" in text and "not ranked (no interval: too few rounds): dt" in text
    block = single.block()
    assert "nan" not in block and "[no interval: 1 round]: not ranked" in block
    assert "Speedup       : 2.800x [no interval: 1 round]" in block
