"""A/B comparison with honest statistics: is B faster than A, by how much, how sure, and do
their outputs agree?

  compare.py --input model.mlir --variant base="" --variant dt="--iree-opt-data-tiling" \\
             --random-inputs 0 --output results.json
  compare.py --dispatch matmul_512x512x512_f32t_f32t_f32t --generated-dir gen
  compare.py --csv old.csv new.csv

A variant is extra iree-compile flags, another .mlir module, or a transform / tuning spec file
(or several of these, space-separated). Variants are timed in interleaved rounds; the first is
the baseline. A difference is claimed only when its whole interval lies beyond --min-effect
(so it excludes 1). Exit status: 0 the comparison ran (whatever its verdict); 1 a variant failed to
compile or run, or outputs disagree beyond tolerance; 2 a user error.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from iree_dispatch_profiler.cli import options
from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.core.values import compile_patterns, parse_fraction, parse_positive
from iree_dispatch_profiler.iree import modules
from iree_dispatch_profiler.iree.launchers import lower
from iree_dispatch_profiler.iree.machines import Here
from iree_dispatch_profiler.iree.target import check_runnable, resolve_target, run_facts
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.report import content
from iree_dispatch_profiler.iree.timers import Timers
from iree_dispatch_profiler.sweep import comparison
from iree_dispatch_profiler.sweep.comparison import Variant
from iree_dispatch_profiler.sweep.manifest import Manifest, select
from iree_dispatch_profiler.measure import calibration
from iree_dispatch_profiler.measure.calibration import Calibration
from iree_dispatch_profiler.measure.protocol import Measurement, Protocol
from iree_dispatch_profiler.sweep.plots import speedup_plot

NAME = re.compile(r"[A-Za-z0-9_.+-]+$")


def parse_variant(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not NAME.match(name):
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=\"<flags, .mlir module or spec>\" "
                                         "(NAME of letters, digits, _ . + -)")
    return name, value


def parser() -> options.ArgumentParser:
    p = options.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_argument_group("what to compare (one of)")
    mode.add_argument("--input", type=Path, metavar="MODULE.mlir",
                      help="a module compiled once per --variant")
    mode.add_argument("--dispatch", type=compile_patterns, metavar="REGEX,...",
                      help="configurations of one generated operation (with --generated-dir)")
    mode.add_argument("--csv", type=Path, nargs=2, metavar=("OLD.csv", "NEW.csv"),
                      help="two profiler CSVs: per-dispatch speedup, regressions beyond noise")
    p.add_argument("--variant", type=parse_variant, action="append", default=[],
                   metavar='NAME="FLAGS|FILE ..."',
                   help="a compile variant: extra iree-compile flags, another .mlir module, or a "
                        "transform/tuning spec file; the first is the baseline (two or more)")
    p.add_argument("--function", default=None, help="function to run (default: the only public one)")
    options.add_inputs(p)
    p.add_argument("--random-inputs", type=int, default=None, metavar="SEED",
                   help="numpy.random.rand cast to each argument's type (integers that index a "
                        "tensor: valid indices), saved as .npy")
    options.add_parameters(p)
    p.add_argument("--reference", type=options.parse_paths, default=None, metavar="@OUT.npy,...",
                   help="expected outputs (.npy, one per result) every variant is checked against")
    p.add_argument("--normalize", action="store_true",
                   help="with --csv: divide each new time by the machine's shift between the two "
                        "runs' calibrations (of its kind of kernel) instead of leaving "
                        "differences within that shift unclaimed")
    p.add_argument("--min-effect", type=parse_fraction, default=stats.MIN_EFFECT,
                   metavar="FRACTION", help="smallest speedup claimed as a difference (default: 0.03)")
    options.add_protocol(p, Protocol.precision, Protocol.time_budget)
    p.add_argument("--timing", choices=["dispatches", "invocation"], default="dispatches",
                   help="dispatches: the summed time of the module's dispatches (IREE's "
                        "--dispatch_statistics; steadier); invocation: the whole call "
                        "(default: dispatches)")
    options.add_timeouts(p, 600.0, 300.0)
    p.add_argument("--output", type=Path, default=None, metavar="RESULTS.json",
                   help="results as JSON, and as CSV beside it (RESULTS.csv)")
    p.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                   help="vmfbs, logs and outputs (default: compare-work/ beside --output, or here)")
    p.add_argument("--min-rounds", type=parse_positive, default=Protocol.min_rounds,
                   metavar="N", help="at least N interleaved rounds (default: 6)")
    options.add_html(p)
    options.add_generated_dir(p)
    options.add_iree_bin_dir(p)
    options.add_target(p, recorded=False)
    return p


Prepared = tuple[list[Variant], list[str], "list[np.ndarray] | None"]  # + notes, references


def given_types(args) -> bool:
    """Whether --inputs holds a type to draw inputs at."""
    return any(isinstance(item, modules.TensorType) for item in args.inputs or [])


def facts(tools: IreeTools, target, device: str, timing_source: str) -> dict:
    """The report header's facts: compare.py times on this machine."""
    here = Here()
    return run_facts(tools, target, device, here.facts, here.label, timing_source)


