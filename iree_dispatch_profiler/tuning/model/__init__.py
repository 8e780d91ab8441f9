"""Whole-model tuning (autotune.py --model) as a phase script: `tune` reads top to bottom, each
phase a module that hands the next what it found.

  baseline     IREE's default compiled, its dispatch roots, the inputs and its outputs
  rewrite_search  source rewrites IREE's flags do not offer, on the whole model; the chosen
               one is adopted (every later build compiles the rewritten source)
  stored       the results store's answer for this model, re-confirmed instead of tuned
  flag_search  IREE's module flags on the whole model; the chosen set is adopted
  ranking      the dispatches by their share of the model's time; the hot tuning targets
  budget       the targets tuned inside the model by the engine's search, trials spread by
               expected gain; then each one's leaders confirmed and reported
  final        the winners as one spec, checked (spec_check), verified and timed
  verdict      the lines, X_compile.sh, the reports

A tuning target is a root op signature (operation name and operand types: what a spec matcher
sees); the dispatches whose root ops share it are tuned together. A candidate is the whole
model compiled with a one-entry spec: its config is checked in IREE's dumped configurations,
the model's outputs are verified against IREE's default, and its time is that of the target's
own dispatches inside the model (--dispatch_statistics), so fusion and calling context are
those of the real model."""
from __future__ import annotations

import dataclasses
import time

from iree_dispatch_profiler.core.library import CpuTarget, UserError
from iree_dispatch_profiler.iree import modules, tunable
from iree_dispatch_profiler.iree.launchers import lower
from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.measure.protocol import fastest_significant
from iree_dispatch_profiler.tuning.engine import (DEFAULT, OpResult, Settings, Toolchain, confirm,
                                                  remember, report, reuse, seeded)
from iree_dispatch_profiler.tuning.flags import FlagSet
from iree_dispatch_profiler.tuning.model import (budget, final, flag_search, ranking,
                                                 rewrite_search, stored, verdict)
from iree_dispatch_profiler.tuning.model.tuner import MODEL_SECONDS, ModelTuner, TuningTarget
from iree_dispatch_profiler.tuning.records import TrialWriter, load_trials, start_log
from iree_dispatch_profiler.tuning.spec import Matcher


def run_model(s: Settings, toolchain: Toolchain) -> int:
    """autotune.py --model."""
    return tune(*start(s, toolchain))


def start(s: Settings, toolchain: Toolchain) -> tuple[ModelTuner, CpuTarget]:
    """The model lowered and checked, its tuner with inputs and the machine's state; the CPU."""
    work = s.paths.work
    work.mkdir(parents=True, exist_ok=True)
    lowered = lower(toolchain.tools, toolchain.target, s.input, work, s.compile_timeout)
    function = modules.find_function(lowered, s.function, shown=str(s.input), source=s.input).name
    missing = modules.missing_parameters(lowered, toolchain.run_flags)
    if missing:  # said before the model is compiled or timed
        raise UserError(f"{s.input}: {missing}")
    cpu = toolchain.target.resolved_cpu()
    log = start_log(s.paths, s.begun_with)
    log(f"Model {s.input}, function {function}, for {cpu.summary}; timing source {s.timing_source}")
    s.input = modules.as_text(s.input, work)  # compile jobs carry the module's text
    tuner = ModelTuner(s, toolchain, log, lowered, function)
    tuner.check_inputs([function])
    if not s.list_only:  # a listing times dispatches only to rank them
        tuner.calibrate_start()
    return tuner, cpu


