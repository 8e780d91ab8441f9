"""Phase 4: the final measurement. The winners become one spec (checked entry by entry), the
model with flags and spec is verified on the inputs used and timed against IREE's default, its
data tiling and the flags alone; a winner slower beside the others is dropped and the model
measured again."""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import LOCAL_SYNC, LOCAL_TASK, UserError
from iree_dispatch_profiler.iree import process
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG
from iree_dispatch_profiler.iree.timing import Benchmark
from iree_dispatch_profiler.measure.calibration import CEILING_ELEMENT
from iree_dispatch_profiler.measure.protocol import Candidate, Outcome, Protocol, measure
from iree_dispatch_profiler.measure.verification import Agreement
from iree_dispatch_profiler.tuning import flags as module_flags
from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning.engine import DEFAULT, Build, OpResult
from iree_dispatch_profiler.tuning.flags import FlagSet
from iree_dispatch_profiler.tuning.model.spec_check import check_spec, iree_own
from iree_dispatch_profiler.tuning.model.tuner import ModelTuner, TuningTarget
from iree_dispatch_profiler.tuning.spec import Entry


@dataclass(frozen=True)
class Runtime:
    """A way to run the shipped call that no compile flag reaches: a HAL device, a CPU
    scheduling policy (process.POLICIES) and runtime flags."""
    name: str
    device: str
    policy: str = ""
    flags: tuple[str, ...] = ()


BATCH_RUNTIME = "SCHED_BATCH"
UNPINNED_RUNTIME = "unpinned workers"
# --runtimes' names for the ways beyond the tuner's own
RUNTIME_NAMES = {"sched-batch": BATCH_RUNTIME, "unpinned": UNPINNED_RUNTIME, "local-sync": LOCAL_SYNC}


def unpinned_workers() -> tuple[str, ...]:
    """local-task's flag for one worker per CPU this process may run on, none pinned to a core
    (IREE's default topology pins a worker to each physical core)."""
    return (f"--task_topology_group_count={len(os.sched_getaffinity(0))}",)


@dataclass
class ModelResult:
    spec: Path | None  # None: no spec
    flags: FlagSet | None  # the flags shipped with the spec (None: IREE's default flags)
    problems: list[str]
    agreement: Agreement | None  # the answer's outputs against IREE's default (None: not compared)
    speedup: stats.Estimate | None  # the answer (flags + spec) against IREE's default
    data_tiling: stats.Estimate | None  # IREE's data tiling against its default
    over_data_tiling: stats.Estimate | None  # the answer against IREE's data tiling
    over_flags: stats.Estimate | None  # the answer against its flags alone (the spec's part)
    per_target: dict[int, stats.Estimate]  # target number -> speedup of its dispatches
    default_ms: dict[str, float]  # dispatch -> ms in the final session, under the flags alone
    tuned_ms: dict[str, float]
    # build (default, data_tiling, flags, tuned) -> the summed dispatch time per model call,
    # and the whole call's median ms, from the final session
    times: dict[str, tuple[stats.Estimate, float]] = dataclasses.field(default_factory=dict)
    # dispatch -> FLOP per model call of the answer's dispatch (its root op's, times its calls),
    # where the root op's work is known
    work: dict[str, float] = dataclasses.field(default_factory=dict)
    # dispatch -> the input element of a root op whose work is known but whose kind of
    # contraction the session's compute ceiling is not of (calibration.CEILING_ELEMENT: bf16)
    uncalibrated: dict[str, str] = dataclasses.field(default_factory=dict)
    source: str = ""  # the source rewrite the answer compiles ("": the model's own)
    source_flags: list[str] = dataclasses.field(default_factory=list)  # the flags it needs
    # the ways the shipped build's whole call was timed (runtimes()), each with its speedup
    # against the first, the tuner's own way (None there); empty: not timed (another machine
    # runs the candidates)
    runtimes: list[tuple[Runtime, stats.Estimate | None]] = dataclasses.field(
        default_factory=list)

    # the tuned answer against IREE's data tiling where that was significantly faster, timed
    # beside it, and is shipped in its place (data_tiling_answer)
    replaced: stats.Estimate | None = None
    # build -> a call's span, its first dispatch's start to its last one's end, median ms
    # (timing.call_spans; only where device profiling timed it)
    spans: dict[str, float] = dataclasses.field(default_factory=dict)
    # the tuned answer against IREE's default where it was significantly slower in the final
    # session, and so not shipped (default_answer)
    dropped: stats.Estimate | None = None

    @property
    def answer(self) -> bool:
        return self.spec is not None or self.flags is not None or bool(self.source)

    @property
    def behind_data_tiling(self) -> bool:
        return slower(self.over_data_tiling)

    @property
    def behind_default(self) -> bool:
        return slower(self.speedup)

    @property
    def outputs_ok(self) -> bool:
        return self.agreement is None or self.agreement.ok


