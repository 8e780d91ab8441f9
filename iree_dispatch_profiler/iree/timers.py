"""The one place that picks a timing source: what times one function of one vmfb (see
timing.BENCHMARK_SOURCES and resident). A source that cannot time a benchmark falls back to
device profiling, then to --dispatch_statistics, and the benchmark's `source` says which did."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.iree import process, resident, timing
from iree_dispatch_profiler.iree.process import Runner
from iree_dispatch_profiler.iree.timing import Benchmark
from iree_dispatch_profiler.iree.tools import IreeTools

Timer = Benchmark | resident.ResidentBenchmark  # what times one function: .sample(seconds), .source
TIMING_SOURCES = {**timing.BENCHMARK_SOURCES, resident.RESIDENT: resident.DESCRIPTION}
# Chosen on benchmarks/bench_truth.py's figures (README, "Timing sources").
DEFAULT_SOURCE = timing.DEVICE_PROFILING


class Timers:
    """Benchmarks timed by `source` on `runner`'s machine; `close()` ends the resident worker."""

    def __init__(self, source: str, tools: IreeTools, runner: Runner | None = None,
                 log_dir: Path | None = None):
        self.source, self.tools, self.runner = source, tools, runner
        self.log_dir = log_dir
        self.worker: resident.Resident | None = None

    def benchmark(self, vmfb: Path, function: str, device: str, inputs: list[str], repeats: int = 1,
                  flags: Sequence[str] = (), timeout: float = 120.0,
                  whole_call: bool = False, per_dispatch: bool = False,
                  scheduling: str = "") -> Timer:
        """`whole_call`: time the invocation rather than its dispatches; `per_dispatch`: the
        benchmark must give each dispatch's time (`rows`), which only the dispatch sources do;
        `scheduling`: the CPU scheduling policy it runs under (process.POLICIES)."""
        if (self.source == resident.RESIDENT and not per_dispatch and not scheduling
                and self.resident_can_time(flags)):
            return resident.ResidentBenchmark(self.resident(), vmfb, function, device,
                                              list(inputs), repeats, timeout)
        source = timing.INVOCATION if whole_call else self.source
        if source not in timing.BENCHMARK_SOURCES:
            source = timing.DEVICE_PROFILING
        return Benchmark(self.tools, vmfb, function, device, list(inputs), repeats,
                         list(flags), timeout, source, runner=self.runner, scheduling=scheduling)

    def resident_can_time(self, flags: Sequence[str]) -> bool:
        # The worker runs here, with no runtime flags (parameters, task topology).
        return not flags and self.runner in (None, process.run)

    def resident(self) -> resident.Resident:
        if self.worker is None:
            folder = self.log_dir or Path(tempfile.gettempdir())
            self.worker = resident.Resident(folder / "resident_worker.log")
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def __enter__(self) -> "Timers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
