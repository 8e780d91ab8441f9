#!/usr/bin/env python3
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
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

import modules
import options
import stats
from launchers import (SPEC_FLAG, Benchmark, CompileRecord, IreeTools, check_runnable,
                       compile_command, resolve_target, run, run_module)
from library import UserError
from manifest import Manifest, select
from measurement import Candidate, Measurement, Protocol, measure
from plots import speedup_plot
from verification import ReferenceCache, agreement

NAME = re.compile(r"[A-Za-z0-9_.+-]+$")


def parse_variant(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not NAME.match(name):
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=\"<flags, .mlir module or spec>\" "
                                         "(NAME of letters, digits, _ . + -)")
    return name, value


def parse_paths(text: str) -> list[Path]:
    """`@a.npy,@b.npy` (the @ as in IREE's tools is optional)."""
    paths = [Path(item.strip().removeprefix("@")) for item in text.split(",")]
    if not all(str(p) not in ("", ".") for p in paths):
        raise argparse.ArgumentTypeError(f"empty file name in '{text}'")
    return paths


def parser() -> options.ArgumentParser:
    p = options.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_argument_group("what to compare (one of)")
    mode.add_argument("--input", type=Path, metavar="MODULE.mlir",
                      help="a module compiled once per --variant")
    mode.add_argument("--dispatch", type=options.compile_patterns, metavar="REGEX,...",
                      help="configurations of one generated operation (with --generated-dir)")
    mode.add_argument("--csv", type=Path, nargs=2, metavar=("OLD.csv", "NEW.csv"),
                      help="two profiler CSVs: per-dispatch speedup, regressions beyond noise")
    p.add_argument("--variant", type=parse_variant, action="append", default=[],
                   metavar='NAME="FLAGS|FILE ..."',
                   help="a compile variant: extra iree-compile flags, another .mlir module, or a "
                        "transform/tuning spec file; the first is the baseline (two or more)")
    p.add_argument("--function", default=None, help="function to run (default: the only public one)")
    p.add_argument("--inputs", type=parse_paths, default=None, metavar="@A.npy,@B.npy",
                   help="one .npy per function argument")
    p.add_argument("--random-inputs", type=int, default=None, metavar="SEED",
                   help="numpy.random.rand cast to each argument's type, saved as .npy")
    options.add_parameters(p)
    p.add_argument("--reference", type=parse_paths, default=None, metavar="@OUT.npy,...",
                   help="expected outputs (.npy, one per result) every variant is checked against")
    p.add_argument("--min-effect", type=options.parse_fraction, default=stats.MIN_EFFECT,
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
    p.add_argument("--min-rounds", type=options.parse_positive, default=Protocol.min_rounds,
                   metavar="N", help="at least N interleaved rounds (default: 6)")
    options.add_generated_dir(p)
    options.add_iree_bin_dir(p)
    options.add_target(p, recorded=False)
    return p


@dataclass
class Variant:
    name: str
    benchmark: Benchmark | None = None
    outputs: list[np.ndarray] = field(default_factory=list)
    reason: str = ""  # why it could not be compared


# --------------------------------------------------------------------------------------------
# Variants of a module
def split_variant(value: str, default_module: Path) -> tuple[Path, list[str]]:
    """The module a variant compiles and its extra flags: files among its words are another
    module, a tuning spec (has a tuning_spec_entrypoint) or a preprocessing transform spec."""
    module, flags = default_module, []
    try:
        words = shlex.split(value)
    except ValueError as error:
        raise UserError(f"cannot read variant '{value}': {error}") from None
    for word in words:
        path = Path(word)
        if word.startswith("-") or not word.endswith(".mlir"):
            flags.append(word)
        elif not path.is_file():
            raise UserError(f"variant file {word} does not exist")
        else:
            text = path.read_text(errors="replace")
            if "transform.named_sequence" not in text:
                module = path
            elif "iree_codegen.tuning_spec_entrypoint" in text:
                flags.append(f"{SPEC_FLAG}={path}")
            else:
                flags.append(f"--iree-preprocessing-transform-spec-filename={path}")
    return module, flags


Prepared = tuple[list[Variant], list[str], "list[np.ndarray] | None"]  # + notes, references


def module_variants(args, tools: IreeTools, work: Path) -> Prepared:
    """Compile every variant and run it once."""
    if not args.input.is_file():
        raise UserError(f"--input {args.input} does not exist")
    signature = modules.find_function(args.input, args.function)
    notes = []
    if args.inputs is not None:
        missing = [str(p) for p in args.inputs if not p.is_file()]
        if missing:
            raise UserError(f"input file {missing[0]} does not exist")
        arrays, paths = modules.load_inputs(args.inputs, signature), args.inputs
    elif args.random_inputs is not None:
        arrays = modules.random_inputs(signature, args.random_inputs)
        folder = args.output.parent if args.output else work
        stem = args.output.stem if args.output else "random"
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f"{stem}_input{i}.npy" for i in range(len(arrays))]
        for array, path in zip(arrays, paths):
            np.save(path, array)
        notes.append(f"random inputs (seed {args.random_inputs}): "
                     + " ".join(str(p) for p in paths))
    elif signature.arguments:
        raise UserError(f"{signature.name} takes {len(signature.arguments)} inputs: give "
                        "--inputs @a.npy,... or --random-inputs SEED")
    else:
        arrays, paths = [], []
    run_flags = options.parameter_flags(args)
    target = resolve_target(tools, options.target_from_args(args))
    device = options.runtime_device(args, target)
    inputs = [f"@{p}" for p in paths]
    variants = []
    for name, value in args.variant:
        source, flags = split_variant(value, args.input)
        variant = Variant(name)
        variants.append(variant)
        vmfb = work / f"{name}.vmfb"
        command = compile_command(tools, target, source, vmfb, flags)
        result = run(command, args.compile_timeout)
        (work / f"{name}.compile.log").write_text(f"$ {shlex.join(command)}\n{result.stderr}")
        if not result.ok:
            variant.reason = result.failure("iree-compile", args.compile_timeout)
            continue
        outputs = [work / f"{name}_output{i}.bin" for i in range(len(signature.results))]
        ran = run_module(tools, vmfb, signature.name, device, inputs, outputs, args.run_timeout,
                         run_flags)
        if not ran.ok:
            variant.reason = ran.reason
            continue
        try:
            variant.outputs = modules.read_outputs(outputs, signature)
        except ValueError:
            variant.reason = "an output has an unexpected size"
            continue
        variant.benchmark = Benchmark(tools, vmfb, signature.name, device, inputs,
                                      flags=run_flags, timeout=args.run_timeout,
                                      dispatch_statistics=args.timing == "dispatches")
    references = None
    if args.reference is not None:
        references = load_references(args.reference)
        notes.append("reference: " + " ".join(map(str, args.reference)))
    return variants, notes, references


