"""The target model with the real iree-compile: resolution of `host`, cross-compiling for the three
SIMD families with no config IREE rejects, and refusing to run code this machine cannot run."""
import json
import platform

import pytest

from helpers import FAST, STOP_AFTER_CODEGEN, run_script

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools

X86 = platform.machine().lower() in ("x86_64", "amd64")
CROSS_TARGETS = {
    "haswell": ["--cpu=haswell", "--target-triple=x86_64-unknown-linux-gnu"],
    "skylake-avx512": ["--cpu=skylake-avx512", "--target-triple=x86_64-unknown-linux-gnu"],
    "neoverse-n1": ["--cpu=neoverse-n1", "--target-triple=aarch64-unknown-linux-gnu"],
}
# One shape per kind, large enough (>= 64) for the whole tile space, small enough to compile fast.
# The matmuls take every data type; batch matmuls (a matmul's tiles under a batch tile of 1),
# fused ops and convolutions one of each element width (4, 2 and 1 bytes: what the
# vector-size check sees) and a mixed-precision one.
SHAPES = [
    ["--operation-kind=matmul,split_k_matmul", "--problem-m=64", "--problem-n=128",
     "--problem-k=64", "--split-k-slices=2"],
    ["--operation-kind=batch_matmul", "--problem-m=64", "--problem-n=128", "--problem-k=64",
     "--problem-b=2", "--data-types=f32,f16,bf16t_bf16t_f32t,i8t_i8t_i32t"],
    ["--operation-kind=fused_matmul", "--problem-m=64", "--problem-n=128", "--problem-k=64",
     "--epilogues=bias_gelu", "--data-types=f32,f16,bf16t_bf16t_f32t"],
    ["--operation-kind=fused_matmul", "--problem-m=64", "--problem-n=128", "--problem-k=64",
     "--epilogues=bias_relu", "--data-types=i8t_i8t_i32t"],
    ["--operation-kind=conv2d", "--input-n=2", "--input-h=10", "--input-w=18", "--input-c=32",
     "--filter-h=3", "--filter-w=3", "--filter-f=64", "--data-types=f32,bf16t_bf16t_f32t,i8t_i8t_i32t"],
]


def manifest(gen):
    return json.loads((gen / "generated" / "manifest.json").read_text())


def test_host_is_resolved_to_a_concrete_cpu_and_recorded(tmp_path):
    result = run_script("generator.py", "--generated-dir", tmp_path, "--problem-m=64",
                        "--problem-n=64", "--problem-k=64", "--data-types=f32")
    assert result.returncode == 0, result.stderr
    cpu = manifest(tmp_path)["target"]["cpu_target"]
    assert cpu["name"] not in ("", "host", "generic")
    assert cpu["native_vector_bytes"] in (16, 32, 64) and cpu["arch"] == platform.machine().lower().replace("arm64", "aarch64")
    assert "+" in cpu["features"] and cpu["l2_cache_bytes"] > 0
    assert f"Target CPU: {cpu['name']}, " in result.stdout


@pytest.mark.parametrize("name", CROSS_TARGETS)
def test_every_generated_config_compiles_for_each_simd_family(tmp_path, name):
    for shape in SHAPES:
        result = run_script("generator.py", "--generated-dir", tmp_path, *CROSS_TARGETS[name], *shape)
        assert result.returncode == 0, result.stderr
    # Our tile configs are what is checked here (IREE's own defaults are IREE's business).
    compiled = run_script("compile.py", "--generated-dir", tmp_path,
                          "--dispatches=_tile_config_", STOP_AFTER_CODEGEN)
    failures = [line for line in compiled.stdout.splitlines() if line.startswith("FAILED")]
    assert compiled.returncode == 0 and "failed 0" in compiled.stdout, failures[:5]
    operations = manifest(tmp_path)["operations"]
    assert {e["operation"]["kind"] for e in operations} == {
        "matmul", "batch_matmul", "split_k_matmul", "fused_matmul", "conv2d"}
    for entry in operations:
        if entry["operation"]["kind"] in ("matmul", "batch_matmul", "fused_matmul", "conv2d"):
            tiled = [c for c in entry["configurations"] if c["name"].startswith("tile_config_")]
            assert len(tiled) >= 8, entry["operation"]


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """One dispatch compiled for the other architecture: this machine cannot run it."""
    gen = tmp_path_factory.mktemp("foreign")
    other = CROSS_TARGETS["neoverse-n1" if X86 else "haswell"]
    assert run_script("generator.py", "--generated-dir", gen, *other, "--problem-m=8",
                      "--problem-n=8", "--problem-k=8", "--data-types=f32",
                      "--dispatches=_default$").returncode == 0
    assert run_script("compile.py", "--generated-dir", gen).returncode == 0
    return gen


def test_running_code_for_another_cpu_is_a_one_line_error(foreign):
    result = run_script("profiler.py", "--generated-dir", foreign)
    assert result.returncode == 2, result.stdout
    assert "this machine cannot run them" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    # Listing what would run needs no such machine.
    assert run_script("profiler.py", "--generated-dir", foreign, "--dry-run").returncode == 0


@pytest.mark.skipif(not X86, reason="AVX-512 code is foreign only to x86 machines without it")
def test_avx512_code_on_a_machine_without_it_is_refused_and_haswell_code_runs_anywhere(tmp_path):
    host = run_script("generator.py", "--generated-dir", tmp_path / "host", "--problem-m=8",
                      "--problem-n=8", "--problem-k=8", "--data-types=f32")
    features = manifest(tmp_path / "host")["target"]["cpu_target"]["features"].split(",")
    assert host.returncode == 0
    for cpu in ("skylake-avx512", "haswell"):
        gen = tmp_path / cpu
        assert run_script("generator.py", "--generated-dir", gen, f"--cpu={cpu}", "--problem-m=8",
                          "--problem-n=8", "--problem-k=8", "--data-types=f32",
                          "--dispatches=_default$").returncode == 0
        assert run_script("compile.py", "--generated-dir", gen).returncode == 0
        result = run_script("profiler.py", "--generated-dir", gen, *FAST)
        if cpu == "skylake-avx512" and "+avx512f" not in features:
            assert result.returncode == 2 and "lacks avx512" in result.stderr
        else:
            assert result.returncode == 0, result.stdout + result.stderr
