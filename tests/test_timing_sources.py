"""Every timing source through the one registry (iree.timers), on a real small dispatch: each
times it, says it did, and falls back where it cannot; the profiler names the source of each
row in its report block and CSV."""
from dataclasses import replace

import pandas as pd
import pytest

from helpers import default_f32_matmul, run_script
from iree_dispatch_profiler.iree import timing
from iree_dispatch_profiler.iree.process import ProcessResult, run
from iree_dispatch_profiler.iree.timing import Benchmark, DEVICE_PROFILING, DISPATCH_STATISTICS
from iree_dispatch_profiler.iree.resident import RESIDENT
from iree_dispatch_profiler.iree.timers import DEFAULT_SOURCE, TIMING_SOURCES, Timers
from iree_dispatch_profiler.sweep.build import CompileRecord

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """128^3 f32 at IREE's default: small enough that the vmfb repeats its dispatch."""
    folder = tmp_path_factory.mktemp("timing")
    _, dispatch, paths, buffers = default_f32_matmul(folder, 128, 128, 128)
    repeats = CompileRecord.load(paths.compile_record).repeat_count
    assert repeats > 1
    return folder, paths.vmfb, dispatch.name, [b.flag for b in buffers], repeats


@pytest.mark.serial  # one source's time against another's
@pytest.mark.parametrize("source", list(TIMING_SOURCES))
def test_each_timing_source_times_the_dispatch(source, small, tools, tmp_path):
    _, vmfb, function, inputs, repeats = small
    with Timers(source, tools, log_dir=tmp_path) as timers:
        timer = timers.benchmark(vmfb, function, "local-task", inputs, repeats)
        reference = Benchmark(tools, vmfb, function, "local-task", inputs, repeats,
                              source=DISPATCH_STATISTICS)
        pairs = [(timer.sample(0.02), reference.sample(0.02)) for _ in range(3)]
    assert all(a.ok and b.ok for a, b in pairs), pairs
    assert timer.source == source
    # per computation, the repeats divided out: what the sources time differs by the call
    # around the dispatch, never by the repeat count
    ratio = sorted(a.ms / b.ms for a, b in pairs)[1]
    assert 0.3 < ratio < repeats / 2, (source, pairs)


def test_device_profiling_counts_every_run_of_a_repeated_build(small, tools):
    _, vmfb, function, inputs, repeats = small
    timer = Benchmark(tools, vmfb, function, "local-task", inputs, repeats, source=DEVICE_PROFILING)
    assert timer.sample(0.02).ok and timer.source == DEVICE_PROFILING
    assert list(timer.runs_per_call.values()) == [repeats]  # a call runs the dispatch R times
    (calls, ms), = timer.rows[-1].values()
    assert calls == 1 and ms > 0  # per computation, as --dispatch_statistics reports it
    # a call's span, its R runs from the first's start to the last's end, per computation:
    # no shorter than the runs in it, no longer than the whole call
    span, = timer.spans
    assert 0.8 * ms <= span <= timer.invocations[-1], (ms, span, timer.invocations)
    # Google Benchmark counts items: --batch_size=R with Nx is N / R calls, R runs each
    command = timer.command(0, timer.vmfb.with_suffix(".ireeprof"), calls=3)
    assert f"--benchmark_min_time={3 * repeats}x" in command
    assert run(command, 120).ok
    read = run([str(tools.profile), "dispatch", "--format=jsonl", "--dispatch_events",
                str(timer.vmfb.with_suffix(".ireeprof"))], 120)
    assert [len(v) for v in timing.runs_by_dispatch(timing.host_events(read.stdout)).values()] == [3 * repeats]


def test_sources_fall_back_where_they_cannot_time(small, tools, tmp_path):
    _, vmfb, function, inputs, repeats = small
    with Timers(RESIDENT, tools, log_dir=tmp_path) as timers:
        # runtime flags, or a need for each dispatch's time: the worker cannot give them
        assert timers.benchmark(vmfb, function, "local-task", inputs,
                                flags=["--task_topology_max_group_count=1"]).source == DEVICE_PROFILING
        assert timers.benchmark(vmfb, function, "local-task", inputs,
                                per_dispatch=True).source == DEVICE_PROFILING
    # no iree-profile in the build, or a remote worker whose profile file is out of reach
    without = Benchmark(replace(tools, profile=None), vmfb, function, "local-task", inputs)
    assert without.source == DISPATCH_STATISTICS and without.sample(0.02).ok

    def elsewhere(command, timeout) -> ProcessResult:
        return run(command, timeout)
    remote = Benchmark(tools, vmfb, function, "local-task", inputs, runner=elsewhere)
    assert remote.source == DISPATCH_STATISTICS


def test_a_source_refused_on_the_first_sample_hands_over_to_the_next(small, tools):
    """CUDA's runtime refuses HAL-native profiling (UNIMPLEMENTED): here a build whose
    iree-profile is another IREE tool refuses to read the profile, the same first failure."""
    _, vmfb, function, inputs, repeats = small
    refusing = replace(tools, profile=tools.run_module)
    timer = Benchmark(refusing, vmfb, function, "local-task", inputs, repeats)
    assert timer.source == DEVICE_PROFILING
    assert timer.sample(0.02).ok and timer.source == DISPATCH_STATISTICS
    # a timeout is the benchmark's own failure: no other source is tried
    slow = Benchmark(refusing, vmfb, function, "local-task", inputs, repeats, timeout=0.001)
    sample = slow.sample(0.02)
    assert not sample.ok and "timed out" in sample.reason and slow.source == DEVICE_PROFILING