# --------------------------------------------------------------------------------------------
# Configurations of a generated operation
def dispatch_variants(args, tools: IreeTools, work: Path) -> Prepared:
    """Run each configuration's verify build once; the reference is the operation's own."""
    manifest = Manifest.load(args.generated_dir)
    check_runnable(tools, manifest.target)
    chosen = select(manifest.dispatches, args.dispatch)
    operations = list(dict.fromkeys(d.operation for d in chosen))
    if len(operations) != 1:
        raise UserError(f"--dispatch matches dispatches of {len(operations)} operations; "
                        "name one operation (or some of its configurations)")
    operation = operations[0]
    chosen.sort(key=lambda d: d.configuration.name != "default")  # default is the baseline
    cache = ReferenceCache(manifest.reference_folder(operation), operation)
    buffers = [b.flag for b in cache.ensure_inputs()]
    device = options.runtime_device(args, manifest.target)
    variants = []
    for dispatch in chosen:
        paths = manifest.paths(dispatch)
        record = CompileRecord.load(paths.compile_record)
        variant = Variant(dispatch.configuration.name)
        variants.append(variant)
        if record is None or record.status != "ok" or not record.profile_built:
            variant.reason = record.reason if record and record.reason else \
                "not compiled with a profile build (run compile.py)"
            continue
        output = work / f"{dispatch.name}_output.bin"
        ran = run_module(tools, paths.verify_vmfb, dispatch.name, device, buffers, [output],
                         args.run_timeout)
        if not ran.ok:
            variant.reason = ran.reason
            continue
        variant.outputs = [cache.read_result(output).astype(operation.output[1].numpy)]
        variant.benchmark = Benchmark(tools, paths.profile_vmfb, dispatch.name, device, buffers,
                                      record.repeat_count, timeout=args.run_timeout,
                                      dispatch_statistics=args.timing == "dispatches")
    reference = cache.expected().astype(operation.output[1].numpy)
    return variants, [f"operation {operation.name}"], [reference]


