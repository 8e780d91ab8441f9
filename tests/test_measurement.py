"""The profiler times the computation, not the invocation: its per-dispatch time agrees with
IREE's own record of each dispatch run (HAL device profiling, read by hand with iree-profile) on
the same vmfb."""
import pytest
import json
import statistics

import pandas as pd

from helpers import default_f32_matmul, run_script
from iree_dispatch_profiler.iree.process import run
from iree_dispatch_profiler.iree.timing import WARMUP_SECONDS
from iree_dispatch_profiler.sweep.build import CompileRecord

# every test here drives the real IREE tools, and compares two timings of one dispatch
pytestmark = [pytest.mark.iree, pytest.mark.serial]


def test_profiler_time_is_the_dispatch_time(tmp_path, tools):
    # 512^3 f32: one dispatch per invocation (no repeats), whose invocation here costs ~1.35x
    # the dispatch itself.
    manifest, dispatch, paths, buffers = default_f32_matmul(tmp_path, 512, 512, 512)
    assert CompileRecord.load(paths.compile_record).repeat_count == 1
    inputs = [f"--input={b.flag}" for b in buffers]
    ours, direct = [], []
    for i in range(5):  # alternate, so that both see the same machine states
        csv = tmp_path / f"run{i}.csv"
        profiled = run_script("profiler.py", "--calibration=off", "--generated-dir", tmp_path, "--output", csv,
                              "--time-budget=2", "--verification-enabled=false")
        assert profiled.returncode == 0, profiled.stderr
        ours.append(float(pd.read_csv(csv)["Runtime(ms)"].iloc[0]))
        profile = tmp_path / f"run{i}.ireeprof"
        result = run([str(tools.benchmark_module), f"--module={paths.vmfb}",
                      f"--function={dispatch.name}", "--device=local-task", *inputs,
                      "--benchmark_min_time=20x", f"--benchmark_min_warmup_time={WARMUP_SECONDS}",
                      "--device_profiling_mode=host-execution",
                      f"--device_profiling_output={profile}"], timeout=120)
        assert result.ok, result.stderr
        events = run([str(tools.profile), "dispatch", "--format=jsonl", "--dispatch_events",
                      str(profile)], timeout=120)
        runs = [json.loads(line) for line in events.stdout.splitlines()]
        durations = [r["duration_ns"] * 1e-6 for r in runs if r.get("type") == "host_dispatch_event"]
        assert len(durations) >= 20
        # a median of runs, as the profiler's: a mean is moved by the slow runs a busy machine adds
        direct.append(statistics.median(durations))
    # each side at its quietest round: a neighbour that starts mid-run (seen: every round from
    # the third twice as slow, one side's run only in some) moves a median of five rounds
    ratio = min(ours) / min(direct)
    assert 0.8 < ratio < 1.2, (ours, direct)