def module_variants(args, tools: IreeTools, work: Path) -> Prepared:
    """Compile every variant and run it once."""
    if not args.input.is_file():
        raise UserError(f"--input {args.input} does not exist")
    run_flags = options.parameter_flags(args)
    missing = modules.missing_parameters(args.input, run_flags)
    if missing:
        raise UserError(f"--input {args.input}: {missing}")
    target = resolve_target(tools, options.target_from_args(args))
    # read past IREE's input phase: a torch / StableHLO / TOSA module's types are tensors there
    lowered = lower(tools, target, args.input, work, args.compile_timeout)
    signature = modules.find_function(lowered, args.function, shown=str(args.input), source=args.input)
    inputs, notes = comparison.module_inputs(
        signature, args.inputs, args.random_inputs, args.output.parent if args.output else work,
        args.output.stem if args.output else "random",
        modules.index_bounds(lowered, signature.name)
        if args.random_inputs is not None or given_types(args) else {})
    device = options.runtime_device(args, target)
    args.facts = facts(tools, target, device, args.timing_source)
    args.calibrate = Calibration(tools, target, device, args.timers, True, args.calibration)
    variants = comparison.module_variants(
        tools, target, device, args.input, signature, args.variant, inputs, run_flags, work,
        args.compile_timeout, args.run_timeout, args.timers, args.timing == "invocation")
    notes += comparison.baseline_notes(variants)
    references = None
    if args.reference is not None:
        references = comparison.load_references(args.reference)
        notes.append("reference: " + " ".join(map(str, args.reference)))
    return variants, notes, references


def dispatch_variants(args, tools: IreeTools, work: Path) -> Prepared:
    """Run each configuration's build once; the reference is the operation's own."""
    manifest = Manifest.load(args.generated_dir)
    check_runnable(tools, manifest.target)
    chosen = select(manifest.dispatches, args.dispatch)
    device = options.runtime_device(args, manifest.target)
    args.facts = facts(tools, manifest.target, device, args.timing_source)
    args.calibrate = Calibration(tools, manifest.target, device, args.timers, True,
                                 args.calibration)
    variants, operation, reference = comparison.dispatch_variants(
        tools, manifest, chosen, device, work, args.run_timeout, args.timers,
        args.timing == "invocation")
    return variants, [f"operation {operation}"], [reference]


def compare_variants(args, variants: list[Variant], notes: list[str],
                     references: list[np.ndarray] | None) -> int:
    ready = [v for v in variants if v.benchmark is not None]
    protocol = Protocol(precision=args.precision, time_budget=args.time_budget,
                        min_rounds=args.min_rounds)
    sources = ", ".join(dict.fromkeys(v.benchmark.source for v in ready))
    print(f"Timing {len(ready)} variants in interleaved rounds (precision {args.precision:.0%}, "
          f"budget {args.time_budget:g} s; timing source {sources})", flush=True)
    start = args.calibrate.measure()
    print(calibration.block("start", start), flush=True)
    measured = comparison.measure_variants(variants, protocol)
    end = args.calibrate.measure()
    verdict = calibration.within_session(start, end)
    print(calibration.block("end", end, verdict))
    report = comparison.build_report(variants, measured, references, args.min_effect)
    report["machine state"] = calibration.state_dict(start, end)
    report["facts"] = {**args.facts, "timing source": sources,
                       "machine state": f"{start.summary()}; {verdict}",
                       "command": options.command_line()}
    for note in notes:
        print(note)
    print_report(report, measured)
    if args.output is not None:
        comparison.write_report(args.output, report)
        print(f"Results: {args.output} and {args.output.with_suffix('.csv')}")
    write_html(args, report)
    failed = any(v.reason for v in variants) or not all(a["ok"] for a in report["agreement"])
    return 1 if failed else 0