def tune(tuner: ModelTuner, cpu: CpuTarget) -> int:
    s = tuner.s
    default_roots = baseline(tuner)
    # the flag sets that can matter are those of the model's own ops too: a rewritten
    # depthwise conv leaves 1x1 convs that im2col makes named matmuls
    kinds = {root.op.kind for root in default_roots.values() if root.op}
    if not s.list_only and s.spec is None:
        default_roots = rewrite_search.search_rewrites(tuner, default_roots, cpu)
        kinds |= {root.op.kind for root in default_roots.values() if root.op}
        known = stored.reuse(tuner, default_roots)
        if known is not None:
            result, in_spec, rows = known
            tuner.log(tuner.store_summary(1, 1))
            return verdict.conclude(tuner, rows, result, in_spec)
    flags = flag_search.FlagChoice(None)
    # --list ranks the dispatches of IREE's default, quickly, or of --base-flags (the names
    # --dispatches finds under them); a given spec is checked under IREE's default flags or
    # --base-flags
    if s.base_flags is not None or not s.list_only and s.spec is None:
        # a dispatch of dynamic shapes has no benchmark IREE dumps, so no root op of a known
        # kind (a dynamic batch's matmuls ran 2.3x faster data-tiled, a set no kind found):
        # its kinds are those of the lowered model's ops (no im2col for a language model)
        if not all(a.static for a in tuner.signatures[tuner.function].arguments):
            kinds |= {op.kind for op in tunable.find(tuner.lowered)}
        flags = flag_search.search_flags(tuner, kinds, s.paths.flags_record)
    roots = flag_search.adopt(tuner, flags, default_roots)
    rows = ranking.rank(tuner, roots, flags.chosen.name if flags.chosen else None)
    if s.list_only:
        return 0
    if s.spec is not None:  # check a given spec and measure the model with it
        result = final.measure_model(tuner, tuning_spec.read_entries(s.spec), s.spec,
                                     flags.chosen, roots, {}, s.confirm_seconds)
        return verdict.conclude(tuner, rows, result, set())
    chosen = ranking.targets(rows, roots)
    results = search_targets(tuner, chosen, cpu)
    by_number = {t.op.index: t for t in chosen}
    configs = final.winners(tuner, results, by_number, roots)
    result, in_spec = final.settle(tuner, configs, by_number, flags.chosen, roots)
    if (result.spec is not None or flags.chosen is not None) and result.speedup is not None \
            and result.outputs_ok:
        result, in_spec, rows, more = compound(tuner, flags, result, in_spec, configs, by_number,
                                               default_roots, rows, cpu,
                                               sum(r.seconds for r in results))
        results += more
    if result.answer and result.outputs_ok and result.behind_data_tiling:
        result, in_spec = final.data_tiling_answer(tuner, result), set()
    # --base-flags are the user's to ship, not the tuner's choice (a spec under them is held
    # against them alone: final.slower_with_spec)
    if result.answer and result.outputs_ok and s.base_flags is None and result.behind_default:
        result, in_spec = final.default_answer(tuner, result), set()
    status = verdict.conclude(tuner, rows, result, in_spec, {r.op.index: len(r.rows) for r in results})
    stored.remember(tuner, result, in_spec, all(r.complete for r in results))
    if result.spec is not None and result.speedup is not None and result.outputs_ok:
        flag_search.retry_failed_flags(tuner, flags.failed, result.spec)
    return status


