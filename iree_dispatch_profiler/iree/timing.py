"""Timing with iree-benchmark-module: the sources that read its samples (HAL device profiling,
--dispatch_statistics, the whole invocation) and the Benchmark that takes them. timers.py is
the registry that picks a source."""
from __future__ import annotations

import json
import math
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from iree_dispatch_profiler.iree.process import TIMED_OUT, Runner, run, scheduled
from iree_dispatch_profiler.iree.tools import IreeTools

@dataclass
class Sample:
    """One timing: ms per computation, or why there is none."""

    ok: bool
    reason: str = ""
    ms: float = math.nan


# Google Benchmark's own warm-up before each sample: first-touch page faults and the worker
# threads' start belong to no computation. A fresh process runs slow for its first ~0.2 s: on a
# 2-core Zen 3 VM, alternating samples (SCHED_BATCH, medians of 8), a tuned BERT layer's 4-call
# sample took 21.4 ms after 0.01 s of warm-up, 14.9 after 0.2 s, 16.1 after 0.3 s; an MLP's
# 45-call sample (of 12) 1.39 ms after 0.01 s, 1.25 after 0.1, 1.15 after 0.2, 1.17 after 0.3.
# PyTorch, beside it in bench_model, is timed warm in its own process.
WARMUP_SECONDS = 0.2


# The calls whose dispatch runs a device profile drops: a process's first two calls each fault
# their transients in (the first's are freed only after the second has taken its own); from the
# third on, the kept heap (iree_jobs.KEPT_HEAP) hands the same memory back. A 2048x1280x5120 f32
# GEMM, packed (79 MB of transients), its dispatches per call: 110, 109, 80, 80, 80, 81 ms
# (Zen 5); with only the first dropped, a 2-call sample was its cold second call.
WARMUP_CALLS = 2


def steady_median(times: list[float], runs: int) -> float:
    """The median of a dispatch's run `times` (in start order, `runs` a call) past the
    warm-up calls."""
    return statistics.median(times[WARMUP_CALLS * runs:])


# Timing sources: which instrument reads a sample, and of what. The dispatch sources time the
# dispatches alone; on a 2-core VM the invocation of a 512^3 matmul took 1.35x its dispatch and
# varied three times as much.
DEVICE_PROFILING = "device-profiling"  # HAL host-execution events: median of each dispatch's runs


DISPATCH_STATISTICS = "dispatch-statistics"  # --dispatch_statistics: mean of its dispatches' runs


INVOCATION = "invocation"  # iree-benchmark-module's time of the whole call


# Where a runtime refuses a source on a benchmark's first sample (CUDA and HIP have no HAL-native
# profiling: UNIMPLEMENTED), the next one times it.
NEXT_SOURCE = {DEVICE_PROFILING: DISPATCH_STATISTICS, DISPATCH_STATISTICS: INVOCATION}


BENCHMARK_SOURCES = {
    DEVICE_PROFILING: "iree-benchmark-module --device_profiling_mode=host-execution, read with "
                      "iree-profile: the median of each dispatch's executions in one process",
    DISPATCH_STATISTICS: "iree-benchmark-module --dispatch_statistics: the mean time of the "
                         "dispatches in one process",
    INVOCATION: "iree-benchmark-module: the mean time of the whole call in one process",
}


