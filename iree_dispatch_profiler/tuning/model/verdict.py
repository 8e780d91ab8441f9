"""Phase 5: the verdict: the lines a reader acts on (outputs, speed, the answer), the answer
as a command (X_compile.sh), the Markdown and JSON reports and the plot; an answer whose
outputs disagree is never shipped nor called faster."""
from __future__ import annotations

import dataclasses
import json
import math
import shlex
from pathlib import Path

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import LOCAL_SYNC
from iree_dispatch_profiler.iree import iree_jobs, process
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, compile_command
from iree_dispatch_profiler.measure.calibration import CEILING_ELEMENT
from iree_dispatch_profiler.tuning.plots import model_plot
from iree_dispatch_profiler.tuning.engine import DEFAULT
from iree_dispatch_profiler.tuning.model import final
from iree_dispatch_profiler.tuning.model.final import BUILD_NAMES, ModelResult
from iree_dispatch_profiler.tuning.model.tuner import SURVEY_FLAGS, ModelTuner

def times_line(result: ModelResult) -> str:
    """`Model times: IREE default 5.12 ms [5.01, 5.30], ...` (and each whole call)."""
    names = {**BUILD_NAMES, **({"flags": "rewritten source alone"}
                               if result.source and not result.flags else {})}
    parts = [f"{names[n]} {e.median:.3f} ms {e.interval('.3f')} (whole call {call:.3f} ms)"
             for n, (e, call) in result.times.items()]
    return "Model times, summed dispatches per call: " + "; ".join(parts) if parts else ""


def model_line(result: ModelResult) -> str:
    """`Model: faster by 2.10x [1.95, 2.24] than IREE data tiling, the better of IREE's default
    and its data tiling`; `slower by ...`, or no significant difference."""
    if result.dropped is not None:
        return (f"Model: IREE's default, which the tuned answer was "
                f"{stats.direction(result.dropped)} than in the final session: the tuned answer "
                "is not shipped")
    if not result.answer:
        return "Model: unchanged (no rewrite, flags or spec beat IREE's default)"
    if not result.outputs_ok:
        return "Model: no answer: its outputs disagree with IREE's default (not shipped)"
    speedup, against = result.speedup, "IREE's default"
    if (result.data_tiling is not None and result.data_tiling.median > 1
            and result.over_data_tiling is not None):
        speedup, against = result.over_data_tiling, "IREE data tiling"
    if result.replaced is not None:
        return (f"Model: IREE data tiling ({result.flags.flags}), which the tuned answer was "
                f"{stats.direction(result.replaced)} than, timed beside it: the tuned answer "
                "is not shipped")
    if speedup is None or not speedup.n:
        return "Model: not timed"
    best = f"{against}, the better of IREE's default and its data tiling"
    if not stats.significant(speedup, stats.MIN_EFFECT):
        return f"Model: no significant difference from {best}"
    return f"Model: {stats.direction(speedup)} than {best}"


BATCH_RUN = ["chrt", "--batch", "0"]  # util-linux: run a command under SCHED_BATCH
# why each way of running can be faster (final.runtimes)
WHY_FASTER = {
    final.BATCH_RUNTIME: "a waking SCHED_BATCH thread does not preempt the IREE worker that "
                         "its wait spins on",
    LOCAL_SYNC: "its dispatches are too small for a second thread to repay handing them to "
                "IREE's workers",
    final.UNPINNED_RUNTIME: "IREE pins a worker to each core by default; unpinned, the OS moves a "
                            "worker off a core where another thread woke"}


def best_runtime(result: ModelResult) -> final.Runtime | None:
    """Of the ways of running the shipped call that were significantly faster than the
    tuner's own, the one of the highest median speedup; None where none was."""
    faster = [(way, found) for way, found in result.runtimes
              if found is not None and found.n and stats.significant(found, stats.MIN_EFFECT)
              and found.median > 1]
    return max(faster, key=lambda pair: pair[1].median)[0] if faster else None