def compound(tuner: ModelTuner, flags: flag_search.FlagChoice, result: final.ModelResult,
             in_spec: set[int], configs: dict, by_number: dict[int, TuningTarget],
             default_roots: dict, rows: list[dict], cpu: CpuTarget, round_s: float
             ) -> tuple[final.ModelResult, set[int], list[dict], list[OpResult]]:
    """The answer, or a runner-up flag set adopted with the spec's entries that still configure
    a dispatch under it and the hot targets new under it tuned, settled and measured again;
    with the ranking the answer's flags give and the new targets' results. A runner-up is
    adopted when it is significantly faster with the spec (flag_search.with_spec_faster), or
    when it tied with it (or could beat it: IREE's default flags) and is significantly faster
    once its own targets are tuned, in a round as long as the first (`round_s` seconds)."""
    better, tied = flag_search.with_spec_faster(tuner, flags, result.spec,
                                                [by_number[n].op for n in in_spec], round_s)
    choice = better or tied
    if choice is None or choice.chosen is None:
        return result, in_spec, rows, []
    name = choice.chosen.name
    roots = flag_search.adopt(tuner, choice, default_roots)
    kept, targets = {}, {}
    for number in in_spec:
        matched = ranking.configurable(by_number[number].op, roots, tuner.base_flags)
        if matched:
            kept[number] = configs[number]
            targets[number] = dataclasses.replace(by_number[number], dispatches=matched)
    tuner.log(f"Flags {name} {'adopted' if better else 'tried'}"
              + (f" with the spec: target(s) {sorted(kept) or 'none'} still configure a dispatch "
                 "under them" if result.spec else " (no spec to keep)"))
    new_rows, new, results = tune_new_targets(tuner, name, roots, targets, rows, cpu)
    own = final.winners(tuner, results, new, roots)
    kept.update(own)
    targets.update(new)
    if better is None and not (own and faster_with_own_targets(tuner, choice.chosen, kept, targets)):
        tuner.log(f"Flags {name}: not significantly faster than the answer"
                  + ("" if own else " (no config of their own targets won)") + ": the answer stays")
        flag_search.adopt(tuner, flags, default_roots)  # the answer's flags again
        return result, in_spec, rows, []
    result, in_spec = final.settle(tuner, kept, targets, flag_search.shipped(choice.chosen), roots)
    return result, in_spec, new_rows, results


def faster_with_own_targets(tuner: ModelTuner, flag_set: FlagSet, configs: dict,
                            targets: dict[int, TuningTarget]) -> bool:
    """Whether a set that tied with the answer's spec, given a spec of its own targets'
    winners (and the entries kept), is significantly faster than the answer."""
    path = tuner.work / f"spec_{flag_set.name}.mlir"
    final.write_spec(path, configs, targets)
    found = flag_search.with_spec(tuner, [flag_set], path, "its own targets tuned")
    if fastest_significant({n: w.outcome for n, w in found.items()}) != flag_set.name:
        return False
    tuner.log(f"Flags {flag_set.name} adopted with their own targets' spec")
    return True


def tune_new_targets(tuner: ModelTuner, flags: str, roots: dict, targets: dict[int, TuningTarget],
                     rows: list[dict], cpu: CpuTarget
                     ) -> tuple[list[dict], dict[int, TuningTarget], list[OpResult]]:
    """Under the flags adopted after tuning (named `flags`, their dispatch `roots`): the
    ranking under them, where `targets` (tuned before) keep their numbers and new ones are
    numbered after the first ranking's (`rows`), so that trials of both rounds resume apart;
    and its hot targets that `targets` do not cover, tuned."""
    first = max([int(r["target"]) for r in rows if r["target"] != ""], default=-1) + 1
    rows = ranking.rank(tuner, roots, flags, tuner.s.paths.ranking_under(flags),
                        {Matcher.of(t.op): n for n, t in targets.items()}, first)
    new = {t.op.index: t for t in ranking.targets(rows, roots) if t.op.index not in targets}
    tuner.log(f"Targets new under {flags}: " + (", ".join(
        f"{n} ({t.op.name} {t.op.shape})" for n, t in new.items()) or "none"))
    return rows, new, search_targets(tuner, list(new.values()), cpu) if new else []


def baseline(tuner: ModelTuner) -> dict:
    """IREE's default build (the reference of every verdict), its inputs and outputs; its
    dispatch roots."""
    start = time.perf_counter()
    tuner.iree_default, roots = tuner.build_surveyed(DEFAULT, [])
    if tuner.iree_default.reason:
        # IREE 3.13 demotes f64 to f32 but not the parameters' archive type: its verifier fails
        wide = [key for _, key, kind in modules.parameters(tuner.lowered) if kind.endswith("f64")]
        hint = (f"; its parameters are float64 ({', '.join(wide[:3])}{', ...' * (len(wide) > 3)})"
                ", which IREE demotes to f32 and then cannot load: export the model and save its "
                "parameters in float32" if wide else "")
        raise UserError(f"{tuner.s.input} does not compile with IREE's defaults: "
                        f"{tuner.iree_default.reason}{hint}")
    tuner.default = tuner.iree_default
    tuner.prepare_function(tuner.function)
    tuner.log.phase("baseline", time.perf_counter() - start)
    return roots