@dataclass
class Benchmark:
    """One function of one vmfb as iree-benchmark-module times it, by `source`. Each `sample` is
    one process timing about `seconds` of work; after the first, the iteration count is fixed
    from the last time, so no time goes into Google Benchmark's own iteration search.

    A dispatch source that finds no dispatch rows (a backend without them, a tool without
    iree-profile) or fails the first sample (a runtime that refuses it) falls back to the next
    one, and `source` says which timed the samples."""

    tools: IreeTools
    vmfb: Path
    function: str
    device: str
    inputs: list[str]  # --input= values: `2x3xf32=@a.bin`, `@a.npy`
    repeats: int = 1  # dispatch repeat count compiled into the vmfb
    flags: list[str] = field(default_factory=list)  # --parameters=..., task topology
    timeout: float = 120.0
    source: str = DEVICE_PROFILING
    dispatches: tuple[str, ...] = ()  # with a dispatch source: time only these dispatches
    runner: Runner | None = None  # where it runs: here by default
    invocation_ms: float = math.nan
    rows: list[dict[str, tuple[float, float]]] = field(default_factory=list)  # per sample
    invocations: list[float] = field(default_factory=list)  # the whole call's ms, per sample
    runs_per_call: dict[str, int] = field(default_factory=dict)  # device profiling, per dispatch
    spans: list[float] = field(default_factory=list)  # device profiling: a call's span, per sample
    scheduling: str = ""  # the CPU scheduling policy (process.POLICIES) it runs under, here

    def __post_init__(self) -> None:
        # The profile is read here: a remote worker's file is out of reach.
        if self.source == DEVICE_PROFILING and (self.tools.profile is None
                                                or self.runner not in (None, run)):
            self.source = DISPATCH_STATISTICS
        if self.scheduling and self.runner not in (None, run):
            raise ValueError("a scheduling policy is set for runs on this machine only")

    def command(self, seconds: float, profile: Path | None = None,
                calls: int | None = None) -> list[str]:
        if calls is None and self.invocation_ms > 0:
            calls = max(1, math.ceil(seconds * 1e3 / self.invocation_ms))
        # Google Benchmark counts items: with --batch_size=R, N iterations are N / R calls
        time_flag = f"{calls * self.repeats}x" if calls else f"{seconds:g}s"
        if self.source == DEVICE_PROFILING:
            # no warm-up: every call is in the profile, and the warm-up calls' runs are dropped
            source_flags = ["--device_profiling_mode=host-execution",
                            f"--device_profiling_output={profile}", "--benchmark_min_warmup_time=0"]
        else:
            source_flags = [f"--benchmark_min_warmup_time={WARMUP_SECONDS}",
                            *(["--dispatch_statistics"] if self.source == DISPATCH_STATISTICS else [])]
        command = [str(self.tools.benchmark_module), f"--module={self.vmfb}",
                   f"--function={self.function}", f"--device={self.device}",
                   *(f"--input={i}" for i in self.inputs), *self.flags,
                   # the vmfb repeats each dispatch `repeats` times; batch_size divides that out
                   f"--batch_size={self.repeats}", "--benchmark_repetitions=1",
                   f"--benchmark_min_time={time_flag}", "--benchmark_format=json", *source_flags]
        return scheduled(command, self.scheduling)

    def sample(self, seconds: float) -> Sample:
        sample = self.source_sample(seconds)
        if (not sample.ok and not self.invocations and self.source in NEXT_SOURCE
                and TIMED_OUT not in sample.reason):
            self.source = NEXT_SOURCE[self.source]
            return self.sample(seconds)
        return sample

    def source_sample(self, seconds: float) -> Sample:
        if self.source == DEVICE_PROFILING:
            return self.profiled_sample(seconds)
        result = (self.runner or run)(self.command(seconds), self.timeout)
        if not result.ok:
            return Sample(False, result.failure("iree-benchmark-module", self.timeout))
        invocation, rows = parse_benchmark_json(result.stdout)
        if invocation.ok:
            self.invocation_ms = invocation.ms * self.repeats
            self.rows.append(rows)
            self.invocations.append(invocation.ms)
        if self.source == DISPATCH_STATISTICS and not rows:
            self.source = INVOCATION  # this backend has none: the invocation it is
        if self.source == INVOCATION or not invocation.ok:
            return invocation
        return self.dispatch_sample(rows)

    def dispatch_sample(self, rows: dict[str, tuple[float, float]]) -> Sample:
        """The sample of the timed dispatches among one process's `rows`."""
        if not rows:
            return Sample(False, "no dispatch ran")
        if self.dispatches:
            if not set(self.dispatches) & set(rows):
                return Sample(False, f"no dispatch {', '.join(self.dispatches)} ran")
            return Sample(True, ms=sum(ms for name, (_, ms) in rows.items()
                                       if name in self.dispatches))
        return Sample(True, ms=sum(ms for _, ms in rows.values()))

    def profiled_sample(self, seconds: float) -> Sample:
        """One process under HAL device profiling, its WARMUP_CALLS calls' runs dropped. The
        first sample is preceded by one call alone, which tells how often each dispatch runs per
        call and how long a call takes."""
        with tempfile.TemporaryDirectory(prefix="idp-profile-") as folder:
            profile = Path(folder) / "sample.ireeprof"
            if not self.runs_per_call:
                calibration = self.profiled_run(1, profile)
                if isinstance(calibration, Sample):
                    return calibration
                self.invocation_ms, first = calibration
                self.runs_per_call = {name: len(times)
                                      for name, times in runs_by_dispatch(first).items()}
                if not self.runs_per_call:  # the tool gave no events: use the next source
                    self.source = DISPATCH_STATISTICS
                    return self.sample(seconds)
            calls = max(WARMUP_CALLS + 1, math.ceil(seconds * 1e3 / self.invocation_ms))
            timed = self.profiled_run(calls, profile)
        if isinstance(timed, Sample):
            return timed
        invocation_ms, found = timed
        by_dispatch = runs_by_dispatch(found)
        if any(len(by_dispatch.get(name, ())) < runs * calls
               for name, runs in self.runs_per_call.items()):
            # a profile that lost runs cannot be counted: the statistics time this benchmark
            self.source = DISPATCH_STATISTICS
            return self.sample(seconds)
        self.invocation_ms = invocation_ms
        self.invocations.append(invocation_ms / self.repeats)
        # the warm-up calls' runs (first touch, threads starting): dropped
        rows = {name: (runs / self.repeats,
                       steady_median(by_dispatch[name], runs) * runs / self.repeats)
                for name, runs in self.runs_per_call.items()}
        self.rows.append(rows)
        spans = call_spans(found, sum(self.runs_per_call.values()))[WARMUP_CALLS:]
        if spans:
            self.spans.append(statistics.median(spans) / self.repeats)
        return self.dispatch_sample(rows)

    def profiled_run(self, calls: int, profile: Path
                     ) -> Sample | tuple[float, list[tuple[int, int, str]]]:
        """(ms per call, its dispatch runs: host_events'), or the failure."""
        result = run(self.command(0, profile, calls), self.timeout)
        if not result.ok:
            return Sample(False, result.failure("iree-benchmark-module", self.timeout))
        invocation, _ = parse_benchmark_json(result.stdout)
        if not invocation.ok:
            return invocation
        read = run([str(self.tools.profile), "dispatch", "--format=jsonl", "--dispatch_events",
                    str(profile)], self.timeout)
        if not read.ok:
            return Sample(False, read.failure("iree-profile", self.timeout))
        return invocation.ms * self.repeats, host_events(read.stdout)