def how_to_run(runtime: final.Runtime) -> str:
    if runtime.policy == process.BATCH:
        return shlex.join(BATCH_RUN)
    return shlex.join(runtime.flags) if runtime.flags else f"--device={runtime.device}"


def how_timed(runtime: final.Runtime) -> str:
    """`under SCHED_BATCH`, `with --task_topology_group_count=2`, `on local-sync`."""
    if runtime.policy == process.BATCH:
        return "under SCHED_BATCH"
    return f"with {how_to_run(runtime)}" if runtime.flags else f"on {runtime.device}"


def runtime_lines(result: ModelResult) -> list[str]:
    """`Runtime: the answer's whole call under SCHED_BATCH is faster by 1.81x [...] than as
    timed (local-task, the default scheduling)`, a line per way it was timed; the best of
    the significantly faster ones says how to run it, and why."""
    if not result.runtimes:
        return []
    what = "the answer's" if result.answer and result.outputs_ok else "IREE's default's"
    timed = f"as timed ({result.runtimes[0][0].device}, the default scheduling)"
    best = best_runtime(result)
    lines = []
    for way, found in result.runtimes[1:]:
        if found is None or not found.n:
            continue
        how = how_timed(way)
        if not stats.significant(found, stats.MIN_EFFECT):
            lines.append(f"Runtime: {what} whole call {how}: no significant difference from "
                         f"the call {timed} ({found.median:.2f}x {found.interval('.2f')})")
            continue
        line = f"Runtime: {what} whole call {how} is {stats.direction(found)} than {timed}"
        if way == best:
            line += f": run it with `{how_to_run(way)}` ({WHY_FASTER[way.name]})"
        lines.append(line)
    return lines


def answer_flags(result: ModelResult) -> list[str]:
    """The flags the answer adds to the target's."""
    return shipped_flags(result) + ([f"{SPEC_FLAG}={result.spec.resolve()}"] if result.spec
                                    else [])


def shipped_flags(result: ModelResult) -> list[str]:
    """The answer's flags but its spec: the flag set's, then those of the source rewrite."""
    return [*(result.flags.args if result.flags else []), *result.source_flags]


def answer_line(result: ModelResult, script: Path) -> str:
    """What to compile the model with."""
    if result.answer and result.outputs_ok:
        return (f"Answer: sh {script} (the iree-compile command that was timed; inside, its "
                "flags for another CPU)")
    best = best_runtime(result)  # IREE's default's: nothing is shipped
    run = f", run with `{how_to_run(best)}`" if best is not None else ""
    if not result.answer:
        return f"Answer: IREE's default{run}"
    return f"Answer: IREE's default{run} (the tuned answer's outputs disagree: not shipped)"


def write_compile_script(tuner: ModelTuner, result: ModelResult, path: Path) -> None:
    """`X_compile.sh`: the exact iree-compile command of the timed answer (this target's flags
    as IREE resolved them), the same with `host` for another machine, and the run command."""
    s, target = tuner.s, tuner.target
    vmfb = s.paths.tuned_vmfb
    timed = compile_command(tuner.tools, target, s.input.resolve(), Path(vmfb),
                            answer_flags(result))
    portable = dataclasses.replace(target, cpu="host", cpu_features="", target_triple="",
                                   cpu_target=None)
    # without the spec: its tiles are sized to this CPU's vectors, and AVX-512 tiles fail on
    # AVX2 or NEON ("large vector sizes": a Swin block's and T5 attention's, IREE 3.13)
    elsewhere = compile_command(tuner.tools, portable, s.input.resolve(), Path(vmfb),
                                shipped_flags(result))
    best = best_runtime(result)
    # as timed: with the heap kept (iree_jobs.KEPT_HEAP, read from the environment at start)
    run_line = [*(f"{k}={v}" for k, v in iree_jobs.KEPT_HEAP.items()),
                *(BATCH_RUN if best is not None and best.policy == process.BATCH else []),
                "iree-run-module", f"--module={vmfb}",
                f"--device={best.device if best is not None else tuner.device}",
                f"--function={tuner.function}", *tuner.run_flags,
                *(best.flags if best is not None else ()),
                *(f"--input={i}" for i in tuner.inputs[tuner.function].flags)]
    cpu = target.resolved_cpu()
    text = "\n".join([
        "#!/bin/sh",
        f"# autotune.py --model's answer for {s.input} (function {tuner.function}), timed on "
        f"{tuner.timed_on}: {model_line(result)}",
        f"# The command that was timed, for {cpu.summary} (the tuner also gave "
        f"{' '.join(SURVEY_FLAGS)} and dump flags, to check the spec):",
        "set -e",
        shlex.join(["iree-compile", *timed[1:]]),
        "# For another machine, the same flags with the CPU IREE finds there" + (
            f" and without the spec, whose tiles are sized to {cpu.name}'s vectors (to tune one "
            "there, run autotune.py there):" if result.spec else ":"),
        "#   " + shlex.join(["iree-compile", *elsewhere[1:]]),
        "# Run it as it was verified" + (f" ({how_to_run(best)}, which was faster):"
                                          if best is not None else ":"),
        "#   " + shlex.join(run_line), ""])
    write_atomically(path, text)
    path.chmod(0o755)


