"""generate -> compile -> verify -> profile -> CSV with the real IREE tools on small, odd shapes.

The sweep runs for this machine's CPU and, on an AVX-512 machine, again pinned to haswell (two
data types): AVX2 code runs on every x86-64 machine with AVX2, so an AVX-512 machine also
checks what an AVX2 user gets (on an AVX2 machine the first sweep is that check)."""
import json
import platform
import re
from pathlib import Path

import pandas as pd
import pytest

from helpers import FAST, run_script
from iree_dispatch_profiler.sweep.performance_report import COLUMNS

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools

X86 = platform.machine().lower() in ("x86_64", "amd64")


def has_avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # unknown: check AVX2 as well


CPUS = ["host"] + (["haswell"] if X86 and has_avx512() else [])
# one type of each element width on this machine's CPU (f16 is test_operations'); on
# haswell, one float and one mixed type
DATA_TYPES = {"host": "f32t_f32t_f32t,i8t_i8t_i32t,bf16t_bf16n_f32t",
              "haswell": "f32t_f32t_f32t,bf16t_bf16n_f32t"}


def tile_configs(gen: Path, operation: str) -> list[str]:
    """The tile configs generated for a matmul (names differ from CPU to CPU)."""
    folder = gen / "generated/linalg/matmul" / operation
    return sorted(p.stem[len(operation) + 1:] for p in folder.glob(f"{operation}_tile_config_*.mlir"))


@pytest.fixture(scope="session", params=CPUS)
def sweep(tmp_path_factory, request):
    """M = 1, K = 1, prime sizes, a column-major operand, tiles larger than the problem."""
    gen = tmp_path_factory.mktemp(f"sweep_{request.param}")
    generated = run_script("generator.py", "--generated-dir", gen, f"--cpu={request.param}",
                           "--problem-m=1,67",
                           "--problem-n=131", "--problem-k=1,64",
                           f"--data-types={DATA_TYPES[request.param]}")
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
    assert (data["ci_low"] <= data["Runtime(ms)"]).all() and (data["Runtime(ms)"] <= data["ci_high"]).all()
    others = data[data["Configuration"] != "default"]  # speedups are over default, same rounds
    assert (others["speedup_ci_low"] <= others["speedup"]).all() and others["speedup"].notna().all()
    assert data[data["Configuration"] == "default"]["speedup"].isna().all()
    assert set(data["drift"]) <= {"no", "re-measured", "yes"}
    assert set(data["precision_reached"]) <= {"yes", "no"}
    assert set(COLUMNS) <= set(data.columns)
    assert {"matmul_1x131x1_f32t_f32t_f32t", "matmul_67x131x64_bf16t_bf16n_f32t"} <= set(data["Operation"])
    cpu = manifest["target"]["cpu_target"]
    assert (data["vector bytes"] == cpu["native_vector_bytes"]).all()
    assert data["cpu features"].str.contains("avx2|neon").all()
    assert all(Path(log).is_file() for log in data["compile log"])


def test_requested_tile_configs_are_applied_and_defaults_say_na(sweep):
    data = pd.read_csv(sweep[3])
    tiled = data[data["Configuration"].str.startswith("tile_config_")]
    types = data["Operation"].str.split("_", n=2).str[2].nunique()
    assert types in (2, 3) and len(tiled) >= 8 * types  # the 67x131x64 operation of each type
    assert (tiled["Config applied"] == "yes").all()
    assert (data[~data.index.isin(tiled.index)]["Config applied"] == "n.a.").all()


def test_report_blocks_and_summary(sweep):
    out = sweep[2].stdout
    # 67 and 131 are prime: every tile leaves a remainder and runs peeled
    assert re.search(r"Dispatch      : matmul_67x131x64_f32t_f32t_f32t_tile_config_\d+x\d+_\d+x\d+x\d+_peel\n",
                     out)
    assert re.search(r"Target        : llvm-cpu:\S+, \w+, \d+-byte vectors \(", out)
    assert "Provider      : IREE Codegen" in out
    assert "Arguments     : --batch_count=1 --m=67 --n=131 --k=64" in out
    # the fastest is named best only when significantly faster than the runner-up
    assert re.search(r"matmul_67x131x64_f32t_f32t_f32t: fastest \S+ [\d.]+ ms \[[\d.]+, [\d.]+\], "
                     r"[^;\n]*; (tied with|best: faster than runner-up)", out)
    assert re.search(r"Runtime\(ms\)   : [\d.]+  \[[\d.]+, [\d.]+\] \(median of \d+ rounds", out)
    assert re.search(r"Speedup       : [\d.]+x \[[\d.]+, [\d.]+\] over default", out)
    lines = out.strip().splitlines()  # the run ends with the count, then where the CSV is
    assert re.fullmatch(r"\d+ dispatches: \d+ ok, 0 FAILED/ERROR", lines[-2])
    assert lines[-1] == f"Performance report: {sweep[3]}"


