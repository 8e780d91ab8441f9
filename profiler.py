#!/usr/bin/env python3
"""Verify compiled dispatches against a numpy reference and time them with iree-benchmark-module.

An operation's configurations (and numpy) are timed in interleaved rounds until each speedup over
default is known to --precision or --time-budget runs out. Prints a report block per dispatch
with its 95% interval, appends CSV rows as each operation finishes, and ends with the best
configuration per operation where it is significantly the best. Exit status: 0 all ran (and
verified), 1 any FAILED/ERROR, 2 a user error.
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Sequence

import cluster
import options

from baselines import NumpyKernel, machine_peak
from launchers import (Benchmark, CompileRecord, IreeTools, check_runnable, run_module,
                       runtime_threads)
from library import Device, Target, UserError
from manifest import Dispatch, Manifest, select
from measurement import Candidate, Protocol, measure
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
    options.add_protocol(p, Protocol.precision, Protocol.time_budget)
    p.add_argument("--benchmark-repetitions", type=options.parse_positive,
                   default=Protocol.min_rounds, metavar="N",
                   help="at least N interleaved rounds per operation (default: 6)")
    p.add_argument("--benchmark-min-time", type=options.parse_seconds,
                   default=Protocol.seconds_per_sample, metavar="SECONDS",
                   help="timed work per configuration per round (default: 0.05)")
    p.add_argument("--run-timeout", type=options.parse_seconds, default=120.0, metavar="SECONDS",
                   help="limit for one verification run or benchmark (default: 120)")
    p.add_argument("--providers", type=parse_providers, default=[PROVIDER_IREE], metavar="NAME,...",
                   help="iree (the dispatches) and/or numpy (numpy/OpenBLAS on the same problem, "
                        "as its own rows) (default: iree)")
    p.add_argument("--plot", type=Path, default=None, metavar="DIR",
                   help="write PNGs: GFLOP/s per configuration of each operation, and a roofline "
                        "against this machine's measured peak (llvm-cpu)")
    cluster.add_profile_on(p, scheduler_too=True)
    return p


def parse_providers(text: str) -> list[str]:
    names = {"iree": PROVIDER_IREE, "numpy": PROVIDER_NUMPY}
    return [names[n] for n in options.parse_choices(text, list(names), "provider")]


class Profiler:
    """Verifies and times the dispatches of one manifest, operation by operation."""

    def __init__(self, args, manifest: Manifest, target: Target, tools: IreeTools,
                 machine: cluster.Here | cluster.Remote):
        self.args = args
        self.runner = machine.run  # where dispatches run
        self.manifest = manifest
        self.device = options.runtime_device(args, target)
        self.tools = tools
        self.protocol = Protocol(precision=args.precision, time_budget=args.time_budget,
                                 seconds_per_sample=args.benchmark_min_time,
                                 min_rounds=args.benchmark_repetitions)
        cpu = target.cpu_target
        self.environment = {
            "target": target.name, "runtime device": self.device,
            "cpu model": machine.facts["cpu_model"],
            "threads": runtime_threads(self.device, machine.facts["physical_cores"]),
            "IREE version": manifest.iree_version,
            "timed on": machine.label,  # what the times describe
            "vector bytes": cpu.native_vector_bytes if cpu else "N/A",
            "cpu features": " ".join(cpu.enabled_features) if cpu else "N/A",
        }
        self.target_summary = f"{target.device.value}:{cpu.summary}" if cpu else target.name

    def result_for(self, operation, configuration: str, provider: str = PROVIDER_IREE) -> PerformanceResult:
        return PerformanceResult(
            dispatch=f"{operation.name}_{configuration}", operation=operation.name,
            configuration=configuration, arguments=operation.arguments,
            operation_fields=operation.report_fields(), flops=operation.flops,
            bytes=operation.bytes, provider=provider, target_summary=self.target_summary,
            environment=dict(self.environment))

    def profile_operation(self, operation, dispatches: list[Dispatch],
                          with_numpy: bool) -> list[PerformanceResult]:
        """Verify each configuration, then time the verified ones (and numpy) in interleaved
        rounds, so that their speedups over default come from the same machine state."""
        cache = ReferenceCache(self.manifest.reference_folder(operation), operation)
        results, candidates = [], []
        for dispatch in dispatches:
            result, benchmark = self.prepare(dispatch, cache)
            results.append(result)
            if benchmark is not None:
                candidates.append(Candidate(result.configuration, benchmark.sample))
        if with_numpy:
            result, kernel = self.prepare_numpy(operation, cache)
            results.append(result)
            candidates.append(Candidate(result.configuration, kernel.sample))
        if self.args.profiling_enabled and candidates:
            measured = measure(candidates, "default", self.protocol)
            for result in results:
                if result.configuration in measured.outcomes:
                    result.set_timing(measured.outcomes[result.configuration], measured.drift)
        return results

    def prepare_numpy(self, operation, cache: ReferenceCache) -> tuple[PerformanceResult, NumpyKernel]:
        """numpy/OpenBLAS on the same inputs: its own row, verified like a dispatch."""
        result = self.result_for(operation, "numpy", PROVIDER_NUMPY)
        kernel = NumpyKernel(operation, cache.load_inputs())
        result.environment.update({"target": kernel.description, "IREE version": "",
                                   "vector bytes": "N/A", "cpu features": "N/A"})
        result.target_summary = kernel.description
        if self.args.verification_enabled:
            self.check(operation, kernel.result, cache, result)
        return result, kernel

    def prepare(self, dispatch: Dispatch,
                cache: ReferenceCache) -> tuple[PerformanceResult, Benchmark | None]:
        """The dispatch's row so far, and its benchmark when it is fit to be timed."""
        result = self.result_for(dispatch.operation, dispatch.configuration.name)
        paths = self.manifest.paths(dispatch)
        record = CompileRecord.load(paths.compile_record)
        result.environment["compile log"] = str(paths.compile_log)
        if record is None:
            result.verification, result.reason = "ERROR", "not compiled (run compile.py)"
            return result, None
        result.environment.update({"compile time(s)": record.compile_seconds,
                                   "compiled on": record.compiled_on, "compile cache": record.cache,
                                   "vmfb bytes": record.vmfb_bytes,
                                   "compile flags": shlex.join(record.flags)})
        result.config_applied = record.config_applied
        if record.status != "ok":
            result.verification, result.reason = "ERROR", record.reason
            return result, None
        inputs = cache.ensure_inputs()
        if self.args.verification_enabled:
            self.verify(dispatch, paths.verify_vmfb, cache, result)
            if result.verification != "SUCCESS":
                return result, None  # a wrong or crashing dispatch is not worth timing
        if not self.args.profiling_enabled:
            return result, None
        if not record.profile_built:
            result.reason = "no profile build (compiled with --verify-only)"
            return result, None
        return result, Benchmark(self.tools, paths.profile_vmfb, dispatch.name, self.device,
                                 [b.flag for b in inputs], record.repeat_count,
                                 timeout=self.args.run_timeout, dispatch_statistics=True,
                                 runner=self.runner)

    def verify(self, dispatch: Dispatch, vmfb: Path, cache: ReferenceCache,
               result: PerformanceResult) -> None:
        output = cache.folder / f"result_{dispatch.configuration.name}.bin"
        run = run_module(self.tools, vmfb, dispatch.name, self.device,
                         [b.flag for b in cache.buffers], [output], self.args.run_timeout,
                         runner=self.runner)
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    manifest = Manifest.load(args.generated_dir)
    target = options.check_target(args, manifest.target)
    dispatches = select(manifest.dispatches, args.dispatches)
    if (args.append or args.resume) and args.output is None:
        raise UserError("--append and --resume need --output")
    tools = IreeTools.locate(args.iree_bin_dir)
    machine = cluster.Here()
    if not args.dry_run:
        if args.scheduler and not args.profile_on:
            raise UserError("--scheduler here only serves --profile-on: timing stays on this "
                            "machine unless you choose a worker")
        machine = cluster.machine_from_args(args, tools.version())
        if machine.remote and PROVIDER_NUMPY in args.providers:
            raise UserError(f"--profile-on times on {machine.label}, but numpy runs here: leave "
                            "numpy out of --providers")
    profiler = Profiler(args, manifest, target, tools, machine)
    if not args.dry_run and PROVIDER_IREE in args.providers:
        check_runnable(tools, target, machine.run, machine.name)

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

    # Work operation by operation: its dispatches and its numpy row share the rounds.
    jobs: dict = {operation: [] for operation in dict.fromkeys(d.operation for d in all_selected)}
    for dispatch in dispatches if PROVIDER_IREE in args.providers else []:
        jobs[dispatch.operation].append(dispatch)
    numpy_for = {operation for operation in jobs if PROVIDER_NUMPY in args.providers
                 and f"{operation.name}_numpy" not in done}
    jobs = {op: queue for op, queue in jobs.items() if queue or op in numpy_for}

    results = []
    progress = Progress(sum(len(q) + (op in numpy_for) for op, q in jobs.items()),
                        "dispatches profiled")
    for operation, queue in jobs.items():
        for result in profiler.profile_operation(operation, queue, operation in numpy_for):
            results.append(result)
            report.append(result)
            progress.message(result.block())
            progress.advance()
    print("-" * 64)
    if results:
        print(summary(results))
    failed = [r for r in results if r.failed]
    if args.plot is not None and results:
        peak = machine_peak() if target.device is Device.LLVMCPU and not machine.remote else None
        written = write_plots(results, args.plot, peak)
        print(f"Wrote {len(written)} plots to {args.plot}")
    print(f"{len(results)} dispatches: {len(results) - len(failed)} ok, {len(failed)} FAILED/ERROR")
    if args.output is not None:
        print(f"Performance report: {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    options.run_main(main)
