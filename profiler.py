#!/usr/bin/env python3
"""Verify compiled dispatches against a numpy reference and time them with iree-benchmark-module.

Prints a report block per dispatch, appends a CSV row per dispatch as it finishes, and ends with
the best configuration per operation. Exit status: 0 all ran (and verified), 1 any FAILED/ERROR,
2 a user error.
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Sequence

import options
import numpy as np

from baselines import machine_peak, time_numpy
from launchers import (BenchmarkResult, CompileRecord, IreeTools, benchmark_command,
                       benchmark_module, check_runnable, cpu_model, run_module, runtime_threads)
from library import Device, Target, UserError
from manifest import Dispatch, Manifest, select
from performance_report import (PROVIDER_IREE, PROVIDER_NUMPY, CsvReport, PerformanceResult,
                                summary)
from plots import write_plots
from progress import Progress
from verification import ReferenceCache, compare


def parse_tags(text: str) -> dict[str, str]:
    tags = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        key, sep, value = item.partition(":")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"entry '{item}' must be key:value")
        tags[key] = value
    return tags


def parser() -> options.ArgumentParser:
    p = options.script_parser(__doc__, target_recorded=True)
    p.add_argument("--verification-enabled", type=options.parse_bool, default=True, metavar="BOOL",
                   help="check results against numpy (default: true)")
    p.add_argument("--profiling-enabled", type=options.parse_bool, default=True, metavar="BOOL",
                   help="time with iree-benchmark-module (default: true)")
    p.add_argument("--output", type=Path, default=None, metavar="CSV",
                   help="CSV file, one row per dispatch, written as each finishes")
    p.add_argument("--append", type=options.parse_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="add rows to an existing --output instead of replacing it")
    p.add_argument("--resume", type=options.parse_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="skip dispatches that already have a row in --output")
    p.add_argument("--tags", type=parse_tags, default={}, metavar="KEY:VALUE,...",
                   help="extra CSV columns, e.g. machine:laptop,run:3")
    p.add_argument("--dry-run", type=options.parse_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="print what would run, run nothing, write nothing")
    p.add_argument("--benchmark-repetitions", type=options.parse_positive, default=5, metavar="N",
                   help="timed repetitions per dispatch; the median is reported (default: 5)")
    p.add_argument("--benchmark-min-time", type=float, default=0.1, metavar="SECONDS",
                   help="minimum time of each repetition (default: 0.1)")
    p.add_argument("--run-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="limit for one verification run or benchmark (default: 120)")
    p.add_argument("--providers", type=parse_providers, default=[PROVIDER_IREE], metavar="NAME,...",
                   help="iree (the dispatches) and/or numpy (numpy/OpenBLAS on the same problem, "
                        "as its own rows) (default: iree)")
    p.add_argument("--plot", type=Path, default=None, metavar="DIR",
                   help="write PNGs: GFLOP/s per configuration of each operation, and a roofline "
                        "against this machine's measured peak (llvm-cpu)")
    return p


def parse_providers(text: str) -> list[str]:
    names = {"iree": PROVIDER_IREE, "numpy": PROVIDER_NUMPY}
    return [names[n] for n in options.parse_choices(text, list(names), "provider")]


class Profiler:
    """Verifies and times dispatches of one manifest with fixed settings."""

    def __init__(self, args, manifest: Manifest, target: Target, tools: IreeTools):
        self.args = args
        self.manifest = manifest
        self.device = options.runtime_device(args, target)
        self.tools = tools
        cpu = target.cpu_target
        self.environment = {
            "target": target.name, "runtime device": self.device, "cpu model": cpu_model(),
            "threads": runtime_threads(self.device), "IREE version": manifest.iree_version,
            "vector bytes": cpu.native_vector_bytes if cpu else "N/A",
            "cpu features": " ".join(cpu.enabled_features) if cpu else "N/A",
        }
        self.target_summary = f"{target.device.value}:{cpu.summary}" if cpu else target.name
        self._cache: ReferenceCache | None = None

    def cache(self, operation) -> ReferenceCache:
        """The operation's inputs and expected result, shared by its configurations. Work comes
        operation by operation, so only the current one is kept in memory."""
        if self._cache is None or self._cache.operation != operation:
            self._cache = ReferenceCache(self.manifest.reference_folder(operation), operation)
        return self._cache

    def result_for(self, operation, configuration: str, provider: str = PROVIDER_IREE) -> PerformanceResult:
        return PerformanceResult(
            dispatch=f"{operation.name}_{configuration}", operation=operation.name,
            configuration=configuration, arguments=operation.arguments,
            operation_fields=operation.report_fields(), flops=operation.flops,
            bytes=operation.bytes, provider=provider, target_summary=self.target_summary,
            environment=dict(self.environment))

    def profile_numpy(self, operation) -> PerformanceResult:
        """numpy/OpenBLAS on the same inputs: its own row, verified like a dispatch."""
        result = self.result_for(operation, "numpy", PROVIDER_NUMPY)
        result.environment.update({"target": f"numpy {np.__version__}", "IREE version": "",
                                   "vector bytes": "N/A", "cpu features": "N/A"})
        result.target_summary = f"numpy {np.__version__} on this machine"
        cache = self.cache(operation)
        repetitions = self.args.benchmark_repetitions if self.args.profiling_enabled else 0
        timing, value = time_numpy(operation, cache.load_inputs(), repetitions,
                                   self.args.benchmark_min_time)
        if self.args.verification_enabled:
            self.check(operation, value, cache, result)
        if self.args.profiling_enabled:
            self.record_timing(result, timing)
        return result

    def profile(self, dispatch: Dispatch) -> PerformanceResult:
        result = self.result_for(dispatch.operation, dispatch.configuration.name)
        paths = self.manifest.paths(dispatch)
        record = CompileRecord.load(paths.compile_record)
        result.environment["compile log"] = str(paths.compile_log)
        if record is None:
            result.verification, result.reason = "ERROR", "not compiled (run compile.py)"
            return result
        result.environment.update({"compile time(s)": record.compile_seconds,
                                   "vmfb bytes": record.vmfb_bytes,
                                   "compile flags": shlex.join(record.flags)})
        result.config_applied = record.config_applied
        if record.status != "ok":
            result.verification, result.reason = "ERROR", record.reason
            return result
        cache = self.cache(dispatch.operation)
        inputs = cache.ensure_inputs()
        if self.args.verification_enabled:
            self.verify(dispatch, paths.verify_vmfb, cache, result)
            if result.verification != "SUCCESS":
                return result  # a wrong or crashing dispatch is not worth timing
        if self.args.profiling_enabled and not record.profile_built:
            result.reason = "no profile build (compiled with --verify-only)"
        elif self.args.profiling_enabled:
            command = benchmark_command(self.tools, paths.profile_vmfb, dispatch.name, self.device,
                                        inputs, record.repeat_count,
                                        self.args.benchmark_repetitions, self.args.benchmark_min_time)
            timing = benchmark_module(command, self.args.run_timeout)
            self.record_timing(result, timing)
        return result

    def verify(self, dispatch: Dispatch, vmfb: Path, cache: ReferenceCache,
               result: PerformanceResult) -> None:
        output = cache.folder / f"result_{dispatch.configuration.name}.bin"
        run = run_module(self.tools, vmfb, dispatch.name, self.device, cache.buffers, output,
                         self.args.run_timeout)
        if not run.ok:
            result.verification, result.reason = "ERROR", run.reason
            return
        try:
            got = cache.read_result(output)
        except ValueError:
            result.verification, result.reason = "ERROR", "result has the wrong size"
            return
        finally:
            output.unlink(missing_ok=True)
        self.check(dispatch.operation, got, cache, result)

    @staticmethod
    def check(operation, got, cache: ReferenceCache, result: PerformanceResult) -> None:
        check = compare(got, cache.expected(), operation.output[1], operation.reduction_length)
        result.max_abs_error = check.max_abs_error
        result.verification = "SUCCESS" if check.passed else "FAILED"
        if not check.passed:
            result.reason = check.detail

    @staticmethod
    def record_timing(result: PerformanceResult, timing: BenchmarkResult) -> None:
        if not timing.ok:
            result.reason = timing.reason
            return
        result.runtime_ms, result.cv, result.repetitions = timing.median_ms, timing.cv, len(timing.times_ms)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    manifest = Manifest.load(args.generated_dir)
    target = options.check_target(args, manifest.target)
    dispatches = select(manifest.dispatches, args.dispatches)
    if (args.append or args.resume) and args.output is None:
        raise UserError("--append and --resume need --output")
    tools = IreeTools.locate(args.iree_bin_dir)
    profiler = Profiler(args, manifest, target, tools)
    if not args.dry_run and PROVIDER_IREE in args.providers:
        check_runnable(tools, target)

    if args.dry_run:
        for dispatch in dispatches:
            paths = manifest.paths(dispatch)
            record = CompileRecord.load(paths.compile_record)
            state = "not compiled" if record is None else f"compile {record.status}"
            print(f"{dispatch.name}  [{state}]  {paths.profile_vmfb}")
        print(f"{len(dispatches)} dispatches would be profiled on {profiler.device}")
        return 0

    report = CsvReport(args.output, append=args.append or args.resume, tags=args.tags)
    if args.plot is not None:
        try:
            args.plot.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"cannot write --plot={args.plot}: {error.strerror}") from None
    all_selected, done = dispatches, set()
    if args.resume:
        done = report.done_dispatches()
        dispatches = [d for d in dispatches if d.name not in done]
        print(f"Resuming: {len(done)} dispatches already in {args.output}, {len(dispatches)} to go")

    # Work in operation order: each operation's dispatches, then its numpy row.
    jobs: dict[str, list] = {}
    for dispatch in dispatches if PROVIDER_IREE in args.providers else []:
        jobs.setdefault(dispatch.operation.name, []).append(dispatch)
    if PROVIDER_NUMPY in args.providers:
        for operation in dict.fromkeys(d.operation for d in all_selected):
            if f"{operation.name}_numpy" not in done:
                jobs.setdefault(operation.name, []).append(operation)
    work = [job for queue in jobs.values() for job in queue]

    results = []
    progress = Progress(len(work), "dispatches profiled")
    for job in work:
        result = profiler.profile(job) if isinstance(job, Dispatch) else profiler.profile_numpy(job)
        results.append(result)
        report.append(result)
        progress.message(result.block())
        progress.advance()
    print("-" * 64)
    if results:
        print(summary(results))
    failed = [r for r in results if r.failed]
    if args.plot is not None and results:
        peak = machine_peak() if target.device is Device.LLVMCPU else None
        written = write_plots(results, args.plot, peak)
        print(f"Wrote {len(written)} plots to {args.plot}")
    print(f"{len(results)} dispatches: {len(results) - len(failed)} ok, {len(failed)} FAILED/ERROR")
    if args.output is not None:
        print(f"Performance report: {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    options.run_main(main)
