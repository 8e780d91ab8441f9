"""autotune.py with the real tools: the seed's module and cfg end to end, --list on a multi-op
module, the exported tuning spec applies, a killed run resumes, bad config files are one line."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from helpers import DATA_DIR as DATA, QUICK_TUNING as QUICK, ROOT, run_script

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools


def seed_config(folder, drop_iree_bin=True, replace=None):
    """The seed's auto-scheduler.cfg and module in `folder` (its placeholder iree_bin dropped)."""
    shutil.copy(DATA / "seed_matmul.mlir", folder / "matmul.mlir")
    lines = (DATA / "auto-scheduler.cfg").read_text().splitlines()
    if drop_iree_bin:
        lines = [line for line in lines if not line.startswith("iree_bin")]
    for key, value in (replace or {}).items():
        lines = [f"{key} = {value}" if line.startswith(f"{key} ") else line for line in lines]
    (folder / "auto-scheduler.cfg").write_text("\n".join(lines) + "\n")
    return folder / "auto-scheduler.cfg"


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("seed")
    config = seed_config(folder)
    result = run_script("autotune.py", "--config", config, "--n-trial", "5", *QUICK)
    return folder, result


def test_seed_config_end_to_end(seed_run):
    folder, result = seed_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ignored on llvm-cpu" in result.stdout  # block_dim_* and pipeline_depth
    trials = pd.read_csv(folder / "matmul.csv")
    assert len(trials) == 5 and trials["candidate"].is_unique
    assert "flags_data_tiling" in set(trials["candidate"])  # flag points are searched by default
    tiles = trials[trials["candidate"].str.startswith("tile_config_")]
    # the cfg's lists are the distribution and reduction tiles
    assert set(tiles["tile_m"]) <= {64, 128} and set(tiles["tile_n"]) <= {32, 64}
    assert set(tiles["tile_k"]) <= {32, 64, 128, 256}
    ok = trials[trials["status"] == "ok"]
    assert len(ok) >= 3 and (ok["verified"] == "yes").all()
    assert (tiles["config_applied"] == "yes").all()
    assert ((ok["speedup_ci_low"] <= ok["speedup"]) & (ok["speedup"] <= ok["speedup_ci_high"])).all()
    assert "IREE's default ranks" in result.stdout and "answer:" in result.stdout
    for suffix in ("_best.mlir", "_tuning_spec.mlir", "_progress.png"):
        assert (folder / f"matmul{suffix}").stat().st_size > 0
    assert "Phase timings: baseline" in (folder / "matmul.log").read_text()


def test_tuning_spec_applies_to_the_untouched_module(seed_run, tools, tmp_path):
    """Compiled here with the spec, IREE's dumped configuration carries the best tile config."""
    folder, result = seed_run
    assert "applies to the untouched module: op 0 yes" in result.stdout
    best = (folder / "matmul_best.mlir").read_text()
    distribution = best[best.index("distribution = "):].split("]")[0] + "]"
    from iree_dispatch_profiler.iree.target import resolve_target
    from iree_dispatch_profiler.core.library import Target
    target = resolve_target(tools, Target())
    command = [str(tools.compile), str(folder / "matmul.mlir"), *target.compiler_flags(),
               f"--iree-codegen-tuning-spec-path={folder / 'matmul_tuning_spec.mlir'}",
               f"--iree-hal-dump-executable-configurations-to={tmp_path}", "-o",
               str(tmp_path / "m.vmfb")]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    dumped = "".join(p.read_text() for p in tmp_path.glob("*.mlir"))
    assert distribution in dumped