def test_second_compile_finds_everything_up_to_date(sweep):
    again = run_script("compile.py", "--generated-dir", sweep[0], "-j", "1")
    assert again.returncode == 0
    assert "Compiled 0, from cache 0, up-to-date" in again.stdout and "failed 0" in again.stdout


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
    operation = "matmul_64x64x64_f32t_f32t_f32t"
    folder = gen / "generated/linalg/matmul" / operation
    wrong_config, broken_config = tile_configs(gen, operation)[:2]
    wrong = folder / f"{operation}_{wrong_config}.mlir"
    wrong.write_text(wrong.read_text().replace("arith.constant 0.0 : f32", "arith.constant 1.0 : f32"))
    # A negative tile size is invalid on every CPU.
    broken = folder / f"{operation}_{broken_config}.mlir"
    broken.write_text(re.sub(r"vector_reduction = \[0, 0, (\d+)\]", r"vector_reduction = [0, 0, -\1]",
                             broken.read_text()))
    compiled = run_script("compile.py", "--generated-dir", gen)
    csv = gen / "data.csv"
    profiled = run_script("profiler.py", "--generated-dir", gen, "--output", csv, *FAST)
    return compiled, profiled, pd.read_csv(csv).set_index("Configuration"), wrong_config, broken_config


def test_a_config_that_cannot_compile_is_recorded_and_its_siblings_are_profiled(tampered):
    compiled, profiled, data, wrong, broken = tampered
    assert compiled.returncode == 1 and "failed 1" in compiled.stdout
    assert f"FAILED matmul_64x64x64_f32t_f32t_f32t_{broken}: iree-compile: " in compiled.stdout
    row = data.loc[broken]
    # IREE's first error line, without the dumped file's path (its name and line and the op
    # there are said last); the full text is in the log.
    assert row["Verification"] == "ERROR" and row["Reason"].startswith("iree-compile: ")
    assert "/" not in row["Reason"] and "error:" in Path(row["compile log"]).read_text()
    assert re.search(r" \(at [\w$.]+\.mlir:\d+: [\w.]+\)$", row["Reason"]), row["Reason"]
    assert len(data) == 12
    assert (data.drop([broken, wrong])["Verification"] == "SUCCESS").all()


def test_what_iree_aborts_on_is_left_out_with_a_note(tools, tmp_path):
    """ops.known_failures, cross-compiled so that every machine sees it: the generator leaves
    bf16 data tiling out for a CPU model whose avx512bf16 is turned off, and iree-compile still
    aborts on it. Once IREE compiles it, this fails and the rule should go."""
    from iree_dispatch_profiler.core.library import DATA_TILING_CONFIGURATION, Target
    from iree_dispatch_profiler.iree.launchers import compile_command
    from iree_dispatch_profiler.iree.process import run
    from iree_dispatch_profiler.iree.target import resolve_target

    cpu = ["--cpu=emeraldrapids", "--target-triple=x86_64-unknown-linux-gnu",
           "--cpu-features=-avx512bf16"]
    generated = run_script("generator.py", "--generated-dir", tmp_path, *cpu, "--problem-m=16",
                           "--problem-n=16", "--problem-k=16",
                           "--data-types=bf16t_bf16t_f32t,f32t_f32t_f32t")
    assert generated.returncode == 0, generated.stderr
    assert ("Left out 1 dispatches IREE aborts on for this target: bf16 data tiling with ukernels"
            in generated.stdout)
    names = {p.stem for p in tmp_path.glob("generated/linalg/matmul/*/*.mlir")}
    assert "matmul_16x16x16_f32t_f32t_f32t_default_data_tiling" in names
    assert "matmul_16x16x16_bf16t_bf16t_f32t_default" in names
    assert "matmul_16x16x16_bf16t_bf16t_f32t_default_data_tiling" not in names
    target = resolve_target(tools, Target(cpu="emeraldrapids", cpu_features="-avx512bf16",
                                          target_triple="x86_64-unknown-linux-gnu"))
    source = next(tmp_path.glob("generated/linalg/matmul/*bf16*/*_default.mlir"))
    result = run(compile_command(tools, target, source, tmp_path / "dt.vmfb",
                                 list(DATA_TILING_CONFIGURATION.flags)), 300)
    assert result.returncode is not None and result.returncode < 0
    assert "Do not know how to split this operator's operand" in result.stderr


def test_a_wrong_result_is_failed_with_its_error_and_the_run_exits_1(tampered):
    _, profiled, data, wrong, _ = tampered
    row = data.loc[wrong]
    assert row["Verification"] == "FAILED" and row["max_abs_error"] == pytest.approx(1.0, rel=1e-4)
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