def outputs_line(result: ModelResult) -> str:
    if result.agreement is None:
        return "Outputs: not compared (the answer is IREE's default itself)"
    word = "agree" if result.outputs_ok else "DISAGREE"
    return f"Outputs: {word} with IREE's default ({result.agreement.detail})"


def comparison_lines(result: ModelResult) -> list[str]:
    """The figures behind the Model line, and IREE's other answer (its data tiling and
    ukernels) against its default and against the answer (none for an answer whose outputs
    disagree: it is not faster at anything)."""
    lines: list[str] = []
    if not result.outputs_ok:
        return lines
    tuned = None if result.replaced is not None else result.speedup  # else data tiling's
    for estimate, what in ((tuned, "the tuned model against IREE's default"),
                           (result.data_tiling, "IREE data tiling + ukernels against IREE's default"),
                           (result.over_data_tiling or result.replaced,
                            "the tuned model against IREE data tiling"),
                           (result.over_flags, "flags + spec against the flags alone")):
        if estimate is not None and estimate.n:
            lines.append(f"{what}: {estimate.median:.2f}x {estimate.interval('.2f')}")
    return lines


def source_lines(result: ModelResult) -> list[str]:
    if not result.source:
        return []
    needs = (f", with `{shlex.join(result.source_flags)}`" if result.source_flags else "")
    return [f"Source: rewritten by {result.source}: the answer compiles it{needs}"]


def verdict_lines(result: ModelResult) -> list[str]:
    return [*source_lines(result), outputs_line(result), model_line(result),
            *([times_line(result)] if result.times else []), *comparison_lines(result),
            *runtime_lines(result)]


def dispatch_rows(rows: list[dict], result: ModelResult, tuned_targets: set[int],
                  trials: dict[int, int], ceiling: float | None = None,
                  others: dict[str, float] | None = None) -> list[dict]:
    """Each ranked dispatch before (the flags alone) and after (with the spec), its share of
    each, its target's trials (the budget's choice) and speedup in the final session, and the
    answer's GFLOP/s there against the session's compute `ceiling`, or the ceiling of its
    inputs' element in `others` (where its root op's work is known)."""
    total = {when: sum(times.get(r["dispatch"], 0.0) for r in rows) or math.nan
             for when, times in (("before", result.default_ms), ("after", result.tuned_ms))}
    dispatches = []
    for row in rows:
        number = int(row["target"]) if row["target"] != "" else None
        speedup = result.per_target.get(number) if number is not None else None
        before = result.default_ms.get(row["dispatch"], math.nan)
        after = result.tuned_ms.get(row["dispatch"], math.nan)
        flops = result.work.get(row["dispatch"])
        gflops = flops / (after * 1e6) if flops and after > 0 else None
        element = result.uncalibrated.get(row["dispatch"], "")
        against = (others or {}).get(element) if element else ceiling
        dispatches.append({
            "dispatch": row["dispatch"], "root": f"{row['root']} {row['shape']}",
            "share": float(row["share"]), "before_ms": before, "after_ms": after,
            "share_before": before / total["before"], "share_after": after / total["after"],
            "speedup": speedup.median if speedup else None,
            "speedup_low": speedup.low if speedup else None,
            "speedup_high": speedup.high if speedup else None,
            "speedup_text": f"{speedup.median:.2f}x {speedup.interval('.2f')}" if speedup else "-",
            "trials": trials.get(number, 0) if number is not None else 0,
            "in_spec": "yes" if number in tuned_targets else "no",
            "gflops": gflops, "uncalibrated": element,
            "of_ceiling": gflops / against if gflops and against else None})
    return dispatches


