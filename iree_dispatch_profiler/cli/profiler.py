"""Verify compiled dispatches against a numpy reference and time them with iree-benchmark-module.

An operation's configurations (and numpy) are timed in interleaved rounds until each speedup over
default is known to --precision or --time-budget runs out. Prints a report block per dispatch
with its 95% interval, appends CSV rows as each operation finishes, and ends with the best
configuration per operation where it is significantly the best. Exit status: 0 all ran (and
verified), 1 any FAILED/ERROR, 2 a user error.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import pandas as pd

from iree_dispatch_profiler.cli import options
from iree_dispatch_profiler.core.library import Device, UserError
from iree_dispatch_profiler.core.values import parse_bool, parse_choices, parse_positive, parse_seconds
from iree_dispatch_profiler.iree.machines import Here, Remote
from iree_dispatch_profiler.iree.target import check_runnable
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.measure import calibration
from iree_dispatch_profiler.measure.blas import blas_summary
from iree_dispatch_profiler.measure.calibration import Calibration
from iree_dispatch_profiler.store import results as results_store
from iree_dispatch_profiler.sweep.build import CompileRecord
from iree_dispatch_profiler.sweep.manifest import Manifest, select
from iree_dispatch_profiler.measure.protocol import Protocol
from iree_dispatch_profiler.sweep.performance_report import (MACHINE_STATE, MACHINE_STATE_END,
                                                             PROVIDER_IREE, PROVIDER_NUMPY,
                                                             CsvReport, summary)
from iree_dispatch_profiler.sweep.plots import write_plots
from iree_dispatch_profiler.sweep.profiling import Profiler
from iree_dispatch_profiler.report import outputs
from iree_dispatch_profiler.sweep.progress import Progress


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
    p.add_argument("--verification-enabled", type=parse_bool, default=True, metavar="BOOL",
                   help="check results against numpy (default: true)")
    p.add_argument("--profiling-enabled", type=parse_bool, default=True, metavar="BOOL",
                   help="time with iree-benchmark-module (default: true)")
    p.add_argument("--output", type=Path, default=None, metavar="CSV",
                   help="CSV file, one row per dispatch, written as each finishes")
    p.add_argument("--append", type=parse_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="add rows to an existing --output instead of replacing it")
    p.add_argument("--resume", type=parse_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="skip dispatches that already have a row in --output")
    p.add_argument("--tags", type=parse_tags, default={}, metavar="KEY:VALUE,...",
                   help="extra CSV columns, e.g. machine:laptop,run:3")
    p.add_argument("--dry-run", type=parse_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="print what would run, run nothing, write nothing")
    options.add_protocol(p, Protocol.precision, Protocol.time_budget)
    p.add_argument("--benchmark-repetitions", type=parse_positive,
                   default=Protocol.min_rounds, metavar="N",
                   help="at least N interleaved rounds per operation (default: 6)")
    p.add_argument("--benchmark-min-time", type=parse_seconds,
                   default=Protocol.seconds_per_sample, metavar="SECONDS",
                   help="timed work per configuration per round (default: 0.05)")
    p.add_argument("--run-timeout", type=parse_seconds, default=120.0, metavar="SECONDS",
                   help="limit for one verification run or benchmark (default: 120)")
    p.add_argument("--providers", type=parse_providers, default=[PROVIDER_IREE], metavar="NAME,...",
                   help="iree (the dispatches) and/or numpy (numpy/OpenBLAS on the same problem, "
                        "as its own rows) (default: iree)")
    p.add_argument("--plot", type=Path, default=None, metavar="DIR",
                   help="write PNGs: GFLOP/s per configuration of each operation, and a roofline "
                        "under this session's measured ceilings (llvm-cpu)")
    options.add_html(p)
    options.add_profile_on(p, scheduler_too=True)
    options.add_store(p)
    return p


def parse_providers(text: str) -> list[str]:
    names = {"iree": PROVIDER_IREE, "numpy": PROVIDER_NUMPY}
    return [names[n] for n in parse_choices(text, list(names), "provider")]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    manifest = Manifest.load(args.generated_dir)
    target = options.check_target(args, manifest.target)
    dispatches = select(manifest.dispatches, args.dispatches)
    if (args.append or args.resume) and args.output is None:
        raise UserError("--append and --resume need --output")
    # GPU dispatches compiled here may run on a machine with only the runtime; CPU runs compile
    # their calibration and check the host CPU, so they need iree-compile
    tools = IreeTools.locate(args.iree_bin_dir, "" if target.device is Device.LLVMCPU
                             else manifest.iree_version)
    machine: Here | Remote = Here()
    if not args.dry_run:
        if args.scheduler and not args.profile_on:
            raise UserError("--scheduler here only serves --profile-on: timing stays on this "
                            "machine unless you choose a worker")
        machine = options.machine_from_args(args, tools.version())
        if machine.remote and PROVIDER_NUMPY in args.providers:
            raise UserError(f"--profile-on times on {machine.label}, but numpy runs here: leave "
                            "numpy out of --providers")
    protocol = Protocol(precision=args.precision, time_budget=args.time_budget,
                        seconds_per_sample=args.benchmark_min_time,
                        min_rounds=args.benchmark_repetitions)
    profiler = Profiler(manifest, target, tools, machine, options.runtime_device(args, target),
                        protocol, args.verification_enabled, args.profiling_enabled,
                        args.run_timeout, args.timing_source)
    if not args.dry_run and PROVIDER_IREE in args.providers:
        check_runnable(tools, target, machine.run, machine.name)

    if args.dry_run:
        for dispatch in dispatches:
            paths = manifest.paths(dispatch)
            record = CompileRecord.load(paths.compile_record)
            state = "not compiled" if record is None else f"compile {record.status}"
            print(f"{dispatch.name}  [{state}]  {paths.vmfb}")
        print(f"{len(dispatches)} dispatches would be profiled on {profiler.device}")
        return 0

    report = CsvReport(args.output, append=args.append or args.resume, tags=args.tags)
    calibrate = Calibration(tools, target, profiler.device, profiler.timers, not machine.remote,
                            args.calibration)
    start = calibrate.measure()
    print(calibration.block("start", start), flush=True)
    profiler.environment[MACHINE_STATE] = start.to_json()
    profiler.machine_start, profiler.sentinel = start, calibrate.sentinel()
    profiler.store = results_store.open_optional(args.store, print)
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
    if numpy_for:
        blas, warning = blas_summary()
        print(f"numpy beside IREE: {blas}" + (f"\nwarning: {warning}" if warning else ""))

    results = []
    progress = Progress(sum(len(q) + (op in numpy_for) for op, q in jobs.items()),
                        "dispatches profiled")
    try:
        for operation, queue in jobs.items():
            def on_round(measured, name=operation.name):
                progress.within(f"{name}: round {measured.rounds} (at least {protocol.min_rounds})")

            for result in profiler.profile_operation(operation, queue, operation in numpy_for,
                                                     on_round):
                results.append(result)
                report.append(result)
                progress.message(result.block())
                progress.advance()
        end = calibrate.measure()
        print(calibration.block("end", end, calibration.within_session(start, end)))
        report.end_session(start.to_json(), end.to_json())
    finally:
        profiler.close()  # the resident worker, if one was started
    print("-" * 64)
    if results:
        print(summary(results))
    failed = [r for r in results if r.failed]
    if args.plot is not None and results:
        written = write_plots(results, args.plot, end.peak() or start.peak())
        print(f"Wrote {len(written)} plots to {args.plot}")
    print(f"{len(results)} dispatches: {len(results) - len(failed)} ok, {len(failed)} FAILED/ERROR")
    if args.output is not None:
        print(f"Performance report: {args.output}")
    if args.html is not None:
        # from the CSV when there is one: a resumed run's report holds the earlier rows too
        page = (outputs.page_for(args.output, options.command_line()) if args.output is not None
                else outputs.sweep_page(pd.DataFrame([{**r.row(), MACHINE_STATE_END: end.to_json()}
                                               for r in results]), options.command_line()))
        options.write_html(args.html, page)
    return 1 if failed else 0


def run() -> None:
    options.run_main(main)
