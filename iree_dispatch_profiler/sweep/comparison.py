"""A/B comparison (compare.py's work): variants of a module or configurations of a generated
operation compiled, run once for their outputs and timed in interleaved rounds; speedups with
intervals, verdicts and output agreement in one report; and two profiler CSVs compared per
dispatch."""
from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import Target, UserError
from iree_dispatch_profiler.iree import modules
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, compile_command, run_module
from iree_dispatch_profiler.iree.process import run
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.iree.timers import Timer, Timers
from iree_dispatch_profiler.sweep.build import CompileRecord
from iree_dispatch_profiler.sweep.manifest import Dispatch, Manifest
from iree_dispatch_profiler.sweep.performance_report import (MACHINE_STATE,
                                                             MACHINE_STATE_DURING, sessions)
from iree_dispatch_profiler.measure.calibration import (MachineState, band, comparable, shifts,
                                                        span, within_session)
from iree_dispatch_profiler.measure.protocol import Candidate, Measurement, Protocol, measure
from iree_dispatch_profiler.measure.verification import ReferenceCache, agreement, non_finite


@dataclass
class Variant:
    name: str
    benchmark: Timer | None = None
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
        if word.startswith("-") or not word.endswith(modules.SUFFIXES):
            flags.append(word)
        elif not path.is_file():
            raise UserError(f"variant file {word} does not exist")
        else:
            text = modules.text_of(path)
            if "transform.named_sequence" not in text:
                module = path
            elif "iree_codegen.tuning_spec_entrypoint" in text:
                flags.append(f"{SPEC_FLAG}={path}")
            else:
                flags.append(f"--iree-preprocessing-transform-spec-filename={path}")
    return module, flags


def module_inputs(signature: modules.Signature, given: list[modules.InputItem] | None,
                  seed: int | None, folder: Path, stem: str, bounds: dict[int, int]
                  ) -> tuple[list[str], list[str]]:
    """The --input values of the function's arguments (given .npy files, checked against the
    signature, or seeded random ones saved as `folder/<stem>_input<i>.npy`, at the types
    `given` holds where it does (seed 0 unless `seed`), index arguments within `bounds`), and
    notes."""
    if (files := modules.all_files(given)) is not None:
        return modules.given_inputs(files, signature).flags, []
    if seed is not None or given is not None:
        made = modules.draw_inputs(modules.concrete(signature, given), seed or 0, bounds, folder,
                                   stem, files=modules.given_files(given))
        return made.flags, [f"{made.about}: " + " ".join(map(str, made.paths))]
    if signature.arguments:
        raise UserError(f"{signature.name} takes {len(signature.arguments)} inputs: give "
                        "--inputs @a.npy,... or --random-inputs SEED")
    return [], []


def module_variants(tools: IreeTools, target: Target, device: str, source: Path,
                    signature: modules.Signature, variants: list[tuple[str, str]],
                    inputs: list[str], run_flags: list[str], work: Path, compile_timeout: float,
                    run_timeout: float, timers: Timers, whole_call: bool) -> list[Variant]:
    """Compile every variant (name, flags or files) and run it once."""
    prepared = []
    for name, value in variants:
        module, flags = split_variant(value, source)
        variant = Variant(name)
        prepared.append(variant)
        vmfb = work / f"{name}.vmfb"
        command = compile_command(tools, target, module, vmfb, flags)
        result = run(command, compile_timeout)
        (work / f"{name}.compile.log").write_text(f"$ {shlex.join(command)}\n{result.stderr}")
        if not result.ok:
            variant.reason = result.failure("iree-compile", compile_timeout)
            continue
        outputs = modules.output_paths(work, f"{name}_output", signature)
        ran = run_module(tools, vmfb, signature.name, device, inputs, outputs, run_timeout,
                         run_flags)
        if not ran.ok:
            variant.reason = ran.reason
            continue
        try:
            variant.outputs = modules.read_outputs(outputs, signature)
        except ValueError:
            variant.reason = "an output has an unexpected size"
            continue
        variant.benchmark = timers.benchmark(vmfb, signature.name, device, inputs, flags=run_flags,
                                             timeout=run_timeout, whole_call=whole_call)
    return prepared