SHOWN_DISPATCHES = 5


def time_goes_lines(dispatches: list[dict], result: ModelResult, ceiling: dict | None,
                    floor: dict | None = None, others: dict[str, float] | None = None
                    ) -> list[str]:
    """Where the answer's call goes: its slowest dispatches, each at its GFLOP/s against this
    session's compute ceiling or its element's in `others` (how far IREE's code for it is
    from the fastest kernel measured on this machine; over 100% where it beats that kernel),
    and the time the call takes beyond its dispatches (runtime work no config changes); with
    `floor` (compute_floor's), the call against it."""
    build = "tuned" if "tuned" in result.times else DEFAULT
    shown = sorted((d for d in dispatches if d["after_ms"] > 0), key=lambda d: -d["after_ms"])
    if build not in result.times or not shown:
        return []
    summed, call = result.times[build][0].median, result.times[build][1]
    about = (f"against this session's compute ceiling, {ceiling['gflops']:.0f} GFLOP/s: the faster "
             "of IREE's in-cache mmt4d and numpy's GEMM" if ceiling
             else "no compute ceiling measured (--calibration off)")
    about += "".join(f"; {element} contractions against {gflops:.0f} GFLOP/s, IREE's in-cache "
                     f"{element} mmt4d" for element, gflops in sorted((others or {}).items()))
    lines = [f"Where the answer's call goes ({about}):"]
    width = max(len(d["dispatch"]) for d in shown[:SHOWN_DISPATCHES])
    for d in shown[:SHOWN_DISPATCHES]:
        if d["gflops"]:
            rate = f"{d['gflops']:6.1f} GFLOP/s"
            if d["of_ceiling"]:
                rate += (f", {d['of_ceiling']:4.0%} of the "
                         f"{d['uncalibrated'] + ' ' if d['uncalibrated'] else ''}ceiling")
            elif d["uncalibrated"] and ceiling:
                rate += f", {d['uncalibrated']} inputs: no ceiling measured for them"
        else:
            rate = f"no FLOP count ({d['root'].split()[0] if d['root'].strip() else 'no root op'})"
        lines.append(f"  {d['dispatch']:<{width}} {d['after_ms']:8.4f} ms {d['after_ms'] / call:6.1%}"
                     f"  {rate}")
    rest = sum(d["after_ms"] for d in shown[SHOWN_DISPATCHES:])
    if rest:
        lines.append(f"  {len(shown) - SHOWN_DISPATCHES} other dispatch(es) {rest:.4f} ms "
                     f"{rest / call:.1%}")
    beyond = call - summed
    if beyond < 0:  # the two come from different processes; one of them had a slow mode
        lines.append(f"  the call beyond its dispatches: none measured (whole call {call:.3f} ms, "
                     f"below its dispatches' {summed:.3f} ms, timed in other processes)")
    else:
        lines.append(f"  the call beyond its dispatches {beyond:.4f} ms {beyond / call:.1%} (whole "
                     f"call {call:.3f} ms, dispatches {summed:.3f} ms: the runtime's own work)"
                     + beyond_split(summed, result.spans.get(build), call))
    if floor:
        left = sorted({d["uncalibrated"] for d in dispatches if d["uncalibrated"]}
                      - set(floor["ceilings"]))
        counted = " and ".join(floor["ceilings"]) + " " if left else ""
        lines.append(f"  its {counted}contractions' work, "
                     f"{floor['gflop']:.3g} GFLOP a call (padding included), at "
                     f"{floor['at']} (the fastest rate{'s' if len(floor['ceilings']) > 1 else ''} seen): "
                     f"{floor['ms']:.3f} ms, the floor of its call; the call at "
                     f"{floor['ms'] / call:.0%} of it"
                     + (f" (its {', '.join(left)} contractions not counted)" if left else ""))
    return lines


