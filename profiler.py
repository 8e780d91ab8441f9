#!/usr/bin/env python3
"""Verify compiled dispatches against a numpy reference and time them with iree-benchmark-module.

Prints a report block per dispatch, appends a CSV row per dispatch as it finishes, and ends with
the best configuration per operation. Exit status: 0 all ran (and verified), 1 any FAILED/ERROR,
2 a user error.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Sequence

import options
from launchers import (BenchmarkResult, CompileRecord, IreeTools, benchmark_command,
                       benchmark_module, cpu_model, run_module, runtime_threads)
from library import Target, UserError
from manifest import Dispatch, Manifest, select
from performance_report import CsvReport, PerformanceResult, summary
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
    return p


class Profiler:
    """Verifies and times dispatches of one manifest with fixed settings."""

    def __init__(self, args, manifest: Manifest, target: Target, tools: IreeTools):
        self.args = args
        self.manifest = manifest
        self.device = options.runtime_device(args, target)
        self.tools = tools
        self.environment = {
            "target": target.name, "runtime device": self.device, "cpu model": cpu_model(),
            "threads": runtime_threads(self.device), "IREE version": manifest.iree_version,
        }

    def result_for(self, dispatch: Dispatch) -> PerformanceResult:
        operation = dispatch.operation
        return PerformanceResult(
            dispatch=dispatch.name, operation=operation.name,
            configuration=dispatch.configuration.name, arguments=operation.arguments,
            operation_fields=operation.report_fields(), flops=operation.flops,
            bytes=operation.bytes, environment=dict(self.environment))

    def profile(self, dispatch: Dispatch) -> PerformanceResult:
        result = self.result_for(dispatch)
        paths = self.manifest.paths(dispatch)
        record = CompileRecord.load(paths.compile_record)
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
        cache = ReferenceCache(self.manifest.reference_folder(dispatch.operation), dispatch.operation)
        inputs = cache.ensure_inputs()
        if self.args.verification_enabled:
            self.verify(dispatch, paths.verify_vmfb, cache, result)
            if result.verification != "SUCCESS":
                return result  # a wrong or crashing dispatch is not worth timing
        if self.args.profiling_enabled:
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
        shape, dtype = dispatch.operation.output
        check = compare(got, cache.expected(), dtype, dispatch.operation.reduction_length)
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

    if args.dry_run:
        for dispatch in dispatches:
            paths = manifest.paths(dispatch)
            record = CompileRecord.load(paths.compile_record)
            state = "not compiled" if record is None else f"compile {record.status}"
            print(f"{dispatch.name}  [{state}]  {paths.profile_vmfb}")
        print(f"{len(dispatches)} dispatches would be profiled on {profiler.device}")
        return 0

    report = CsvReport(args.output, append=args.append or args.resume, tags=args.tags)
    if args.resume:
        done = report.done_dispatches()
        dispatches = [d for d in dispatches if d.name not in done]
        print(f"Resuming: {len(done)} dispatches already in {args.output}, {len(dispatches)} to go")

    results = []
    progress = Progress(len(dispatches), "dispatches profiled")
    for dispatch in dispatches:
        result = profiler.profile(dispatch)
        results.append(result)
        report.append(result)
        progress.message(result.block())
        progress.advance()
    print("-" * 64)
    if results:
        print(summary(results))
    failed = [r for r in results if r.failed]
    if args.output is not None:
        print(f"Writing performance report to {args.output}")
    print(f"{len(results)} dispatches: {len(results) - len(failed)} ok, {len(failed)} FAILED/ERROR")
    return 1 if failed else 0


if __name__ == "__main__":
    options.run_main(main)