def time_model(tuner: ModelTuner, builds: dict[str, Build], seconds: float,
               settle: str | None = None) -> tuple[dict[str, Outcome], dict[str, Benchmark]]:
    """The whole model's builds, and IREE's data tiling beside them, in interleaved rounds
    against IREE's default (until `settle`'s speedup is significant, when given). A vmfb shared
    by two names (data tiling chosen as the flags) is timed once and reported under both."""
    tiling = tuner.data_tiling_build()
    builds = {DEFAULT: tuner.iree_default, **builds}
    if not tiling.reason:
        builds["data_tiling"] = tiling
    tuner.focus = ()  # the whole model's dispatches now
    first = {}  # vmfb -> the first name it is timed under
    for name, build in builds.items():
        first.setdefault(build.vmfb, name)
    benches = {name: tuner.benchmark(build, tuner.function) for name, build in builds.items()
               if first[build.vmfb] == name}
    start = time.perf_counter()
    measured = measure([Candidate(n, b.sample) for n, b in benches.items()], DEFAULT,
                       Protocol(time_budget=seconds,
                                settle=settle if settle in benches else None))
    tuner.log.phase("model", time.perf_counter() - start)
    outcomes = dict(measured.outcomes)
    for name, build in builds.items():
        outcomes[name], benches[name] = outcomes[first[build.vmfb]], benches[first[build.vmfb]]
    return outcomes, benches


def measure_model(tuner: ModelTuner, entries: list[Entry], spec: Path | None, flags: FlagSet | None,
                  default_roots: dict, targets_by_number: dict[int, TuningTarget],
                  seconds: float, settle: bool = False) -> ModelResult:
    """Compile the model with the flags and the spec together, check every entry, verify, and
    time it against IREE's default, its data tiling and the flags alone in interleaved rounds
    (with `settle`, a re-confirmation: until the answer's speedup is significant either way).
    Without a spec the answer is the flags alone (verified by the flag search); without
    either, IREE's default is timed beside its data tiling."""
    problems, builds, check, answer_roots = [], {}, None, default_roots
    answer = tuner.s.paths.answer_build  # what bench_model.py times
    answer.unlink(missing_ok=True)
    if spec is not None:
        tuned, tuned_roots = tuner.build_surveyed("model_tuned", [*tuner.base_flags,
                                                                  f"{SPEC_FLAG}={spec.resolve()}"])
        if tuned.reason:
            raise UserError(f"the model does not compile with {spec}: {tuned.reason}")
        problems = check_spec(entries, default_roots, tuned_roots, tuner.s.spec_library)
        if tuner.s.spec_library:
            matching = [e.name for e in entries if e.matcher is not None and any(
                e.matcher.accepts(r.name, r.operand_types) for r in default_roots.values())]
            tuner.log(f"Tuning spec {spec.name}, a library of {len(entries)} entries: "
                      f"{len(matching)} match this model's dispatches ({', '.join(matching)})")
        check = answer_agreement(tuner, tuned)
        answer_roots = tuner.at_inputs(tuned_roots, say=False)  # the work of dynamic ones too
        builds.update({"flags": tuner.default} if flags is not None or tuner.rewrite else {})
        builds["tuned"] = tuned
    elif flags is not None or tuner.rewrite:
        shutil.copyfile(tuner.default.vmfb, answer)
        check = answer_agreement(tuner, tuner.default)
        builds["tuned"] = tuner.default
    outcome, benches = time_model(tuner, builds, seconds, "tuned" if settle else None)
    # Each dispatch before and after the spec: under the flags alone, and with the spec.
    final = "tuned" if "tuned" in benches else DEFAULT
    reference = "flags" if "flags" in benches else DEFAULT if spec is not None else final
    rounds = min(len(benches[reference].rows), len(benches[final].rows))
    before, after = benches[reference].rows[-rounds:], benches[final].rows[-rounds:]
    per_target = {}
    for number, target in targets_by_number.items():
        a = [sum(r.get(d, (0, 0.0))[1] for d in target.dispatches) for r in before]
        b = [sum(r.get(d, (0, 0.0))[1] for d in target.dispatches) for r in after]
        if rounds and all(v > 0 for v in b):
            per_target[number] = stats.speedup(a, b)

    def against(baseline: str) -> stats.Estimate | None:
        timed = [outcome.get(n) for n in (baseline, "tuned")]
        if any(o is None or o.reason for o in timed):
            return None
        return stats.speedup(timed[0].samples, timed[1].samples)

    tuned = outcome.get("tuned")
    tiling = outcome.get("data_tiling")
    return ModelResult(spec, flags, problems, check,
                       tuned.speedup if tuned and not tuned.reason else None,
                       tiling.speedup if tiling else None, against("data_tiling"),
                       against("flags"), per_target, medians(before), medians(after),
                       model_times(outcome, benches), work(answer_roots, after),
                       uncalibrated(answer_roots, after),
                       f"{tuner.rewrite} ({tuner.s.paths.rewritten_source.name})"
                       if tuner.rewrite else "", list(tuner.source_flags),
                       spans=model_spans(outcome, benches))


