"""Large GEMMs: tiles with cache levels, data-tiled configurations (early data tiling, a tuning
spec that configures the mmt4d) and matmuls that pack their own operands into a wider register
tile are generated, compiled with their config applied, verified and timed on this machine, and
applied when cross-compiled for AVX2, AVX-512 and NEON."""
import json
import re

import pandas as pd
import pytest

from helpers import FAST, STOP_AFTER_CODEGEN, run_script
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG
from iree_dispatch_profiler.ops import cpu_tiles

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools

EDGE = cpu_tiles.MIN_LARGE_DIMENSION  # the smallest large problem: cheap to compile and run
SHAPE = [f"--problem-m={EDGE}", f"--problem-n={EDGE}", f"--problem-k={EDGE}", "--data-types=f32"]
OPERATION = f"matmul_{EDGE}x{EDGE}x{EDGE}_f32t_f32t_f32t"


def sweep(gen, generator_args: list[str], profiler_args: list[str]):
    """generator.py, compile.py and profiler.py run in `gen`: profiler.py's run and its CSV."""
    assert run_script("generator.py", "--generated-dir", gen, *generator_args).returncode == 0
    compiled = run_script("compile.py", "--generated-dir", gen)
    assert compiled.returncode == 0, compiled.stdout[-2000:]
    csv = gen / "data.csv"
    profiled = run_script("profiler.py", "--generated-dir", gen, "--output", csv,
                          *profiler_args, *FAST)
    return profiled, pd.read_csv(csv)


@pytest.fixture(scope="module")
def large_sweep(tmp_path_factory):
    gen = tmp_path_factory.mktemp("large")
    return gen, *sweep(gen, SHAPE, ["--providers=iree,numpy"])


def test_cache_and_data_tiled_configs_verify_and_apply(large_sweep):
    _, profiled, data = large_sweep
    assert profiled.returncode == 0, profiled.stdout[-3000:]
    assert (data["Verification"] == "SUCCESS").all() and (data["Runtime(ms)"] > 0).all()
    names = data["Configuration"]
    cached = data[names.str.fullmatch(r"tile_config_\d+x\d+_\d+x\d+x\d+_\d+x\d+x\d+(_peel)?")]
    data_tiled = data[names.str.startswith("data_tiling_")]
    assert len(cached) == cpu_tiles.CACHE_TILED
    assert data_tiled["Configuration"].str.endswith("_ukernels").sum() == len(data_tiled) / 2 > 0
    packed = data[names.str.startswith("packed_")]  # verified above, as every row
    assert len(packed) == cpu_tiles.PACKED
    assert (pd.concat([cached, data_tiled, packed])["Config applied"] == "yes").all()


def test_a_data_tiled_config_is_compiled_with_its_spec(large_sweep):
    gen = large_sweep[0]
    folder = gen / "generated/linalg/matmul" / OPERATION
    record = json.loads(next(folder.glob(f"{OPERATION}_data_tiling_*_ukernels.compile.json")).read_text())
    spec = next(f for f in record["flags"] if f.startswith(SPEC_FLAG)).split("=", 1)[1]
    assert spec.endswith("_ukernels_spec.mlir") and '["linalg.mmt4d"]' in open(spec).read()
    assert "--iree-global-opt-enable-early-materialization" in record["flags"]
    # the source's matmul carries no config (it would turn data tiling off)
    source = (folder / f"{record['dispatch']}.mlir").read_text()
    assert "compilation_info" not in source


def packed_dumps(folder) -> list[str]:
    """The executable configurations IREE dumped for the packed configs compiled in `folder`."""
    return [d.read_text() for d in folder.glob("generated/linalg/matmul/*/configs/*packed_*/*.mlir")]