# --------------------------------------------------------------------------------------------
def compare_variants(args, variants: list[Variant], notes: list[str],
                     references: list[np.ndarray] | None) -> int:
    baseline = variants[0].name
    ready = [v for v in variants if v.benchmark is not None]
    protocol = Protocol(precision=args.precision, time_budget=args.time_budget,
                        min_rounds=args.min_rounds)
    print(f"Timing {len(ready)} variants in interleaved rounds (precision {args.precision:.0%}, "
          f"budget {args.time_budget:g} s)", flush=True)
    measured = measure([Candidate(v.name, v.benchmark.sample) for v in ready], baseline, protocol)
    for variant in ready:
        if measured.outcomes[variant.name].reason:
            variant.reason = measured.outcomes[variant.name].reason
    report = build_report(args, variants, measured, references)
    for note in notes:
        print(note)
    print_report(report, measured)
    if args.output is not None:
        write_outputs(args.output, report)
    failed = any(v.reason for v in variants) or not all(a["ok"] for a in report["agreement"])
    return 1 if failed else 0


def build_report(args, variants: list[Variant], measured: Measurement,
                 references: list[np.ndarray] | None) -> dict:
    baseline = variants[0]
    report = {"baseline": baseline.name, "rounds": measured.rounds, "drift": measured.drift,
              "variants": [], "comparisons": [], "agreement": [], "failures": []}
    for variant in variants:
        if variant.reason:
            report["failures"].append({"variant": variant.name, "reason": variant.reason})
            continue
        outcome = measured.outcomes[variant.name]
        report["variants"].append({
            "name": variant.name, "median_ms": outcome.runtime.median,
            "ci_low_ms": outcome.runtime.low, "ci_high_ms": outcome.runtime.high,
            "cv": outcome.runtime.cv, "rounds": outcome.runtime.n,
            "precision_reached": outcome.precision_reached})
        if variant is not baseline and outcome.speedup is not None:
            ratio = outcome.speedup
            report["comparisons"].append({
                "baseline": baseline.name, "variant": variant.name, "speedup": ratio.median,
                "ci_low": ratio.low, "ci_high": ratio.high,
                "significant": stats.significant(ratio, args.min_effect),
                "verdict": stats.verdict(variant.name, baseline.name, ratio, args.min_effect)})
    checks = []
    if not baseline.reason:
        checks += [(baseline.name, baseline.outputs, v) for v in variants[1:] if not v.reason]
    if references is not None:
        checks += [("reference", references, v) for v in variants if not v.reason]
    for against, expected, variant in checks:
        if len(expected) != len(variant.outputs):
            raise UserError(f"{len(expected)} reference outputs for {len(variant.outputs)} results")
        for i, (want, got) in enumerate(zip(expected, variant.outputs)):
            check = agreement(got, want)
            report["agreement"].append({
                "baseline": against, "variant": variant.name, "output": i,
                "max_abs": check.max_abs, "max_rel": check.max_rel,
                "mismatches": check.mismatches, "worst_index": list(check.worst_index),
                "ok": check.ok})
    return report


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
    for comparison in report["comparisons"]:
        print(comparison["verdict"])
    for a in report["agreement"]:
        print(f"agreement {a['variant']} vs {a['baseline']}, output {a['output']}: "
              f"max abs {a['max_abs']:.3g}, max rel {a['max_rel']:.3g}, "
              f"{a['mismatches']} over tolerance (worst at {tuple(a['worst_index'])}): "
              + ("ok" if a["ok"] else "DISAGREE"))


def write_outputs(path: Path, report: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1, default=float) + "\n")
        rows = pd.DataFrame(report["variants"])
        if report["comparisons"]:
            rows = rows.merge(pd.DataFrame(report["comparisons"]).drop(columns="baseline"),
                              how="left", left_on="name", right_on="variant").drop(columns="variant")
        rows.to_csv(path.with_suffix(".csv"), index=False)
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror}") from None
    print(f"Results: {path} and {path.with_suffix('.csv')}")