def runtimes(device: str, allowed: tuple[str, ...] | None = None) -> list[Runtime]:
    """The ways the shipped call is timed: as the tuner ran it, under SCHED_BATCH where this
    OS has it, and where the tuner ran local-task, with its workers unpinned and on
    local-sync; of those beyond the first, the `allowed` (RUNTIME_NAMES; None: all)."""
    found = [Runtime(DEFAULT, device)]
    if process.can_schedule(process.BATCH):
        found.append(Runtime(BATCH_RUNTIME, device, process.BATCH))
    if device == LOCAL_TASK:
        # Unpinned, the workers gained what SCHED_BATCH gains, with no change of scheduling
        # policy (a runtime flag, also for iree.runtime in a process): whole call, tuned, 3
        # rounds (Emerald Rapids, 2 cores): GPT-2 decode step 1.22-1.38 -> 0.73-0.93 ms,
        # encoder block 1.90-2.33 -> 1.57-1.68, MobileNet block 0.80-1.08 -> 0.80-0.95; a
        # ResNet stage lost (2.69-3.48 -> 3.00-4.81). Under SCHED_BATCH it changed nothing.
        found.append(Runtime(UNPINNED_RUNTIME, device, flags=unpinned_workers()))
        # IREE's synchronous device runs each dispatch in the calling thread: no hand-off to
        # worker threads and no wake-ups, at one thread's speed. It wins where dispatches are
        # too small for a second core to repay the hand-off: a one-layer text classifier (14
        # dispatches, 28 us of them) took 0.042 ms a call there against 0.073-0.108 on
        # local-task; a GPT-2 decode step (0.78 -> 1.57 ms) and an encoder block (1.43 -> 2.60
        # ms) lost (Zen 4, 2 cores).
        found.append(Runtime(LOCAL_SYNC, LOCAL_SYNC))
    if allowed is None:
        return found
    kept = {RUNTIME_NAMES[name] for name in allowed}
    return [found[0], *(way for way in found[1:] if way.name in kept)]


def time_runtimes(tuner: ModelTuner, result: ModelResult) -> ModelResult:
    """The result with the whole call of what it ships (IREE's default where it ships
    nothing) timed each way of `runtimes` against the tuner's own, interleaved: levers of the
    runtime (verdict.WHY_FASTER says why each can gain)."""
    ways = runtimes(tuner.device, tuner.s.runtimes)
    # timed on this machine only, and only beside another way (--runtimes none: none)
    if tuner.runner not in (None, process.run) or len(ways) == 1:
        return result
    shipped = result.answer and result.outputs_ok and tuner.s.paths.answer_build.is_file()
    vmfb = tuner.s.paths.answer_build if shipped else tuner.iree_default.vmfb
    benches = [tuner.timers.benchmark(vmfb, tuner.function, r.device,
                                      tuner.inputs[tuner.function].flags,
                                      flags=[*tuner.run_flags, *r.flags],
                                      timeout=tuner.s.run_timeout, whole_call=True,
                                      scheduling=r.policy) for r in ways]
    start = time.perf_counter()
    measured = measure([Candidate(r.name, b.sample) for r, b in zip(ways, benches)], DEFAULT,
                       Protocol(time_budget=tuner.s.confirm_seconds))
    tuner.log.phase("runtime", time.perf_counter() - start)
    outcomes = measured.outcomes
    for way in ways:
        if outcomes[way.name].reason:
            tuner.log(f"Runtime {way.name}: not timed: {outcomes[way.name].reason}")
    if outcomes[DEFAULT].reason:  # nothing to compare the others with
        return result
    return dataclasses.replace(result, runtimes=[
        (way, outcomes[way.name].speedup) for way in ways if not outcomes[way.name].reason])