def test_a_packed_matmuls_unpack_writes_whole_rows_and_stays_exact_past_a_partial_tile(tmp_path):
    """The unpack carries its own config (M0 rows of whole tiles a workgroup: IREE's own blocks
    write pieces of rows far apart), which IREE applies; N = EDGE + 8 ends in part of a 16- or
    32-wide tile, written by workgroups of their own, and M = EDGE in part of a 6- or 12-row
    one, and the products are still numpy's."""
    n = EDGE + 8
    shape = [f"--problem-m={EDGE}", f"--problem-n={n}", f"--problem-k={EDGE}", "--data-types=f32"]
    profiled, data = sweep(tmp_path, [*shape, "--dispatches=packed_"], [])
    assert profiled.returncode == 0, profiled.stdout[-3000:]
    assert len(data) == cpu_tiles.PACKED and (data["Verification"] == "SUCCESS").all()
    unpacks = [text for text in packed_dumps(tmp_path) if "linalg.unpack" in text]
    assert len(unpacks) == cpu_tiles.PACKED
    for text in unpacks:
        assert re.search(rf"distribution = \[(6|12), {EDGE}\], vector_common_parallel = \[\1, ", text)


# N = 1004 ends in part of each family's register tile (16, 32 and 8 wide)
@pytest.mark.parametrize("cpu, triple, block", [
    ("haswell", "", "[6, 992]"), ("skylake-avx512", "", "[12, 992]"),
    ("neoverse-n1", "aarch64-unknown-linux-gnu", "[12, 1000]")])
def test_a_packed_matmul_ending_in_part_of_a_tile_builds_on_each_simd_family(tmp_path, cpu,
                                                                             triple, block):
    """An unpack block ending in part of a tile takes a stack buffer of the block: on AVX-512,
    12 rows of 1024 f32 (49152 bytes, over IREE's 32 KiB limit). The rows' whole tiles and
    the rest, in workgroups of their own, build for every family (cross-compiled)."""
    shape = [f"--problem-m={EDGE}", "--problem-n=1004", f"--problem-k={EDGE}", "--data-types=f32"]
    target = [f"--cpu={cpu}"] + ([f"--target-triple={triple}"] if triple else [])
    assert run_script("generator.py", "--generated-dir", tmp_path, *shape, *target,
                      "--dispatches=packed_").returncode == 0
    compiled = run_script("compile.py", "--generated-dir", tmp_path)
    assert compiled.returncode == 0 and "failed 0" in compiled.stdout, compiled.stdout[-2000:]
    unpacks = [t for t in packed_dumps(tmp_path) if "linalg.unpack" in t]
    assert len(unpacks) == cpu_tiles.PACKED
    assert all(f"distribution = {block}" in t for t in unpacks)


# IREE's f32 inner tile and our register tile on each SIMD family
@pytest.mark.parametrize("cpu, triple, inner, register", [
    ("haswell", "", "8x8x1", "6x16x1"), ("skylake-avx512", "", "16x16x1", "12x32x1"),
    ("neoverse-n1", "aarch64-unknown-linux-gnu", "8x8x1", "12x8x1")])
def test_large_configs_apply_when_cross_compiled(tmp_path, cpu, triple, inner, register):
    target = [f"--cpu={cpu}"] + ([f"--target-triple={triple}"] if triple else [])
    assert run_script("generator.py", "--generated-dir", tmp_path, *SHAPE, *target).returncode == 0
    manifest = json.loads((tmp_path / "generated/manifest.json").read_text())
    names = [c["name"] for c in manifest["operations"][0]["configurations"]]
    assert any(n.startswith("data_tiling_") and inner in n for n in names), names
    assert any(n.startswith("packed_") and n.endswith(register) for n in names), names
    compiled = run_script("compile.py", "--generated-dir", tmp_path, STOP_AFTER_CODEGEN)
    assert compiled.returncode == 0, compiled.stdout[-2000:]
    assert "failed 0" in compiled.stdout and "NOTE" not in compiled.stdout  # every config applied
    # and the packed matmul's unpack took its own config: M0 whole rows a workgroup
    unpacks = [t for t in packed_dumps(tmp_path) if "linalg.unpack" in t]
    rows = f"distribution = [{register.split('x')[0]}, {EDGE}]"
    assert len(unpacks) == cpu_tiles.PACKED and all(rows in t for t in unpacks)


