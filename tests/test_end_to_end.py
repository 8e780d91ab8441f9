"""generate -> compile -> verify -> profile -> CSV with the real IREE tools on small, odd shapes."""
import json

import pandas as pd
import pytest

from conftest import run_script
from performance_report import COLUMNS

FAST = ["--benchmark-min-time=0.01", "--benchmark-repetitions=2"]


@pytest.fixture(scope="session")
def sweep(tmp_path_factory):
    """M = 1, K = 1, prime sizes, a column-major operand, tiles larger than the problem."""
    gen = tmp_path_factory.mktemp("sweep")
    generated = run_script("generator.py", "--generated-dir", gen, "--problem-m=1,67",
                           "--problem-n=131", "--problem-k=1,64",
                           "--data-types=f32t_f32t_f32t,f16t_f16t_f16t,i8t_i8t_i32t,bf16t_bf16n_f32t")
    assert generated.returncode == 0, generated.stderr
    compiled = run_script("compile.py", "--generated-dir", gen)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    csv = gen / "data.csv"
    profiled = run_script("profiler.py", "--generated-dir", gen, "--output", csv, *FAST)
    return gen, compiled, profiled, csv


def test_every_dispatch_verifies_and_is_timed(sweep):
    gen, _, profiled, csv = sweep
    assert profiled.returncode == 0, profiled.stdout[-3000:]
    data = pd.read_csv(csv)
    manifest = json.loads((gen / "generated" / "manifest.json").read_text())
    expected = sum(len(e["configurations"]) for e in manifest["operations"])
    assert len(data) == expected == data["Dispatch"].nunique()
    assert (data["Verification"] == "SUCCESS").all()
    assert (data["Runtime(ms)"] > 0).all() and (data["GFLOPs"] > 0).all()
    assert set(COLUMNS) <= set(data.columns)
    assert {"matmul_1x131x1_f32t_f32t_f32t", "matmul_67x131x64_bf16t_bf16n_f32t"} <= set(data["Operation"])


def test_requested_tile_configs_are_applied_and_defaults_say_na(sweep):
    data = pd.read_csv(sweep[3])
    tiled = data[data["Configuration"].str.startswith("tile_config_")]
    assert len(tiled) >= 8 * 4  # the 67x131x64 operation of each data type
    assert (tiled["Config applied"] == "yes").all()
    assert (data[~data.index.isin(tiled.index)]["Config applied"] == "n.a.").all()


def test_report_blocks_and_summary(sweep):
    out = sweep[2].stdout
    assert "Dispatch      : matmul_67x131x64_f32t_f32t_f32t_tile_config_256x128_16x32x8" in out
    assert "Provider      : IREE Codegen" in out
    assert "Arguments     : --batch_count=1 --m=67 --n=131 --k=64" in out
    assert "matmul_67x131x64_f32t_f32t_f32t: best " in out and "x vs default" in out


def test_second_compile_finds_everything_up_to_date(sweep):
    again = run_script("compile.py", "--generated-dir", sweep[0], "-j", "1")
    assert again.returncode == 0
    assert "Compiled 0, up-to-date" in again.stdout and "failed 0" in again.stdout


def test_resume_skips_dispatches_already_in_the_csv(sweep):
    gen, _, _, csv = sweep
    before = len(pd.read_csv(csv))
    resumed = run_script("profiler.py", "--generated-dir", gen, "--output", csv, "--resume", *FAST)
    assert resumed.returncode == 0
    assert f"{before} dispatches already in" in resumed.stdout and "0 to go" in resumed.stdout
    assert len(pd.read_csv(csv)) == before


def test_dry_run_runs_and_writes_nothing(sweep, tmp_path):
    out = tmp_path / "dry.csv"
    dry = run_script("profiler.py", "--generated-dir", sweep[0], "--dry-run", "--output", out,
                     "--dispatches=_default$")
    assert dry.returncode == 0 and "would be profiled" in dry.stdout
    assert not out.exists()


def test_target_conflicting_with_the_generated_one_is_refused(sweep):
    result = run_script("compile.py", "--generated-dir", sweep[0], "--device=cuda")
    assert result.returncode == 2
    assert "conflicts with the generated dispatches' target llvm-cpu" in result.stderr


@pytest.fixture(scope="session")
def tampered(tmp_path_factory):
    """One dispatch computes the wrong thing, one cannot compile; their siblings are fine."""
    gen = tmp_path_factory.mktemp("tampered")
    assert run_script("generator.py", "--generated-dir", gen, "--problem-m=64", "--problem-n=64",
                      "--problem-k=64", "--data-types=f32t_f32t_f32t").returncode == 0
    folder = gen / "generated/linalg/matmul/matmul_64x64x64_f32t_f32t_f32t"
    wrong = folder / "matmul_64x64x64_f32t_f32t_f32t_tile_config_64x64_8x32x8.mlir"
    wrong.write_text(wrong.read_text().replace("arith.constant 0.0 : f32", "arith.constant 1.0 : f32"))
    broken = folder / "matmul_64x64x64_f32t_f32t_f32t_tile_config_32x32_8x16x16.mlir"
    broken.write_text(broken.read_text().replace("vector_reduction = [0, 0, 16]",
                                                 "vector_reduction = [0, 0, -16]"))
    compiled = run_script("compile.py", "--generated-dir", gen)
    csv = gen / "data.csv"
    profiled = run_script("profiler.py", "--generated-dir", gen, "--output", csv, *FAST)
    return compiled, profiled, pd.read_csv(csv).set_index("Configuration")


def test_a_config_that_cannot_compile_is_recorded_and_its_siblings_are_profiled(tampered):
    compiled, profiled, data = tampered
    assert compiled.returncode == 1 and "failed 1" in compiled.stdout
    assert "FAILED matmul_64x64x64_f32t_f32t_f32t_tile_config_32x32_8x16x16" in compiled.stdout
    row = data.loc["tile_config_32x32_8x16x16"]
    assert row["Verification"] == "ERROR" and "iree-compile exited" in row["Reason"]
    assert len(data) == 12
    assert (data.drop(["tile_config_32x32_8x16x16", "tile_config_64x64_8x32x8"])["Verification"]
            == "SUCCESS").all()


def test_a_wrong_result_is_failed_with_its_error_and_the_run_exits_1(tampered):
    _, profiled, data = tampered
    row = data.loc["tile_config_64x64_8x32x8"]
    assert row["Verification"] == "FAILED" and row["max_abs_error"] == pytest.approx(1.0)
    assert "max abs err 1" in row["Reason"]
    assert profiled.returncode == 1 and "2 FAILED/ERROR" in profiled.stdout


def test_cuda_sm80_f16_sweep_compiles_with_configs_applied(tmp_path):
    gen = tmp_path
    assert run_script("generator.py", "--generated-dir", gen, "--device=cuda", "--cuda-arch=sm_80",
                      "--problem-m=256", "--problem-n=128", "--problem-k=128",
                      "--data-types=f16t_f16t_f16t,f16t_f16t_f32t").returncode == 0
    compiled = run_script("compile.py", "--generated-dir", gen)
    assert compiled.returncode == 0, compiled.stdout
    records = [json.loads(p.read_text()) for p in gen.glob("generated/linalg/matmul/*/*.compile.json")]
    tensorcore = [r for r in records if r["dispatch"].endswith("_tensorcore_mmasync")]
    assert len(tensorcore) >= 4 and all(r["config_applied"] == "yes" for r in tensorcore)
    assert all(r["status"] == "ok" and r["vmfb_bytes"] > 0 for r in records)