def host_events(text: str) -> list[tuple[int, int, str]]:
    """`iree-profile dispatch --format=jsonl --dispatch_events`: each dispatch run as (start ns,
    duration ns, dispatch), in the order they started."""
    events = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "host_dispatch_event" and event.get("valid", True):
            events.append((event["start_host_time_ns"], event["duration_ns"], event["key"]))
    return sorted(events)


def runs_by_dispatch(events: list[tuple[int, int, str]]) -> dict[str, list[float]]:
    """Each dispatch's run times (ms) among `events` (host_events'), in the order they started."""
    runs: dict[str, list[float]] = {}
    for _, duration, name in events:
        runs.setdefault(name, []).append(duration * 1e-6)
    return runs


def call_spans(events: list[tuple[int, int, str]], per_call: int) -> list[float]:
    """Each call's span (ms) among `events` (host_events', `per_call` runs a call, calls one
    after another): its first dispatch's start to its last one's end. A call's time beyond its
    span is the caller's side (the call issued, its wait; on a 2-core VM a speech encoder's
    spans were 6.1 ms of 7.6-8.2 ms calls; perf sched had its workers runnable but waiting
    1.3-2.9 ms on average for a core, and under SCHED_BATCH the calls took 6.2-6.3 ms)."""
    return [(max(start + duration for start, duration, _ in call) - call[0][0]) * 1e-6
            for call in (events[i:i + per_call]
                         for i in range(0, len(events) - per_call + 1, per_call))]


def parse_benchmark_json(text: str) -> tuple[Sample, dict[str, tuple[float, float]]]:
    """The mean real time per iteration of the one repetition, and each dispatch's (calls, ms)
    in it (--dispatch_statistics rows; the time of all its calls in one invocation, measured
    so: a dispatch called 4 times reports 4x the time of one call). All divided by batch_size."""
    try:
        report = json.loads(text)
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
        rows = report["benchmarks"]
        times = [b["real_time"] * scale[b["time_unit"]] for b in rows
                 if b.get("run_type") == "iteration" and "/process_time/" in b["name"]]
        dispatches = {b["name"].split("/", 1)[-1]: (b["calls"], b["real_time"] * scale[b["time_unit"]])
                      for b in rows if "calls" in b}
    except (ValueError, KeyError, TypeError) as error:
        return Sample(False, f"unreadable iree-benchmark-module output ({error})"), {}
    if not times or min(times) <= 0:
        return Sample(False, "iree-benchmark-module reported no time"), {}
    return Sample(True, ms=times[0]), dispatches