def baseline_notes(variants: list[Variant]) -> list[str]:
    """A note where the baseline's outputs hold NaN or inf: NaN agrees with NaN, so the other
    variants' agreement with it checks nothing there (random inputs a model does not take: a
    padding mask drawn all ones masks every key)."""
    if not variants or not (bad := non_finite(variants[0].outputs)):
        return []
    return [f"the baseline {variants[0].name} gives NaN/inf on these inputs ({bad}): agreement "
            "with it checks nothing there; give the inputs the function takes with --inputs"]


def load_references(paths: list[Path]) -> list[np.ndarray]:
    arrays = []
    for path in paths:
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as error:
            raise UserError(f"cannot read reference {path}: {error}") from None
    return arrays


# --------------------------------------------------------------------------------------------
# Configurations of a generated operation
def dispatch_variants(tools: IreeTools, manifest: Manifest, chosen: list[Dispatch], device: str,
                      work: Path, run_timeout: float, timers: Timers,
                      whole_call: bool) -> tuple[list[Variant], str, np.ndarray]:
    """Run each configuration's build once (default first: the baseline); also the
    operation's name and its reference output."""
    operations = list(dict.fromkeys(d.operation for d in chosen))
    if len(operations) != 1:
        raise UserError(f"--dispatch matches dispatches of {len(operations)} operations; "
                        "name one operation (or some of its configurations)")
    operation = operations[0]
    chosen = sorted(chosen, key=lambda d: d.configuration.name != "default")
    cache = ReferenceCache(manifest.reference_folder(operation), operation)
    buffers = [b.flag for b in cache.ensure_inputs()]
    variants = []
    for dispatch in chosen:
        paths = manifest.paths(dispatch)
        record = CompileRecord.load(paths.compile_record)
        variant = Variant(dispatch.configuration.name)
        variants.append(variant)
        if record is None or record.status != "ok":
            variant.reason = record.reason if record and record.reason else \
                "not compiled (run compile.py)"
            continue
        output = work / f"{dispatch.name}_output.bin"
        ran = run_module(tools, paths.vmfb, dispatch.name, device, buffers, [output],
                         run_timeout)
        if not ran.ok:
            variant.reason = ran.reason
            continue
        variant.outputs = [cache.read_result(output).astype(operation.output[1].numpy)]
        variant.benchmark = timers.benchmark(paths.vmfb, dispatch.name, device, buffers,
                                             record.repeat_count, timeout=run_timeout,
                                             whole_call=whole_call)
    return variants, operation.name, cache.expected()[0].astype(operation.output[1].numpy)


# --------------------------------------------------------------------------------------------
def measure_variants(variants: list[Variant], protocol: Protocol) -> Measurement:
    """The runnable variants in interleaved rounds against the first; one that fails while
    being timed gets its reason."""
    ready = [v for v in variants if v.benchmark is not None]
    measured = measure([Candidate(v.name, v.benchmark.sample) for v in ready], variants[0].name,
                       protocol)
    for variant in ready:
        if measured.outcomes[variant.name].reason:
            variant.reason = measured.outcomes[variant.name].reason
    return measured


def build_report(variants: list[Variant], measured: Measurement,
                 references: list[np.ndarray] | None, min_effect: float) -> dict:
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
            "precision_reached": outcome.precision_reached,
            "timing_source": variant.benchmark.source})
        if variant is not baseline and outcome.speedup is not None:
            ratio = outcome.speedup
            report["comparisons"].append({
                "baseline": baseline.name, "variant": variant.name, "speedup": ratio.median,
                "ci_low": ratio.low, "ci_high": ratio.high,
                "significant": stats.significant(ratio, min_effect),
                "verdict": stats.verdict(variant.name, baseline.name, ratio, min_effect)})
    checks = []
    if not baseline.reason:
        checks += [(baseline.name, baseline.outputs, v) for v in variants[1:] if not v.reason]
    if references is not None:
        checks += [("reference", references, v) for v in variants if not v.reason]
    for against, expected, variant in checks:
        if len(expected) != len(variant.outputs):
            raise UserError(f"{len(expected)} reference outputs for {len(variant.outputs)} results")
        for i, (want, got) in enumerate(zip(expected, variant.outputs)):
            check = agreement(got, want, i)
            report["agreement"].append({
                "baseline": against, "variant": variant.name, "output": i,
                "max_abs": check.max_abs, "max_rel": check.max_rel,
                "mismatches": check.mismatches, "worst_index": list(check.worst_index),
                "allowed": check.allowed, "rule": check.rule, "ok": check.ok})
    return report