def test_list_shows_every_tunable_op_of_a_multi_op_module():
    result = run_script("autotune.py", "--input", DATA / "multi_op.mlir", "--list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("3 tunable ops")
    assert "linalg.matmul" in lines[2] and "m=256 n=384 k=512" in lines[2] and "mlp" in lines[2]
    assert "linalg.batch_matmul" in lines[3] and "batch=4 m=64 n=96 k=32" in lines[3]
    assert "linalg.conv_2d_nhwc_hwcf" in lines[4] and "filter=3x3 c=16" in lines[4]
    assert "norm" not in result.stdout  # a sum of squares is a reduction, not a contraction


def test_a_multi_op_module_tunes_each_op_in_its_function(tmp_path):
    """Peeled points only, so that IREE is seen applying the loop-peeling translation too."""
    output = tmp_path / "multi.csv"
    (tmp_path / "peel.cfg").write_text("[SearchSpace]\npeel = [1]\n")
    result = run_script("autotune.py", "--input", DATA / "multi_op.mlir", "--op", "0,1",
                        "--config", tmp_path / "peel.cfg", "--n-trial", "2", "--flags=",
                        "--tuner", "random", "--output", output, *QUICK)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = pd.read_csv(output)
    assert sorted(set(trials["op"])) == [0, 1] and len(trials) == 4
    assert (trials["status"] == "ok").all() and set(trials["function"]) == {"mlp"}
    assert (trials["config_applied"] == "yes").all() and (trials["peel"] == 1).all()
    best = (tmp_path / "multi_best.mlir").read_text()
    assert best.count("compilation_info = #") == 2


def test_a_lone_attention_is_tuned_and_its_spec_applies(tmp_path):
    """An iree_linalg_ext.attention (as generator.py emits it) is a tunable op: candidates carry
    their config into the online_attention IREE compiles, verify, and the exported spec (a
    matcher on that online_attention) configures the untouched module."""
    from iree_dispatch_profiler.core.library import DEFAULT_CONFIGURATION
    from iree_dispatch_profiler.ops.attention import AttentionOperation
    source = tmp_path / "attention.mlir"
    source.write_text(AttentionOperation(2, 64, 32, 48, 32).emit_mlir("main", DEFAULT_CONFIGURATION))
    listed = run_script("autotune.py", "--input", source, "--list")
    assert "iree_linalg_ext.attention  attention" in listed.stdout
    assert "batch=2 m=64 k1=32 k2=48 n=32" in listed.stdout
    output = tmp_path / "attention.csv"
    result = run_script("autotune.py", "--input", source, "--output", output, "--n-trial", "3",
                        "--flags=", "--tuner", "random", *QUICK)
    assert result.returncode == 0, result.stdout + result.stderr
    trials = pd.read_csv(output)
    assert len(trials) == 3 and (trials["status"] == "ok").all()
    assert (trials["config_applied"] == "yes").all()
    assert "applies to the untouched module: op 0 yes" in result.stdout
    assert '"iree_linalg_ext.online_attention"' in (tmp_path / "attention_tuning_spec.mlir").read_text()


def test_a_killed_run_resumes_without_measuring_finished_trials(tmp_path):
    output = tmp_path / "resume.csv"
    args = [sys.executable, str(ROOT / "autotune.py"), "--input", str(DATA / "seed_matmul.mlir"),
            "--output", str(output), "--n-trial", "6", "--batch-size", "2", "--tuner", "random",
            *QUICK, "--calibration=quick"]  # the machine's state is recorded per session
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if output.is_file() and len(output.read_text().splitlines()) >= 3:  # header + 2 trials
            break
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = pd.read_csv(output)
    assert 2 <= len(before) < 6
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"resuming after {len(before)} finished trials" in result.stdout
    # the killed session's start calibration was kept; this one's is compared with it
    assert "Machine state against the session this run resumes: " in result.stdout
    sessions = json.loads((tmp_path / "resume_machine.json").read_text())
    assert len(sessions) == 2 and sessions[0]["end"] is None and sessions[1]["end"]["at"]
    after = pd.read_csv(output)
    assert len(after) == 6 and after["candidate"].is_unique
    pd.testing.assert_frame_equal(after.head(len(before)), before)
    # the same output asked of other flags or another module is not this run to resume
    for other in (["--flags=--iree-opt-level=O2"], ["--input", str(DATA / "multi_op.mlir")]):
        refused = subprocess.run([*args, *other], cwd=ROOT, capture_output=True, text=True,
                                 timeout=120)
        name = other[0].split("=")[0]
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"{output} is of a run begun with other {name}: give another --output" in refused.stderr
    pd.testing.assert_frame_equal(pd.read_csv(output), after)


@pytest.mark.parametrize("replace, message", [
    ({"tile_m": "64"}, "[SearchSpace] tile_m must be a non-empty list"),
    ({"block_dim_z": "[2]"}, "block_dim_z must be [1]"),
    ({"block_dim_x": "[1024]"}, "reaches 2048 threads"),
    ({"tile_k": "[100000]"}, "no valid tile config in tile_m=[64, 128], tile_n=[32, 64], tile_k=[100000]"),
    ({"tuner": "SimulatedTuner"}, "tuner SimulatedTuner is unknown"),
    ({"tile_m": "[64]\npeel = [2]"}, "peel must hold values among [0, 1]"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, replace, message):
    result = run_script("autotune.py", "--config", seed_config(tmp_path, replace=replace))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "matmul.csv").exists()


def test_the_seed_placeholder_iree_bin_is_named(tmp_path):
    result = run_script("autotune.py", "--config", seed_config(tmp_path, drop_iree_bin=False))
    assert result.returncode == 2 and "[Env] iree_bin:" in result.stderr
    assert "xxx/iree_build/tools is not a directory" in result.stderr


@pytest.mark.parametrize("cpu, triple", [("haswell", ""), ("skylake-avx512", ""),
                                         ("neoverse-n1", "aarch64-unknown-linux-gnu")])
def test_tile_points_compile_for_each_simd_family(tools, tmp_path, cpu, triple):
    """Tile points of autotune.py's spaces for CPUs other than this one, cross-compiled up to
    IREE's codegen (where a config is accepted or rejected): none is rejected."""
    from iree_dispatch_profiler.iree import tunable
    from iree_dispatch_profiler.tuning import space as tuning_space
    from iree_dispatch_profiler.iree.launchers import compile_command
    from iree_dispatch_profiler.iree.process import run
    from iree_dispatch_profiler.iree.target import resolve_target
    from iree_dispatch_profiler.core.library import Target
    target = resolve_target(tools, Target(cpu=cpu, target_triple=triple))
    module = DATA / "multi_op.mlir"
    for op in tunable.find(module)[:2]:  # the matmul and the batch_matmul
        tiles = tuning_space.build(op, target.resolved_cpu(), {}, {}).tiles
        for point in tiles[::max(1, len(tiles) // 6)]:
            config = tuning_space.configuration(op, point)
            source = tmp_path / f"op{op.index}_{point.name}.mlir"
            source.write_text(tunable.with_configs(module, {op.index: config.compilation_info}))
            result = run(compile_command(tools, target, source, tmp_path / "out.mlir",
                                         ["--compile-to=executable-targets"]), 300)
            assert result.ok, f"{cpu} {point.name}: {result.failure('iree-compile', 300)}"
