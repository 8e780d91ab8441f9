"""The profiler times the computation, not the invocation: its per-dispatch time agrees with
iree-benchmark-module --dispatch_statistics run by hand on the same vmfb."""
import json
import statistics

import pandas as pd

from conftest import run_script
from iree_dispatch_profiler.iree.launchers import WARMUP_SECONDS, run
from iree_dispatch_profiler.sweep.build import CompileRecord
from iree_dispatch_profiler.sweep.manifest import Manifest
from iree_dispatch_profiler.sweep.verification import ReferenceCache


def test_profiler_time_is_the_dispatch_time(tmp_path, tools):
    # 512^3 f32: one dispatch per invocation (no repeats), whose invocation here costs ~1.35x
    # the dispatch itself.
    assert run_script("generator.py", "--generated-dir", tmp_path, "--problem-m=512",
                      "--problem-n=512", "--problem-k=512", "--data-types=f32t_f32t_f32t",
                      "--dispatches=_default$").returncode == 0
    assert run_script("compile.py", "--generated-dir", tmp_path).returncode == 0
    manifest = Manifest.load(tmp_path)
    dispatch = manifest.dispatches[0]
    paths = manifest.paths(dispatch)
    assert CompileRecord.load(paths.compile_record).repeat_count == 1
    inputs = [f"--input={b.flag}" for b in
              ReferenceCache(manifest.reference_folder(dispatch.operation), dispatch.operation).ensure_inputs()]
    ours, direct = [], []
    for i in range(5):  # alternate, so that both see the same machine states
        csv = tmp_path / f"run{i}.csv"
        profiled = run_script("profiler.py", "--generated-dir", tmp_path, "--output", csv,
                              "--time-budget=2", "--verification-enabled=false")
        assert profiled.returncode == 0, profiled.stderr
        ours.append(float(pd.read_csv(csv)["Runtime(ms)"].iloc[0]))
        result = run([str(tools.benchmark_module), f"--module={paths.profile_vmfb}",
                      f"--function={dispatch.name}", "--device=local-task", *inputs,
                      "--dispatch_statistics", "--benchmark_repetitions=5",
                      "--benchmark_min_time=0.05s", f"--benchmark_min_warmup_time={WARMUP_SECONDS}",
                      "--benchmark_format=json"], timeout=120)  # warmed up as the profiler is
        rows = [b for b in json.loads(result.stdout)["benchmarks"] if "calls" in b]
        assert rows and all(b["time_unit"] == "ms" for b in rows)
        direct.append(statistics.median(b["real_time"] for b in rows))
    ratio = statistics.median(ours) / statistics.median(direct)
    assert 0.8 < ratio < 1.2, (ours, direct)
