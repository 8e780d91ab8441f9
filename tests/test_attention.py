"""The attention kind: its reference, its tile rules on every SIMD family, and generate ->
compile -> verify -> profile with the real tools (configs applied, the default beaten)."""
import itertools

import numpy as np
import pandas as pd
import pytest

from helpers import AVX2, AVX512, FAST, NEON, STOP_AFTER_CODEGEN, run_script
from iree_dispatch_profiler.core.library import DataType
from iree_dispatch_profiler.ops import cpu_tiles
from iree_dispatch_profiler.ops.attention import AttentionOperation

SMALL = ["--operation-kind=attention", "--problem-b=2", "--problem-m=64", "--problem-k1=32",
         "--problem-k2=48", "--problem-n=32"]


def test_reference_is_the_softmax_of_scaled_scores_times_values():
    op = AttentionOperation(2, 3, 4, 5, 6)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape) for shape, _ in op.inputs)
    expected = np.zeros(op.output[0])
    for b, i in itertools.product(range(2), range(3)):
        scores = np.array([q[b, i] @ k[b, j] for j in range(5)]) / np.sqrt(4)
        weights = np.exp(scores) / np.exp(scores).sum()
        expected[b, i] = sum(w * v[b, j] for j, w in enumerate(weights))
    assert np.allclose(op.reference(q, k, v), expected)
    assert op.name == "attention_2x3x4x5x6_f32" and op.flops == 2 * 2 * 3 * 5 * (4 + 6)


def test_the_scale_is_rounded_to_the_element_type():
    assert AttentionOperation(1, 8, 64, 8, 8).scale == 0.125
    scale = AttentionOperation(1, 8, 80, 8, 8, DataType.f16).scale
    assert scale == float(np.float16(1 / np.sqrt(80))) and scale != 1 / np.sqrt(80)


@pytest.mark.parametrize("cpu", [AVX2, AVX512, NEON], ids=lambda c: c.name)
@pytest.mark.parametrize("shape", [(12, 128, 64, 128, 64), (8, 256, 128, 256, 128), (2, 64, 32, 48, 32)])
def test_attention_tiles_are_legal_and_at_least_8(cpu, shape):
    _, m, k1, k2, n = shape
    tiles = cpu_tiles.attention_tiles(cpu, m, n, k1, k2)
    assert len(set(tiles)) == len(tiles) >= 8
    for t in tiles:
        assert cpu_tiles.is_legal_attention_tile(cpu, k1, t.vm, t.vn, t.vk2)
        assert t.dm % t.vm == 0 and t.dn % t.vn == 0 and n % t.vn == 0 and t.vk2 <= k2


def test_the_vector_size_rule_counts_the_whole_key_head_dim():
    """IREE keeps k1 whole: Q K^T's contract spans 8 rows x 16 keys x 64 = 32 KiB of f32, the
    AVX-512 limit (measured: `large vector sizes (32768 bytes)`); 8 keys pass."""
    assert not cpu_tiles.is_legal_attention_tile(AVX512, 64, 8, 16, 16)
    assert cpu_tiles.is_legal_attention_tile(AVX512, 64, 8, 64, 8)


@pytest.fixture(scope="module")
def attention_sweep(tmp_path_factory):
    gen = tmp_path_factory.mktemp("attention")
    generated = run_script("generator.py", "--generated-dir", gen, *SMALL,
                           "--data-types=f32t_f32t_f32t,f16t_f16t_f16t")
    assert generated.returncode == 0, generated.stderr
    compiled = run_script("compile.py", "--generated-dir", gen)
    assert compiled.returncode == 0, compiled.stdout[-2000:]
    csv = gen / "data.csv"
    # Whether a tile beats IREE's default is a speed figure load can erase: measured in
    # benchmarks/bench_operations.py, not asserted here.
    profiled = run_script("profiler.py", "--generated-dir", gen, "--output", csv,
                          "--providers=iree,numpy", *FAST)
    return profiled, pd.read_csv(csv)


@pytest.mark.iree
def test_attention_dispatches_verify_against_numpy_and_configs_apply(attention_sweep):
    profiled, data = attention_sweep
    assert profiled.returncode == 0, profiled.stdout[-3000:]
    assert set(data["Operation"]) == {"attention_2x64x32x48x32_f32", "attention_2x64x32x48x32_f16"}
    assert (data["Verification"] == "SUCCESS").all() and (data["Runtime(ms)"] > 0).all()
    tiled = data[data["Configuration"].str.startswith("tile_config_")]
    assert len(tiled) >= 16 and (tiled["Config applied"] == "yes").all()
    assert set(data[data["Provider"] == "numpy"]["Configuration"]) == {"numpy"}
    # its decomposition into matmuls is a configuration of its own, verified like the others
    assert len(data[data["Configuration"] == "default_decomposed"]) == 2  # f32, f16


@pytest.mark.iree
@pytest.mark.parametrize("cpu, triple", [("haswell", ""), ("skylake-avx512", ""),
                                        ("neoverse-n1", "aarch64-unknown-linux-gnu")])
def test_attention_configs_compile_for_other_cpus(tmp_path, cpu, triple):
    target = [f"--cpu={cpu}"] + ([f"--target-triple={triple}"] if triple else [])
    assert run_script("generator.py", "--generated-dir", tmp_path, *SMALL, *target,
                      "--data-types=f32").returncode == 0
    compiled = run_script("compile.py", "--generated-dir", tmp_path, STOP_AFTER_CODEGEN)
    assert compiled.returncode == 0, compiled.stdout[-2000:]
    assert "failed 0" in compiled.stdout and "NOTE" not in compiled.stdout  # every config applied


@pytest.mark.iree
def test_an_attention_is_tuned_with_its_decomposition_too(tmp_path):
    """Beside its tile configs, a single attention's search has its decomposition into two
    matmuls as flag points, verified against numpy like every candidate; a winner is
    written as flags."""
    import shlex
    from iree_dispatch_profiler.tuning.space import ATTENTION_FLAG_POINTS
    assert run_script("generator.py", "--generated-dir", tmp_path, *SMALL,
                      "--data-types=f32").returncode == 0
    (module,) = tmp_path.glob("generated/linalg/attention/*/*_default.mlir")
    output = tmp_path / "att.csv"
    tuned = run_script("autotune.py", "--input", module, "--n-trial", "3", "--output", output,
                       "--calibration=off", "--store=off", "--batch-seconds", "1",
                       "--confirm-seconds", "2")
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr
    trials = pd.read_csv(output).set_index("candidate")
    flags = [f"flags_{name}" for name in ATTENTION_FLAG_POINTS]
    assert (trials.loc[flags, "status"] == "ok").all(), trials.loc[flags, ["status", "reason"]]
    best = tmp_path / "att_best_flags.txt"
    if best.exists():  # a flag point won: the file holds its flags, quoted for a shell
        assert shlex.split(best.read_text()) in [shlex.split(f)
                                                for f in ATTENTION_FLAG_POINTS.values()]