def square_matmul(path):
    square = f"tensor<{EDGE}x{EDGE}xf32>"
    path.write_text(
        f"func.func @mm(%a: {square}, %b: {square}) -> {square} {{\n"
        "  %zero = arith.constant 0.0 : f32\n"
        f"  %init = tensor.empty() : {square}\n"
        f"  %c = linalg.fill ins(%zero : f32) outs(%init : {square}) -> {square}\n"
        f"  %r = linalg.matmul ins(%a, %b : {square}, {square}) outs(%c : {square}) -> {square}\n"
        f"  return %r : {square}\n}}\n")
    return path


def test_the_tuner_tries_data_tiled_configs_and_exports_their_spec_and_flags(tmp_path):
    """autotune.py on a large matmul: its data-tiled points compile with their flags and a spec
    for the mmt4d, carry their config, verify, and a winner's spec applies with the flags."""
    square_matmul(tmp_path / "mm.mlir")
    (tmp_path / "dt.cfg").write_text("[Env]\ninput_file = mm.mlir\noutput_file = dt.csv\n"
                                     "[SearchSpace]\ndata_tiling = [1, 2]\n"
                                     "[SearchStrategy]\ntuner = grid\nn_trial = 3\n")
    result = run_script("autotune.py", "--calibration=off", "--store=off", "--config", tmp_path / "dt.cfg", "--flags=",
                        "--batch-seconds", "1", "--confirm-seconds", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    trials = pd.read_csv(tmp_path / "dt.csv")
    assert trials["candidate"].str.startswith("data_tiling_").all() and len(trials) == 3
    assert trials["candidate"].str.endswith("_ukernels").any()  # the seeds: both ukernel choices
    assert (trials["config_applied"] == "yes").all() and (trials["verified"] == "yes").all()
    assert "linalg.mmt4d" in (tmp_path / "dt_tuning_spec.mlir").read_text()
    assert "--iree-global-opt-enable-early-materialization" in (tmp_path / "dt_spec_flags.txt").read_text()
    assert "applies to the untouched module: op 0 yes" in result.stdout
    assert not (tmp_path / "dt_best.mlir").exists()  # no source-attached config to inline


@pytest.mark.parametrize("cpu, triple", [("haswell", ""), ("neoverse-n1", "aarch64-unknown-linux-gnu")])
def test_the_tuners_data_tiled_seeds_apply_when_cross_compiled(tools, tmp_path, cpu, triple):
    """The tuner's spec matches the mmt4d by its packed types, which depend on the target's
    inner tile (8x8x1 on AVX2 and NEON): each seed's config is applied there."""
    from iree_dispatch_profiler.core.library import Target
    from iree_dispatch_profiler.iree import tunable
    from iree_dispatch_profiler.iree.config_check import configuration_applied
    from iree_dispatch_profiler.iree.launchers import compile_command
    from iree_dispatch_profiler.iree.process import run
    from iree_dispatch_profiler.iree.target import resolve_target
    from iree_dispatch_profiler.tuning import spec as tuning_spec
    from iree_dispatch_profiler.tuning import space as tuning_space
    target = resolve_target(tools, Target(cpu=cpu, target_triple=triple))
    module = square_matmul(tmp_path / "mm.mlir")
    op = tunable.find(module)[0]
    seeds = tuning_space.build(op, target.resolved_cpu(), {}, {}, data_tiled=True).seeds
    assert len(seeds) == 2 and all("_8x8x1" in p.name for p in seeds)
    for point in seeds:
        config = tuning_space.configuration(op, point)
        spec = tmp_path / f"{point.name}_spec.mlir"
        spec.write_text(tuning_spec.spec([(op, config)], tuning_space.spec_matchers(op, point)))
        dump = tmp_path / f"{point.name}_configs"
        result = run(compile_command(tools, target, module, tmp_path / "out.mlir", [
            *config.flags, f"{SPEC_FLAG}={spec}", "--compile-to=executable-targets",
            f"--iree-hal-dump-executable-configurations-to={dump}"]), 300)
        assert result.ok, f"{cpu} {point.name}: {result.failure('iree-compile', 300)}"
        assert configuration_applied(dump, config) == "yes", f"{cpu} {point.name}"