def write_report(path: Path, report: dict) -> None:
    """The report as JSON, and its variants with their comparisons as CSV beside it."""
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


# --------------------------------------------------------------------------------------------
def csv_comparisons(old: Path, new: Path, min_effect: float,
                    normalize: bool = False) -> tuple[list[dict], dict]:
    """Per dispatch of two profiler CSVs: old time / new time with an interval from both
    runtime intervals, flagged as a regression or an improvement beyond noise; and the two
    runs' machine states compared first (machine_shift). Each ratio's interval is widened by
    the spread between sessions (stats.across_sessions, for both runs); a difference beyond
    noise within the sessions that this spread or the machine's own shift could explain is
    flagged `machine shift` (or `session noise`, when the calibrations agree), not claimed;
    with `normalize`, each new time is
    divided by the shift of its kind of kernel (compute- or memory-bound, by the roofline's
    ridge) instead."""
    frames, states = [], []
    for path in (old, new):
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError) as error:
            raise UserError(f"cannot read profiler CSV {path}: {error}") from None
        if not {"Dispatch", "Runtime(ms)"} <= set(frame.columns):
            raise UserError(f"{path} is not a profiler CSV (no Dispatch and Runtime(ms) columns)")
        for column in ("ci_low", "ci_high", "flops", "bytes", MACHINE_STATE, MACHINE_STATE_DURING):
            if column not in frame.columns:
                frame[column] = np.nan  # an older CSV: no interval, nothing is claimed
        for column in ("Runtime(ms)", "ci_low", "ci_high"):
            numbers = pd.to_numeric(frame[column], errors="coerce")
            bad = frame[column].notna() & numbers.isna()
            if bad.any():
                row = frame[bad].iloc[0]
                raise UserError(f"{path}: {column} of {row['Dispatch']} is "
                                f"'{row[column]}', not a number")
            frame[column] = numbers
        states.append(sessions(frame))
        # the sentinel's reading in each dispatch's own rounds
        frame["during"] = [MachineState.from_json(a) for a in frame[MACHINE_STATE_DURING]]
        frames.append(frame[["Dispatch", "Runtime(ms)", "ci_low", "ci_high", "flops", "bytes",
                             "during"]]
                      .dropna(subset=["Runtime(ms)"]).drop_duplicates("Dispatch", keep="last"))
    both = frames[0].merge(frames[1], on="Dispatch", suffixes=("_old", "_new"))
    if both.empty:
        raise UserError("the two CSVs have no timed dispatch in common")
    machine = machine_shift(states[0], states[1], old.name, new.name, min_effect)
    comparisons, moved_rows = [], 0
    for row in both.to_dict("records"):
        # Judged by the machine in its own rounds when both runs had a sentinel there (the
        # sessions' calibrations can be off while its rounds were not), else by the sessions'.
        low, high = machine["band"]
        moved = False
        if not comparable(row["during_old"], row["during_new"]):
            found = shifts(row["during_old"], row["during_new"], min_effect)
            low, high = band(found)
            moved = any(x.significant for x in found)
            moved_rows += moved
        old_ms, new_ms = row["Runtime(ms)_old"], row["Runtime(ms)_new"]
        within = stats.Estimate(old_ms / new_ms, row["ci_low_old"] / row["ci_high_new"],
                                row["ci_high_old"] / row["ci_low_new"], np.nan, 1)
        factor = None
        if normalize and machine["shifts"] and machine["band"][1] < math.inf:
            factor = _machine_factor(machine, row["flops_old"], row["bytes_old"])
            within = stats.Estimate(within.median / factor.median, within.low / factor.high,
                                    within.high / factor.low, np.nan, 1)
        # two sessions: each run's time also carries its session's spread
        ratio = stats.across_sessions(within, math.sqrt(2) * stats.SESSION_SD)
        significant = stats.significant(within, min_effect)
        beyond_machine = factor is not None or ratio.low > high or ratio.high < low
        # rounds whose sentinels differ between the runs are never claimed
        claimed = stats.significant(ratio, min_effect) and beyond_machine and not moved
        flag = ("" if not significant else "machine shift" if moved
                else machine["within"] if not claimed
                else "improved" if ratio.median > 1 else "REGRESSION")
        if factor is not None and significant:
            flag += " (normalized)"  # a claim that rests on the machine's shift as a model
        comparisons.append({"baseline": str(old), "variant": str(new),
                            "dispatch": row["Dispatch"], "old_ms": old_ms, "new_ms": new_ms,
                            "speedup": ratio.median, "ci_low": ratio.low, "ci_high": ratio.high,
                            "ci_low_within": within.low, "ci_high_within": within.high,
                            "significant": flag.split(" (")[0] in ("improved", "REGRESSION"),
                            "flag": flag,
                            "machine_factor": factor.median if factor is not None else np.nan})
    judged = sum(not comparable(r["during_old"], r["during_new"]) for r in both.to_dict("records"))
    if judged:
        machine["lines"].append(
            f"machine state: {judged} of {len(both)} dispatches judged by the sentinel in their "
            f"own rounds; {moved_rows} ran on a machine that differed between the runs: "
            "not claimed")
    return comparisons, machine