def print_report(report: dict, measured: Measurement) -> None:
    print(f"{'variant':<24} {'median ms':>10}  {'95% interval':<22} {'cv':>6}  rounds")
    for v in report["variants"]:
        print(f"{v['name']:<24} {v['median_ms']:>10.4f}  "
              f"[{v['ci_low_ms']:.4f}, {v['ci_high_ms']:.4f}]".ljust(60)
              + f"{v['cv']:>6.1%}  {v['rounds']}")
    for failure in report["failures"]:
        print(f"{failure['variant']:<24} FAILED: {failure['reason']}")
    if measured.drift != "no":
        print(f"drift: {measured.drift} (the baseline's late rounds moved against its early ones)")
    for pair in report["comparisons"]:
        print(pair["verdict"])
    for a in report["agreement"]:
        print(f"agreement {a['variant']} vs {a['baseline']}, output {a['output']}: "
              f"max abs {a['max_abs']:.3g}, max rel {a['max_rel']:.3g}, "
              f"{a['mismatches']} over tolerance; allowed {a['allowed']:.3g} at "
              f"{tuple(a['worst_index'])}, {a['rule']}: " + ("ok" if a["ok"] else "DISAGREE"))


def compare_csv(args) -> int:
    """Per dispatch of two profiler CSVs: old time / new time with an interval from both
    runtime intervals; the machine's state in each run compared first, and differences
    beyond noise and beyond the machine's shift flagged; a PNG beside --output."""
    comparisons, machine = comparison.csv_comparisons(*args.csv, args.min_effect, args.normalize)
    for line in machine["lines"]:
        print(line)
    if args.normalize and machine["shifts"]:
        print("normalized: each new time divided by its kind of kernel's shift (compute- or "
              "memory-bound by the old run's ridge point); see machine_factor")
    width = max(len(c["dispatch"]) for c in comparisons)
    print(f"{'dispatch':<{width}} {'old ms':>10} {'new ms':>10}  speedup (old/new) "
          "[interval across sessions]")
    for c in comparisons:
        print(f"{c['dispatch']:<{width}} {c['old_ms']:>10.4f} {c['new_ms']:>10.4f}  "
              f"{c['speedup']:.3f}x [{c['ci_low']:.3f}, {c['ci_high']:.3f}] {c['flag']}")
    counts = {flag: sum(c["flag"].split(" (")[0] == flag for c in comparisons)
              for flag in ("REGRESSION", "improved", machine["within"])}
    print(f"{len(comparisons)} dispatches: {counts['REGRESSION']} regressions, "
          f"{counts['improved']} improvements beyond noise (min effect {args.min_effect:.0%})"
          + (f"; {counts[machine['within']]} left to the {machine['within']}, not claimed"
             if counts[machine["within"]] else ""))
    report = {"comparisons": comparisons, "machine": machine, "facts": {
        "old": str(args.csv[0]), "new": str(args.csv[1]), "machine state": machine["lines"][0],
        "command": options.command_line()}}
    if args.output is not None:
        plot = args.output.with_suffix(".png")
        speedup_plot(comparisons, plot, f"{args.csv[0].name} -> {args.csv[1].name}")
        comparison.write_csv_comparisons(args.output, report)
        print(f"Results: {args.output}, {args.output.with_suffix('.csv')} and plot {plot}")
    write_html(args, report)
    return 0


def write_html(args, report: dict) -> None:
    if args.html is not None:
        options.write_html(args.html, content.comparison(report))


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    modes = [m for m in ("input", "dispatch", "csv") if getattr(args, m) is not None]
    if len(modes) != 1:
        raise UserError("give one of --input, --dispatch or --csv")
    if args.output is not None:  # before any work: a folder that cannot be made is said now
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"cannot write {args.output}: {error.strerror}") from None
    if args.csv is not None:
        missing = [str(p) for p in args.csv if not p.is_file()]
        if missing:
            raise UserError(f"{missing[0]} does not exist")
        return compare_csv(args)
    if args.input is not None:
        if len(args.variant) < 2:
            raise UserError("give two or more --variant NAME=\"...\" (the first is the baseline)")
        names = [name for name, _ in args.variant]
        if len(set(names)) != len(names):
            raise UserError(f"variant names repeat: {', '.join(names)}")
        if args.inputs is not None and args.random_inputs is not None and not given_types(args):
            raise UserError("give --inputs files or --random-inputs, not both (--random-inputs "
                            "seeds what is drawn at a type --inputs gives)")
    elif args.variant:
        raise UserError("--variant goes with --input; --dispatch compares generated configurations")
    work = args.work_dir or (args.output.parent if args.output else Path(".")) / "compare-work"
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {work}: {error.strerror}") from None
    tools = IreeTools.locate(args.iree_bin_dir)
    prepare = module_variants if args.input is not None else dispatch_variants
    with Timers(args.timing_source, tools, log_dir=work) as timers:
        args.timers = timers
        return compare_variants(args, *prepare(args, tools, work))


def run() -> None:
    options.run_main(main)