# --------------------------------------------------------------------------------------------
def compare_csv(args) -> int:
    """Per dispatch of two profiler CSVs: old time / new time with an interval from both
    runtime intervals; regressions and improvements beyond noise flagged, and a PNG."""
    frames = []
    for path in args.csv:
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError) as error:
            raise UserError(f"cannot read profiler CSV {path}: {error}") from None
        if not {"Dispatch", "Runtime(ms)"} <= set(frame.columns):
            raise UserError(f"{path} is not a profiler CSV (no Dispatch and Runtime(ms) columns)")
        for column in ("ci_low", "ci_high"):
            if column not in frame.columns:
                frame[column] = np.nan  # an older CSV: no interval, nothing is claimed
        frames.append(frame[["Dispatch", "Runtime(ms)", "ci_low", "ci_high"]]
                      .dropna(subset=["Runtime(ms)"]).drop_duplicates("Dispatch", keep="last"))
    both = frames[0].merge(frames[1], on="Dispatch", suffixes=("_old", "_new"))
    if both.empty:
        raise UserError("the two CSVs have no timed dispatch in common")
    comparisons = []
    for row in both.itertuples(index=False):
        old, new = row[1], row[4]
        ratio = stats.Estimate(old / new, row[2] / row[6], row[3] / row[5], np.nan, 1)
        significant = stats.significant(ratio, args.min_effect)
        flag = "" if not significant else "improved" if ratio.median > 1 else "REGRESSION"
        comparisons.append({"baseline": str(args.csv[0]), "variant": str(args.csv[1]),
                            "dispatch": row[0], "old_ms": old, "new_ms": new,
                            "speedup": ratio.median, "ci_low": ratio.low, "ci_high": ratio.high,
                            "significant": significant, "flag": flag})
    width = max(len(c["dispatch"]) for c in comparisons)
    print(f"{'dispatch':<{width}} {'old ms':>10} {'new ms':>10}  speedup (old/new) [interval]")
    for c in comparisons:
        print(f"{c['dispatch']:<{width}} {c['old_ms']:>10.4f} {c['new_ms']:>10.4f}  "
              f"{c['speedup']:.3f}x [{c['ci_low']:.3f}, {c['ci_high']:.3f}] {c['flag']}")
    regressions = sum(c["flag"] == "REGRESSION" for c in comparisons)
    improved = sum(c["flag"] == "improved" for c in comparisons)
    print(f"{len(comparisons)} dispatches: {regressions} regressions, {improved} improvements "
          f"beyond noise (min effect {args.min_effect:.0%})")
    plot = (args.output.with_suffix(".png") if args.output else Path("compare.png"))
    speedup_plot(comparisons, plot, f"{args.csv[0].name} -> {args.csv[1].name}")
    print(f"Plot: {plot}")
    if args.output is not None:
        try:
            args.output.write_text(json.dumps({"comparisons": comparisons}, indent=1) + "\n")
            pd.DataFrame(comparisons).to_csv(args.output.with_suffix(".csv"), index=False)
        except OSError as error:
            raise UserError(f"cannot write {args.output}: {error.strerror}") from None
        print(f"Results: {args.output} and {args.output.with_suffix('.csv')}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    modes = [m for m in ("input", "dispatch", "csv") if getattr(args, m) is not None]
    if len(modes) != 1:
        raise UserError("give one of --input, --dispatch or --csv")
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
        if args.inputs is not None and args.random_inputs is not None:
            raise UserError("give --inputs or --random-inputs, not both")
    elif args.variant:
        raise UserError("--variant goes with --input; --dispatch compares generated configurations")
    work = args.work_dir or (args.output.parent if args.output else Path(".")) / "compare-work"
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {work}: {error.strerror}") from None
    tools = IreeTools.locate(args.iree_bin_dir)
    prepare = module_variants if args.input is not None else dispatch_variants
    return compare_variants(args, *prepare(args, tools, work))


def load_references(paths: list[Path]) -> list[np.ndarray]:
    arrays = []
    for path in paths:
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as error:
            raise UserError(f"cannot read reference {path}: {error}") from None
    return arrays


if __name__ == "__main__":
    options.run_main(main)