def data_tiling_answer(tuner: ModelTuner, result: ModelResult) -> ModelResult:
    """IREE's data tiling of the model itself (its flags, the model's own source, no spec) in
    place of a tuned answer significantly slower than it in the final session: an answer
    that loses to a flag set of IREE's is not shipped (a rewrite adopted against IREE's
    default, and flags and a spec tuned on it, ended 1.07x slower than data tiling on an
    attention layer). The spec is kept under the rejected name."""
    tiling = tuner.data_tiling_build()
    shutil.copyfile(tiling.vmfb, tuner.s.paths.answer_build)
    return set_aside(tuner, result, module_flags.DATA_TILING_SET, result.data_tiling,
                     replaced=result.over_data_tiling)


def default_answer(tuner: ModelTuner, result: ModelResult) -> ModelResult:
    """IREE's default in place of a tuned answer significantly slower than it in the final
    session: nothing is shipped. The searches that chose the answer timed it in shorter
    sessions (on a loaded machine a data tiling set 1.05x faster in the flag search was 1.33x
    slower in the final one). The spec is kept under the rejected name."""
    tuner.s.paths.answer_build.unlink(missing_ok=True)
    return set_aside(tuner, result, None, None, dropped=result.speedup)


def set_aside(tuner: ModelTuner, result: ModelResult, flags: FlagSet | None,
              speedup: stats.Estimate | None, **why: stats.Estimate | None) -> ModelResult:
    """The result with the tuned answer set aside for IREE's `flags` (None: its default) on
    the model's own source, at `speedup`; the spec kept under the rejected name; `why`: the
    field with what the tuned answer measured (replaced, dropped)."""
    if result.spec is not None:
        result.spec.replace(tuner.s.paths.rejected_spec)
    tuner.s.input = tuner.model
    return dataclasses.replace(result, spec=None, flags=flags, problems=[], speedup=speedup,
                               over_data_tiling=None, over_flags=None, source="",
                               source_flags=[], **why)


def slower(found: stats.Estimate | None) -> bool:
    """Whether a speedup says significantly slower."""
    return (found is not None and bool(found.n) and stats.significant(found, stats.MIN_EFFECT)
            and found.median < 1)


def answer_agreement(tuner: ModelTuner, build: Build) -> Agreement:
    """The answer's outputs against IREE's default's on the inputs the tuner used."""
    status, reason, check = tuner.verify(build, tuner.function)
    return check if check is not None else Agreement(
        math.inf, math.inf, 0, (), False, 0.0, f"not run: {status}: {reason}")


def medians(rows: list[dict]) -> dict[str, float]:
    """dispatch -> its median ms over the rounds of a session."""
    return {d: float(np.median([r[d][1] for r in rows if d in r])) for d in rows[-1]} if rows else {}


def work(roots: dict, rows: list[dict]) -> dict[str, float]:
    """dispatch -> FLOP per model call: its root op's times its calls in the last round."""
    found = {}
    for dispatch, (calls, _) in (rows[-1].items() if rows else ()):
        root = roots.get(dispatch)
        flops = root.flops if root is not None else None
        if flops:
            found[dispatch] = calls * flops
    return found


def uncalibrated(roots: dict, rows: list[dict]) -> dict[str, str]:
    """dispatch -> its root op's input element, of the dispatches of known `work`, where the
    compute ceiling is of another."""
    return {dispatch: roots[dispatch].input_element or "unknown" for dispatch in work(roots, rows)
            if roots[dispatch].input_element != CEILING_ELEMENT}


