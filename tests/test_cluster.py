"""Compiling on a real Dask cluster (distributed.LocalCluster, 2 worker processes) and the
content-addressed compile cache."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from helpers import FAST, ROOT, run_script

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools

OPERATION = "matmul_64x64x64_f32t_f32t_f32t"
FOLDER = Path("generated/linalg/matmul") / OPERATION


@pytest.fixture(scope="module")
def scheduler():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        yield cluster.scheduler_address, client


def generate(folder: Path, *extra: str) -> Path:
    result = run_script("generator.py", "--generated-dir", folder, "--problem-m=64",
                        "--problem-n=64", "--problem-k=64", "--data-types=f32t_f32t_f32t", *extra)
    assert result.returncode == 0, result.stderr
    return folder


def some(gen: Path) -> str:
    """--dispatches for the default and two tile configs (their names depend on the CPU)."""
    tiles = sorted(p.stem for p in (gen / FOLDER).glob(f"{OPERATION}_tile_config_*.mlir"))[:2]
    return f"--dispatches={OPERATION}_default$,{tiles[0]}$,{tiles[1]}$"


def records(gen: Path) -> dict[str, dict]:
    return {p.name.removesuffix(".compile.json"): json.loads(p.read_text())
            for p in (gen / FOLDER).glob("*.compile.json")}


def artifacts(gen: Path) -> dict[str, bytes]:
    """Every vmfb and dumped configuration, by path relative to the operation's folder."""
    folder = gen / FOLDER
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and (p.suffix == ".vmfb" or "configs" in p.parts)}


def test_a_sweep_through_the_scheduler_makes_the_local_pool_s_artifacts(scheduler, tmp_path):
    address, _ = scheduler
    local, remote = generate(tmp_path / "local"), generate(tmp_path / "remote")
    done = run_script("compile.py", "--generated-dir", local, some(local), "--no-cache")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_script("compile.py", "--generated-dir", remote, some(remote), "--no-cache",
                      "--scheduler", address)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"on the Dask cluster at {address} (2 worker threads)" in done.stdout
    assert "Compiled 3, from cache 0, up-to-date 0, failed 0" in done.stdout
    # Byte for byte: relative paths inside the job make builds independent of where they ran.
    assert artifacts(local) == artifacts(remote) and len(artifacts(local)) >= 3 * 2  # vmfb, configs
    here, there = records(local), records(remote)
    assert here.keys() == there.keys() and len(here) == 3
    for name, record in there.items():
        assert record["status"] == here[name]["status"] == "ok"
        assert record["config_applied"] == here[name]["config_applied"]
        assert record["compiled_on"].startswith("tcp://") and here[name]["compiled_on"] == "local"
    assert len({r["compiled_on"] for r in there.values()}) == 2  # both workers compiled


def test_a_worker_killed_mid_sweep_loses_no_dispatch(scheduler, tmp_path):
    address, client = scheduler
    gen = generate(tmp_path / "gen")
    command = [sys.executable, str(ROOT / "compile.py"), "--generated-dir", str(gen),
               "--no-cache", "--scheduler", address]
    sweep = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    pids = client.run(os.getpid)
    deadline = time.time() + 120
    while not records(gen) and time.time() < deadline:  # mid-sweep: the first dispatch is done
        time.sleep(0.2)
    os.kill(next(iter(pids.values())), signal.SIGKILL)  # its compile in flight dies with it
    out, err = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, out + err
    manifest = json.loads((gen / "generated/manifest.json").read_text())
    expected = len(manifest["operations"][0]["configurations"])
    done = records(gen)
    assert len(done) == expected and all(r["status"] == "ok" for r in done.values()), out
    assert "failed 0" in out


@pytest.mark.parametrize("script", ["compile.py", "autotune.py"])
def test_an_unreachable_scheduler_is_one_line_and_exit_2_within_15_s(script, tmp_path):
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    args = (["--generated-dir", generate(tmp_path / "gen")] if script == "compile.py" else
            ["--input", ROOT / "tests/data/seed_matmul.mlir", "--output", tmp_path / "t.csv"])
    start = time.perf_counter()
    result = run_script(script, *args, "--scheduler", f"tcp://127.0.0.1:{port}")
    assert time.perf_counter() - start < 15
    assert result.returncode == 2 and not result.stdout.strip() and not (tmp_path / "t.csv").exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach a Dask scheduler" in lines[0], result.stderr