# Seconds of trials a model's targets get without --time-budget: each trial compiles the whole
# model (a ResNet-18 answered with Winograd under im2col and data tiling: 49 trials over six
# targets, 21 min in all with the default --n-trial, Zen 4), and a model is tuned in about 10
# minutes (MODEL_SECONDS) in all: a round of search gets no more than what is left of them
# after the phases before it and an estimate of those after it (about 60 s to measure the
# answer and time its runtimes, and each target's leaders confirmed in 1.6 --confirm-seconds:
# 20-40 s and 32 s a target in eight unseen models' logs, Zen 3), and at least
# MIN_SEARCH_SECONDS
MODEL_SEARCH_SECONDS = 240.0
MIN_SEARCH_SECONDS = 30.0


def search_seconds(s: Settings, elapsed: float, targets: int) -> tuple[float, str]:
    """A round's seconds of search, and why (for the log)."""
    if s.time_budget is not None:
        return s.time_budget, ""
    after = 60.0 + 1.6 * s.confirm_seconds * targets
    left = MODEL_SECONDS - elapsed - after
    if left >= MODEL_SEARCH_SECONDS:
        return MODEL_SEARCH_SECONDS, " (the default for a model; --time-budget sets it)"
    return max(float(round(left)), MIN_SEARCH_SECONDS), (
        f" (what is left of the {MODEL_SECONDS:g} s a model is tuned in, after {elapsed:.0f} s "
        f"so far and about {after:.0f} s to confirm, measure and time the answer; "
        "--time-budget sets it)")


def search_targets(tuner: ModelTuner, chosen: list[TuningTarget], cpu) -> list[OpResult]:
    """The hot targets tuned inside the model, their trials spread by expected gain (budget),
    for --time-budget seconds (search_seconds without it); each one's leaders confirmed and
    reported."""
    s, log = tuner.s, tuner.log
    if not chosen:  # e.g. late data tiling's mmt4d, configured after specs apply
        log("No target to search: no hot dispatch is tunable under these flags (the ranking "
            "says why)")
        return []
    earlier, writer = load_trials(s.output), TrialWriter(s.output)
    seconds, why = search_seconds(s, time.perf_counter() - log.start, len(chosen))
    log(f"Search budget: {seconds:g} s of trials{why}")
    deadline = time.perf_counter() + seconds
    peak = tuner.peak()
    others = tuner.ceilings({target.op.input_element for target in chosen}) if peak else {}
    tasks, results = [], []
    for target in chosen:
        space = tuning_space.build(target.op, cpu, s.lists, {})
        log(f"target {target.op.index}: {target.op.name} {target.op.shape} ({target.op.types}) in "
            f"{', '.join(target.dispatches)}: {float(target.ms):.4f} ms, {len(space.tiles)} tile configs")
        if not space.tiles:
            continue
        tuner.focus = target.dispatches
        reused = reuse(tuner, target.op, space) if earlier.empty else None  # a resume searches on
        if reused is not None:
            report(tuner, reused)
            results.append(reused)
        else:
            tasks.append(budget.Task(target, space, seeded(tuner, target.op, space),
                                     floor_ms=budget.floor_ms(target, peak, others)))
    began = time.perf_counter()
    budget.schedule(tuner, tasks, earlier, writer, deadline)
    searched, trials = time.perf_counter() - began, sum(len(t.rows) for t in tasks) or 1
    log(tuner.store_summary(len(results), len(results) + len(tasks)))
    for task in tasks:
        tuner.focus = task.target.dispatches
        # the budget interleaves the targets: each is credited its share of the trials' time
        result = OpResult(task.target.op, task.space, task.rows,
                          complete=time.perf_counter() < deadline,
                          seconds=searched * len(task.rows) / trials)
        began = time.perf_counter()
        confirm(tuner, result)
        result.seconds += time.perf_counter() - began
        remember(tuner, result)
        report(tuner, result)
        results.append(result)
    return results