def timed_builds(outcome: dict[str, Outcome], benches: dict[str, Benchmark]) -> list[str]:
    """The builds of BUILD_NAMES the final session timed."""
    return [name for name in BUILD_NAMES
            if name in outcome and not outcome[name].reason and benches[name].invocations]


def model_times(outcome: dict[str, Outcome], benches: dict[str, Benchmark],
                ) -> dict[str, tuple[stats.Estimate, float]]:
    return {name: (outcome[name].runtime, float(np.median(benches[name].invocations)))
            for name in timed_builds(outcome, benches)}


def model_spans(outcome: dict[str, Outcome], benches: dict[str, Benchmark]) -> dict[str, float]:
    """build -> the median span of its calls (timing.call_spans), where device profiling
    timed it."""
    return {name: float(np.median(benches[name].spans)) for name in timed_builds(outcome, benches)
            if benches[name].spans}


BUILD_NAMES = {DEFAULT: "IREE default", "data_tiling": "IREE data tiling", "flags": "flags alone",
               "tuned": "tuned"}


def winners(tuner: ModelTuner, results: list[OpResult], by_number: dict[int, TuningTarget],
            default_roots: dict) -> dict:
    """Target number -> the config of its confirmed winner, less those that are IREE's own
    config for their dispatches (a speedup measured on the same code is noise)."""
    found = {r.op.index: tuning_space.configuration(r.op, next(p for p in r.space.points
                                                              if p.name == r.winner))
             for r in results if r.winner != DEFAULT}
    names = {r.op.index: r.winner for r in results}
    for number in [n for n in found if iree_own(found[n], by_number[n].dispatches, default_roots)]:
        del found[number]
        tuner.log(f"target {number}: its winner {names[number]} is IREE's own config there "
                  "(a speedup measured on the same code is noise): left out of the spec")
    return found


def write_spec(path: Path, configs: dict, by_number: dict[int, TuningTarget]) -> list[Entry]:
    """The spec of target number -> config written to `path`; its entries as written (the
    check names what is in the file)."""
    entries = tuning_spec.entries([(by_number[n].op, configs[n]) for n in configs],
                                  intended={n: by_number[n].dispatches for n in configs})
    path.write_text(tuning_spec.text(entries))
    return entries


def spec_part(result: ModelResult) -> stats.Estimate | None:
    """The answer against itself without the spec: its flags (or rewritten source) alone, or
    IREE's default."""
    return result.over_flags if result.flags or result.source else result.speedup


def slower_with_spec(result: ModelResult) -> bool:
    """Whether the whole model is significantly slower with the spec than without it: each
    target's dispatches may still be faster (an encoder block: 0.91x [0.89, 0.93] against its
    flags alone, its two entries 1.18x and 1.11x on their own dispatches)."""
    return result.spec is not None and slower(spec_part(result))


def settle(tuner: ModelTuner, configs: dict, by_number: dict[int, TuningTarget],
           flags: FlagSet | None, default_roots: dict) -> tuple[ModelResult, set[int]]:
    """The spec of the winners that stay faster beside each other, written, checked and
    measured (no spec if none stays); the result and the targets in the spec."""
    s, spec = tuner.s, tuner.s.paths.tuning_spec
    while configs:
        entries = write_spec(spec, configs, by_number)
        result = measure_model(tuner, entries, spec, flags, default_roots, by_number,
                               s.confirm_seconds)
        # A winner measured alone can lose beside the others: drop it and measure again.
        losers = [n for n in configs if slower(result.per_target.get(n))]
        if not losers:
            if not slower_with_spec(result):
                return result, set(configs)
            part = spec_part(result)  # each target holds, yet the whole model lost: no spec
            assert part is not None
            tuner.log(f"The whole model with the spec is {stats.direction(part)} than without "
                      "it: no tuning spec")
            break
        tuner.log(f"dropped from the spec, slower inside the tuned model: target(s) {losers}")
        configs = {n: c for n, c in configs.items() if n not in losers}
    else:
        tuner.log("No tuned config beat " + ("the flags alone" if flags else "IREE's default")
                  + " inside the model: no tuning spec")
    spec.unlink(missing_ok=True)
    return measure_model(tuner, [], None, flags, default_roots, {}, s.confirm_seconds), set()