def test_resident_worker_reports_a_bad_module_and_goes_on(small, tools, tmp_path):
    _, vmfb, function, inputs, repeats = small
    with Timers(RESIDENT, tools, log_dir=tmp_path) as timers:
        bad = timers.benchmark(tmp_path / "missing.vmfb", function, "local-task", inputs)
        good = timers.benchmark(vmfb, function, "local-task", inputs, repeats)
        failed, timed = bad.sample(0.02), good.sample(0.02)
    assert not failed.ok and "resident worker" in failed.reason and "\n" not in failed.reason
    assert timed.ok and timed.ms > 0


def test_profiler_names_the_timing_source(small):
    folder = small[0]
    for source in (DEFAULT_SOURCE, RESIDENT):
        csv = folder / f"{source}.csv"
        done = run_script("profiler.py", "--calibration=off", "--generated-dir", folder, "--output", csv,
                          "--time-budget=1", f"--timing-source={source}")
        assert done.returncode == 0, done.stderr
        assert f"Timing source : {source}" in done.stdout
        assert list(pd.read_csv(csv)["timing source"]) == [source]
    bad = run_script("profiler.py", "--generated-dir", folder, "--timing-source=stopwatch")
    assert bad.returncode == 2 and "--timing-source" in bad.stderr
    assert timing.BENCHMARK_SOURCES.keys() <= TIMING_SOURCES.keys()


def test_a_benchmark_under_sched_batch_runs_its_tool_under_it(small, tools, tmp_path):
    """The scheduling wrapper execs the command under SCHED_BATCH (a Python child reports its
    own policy: SCHED_BATCH with it, the default without it), a policy it does not know is
    refused, and a whole-call benchmark of the real tool times under it; a benchmark on another
    machine takes none (the wrapper runs here)."""
    import os
    import sys

    from iree_dispatch_profiler.iree import process

    if not process.can_schedule(process.BATCH):
        pytest.skip("no SCHED_BATCH on this platform")
    policy = [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
    assert run(process.scheduled(policy, process.BATCH), 60).stdout.strip() == str(os.SCHED_BATCH)
    assert run(process.scheduled(policy, ""), 60).stdout.strip() == str(os.SCHED_OTHER)
    with pytest.raises(ValueError):
        process.scheduled(policy, "fifo")
    _, vmfb, function, inputs, repeats = small
    with Timers(RESIDENT, tools, log_dir=tmp_path) as timers:
        bench = timers.benchmark(vmfb, function, "local-task", inputs, repeats, whole_call=True,
                                 scheduling=process.BATCH)
        assert isinstance(bench, Benchmark) and bench.command(0.02)[:2] == [sys.executable, "-c"]
        assert bench.sample(0.02).ok

    def elsewhere(command, timeout) -> ProcessResult:
        return run(command, timeout)
    with pytest.raises(ValueError):
        Benchmark(tools, vmfb, function, "local-task", inputs, runner=elsewhere,
                  scheduling=process.BATCH)


# Packed into a transient of 85 MB that IREE's runtime allocates anew each call, then summed.
LARGE_TRANSIENT = """
func.func @main(%a: tensor<4608x4608xf32>) -> tensor<576x4608xf32> {
  %e = tensor.empty() : tensor<576x4608x8x1xf32>
  %p = linalg.pack %a inner_dims_pos = [0, 1] inner_tiles = [8, 1] into %e
      : tensor<4608x4608xf32> -> tensor<576x4608x8x1xf32>
  %z = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<576x4608xf32>
  %f = linalg.fill ins(%z : f32) outs(%o : tensor<576x4608xf32>) -> tensor<576x4608xf32>
  %r = linalg.reduce ins(%p : tensor<576x4608x8x1xf32>) outs(%f : tensor<576x4608xf32>)
      dimensions = [2, 3]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  return %r : tensor<576x4608xf32>
}
"""


def test_timed_tools_keep_their_heap(tools, tmp_path):
    """The one runner runs a tool with the heap kept (iree_jobs.KEPT_HEAP): a call's 85 MB
    transient is faulted in once per process, where without it every call faults it in again;
    and this process keeps its own (what the numpy and PyTorch anchors are timed in)."""
    import resource
    import subprocess

    import numpy as np

    from iree_dispatch_profiler.iree import iree_jobs

    source, vmfb = tmp_path / "transient.mlir", tmp_path / "transient.vmfb"
    source.write_text(LARGE_TRANSIENT)
    built = run([str(tools.compile), str(source), "--iree-hal-target-device=local",
                 "--iree-hal-local-target-device-backends=llvm-cpu", "-o", str(vmfb)], 300)
    assert built.ok, built.stderr
    command = [str(tools.benchmark_module), f"--module={vmfb}", "--function=main",
               "--input=4608x4608xf32=1", "--benchmark_min_time=11x", "--device=local-task"]

    def faults(start) -> int:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
        assert start().returncode == 0
        return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before

    transient_pages = 576 * 4608 * 8 * 4 // resource.getpagesize()
    kept = faults(lambda: subprocess.run(command, capture_output=True, timeout=300,
                                         env=iree_jobs.kept_heap_environment()))
    ran = faults(lambda: run(command, 300))  # the one runner
    plain = faults(lambda: subprocess.run(command, capture_output=True, timeout=300))
    # 12 calls (Google Benchmark's first one too): each faults the transient in again
    assert plain - kept > 8 * transient_pages, (plain, kept)
    assert abs(ran - kept) < 2 * transient_pages, (ran, kept)

    assert iree_jobs.keep_this_heap()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        np.ones(64 << 20, dtype=np.uint8)  # 64 MiB, freed each time
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < 2 * (64 << 20) // (
        resource.getpagesize())