def beyond_split(summed: float, span: float | None, call: float) -> str:
    """Where the call beyond its dispatches goes, by its span (timing.call_spans): gaps between
    its dispatches (barriers, workers woken), which fewer dispatches shorten, and the time
    between calls (the call issued and waited for), which the way it runs changes (the
    Runtime: lines); "" without a span, or with one longer than the call."""
    if span is None or span > call:
        return ""
    gaps = (f"{span - summed:.4f} ms between its dispatches" if span >= summed
            else f"its dispatches overlapping by {summed - span:.4f} ms")
    return (f": {gaps}, {call - span:.4f} ms between calls (the call's span {span:.3f} ms, its "
            "first dispatch's start to its last one's end)")


def compute_floor(dispatches: list[dict], peaks: list[dict | None],
                  others: dict[str, float] | None = None) -> dict | None:
    """The answer's contraction work a call and its time at the session's compute ceilings:
    what the answer's call cannot beat (its memory-bound ops come on top; a build padding its
    tiles less could beat it by that padding, 3% on BERT's 128 rows). Beside another
    implementation's time it says how far any tuning could take the model past it. Each
    element's ceiling is the fastest rate seen, of the session's calibrations (`peaks`: a VM's
    phases move them; `others`: element -> GFLOP/s) and the answer's own dispatches of it, so
    that the floor is never set too high; contractions of an element without a ceiling are
    left out (their rates are others). `ceiling_gflops` is the f32 one (None without f32
    contractions); `at` says them all."""
    known = {CEILING_ELEMENT: [p["gflops"] for p in peaks if p]}
    known |= {element: [gflops] for element, gflops in (others or {}).items()}
    ceilings, gflop, ms = {}, 0.0, 0.0
    for element, measured in known.items():
        counted = [d for d in dispatches if d["gflops"]
                   and (d["uncalibrated"] or CEILING_ELEMENT) == element]
        if not counted or not measured:
            continue
        ceilings[element] = max(*measured, *(d["gflops"] for d in counted))
        work = sum(d["gflops"] * d["after_ms"] / 1e3 for d in counted)
        gflop, ms = gflop + work, ms + work / ceilings[element] * 1e3
    if not ceilings:
        return None
    at = ", ".join(f"{gflops:.0f}{' GFLOP/s' if not i else ''}"
                   + (f" for {element}" if len(ceilings) > 1 else "")
                   for i, (element, gflops) in enumerate(ceilings.items()))
    return {"gflop": gflop, "ceiling_gflops": ceilings.get(CEILING_ELEMENT), "ms": ms,
            "ceilings": ceilings, "at": at}