def machine_shift(old: list, new: list, old_name: str, new_name: str,
                  min_effect: float) -> dict:
    """The two runs' calibrations (every session of each, start and end) compared: the lines
    that say it, each kernel's shift, and the band of speedups the machine alone explains
    (unbounded when a session's own start and end disagree: its timings mix two states)."""
    spans = [span([s for pair in states for s in pair]) for states in (old, new)]
    lines, why = [], comparable(*spans)
    changed = []
    for name, states in ((old_name, old), (new_name, new)):
        for start, end in states:
            if end is not None and not comparable(start, end) and any(
                    s.significant for s in shifts(start, end, min_effect)):
                changed.append(name)
                lines.append(f"machine state: in {name}, {within_session(start, end)}")
    if why:
        missing = old_name if not old else new_name if not new else f"{old_name} or {new_name}"
        lines.insert(0, f"machine state: not compared ({why} in {missing}): a shift of the "
                        "machine cannot be told from a change")
        return {"lines": lines, "shifts": [], "band": (1.0, 1.0), "within": "session noise",
                "old": None, "new": None, "flagged": False}
    found = shifts(spans[0], spans[1], min_effect)
    moved = [s for s in found if s.significant]
    if changed:
        lines.insert(0, f"machine state: the machine changed during a session of "
                        f"{' and '.join(dict.fromkeys(changed))}: a difference is attributed to "
                        "the change only where the sentinels in the dispatch's rounds agree")
    elif moved:
        lines.insert(0, "machine state: the machine ran " + "; ".join(s.said for s in moved)
                     + f" in {new_name}: differences below that are not attributed to the change")
    else:
        lines.insert(0, "machine state: the calibrations agree (" + ", ".join(
            f"{s.kernel} {s.ratio.median:.2f}x {s.ratio.interval('.2f')}" for s in found)
            + "): differences are attributed to the change")
    return {"lines": lines, "shifts": [{"kernel": s.kernel, "ratio": s.ratio.median,
                                       "ci_low": s.ratio.low, "ci_high": s.ratio.high,
                                       "significant": s.significant} for s in found],
            "band": (0.0, math.inf) if changed else band(found),
            "within": "machine shift" if moved or changed else "session noise",
            "flagged": bool(moved or changed),
            "old": spans[0].summary(), "new": spans[1].summary(),
            "ridge": (spans[0].readings["compute"].rate / spans[0].readings["memory"].rate
                      if {"compute", "memory"} <= set(spans[0].readings) else np.nan)}


def _machine_factor(machine: dict, flops: float, nbytes: float) -> stats.Estimate:
    """The shift of the kind of kernel a dispatch is: memory-bound below the ridge (when its
    flops and bytes are known), else compute-bound. As old/new speedups are, above 1 when the
    machine ran it faster in the new run."""
    by_kernel = {s["kernel"]: s for s in machine["shifts"]}
    kind = ("memory" if nbytes > 0 and flops / nbytes < machine["ridge"] and "memory" in by_kernel
            else "compute" if "compute" in by_kernel else next(iter(by_kernel)))
    shift = by_kernel[kind]
    # the rate ratio new/old is the time ratio old/new: a slower machine lowers every speedup
    return stats.Estimate(shift["ratio"], shift["ci_low"], shift["ci_high"], np.nan, 1)


def write_csv_comparisons(path: Path, report: dict) -> None:
    """`report` ({"comparisons": [...], "facts": {...}}) as JSON, its comparisons as CSV beside it."""
    try:
        path.write_text(json.dumps(report, indent=1) + "\n")
        pd.DataFrame(report["comparisons"]).to_csv(path.with_suffix(".csv"), index=False)
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror}") from None