def standin_tools(folder: Path, tools, unavailable: str) -> Path:
    """A bin dir of the real tools but `unavailable`: a stand-in that answers --version as the
    real one and fails anything else, leaving a mark, so that a run of it is seen."""
    folder.mkdir()
    real = {t.name: t for t in (tools.compile, tools.run_module, tools.benchmark_module)}
    version = subprocess.run([real[unavailable], "--version"], capture_output=True, text=True)
    (folder / "version.txt").write_text(version.stdout)
    for name, tool in real.items():
        if name != unavailable:
            (folder / name).symlink_to(tool)
    script = folder / unavailable
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then cat {folder}/version.txt; exit 0; fi\n"
                      f"touch {folder}/ran\necho 'error: {unavailable} is unavailable' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


def test_a_cache_hit_runs_no_iree_compile_and_profiles_verified(tools, tmp_path):
    cache = ["--cache-dir", tmp_path / "cache"]
    first = generate(tmp_path / "first")
    done = run_script("compile.py", "--generated-dir", first, some(first), *cache)
    assert done.returncode == 0 and "Compiled 3, from cache 0" in done.stdout, done.stdout + done.stderr
    builds = int(re.search(r"Compile cache: 0 hits, (\d+) misses", done.stdout).group(1))
    assert builds == 3  # one build per dispatch

    # Another sweep of the same dispatches, with iree-compile unavailable.
    bin_dir = standin_tools(tmp_path / "bin", tools, "iree-compile")
    again = generate(tmp_path / "again")
    done = run_script("compile.py", "--generated-dir", again, some(again), *cache,
                      "--iree-bin-dir", bin_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (bin_dir / "ran").exists()
    assert "Compiled 0, from cache 3, up-to-date 0, failed 0" in done.stdout
    assert f"Compile cache: {builds} hits, 0 misses (hit rate 100%)" in done.stdout
    assert artifacts(again) == artifacts(first)
    assert all(r["cache"] == "hit" for r in records(again).values())
    log = next((again / FOLDER).glob("*tile_config*.compile.log")).read_text()
    assert "restored from the compile cache" in log

    csv = tmp_path / "data.csv"
    profiled = run_script("profiler.py", "--generated-dir", again, some(again), "--output", csv,
                          *FAST)
    assert profiled.returncode == 0, profiled.stdout[-2000:] + profiled.stderr
    data = pd.read_csv(csv).set_index("Configuration")
    assert len(data) == 3 and (data["Verification"] == "SUCCESS").all()
    assert (data["Runtime(ms)"] > 0).all() and (data["compile cache"] == "hit").all()
    tiles = data[data.index.str.startswith("tile_config")]
    assert len(tiles) == 2 and (tiles["Config applied"] == "yes").all()
    assert (data["timed on"] == socket.gethostname()).all()


def test_identical_jobs_in_flight_compile_once(tools, tmp_path):
    from iree_dispatch_profiler.iree.builder import Builder
    from iree_dispatch_profiler.iree.compile_cache import CompileCache
    from iree_dispatch_profiler.iree.target import resolve_target
    from iree_dispatch_profiler.core.library import Target

    target = resolve_target(tools, Target())
    builder = Builder(tools, target, tools.version(), CompileCache(tmp_path / "cache"))
    source = ROOT / "tests/data/seed_matmul.mlir"
    results = {}

    def compile(name: str) -> None:
        results[name] = builder.compile(source, tmp_path / f"{name}.vmfb", [], 300)

    twins = [threading.Thread(target=compile, args=(n,)) for n in ("a", "b")]
    for twin in twins:
        twin.start()
    for twin in twins:
        twin.join()
    assert all(r.ok for r in results.values())
    assert sorted(r.cache for r in results.values()) == ["hit", "miss"]
    assert builder.cache.misses == 1  # one lookup missed, one compile ran
    assert (tmp_path / "a.vmfb").read_bytes() == (tmp_path / "b.vmfb").read_bytes()


def test_the_cache_prunes_least_recently_used_entries(tmp_path):
    cache = tmp_path / "cache"
    gen = generate(tmp_path / "gen")
    done = run_script("compile.py", "--generated-dir", gen, some(gen), "--cache-dir", cache)
    assert done.returncode == 0, done.stderr
    entries = sorted(cache.glob("??/*"), key=lambda e: (e / "entry.json").stat().st_mtime)
    oldest = entries[0]
    os.utime(oldest / "entry.json", (0, 0))
    sizes = sum(f.stat().st_size for e in entries for f in e.rglob("*") if f.is_file())
    # A limit one byte short of everything: only the least recently used entry goes.
    done = run_script("compile.py", "--generated-dir", gen, some(gen), "--cache-dir", cache,
                      "--cache-max-size", str(sizes - 1))
    assert done.returncode == 0 and "1 least recently used entries pruned" in done.stdout, done.stdout
    assert not oldest.exists() and len(list(cache.glob("??/*"))) == len(entries) - 1
    bad = run_script("compile.py", "--generated-dir", gen, "--cache-max-size", "lots")
    assert bad.returncode == 2 and "--cache-max-size" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("profile_on", [False, True])
def test_autotune_compiles_on_the_cluster_and_times_where_asked(scheduler, tmp_path, profile_on):
    address, client = scheduler
    worker = sorted(client.scheduler_info()["workers"])[-1]
    output = tmp_path / "tune.csv"
    done = run_script("autotune.py", "--calibration=off", "--store=off", "--input", ROOT / "tests/data/seed_matmul.mlir", "--output",
                      output, "--n-trial=2", "--batch-size=2", "--batch-seconds=1",
                      "--confirm-seconds=1", "--flags=", "--scheduler", address, "--no-cache",
                      *(["--profile-on", worker] if profile_on else []))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    trials = pd.read_csv(output)
    assert len(trials) == 2 and (trials["status"] == "ok").all(), trials.to_string()
    assert trials["compiled_on"].str.startswith("tcp://127.0.0.1:").all()
    if profile_on:
        assert trials["timed_on"].str.startswith(worker + " (").all()
    else:
        assert (trials["timed_on"] == socket.gethostname()).all()
    assert "Compile cache: " in done.stdout


def test_profile_on_a_worker_verifies_and_times_there(scheduler, tools, tmp_path):
    address, client = scheduler
    gen = generate(tmp_path / "gen")
    assert run_script("compile.py", "--generated-dir", gen, some(gen)).returncode == 0
    worker = sorted(client.scheduler_info()["workers"])[0]
    # Here, neither runtime tool works: what runs, runs on the worker.
    bin_dir = standin_tools(tmp_path / "bin", tools, "iree-benchmark-module")
    (bin_dir / "iree-run-module").unlink()
    (bin_dir / "iree-run-module").symlink_to(bin_dir / "iree-benchmark-module")
    csv = tmp_path / "data.csv"
    done = run_script("profiler.py", "--generated-dir", gen, some(gen), "--output", csv, *FAST,
                      "--iree-bin-dir", bin_dir, "--scheduler", address, "--profile-on", worker)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert not (bin_dir / "ran").exists()
    data = pd.read_csv(csv)
    assert len(data) == 3 and (data["Verification"] == "SUCCESS").all()
    assert (data["Runtime(ms)"] > 0).all() and data["timed on"].str.startswith(worker + " (").all()
    assert (data[data["Configuration"] != "default"]["Config applied"] == "yes").all()

    alone = run_script("profiler.py", "--calibration=off", "--generated-dir", gen, "--profile-on", worker)
    assert alone.returncode == 2 and "--profile-on needs --scheduler" in alone.stderr
    numpy = run_script("profiler.py", "--calibration=off", "--generated-dir", gen, "--providers=iree,numpy",
                       "--scheduler", address, "--profile-on", worker)
    assert numpy.returncode == 2 and "numpy runs here" in numpy.stderr


@pytest.mark.parametrize("cpu", [["--cpu=skylake-avx512"],
                                 ["--cpu=neoverse-n1", "--target-triple=aarch64-unknown-linux-gnu"]],
                         ids=["avx512", "neon"])
def test_other_cpus_compile_on_the_cluster_under_their_own_cache_keys(scheduler, tmp_path, cpu):
    """Cross-compiled on the workers; the default dispatch's MLIR is the host's to the byte, and
    still no host entry answers it: the resolved target is in the key."""
    address, _ = scheduler
    cache = ["--cache-dir", tmp_path / "cache"]
    host = generate(tmp_path / "host")
    assert run_script("compile.py", "--generated-dir", host, some(host), *cache).returncode == 0
    other = generate(tmp_path / "other", *cpu)
    default = f"{OPERATION}_default.mlir"
    assert (other / FOLDER / default).read_text() == (host / FOLDER / default).read_text()
    done = run_script("compile.py", "--generated-dir", other, some(other), *cache,
                      "--scheduler", address, "--verify-only")  # an old command line
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Compiled 3, from cache 0, up-to-date 0, failed 0" in done.stdout
    there = records(other)
    assert all(r["compiled_on"].startswith("tcp://") for r in there.values())
    assert [r["config_applied"] for n, r in sorted(there.items()) if "tile_config" in n] == ["yes", "yes"]