def write_report(path: Path, dispatches: list[dict], result: ModelResult,
                 goes: list[str]) -> None:
    flags = shipped_flags(result)
    named = f" ({result.flags.name})" if result.flags else ""
    lines = ["# Model tuning report", "",
             f"Flags: `{shlex.join(flags)}`{named}" if flags else "Flags: none",
             f"Tuning spec: `{result.spec.name}`" if result.spec else "Tuning spec: none", "",
             "| dispatch | root op | share | flags alone ms | tuned ms | tuned GFLOP/s | of ceiling | "
             "target trials | target speedup [95%] | in spec |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for d in dispatches:
        rate = f"{d['gflops']:.1f}" if d["gflops"] else "-"
        share = f"{d['of_ceiling']:.0%}" if d["of_ceiling"] else "-"
        lines.append(f"| {d['dispatch']} | {d['root']} | {d['share']:.1%} | {d['before_ms']:.4f} | "
                     f"{d['after_ms']:.4f} | {rate} | {share} | {d['trials']} | "
                     f"{d['speedup_text']} | {d['in_spec']} |")
    lines += ["", *verdict_lines(result),
              "(times: the summed time of the model's dispatches per call, interleaved rounds)"]
    if goes:
        lines += ["", "```", *goes, "```"]
    if result.problems:
        lines += ["", "Spec problems:", *(f"- {p}" for p in result.problems)]
    path.write_text("\n".join(lines) + "\n")


def write_summary(path: Path, facts: dict, dispatches: list[dict], lines: list[str],
                  floor: dict | None = None) -> None:
    """The model's answer as JSON (what its HTML report shows; `floor`: compute_floor's)."""
    write_atomically(path, json.dumps({"kind": "model", "facts": facts, "lines": lines,
                                       "dispatches": dispatches, "floor": floor},
                                      indent=1, default=float) + "\n")


def conclude(tuner: ModelTuner, rows: list[dict], result: ModelResult,
             tuned_targets: set[int], trials: dict[int, int] | None = None) -> int:
    """The verdict logged and written; `trials`: each tuned target's trials."""
    result = final.time_runtimes(tuner, result)
    tuner.calibrate_end()
    log = tuner.log
    paths = tuner.s.paths
    flags_path, script = paths.best_flags, paths.compile_script
    flags_path.unlink(missing_ok=True)
    script.unlink(missing_ok=True)
    shipped = result.answer and result.outputs_ok
    flags = shipped_flags(result)
    if shipped and flags:
        flags_path.write_text(shlex.join(flags) + "\n")  # quoted for a shell
    if result.spec is not None and not result.outputs_ok:
        # kept to look at, under a name no one ships by mistake
        result.spec.replace(paths.rejected_spec if result.spec == paths.tuning_spec
                            else result.spec.with_name(f"{result.spec.stem}_rejected.mlir"))
    for problem in result.problems:
        log(f"Spec problem: {problem}")
    if result.spec is not None and result.outputs_ok:
        together = f" with the flags in {flags_path}" if flags else ""
        log(f"Tuning spec {result.spec}{together}: " + (
            "applies as intended" if not result.problems
            else f"{len(result.problems)} problem(s)"))
    inputs = f"Inputs: {tuner.inputs[tuner.function].about}"
    log(inputs)
    for line in source_lines(result):
        log(line)
    log(outputs_line(result))
    log(model_line(result))
    if result.times:
        log(times_line(result))
    for line in comparison_lines(result):
        log(f"({line})")
    for line in runtime_lines(result):
        log(line)
    if shipped:
        write_compile_script(tuner, result, script)
    log(answer_line(result, script))
    report_path, plot = paths.model_report, paths.model_plot
    ceiling = tuner.peak()
    others = tuner.ceilings(result.uncalibrated.values()) if ceiling else {}
    dispatches = dispatch_rows(rows, result, tuned_targets, trials or {},
                               ceiling["gflops"] if ceiling else None, others)
    end = tuner.machine_end.peak() if tuner.machine_end is not None else None
    floor = compute_floor(dispatches, [ceiling, end], others)
    goes = time_goes_lines(dispatches, result, ceiling, floor, others)
    for line in goes:
        log(line)
    write_report(report_path, dispatches, result, goes)
    write_summary(paths.model_summary, tuner.facts, dispatches,
                  [inputs, *verdict_lines(result), answer_line(result, script), *goes,
                   *result.problems], floor)
    model_plot([r["dispatch"] for r in rows], result.default_ms, result.tuned_ms, plot)
    log(f"Report: {report_path}; plot: {plot}"
        + (f"; ranking: {paths.ranking}" if paths.ranking.is_file() else ""))
    log.timings()
    log(tuner.builder.summary())
    return 0 if result.outputs_ok and not result.problems else 1
