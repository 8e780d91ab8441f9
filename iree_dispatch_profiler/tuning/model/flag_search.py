"""Phase 1: IREE's module flags (tuning.flags) searched on the whole model against IREE's
default; the chosen set is what the spec is tuned under and ships with (X_flags.csv)."""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG
from iree_dispatch_profiler.iree.tunable import TunableOp
from iree_dispatch_profiler.measure.calibration import CEILING_ELEMENT
from iree_dispatch_profiler.measure.protocol import (Candidate, Outcome, Protocol,
                                                       fastest_significant, measure)
from iree_dispatch_profiler.store.results import Store
from iree_dispatch_profiler.tuning import flags as module_flags
from iree_dispatch_profiler.tuning.engine import DEFAULT, Build
from iree_dispatch_profiler.tuning.flags import FlagSet
from iree_dispatch_profiler.tuning.model import final, ranking
from iree_dispatch_profiler.tuning.model.tuner import MODEL_SECONDS, ModelTuner
from iree_dispatch_profiler.tuning.records import (COMPILE_FAILED, OK, TIMING_FAILED, read_table,
                                                   speedup_text, write_table)

@dataclass
class FlagChoice:
    """What the flag search chose: the set the spec is tuned under and ships with (None:
    IREE's default flags), the model built with it alone and that build's dispatch roots."""

    chosen: FlagSet | None
    build: Build | None = None
    roots: dict = dataclasses.field(default_factory=dict)
    failed: list[FlagSet] = dataclasses.field(default_factory=list)  # sets that fail alone
    rows: list[dict] = dataclasses.field(default_factory=list)  # the search's (none: --base-flags)


def search_flags(tuner: ModelTuner, kinds: set[str] | None, path: Path) -> FlagChoice:
    """The flag sets (--flags, or the curated ones that can matter for ops of `kinds`; None:
    every one) on the whole model: compiled, verified, timed against IREE's default in one
    interleaved session; the fastest whose interval clears it is chosen. Recorded in `path`,
    read back to resume."""
    s, log = tuner.s, tuner.log
    if s.base_flags is not None:  # the user's: no search
        chosen = FlagSet("given", s.base_flags, "given with --base-flags") if s.base_flags else None
        built, failed, rows = {}, [], []
        log(f"Flags: {s.base_flags or 'none'} (--base-flags): the spec is tuned under them")
    else:
        if path.is_file():
            rows, built = read_table(path, module_flags.COLUMNS, "a flag record"), {}
            log(f"Flag sets from {path}")
        else:
            sets = (module_flags.given(s.flag_points) if s.flag_points is not None
                    else module_flags.relevant(module_flags.CURATED, kinds))
            rows, built = measure_flags(tuner, sets) if sets else ([], {})
            if rows:
                write_table(path, module_flags.COLUMNS, rows)
        print_flags(rows, log)
        by_name = {r["name"]: FlagSet(r["name"], r["flags"], r["why"]) for r in rows}
        chosen = next((by_name[r["name"]] for r in rows if r["chosen"] == "yes"), None)
        failed = [by_name[r["name"]] for r in rows if r["status"] == COMPILE_FAILED]
    if chosen is None:
        return FlagChoice(None, failed=failed, rows=rows)
    build, roots = built.get(chosen.name) or tuner.build_surveyed(tuner.flags_build(chosen.name),
                                                                 chosen.args)
    if build.reason:
        raise UserError(f"the model does not compile with {chosen.flags}: {build.reason}")
    if s.base_flags is not None:
        status, reason, _ = tuner.verify(build, tuner.function)
        if reason:
            raise UserError(f"the model with {chosen.flags}: {status}: {reason}")
    return FlagChoice(chosen, build, roots, failed, rows)


JOIN_ROUNDS = 3  # sets of up to four levers


def measure_flags(tuner: ModelTuner, sets: list[FlagSet]) -> tuple[list[dict], dict]:
    """A row per set (module_flags.COLUMNS), and the builds with their roots by set name. The
    sets are measured alone, then the one that would be chosen joined with the best set of
    each other group that may be faster under it (partners, module_flags.joined), and again
    while a join is chosen (JOIN_ROUNDS at most): levers compound. A join is timed against the
    set it extends (`chained` puts it against the default)."""
    built: dict = {}

    def measure(round_sets: list[FlagSet], leader: dict | None = None) -> list[dict]:
        rows, round_built = measure_round(
            tuner, round_sets, (leader["name"], built[leader["name"]][0]) if leader else None)
        built.update(round_built)
        return chained(rows, leader) if leader else rows

    rows, known = join_rounds(sets, measure)
    chosen, best = choose(faster_rows(rows), known)
    if chosen is None:
        chosen = seedable(rows, tuner.ask_store(Store.answered_flags))
        if chosen is not None:
            tuner.log(f"Flags {chosen['name']}: no set is significantly faster than IREE's "
                      "default and these are not slower; the results store's answers for this "
                      "CPU were tuned under them, so its results seed this model's searches")
    elif chosen is not best:
        tuner.log(f"Flags {chosen['name']} in place of {best['name']}: not significantly "
                  "slower, and they leave the spec more to tune")
    if chosen is not None:
        chosen["chosen"] = "yes"
    return rows, built


def join_rounds(sets: list[FlagSet], measure) -> tuple[list[dict], list[FlagSet]]:
    """The rows of `sets` measured alone, then of the leader joined with its partners, round
    after round while a join leads (JOIN_ROUNDS at most); and every set measured. `measure`
    gives a round's rows (the joins' with the set they extend, against which they are timed)."""
    known = list(sets)
    rows = alone = contest(measure(sets), known, measure)
    leader, _ = choose(faster_rows(rows), known)
    for _ in range(JOIN_ROUNDS):
        measured = len(known)
        if leader:
            rows, known = measure_joins(leader, alone, rows, known, measure)
        if len(known) == measured:
            break
        leader, previous = choose(faster_rows(rows), known)[0], leader
        if leader is previous:  # no join beat it: the next round would join the same sets
            break
    return rows, known


CONTENDERS = 3  # the most sets a contest times against the leader


def contest(rows: list[dict], sets: list[FlagSet], measure) -> list[dict]:
    """`rows` with the sets that may be faster than the leader (their interval reaches above
    its median: one noisy round cannot rank them; without a leader, those whose median is
    faster than IREE's default by the minimum effect) timed again against it, in a session of
    their own, in place of their first rows: the fastest CONTENDERS by median. One that clears
    the leader (over_leader) may then be chosen; one that does not is no longer among the
    faster sets. A MobileNet block's im2col measured 1.41x [0.87, 2.58] against IREE's
    default and lost to im2col with data tiling's 1.55x [1.36, 1.84]; in the session before,
    it ran in 0.356 ms to that set's 0.704."""
    leader, _ = choose(faster_rows(rows), sets)
    if leader:
        def may_gain(r: dict) -> bool:
            return r is not leader and r["speedup_ci_high"] > leader["speedup"]
    else:
        # IREE's default leads: the sets whose median gains (a Swin block's decomposed
        # attention, 1.24x [0.97, 1.34] in a session of 11 sets) are timed against it again
        def may_gain(r: dict) -> bool:
            return r["speedup"] > 1 + stats.MIN_EFFECT
    doubtful = sorted(filter(may_gain, timed_rows(rows)), key=lambda r: -r["speedup"])[:CONTENDERS]
    if not doubtful:
        return rows
    first = {r["name"]: r for r in doubtful}
    again = {r["name"]: r for r in measure([f for f in sets if f.name in first], leader)}
    if leader is None:
        for row in timed_rows(list(again.values())):
            row["reason"] = (f"timed again against IREE's default, in a session of its own "
                             f"(with all the sets: {speedup_text(first[row['name']])})")
    return [again.get(r["name"], r) if r["name"] in first else r for r in rows]


def measure_joins(leader: dict, alone: list[dict], rows: list[dict], known: list[FlagSet],
                  measure) -> tuple[list[dict], list[FlagSet]]:
    """`rows` and `known` with the joins of `leader` and its partners measured; where a join
    fails to build, the join of the next set of that partner's group in its place, until one
    builds or the group has no more: decomposed attention joined with data_tiling_codegen
    failed to compile (a dispatch's vectors over 32 KiB) where with data_tiling_early it built
    and was the causal block's fastest."""
    prefix = f"{leader['name']}+"
    failed: set[str] = set()
    while True:
        names = {f.name for f in known}
        fresh = [f for f in module_flags.joined(
            leader["name"], [p for p in partners(alone, leader, known) if p not in failed],
            known)
            if f.name not in names]
        if not fresh:
            return rows, known
        new = measure(fresh, leader)
        rows, known = rows + new, known + fresh
        failed |= {r["name"][len(prefix):] for r in new if r["status"] == COMPILE_FAILED}


def chained(rows: list[dict], leader: dict) -> list[dict]:
    """Rows timed against `leader` put against IREE's default: their speedups and bounds times
    the leader's; the direct measure kept in the reason. A join's gain over the set it extends
    is a few percent, under the noise of a default several times slower (the causal block: a
    join 3.8% faster by its median ms measured 2.84x [2.80, 2.93] against the default, where
    its leader measured 2.88x)."""
    for row in timed_rows(rows):
        row["reason"] = f"timed against {leader['name']}: {speedup_text(row, 3)}"
        # a join is worth its lever only where it clears the set it extends: among joins
        # within the noise of it, the highest median is no result (an MLP chose a join of
        # four sets, each at 0.99-1.01x of the set it extended)
        row["over_leader"] = row["speedup_ci_low"] > 1 + stats.MIN_EFFECT
        row["cleared"] = leader["name"] if row["over_leader"] else None
        for key in ("speedup", "speedup_ci_low", "speedup_ci_high"):
            row[key] *= leader[key]
    return rows


def partners(rows: list[dict], first: dict, sets: list[FlagSet] = ()) -> list[str]:
    """The sets worth joining with `first`, fastest first: those significantly faster than
    IREE's default, and those that may be under `first`. `first` leaves 1/S of the default's
    time, so a set that saves a share g of the default's time saves about S x g of first's: with
    first at S = 4.6x (attention decomposed), data tiling's 1.02x [0.99, 1.04] against the
    default may be 1.18x under it, and the first round, against the default, cannot tell. A
    set of `sets` that stands for its group goes before the group's others where its interval
    reaches the group's fastest, as `choose` takes it: a BERT layer joined the late data tiling
    by 1.19x against the early one's 1.17x (intervals [1.05, 1.57], [1.01, 1.59]), and no
    packed matmul was left to tune."""
    scale = first["speedup"]
    faster = faster_rows(rows)
    ranked = [r for r in sorted(timed_rows(rows), key=lambda r: -r["speedup"])
              if r is not first and (r in faster or scale * (1 - 1 / r["speedup_ci_high"])
                                     > stats.MIN_EFFECT)]
    group_of = {f.name: f.group or f.name for f in sets}
    for stand_in in (f for f in sets if f.stands_for):
        at = next((i for i, r in enumerate(ranked) if r["name"] == stand_in.name), None)
        top = next((i for i, r in enumerate(ranked)
                    if group_of.get(r["name"]) == stand_in.stands_for), None)
        if at is not None and top is not None and top < at and reaches(ranked[at], ranked[top]):
            ranked.insert(top, ranked.pop(at))
    return [r["name"] for r in ranked]


def seedable(rows: list[dict], answered: list[tuple[str, str]]) -> dict | None:
    """Where no set is significantly faster than IREE's default: the fastest set that cannot be
    slower by the minimum effect (stats.MIN_EFFECT: smaller differences are never claimed) and
    that stored model answers on this CPU were tuned under (Store.answered_flags). As fast as
    the default, and the searches under it start from the stored results of nearby shapes
    instead of from nothing."""
    fit = [r for r in timed_rows(rows) if (r["name"], r["flags"]) in answered
           and r["speedup_ci_low"] > 1 / (1 + stats.MIN_EFFECT)]
    return max(fit, key=lambda r: r["speedup"], default=None)


def faster_rows(rows: list[dict]) -> list[dict]:
    """The sets significantly faster than IREE's default (stats.significant), and a join than
    the set it extends too."""
    return [r for r in timed_rows(rows) if r["speedup_ci_low"] > 1 + stats.MIN_EFFECT
            and r.get("over_leader", True)]


def timed_rows(rows: list[dict]) -> list[dict]:
    """The sets that compiled, verified and were timed against IREE's default."""
    return [r for r in rows if r["status"] == OK and "speedup" in r]


def measure_round(tuner: ModelTuner, sets: list[FlagSet],
                  reference: tuple[str, Build] | None = None) -> tuple[list[dict], dict]:
    """The sets compiled in parallel, verified, and timed against IREE's default (or the
    `reference` set's build) in one interleaved session."""
    log = tuner.log
    log(f"Module flags: {len(sets)} set(s) on the whole model against "
        + (f"the flags {reference[0]}" if reference else tuner.reference))
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=tuner.jobs) as pool:
        built = dict(zip([f.name for f in sets], pool.map(
            lambda f: tuner.build_surveyed(tuner.flags_build(f.name), f.args), sets)))
    log.phase("compile", time.perf_counter() - start)
    rows = []
    for flag_set in sets:
        build = built[flag_set.name][0]
        if (flag_set.name == "data_tiling" and flag_set.flags == module_flags.DATA_TILING
                and not tuner.rewrite):  # IREE's data tiling of the model itself
            tuner.data_tiling = build
        rows.append(({"name": flag_set.name, "flags": flag_set.flags, "why": flag_set.why,
                      "chosen": "no"}, build))
    return verify_and_time(tuner, rows, "flags", reference[1] if reference else None), built


def verify_and_time(tuner: ModelTuner, rows: list[tuple[dict, Build]], phase: str,
                    reference: Build | None = None) -> list[dict]:
    """Each row with its build's status and reason: its outputs verified against IREE's
    default's, and the builds that agree timed against the tuner's default (or `reference`)
    in one interleaved session (each row gains its median ms and speedup with their
    intervals, and the reference's median ms)."""
    timed = []
    for row, build in rows:
        row["status"], row["reason"] = COMPILE_FAILED, build.reason
        if not build.reason:
            row["status"], row["reason"], check = tuner.verify(build, tuner.function)
            row["max_abs_err"] = check.max_abs if check else math.nan
            if row["status"] == OK:
                timed.append(build)
    start = time.perf_counter()
    outcomes = (tuner.time(timed, tuner.function, tuner.s.confirm_seconds, decide=True,
                           reference=reference) if timed else {})
    tuner.log.phase(phase, time.perf_counter() - start)
    for row, build in rows:
        outcome = outcomes.get(build.name)
        if outcome is None:
            continue
        if outcome.reason or outcome.speedup is None:
            row["status"] = TIMING_FAILED
            row["reason"] = outcome.reason or "IREE's default failed to time"
            continue
        row.update(median_ms=outcome.runtime.median, ci_low_ms=outcome.runtime.low,
                   ci_high_ms=outcome.runtime.high,
                   reference_ms=outcomes[DEFAULT].runtime.median, speedup=outcome.speedup.median,
                   speedup_ci_low=outcome.speedup.low, speedup_ci_high=outcome.speedup.high)
    return [row for row, _ in rows]


def choose(faster: list[dict], sets: list[FlagSet]) -> tuple[dict | None, dict | None]:
    """The row to choose among those significantly faster than IREE's default, and the fastest
    of them: the fastest, or a set that stands for its group (FlagSet.stands_for) where their
    speedup intervals overlap, unless the fastest was timed against that set and cleared it (an
    int8 MLP's late data tiling, 1.21x [1.11, 1.38] faster than the early one head to head,
    had lost its place to it on intervals against the default that overlapped)."""
    if not faster:
        return None, None
    best = max(faster, key=lambda r: r["speedup"])
    group = next((f.group or f.name for f in sets if f.name == best["name"]), best["name"])
    by_name = {r["name"]: r for r in faster}
    stand_in = next((by_name[f.name] for f in sets if f.stands_for == group
                     and f.name in by_name and reaches(by_name[f.name], best)
                     and best.get("cleared") != f.name), None)
    return stand_in or best, best


def reaches(row: dict, best: dict) -> bool:
    """Whether `row`'s speedup interval reaches `best`'s: where a stand-in takes its group's
    place (FlagSet.stands_for)."""
    return row["speedup_ci_high"] >= best["speedup_ci_low"]


def print_flags(rows: list[dict], log) -> None:
    width = max([len(row["name"]) for row in rows] + [4])
    for row in rows:
        if row["status"] == OK:
            shown = (f"{speedup_text(row)}, {float(row['median_ms']):.3f} ms"
                     + (f" ({row['reason']})" if row.get("reason") else ""))
        else:
            shown = f"{row['status']}: {row['reason']}"
        mark = "  <- chosen" if row["chosen"] == "yes" else ""
        log(f"  flags {row['name']:<{width}} {shown}{mark}")
    chosen = [row for row in rows if row["chosen"] == "yes"]
    log(f"Flags: {chosen[0]['name']} ({chosen[0]['flags']}): the spec is tuned under them"
        if chosen else "Flags: none is faster than IREE's default: the spec is tuned without flags")


def adopt(tuner: ModelTuner, flags: FlagChoice, default_roots: dict) -> dict:
    """Under chosen flags, candidates compile with them and are measured, and their specs
    checked, against the flags alone: the dispatch roots of that build. Without flags, IREE's
    default again (a set tried and given back)."""
    if shipped(flags.chosen) is None:
        tuner.without_flags()
        return tuner.at_inputs(default_roots)
    tuner.base_flags = flags.chosen.args
    tuner.default = dataclasses.replace(flags.build, name=DEFAULT)
    tuner.reference = f"the flags {flags.chosen.name} alone"
    return tuner.at_inputs(flags.roots)


@dataclass
class WithSpec:
    """A flag set compiled with a spec and timed against the answer."""

    outcome: Outcome
    roots: dict  # its dispatch roots
    ms: dict[str, float]  # each dispatch's median ms per call in the session
    work: dict[str, float] = dataclasses.field(default_factory=dict)  # FLOP a call (final.work)


def with_spec(tuner: ModelTuner, sets: list[FlagSet], spec: Path | None, about: str
              ) -> dict[str, WithSpec]:
    """Each set compiled with the spec (None: alone) and verified; those that run timed
    against the answer in one interleaved session. A line each; set name -> what it gave."""
    runs, lines = {}, {f.name: f"Flags {f.name}, {about}, {f'with {spec.name}' if spec else 'alone'}: "
                       for f in sets}
    roots = {}
    with_it = [f"{SPEC_FLAG}={spec.resolve()}"] if spec else []
    for flag_set in sets:
        build, roots[flag_set.name] = tuner.build_surveyed(
            tuner.flags_build(f"{flag_set.name}_spec"), [*flag_set.args, *with_it])
        if build.reason:
            tuner.log(lines[flag_set.name] + f"fail: {build.reason}")
            continue
        status, reason, _ = tuner.verify(build, tuner.function)
        if reason:
            tuner.log(lines[flag_set.name] + f"compile, but {status}: {reason}")
            continue
        runs[flag_set.name] = build
    if not runs:
        return {}
    tuner.focus = ()  # the whole model's dispatches
    benches = {n: tuner.benchmark(b, tuner.function) for n, b in
               [("answer", Build("answer", tuner.s.paths.answer_build)), *runs.items()]}
    measured = measure([Candidate(n, b.sample) for n, b in benches.items()], "answer",
                       Protocol(time_budget=tuner.s.confirm_seconds))
    answered = measured.outcomes["answer"]
    for flag_set in (f for f in sets if f.name in runs):
        outcome = measured.outcomes[flag_set.name]
        shown = (f"{outcome.runtime.median:.3f} ms, " + stats.verdict(
            flag_set.name, "the answer", outcome.speedup, stats.MIN_EFFECT)
                 if outcome.speedup is not None
                 else f"failed to time: {outcome.reason or answered.reason}")
        tuner.log(lines[flag_set.name] + f"compile, outputs agree; {shown} "
                  f"({' '.join([flag_set.flags, *with_it]).strip() or 'no flags'})")
    return {n: WithSpec(measured.outcomes[n], roots[n], final.medians(benches[n].rows),
                        final.work(roots[n], benches[n].rows)) for n in runs}


def retry_failed_flags(tuner: ModelTuner, failed: list[FlagSet], spec: Path) -> None:
    """Flag sets that failed to compile the model alone, tried again with the spec: IREE's
    data tiling fails on some attention dispatches at the vector sizes of its own config, which
    the spec replaces. Reported, not shipped (the spec was tuned under other flags)."""
    with_spec(tuner, failed, spec, "which fail alone")


# Runners-up tried with the spec: at most this many, the fastest alone first.
RUNNERS_UP = 3
# A tie has its own targets tuned only if this share of its time is in dispatches the spec
# does not configure: 1.3x on a tenth of the time is 2.4%, under the minimum effect.
TIE_UNTUNED = 0.1
# IREE's default flags, a runner-up once a data tiling set is chosen: the flag search timed
# them with IREE's own configs, and data tiling turns the ops a spec could configure into
# packed ones. An LSTM's matrix-vector product (batch_matmul 1x1x256x1024, 64 steps) took the
# model 3.0x longer under IREE's own config (16 workgroups, 16-wide vectors) than under data
# tiling tuned, and 1.20-1.28x less under a config of its own (2 workgroups, 128-wide vectors,
# Zen 4), its bias adds fused: two dispatches a step where data tiling runs three.
NO_FLAGS = FlagSet("no_flags", "", "IREE's default flags, its ops tuned instead of packed")


def shipped(flag_set: FlagSet | None) -> FlagSet | None:
    """The set an answer ships with: None for IREE's default flags (NO_FLAGS or none)."""
    return None if flag_set is None or flag_set.name == NO_FLAGS.name else flag_set


def with_spec_faster(tuner: ModelTuner, flags: FlagChoice, spec: Path | None,
                     tuned: list[TunableOp], round_s: float
                     ) -> tuple[FlagChoice | None, FlagChoice | None]:
    """Flags and a spec compound: a set that measured no faster alone (its gain hidden behind
    dispatches that the spec then made fast) can be with the spec. The runners-up of the flag
    search (and after a data tiling set, IREE's default flags: NO_FLAGS), each with the spec,
    timed against the answer: the fastest that is significantly faster, as a FlagChoice to
    adopt; or else, of those that tie with it or could beat it once their own targets are
    tuned (could_win), the one leaving the most time in dispatches the spec's entries (for the
    ops `tuned`) do not configure: a set that turns the tuned ops into others (im2col, data
    tiling) may win once its own are tuned, if a round as long as the first (`round_s`) fits
    in the time a model is tuned in. None for either that is not. Without a spec (no config
    beat the chosen flags, or late data tiling left nothing tunable), NO_FLAGS alone: the
    other sets were timed alone in the flag search."""
    chosen = flags.chosen.name if flags.chosen else None
    sets = [f for f in runners_up(flags.rows, flags.chosen) if spec or f == NO_FLAGS]
    found = with_spec(tuner, sets, spec, f"runner-up to {chosen or 'no flags'}")
    best = fastest_significant({n: w.outcome for n, w in found.items()})
    by_name = {f.name: f for f in sets}
    peak = tuner.peak()
    tie = None if best else tie_to_tune(found, tuned, {n: f.args for n, f in by_name.items()},
                                        peak["gflops"] if peak else 0.0)
    elapsed = time.perf_counter() - tuner.started
    if tie and not round_fits(elapsed, round_s):
        tuner.log(f"Flags {tie[0]} could gain with their own targets tuned, {tie[1]:.3f} ms a call "
                  f"in dispatches the spec does not configure: not tuned, the run has taken "
                  f"{elapsed:.0f} s and its first round {round_s:.0f} s, of the {MODEL_SECONDS:g} s "
                  "a model is tuned in")
        tie = None
    name = best or (tie[0] if tie else None)
    if name is None:
        return None, None
    if tie:
        tuner.log(f"Flags {name} {'tie with' if name != NO_FLAGS.name else 'could beat'} the "
                  f"answer and leave the most time to tune ({tie[1]:.3f} ms a call in dispatches "
                  "the spec does not configure): their own targets are tuned")
    flag_set = by_name[name]
    build, roots = tuner.build_surveyed(tuner.flags_build(flag_set.name), flag_set.args)
    choice = None if build.reason else FlagChoice(flag_set, build, roots)
    return (choice, None) if best else (None, choice)


# what a runner-up's round takes beyond its search: built, ranked, timed with its own
# targets' spec and settled
ROUND_AFTER_S = 60.0


def round_fits(elapsed_s: float, round_s: float) -> bool:
    """Whether a run that has taken `elapsed_s` can tune a runner-up's targets, their search
    about as long as the first (`round_s`), within the time a model is tuned in (an encoder
    block took 615 s with a tie's round)."""
    return elapsed_s + round_s + ROUND_AFTER_S <= MODEL_SECONDS


def tie_to_tune(found: dict[str, WithSpec], tuned: list[TunableOp], flags: dict[str, list[str]],
                peak_gflops: float = 0.0) -> tuple[str, float] | None:
    """Of the sets that tie with the answer, and IREE's default flags where they could beat it
    (could_win at the compute ceiling `peak_gflops`), the one leaving the most time (ms) in
    dispatches that no entry configures, if that is TIE_UNTUNED of its time or more."""
    def admitted(name: str, tried: WithSpec) -> bool:
        if tried.outcome.reason or tried.outcome.speedup is None:
            return False
        return (not stats.significant(tried.outcome.speedup, stats.MIN_EFFECT)
                or name == NO_FLAGS.name and could_win(tried, tuned, flags[name], peak_gflops))
    left = {n: untuned_ms(w, tuned, flags[n]) for n, w in found.items() if admitted(n, w)}
    worth = [(n, ms) for n, ms in left.items()
             if ms >= TIE_UNTUNED * found[n].outcome.runtime.median]
    return max(worth, key=lambda item: item[1], default=None)


def untuned(tried: WithSpec, tuned: list[TunableOp], flags: list[str]) -> list[str]:
    """The tunable dispatches under `flags` that no entry for the ops `tuned` configures."""
    configured = {d for op in tuned for d in ranking.configurable(op, tried.roots, flags)}
    return [d for d in tried.ms if d in tried.roots and d not in configured
            and not ranking.not_tunable(tried.roots[d], flags)]


def untuned_ms(tried: WithSpec, tuned: list[TunableOp], flags: list[str]) -> float:
    """Their time, in the session that timed the set with the spec."""
    return sum(tried.ms[d] for d in untuned(tried, tuned, flags))


def could_win(tried: WithSpec, tuned: list[TunableOp], flags: list[str], peak_gflops: float
              ) -> bool:
    """Whether the set, slower with the spec, could beat the answer by the minimum effect once
    its own targets are tuned: its time less what its untuned dispatches would save at the
    compute ceiling (their work at `peak_gflops`; none for a dispatch whose work or element
    the ceiling does not know). The answer's time is the set's times its speedup."""
    if not peak_gflops or tried.outcome.speedup is None:
        return False
    saving = sum(max(0.0, tried.ms[d] - tried.work[d] / (peak_gflops * 1e6))
                 for d in untuned(tried, tuned, flags)
                 if d in tried.work and tried.roots[d].input_element == CEILING_ELEMENT)
    answer_ms = tried.outcome.runtime.median * tried.outcome.speedup.median
    return tried.outcome.runtime.median - saving < answer_ms / (1 + stats.MIN_EFFECT)


def runners_up(rows: list[dict], chosen: FlagSet | None) -> list[FlagSet]:
    """The sets of the flag search other than the chosen one that compiled, verified and
    cannot be slower than IREE's default by the minimum effect; the fastest alone first, at
    most RUNNERS_UP; then NO_FLAGS where the search chose a set that data-tiles (none
    without `rows`: flags the user gave, --base-flags, are kept)."""
    fit = [r for r in timed_rows(rows) if r["name"] != (chosen.name if chosen else None)
           and float(r["speedup_ci_high"]) > 1 / (1 + stats.MIN_EFFECT)]  # read back: text
    sets = [FlagSet(r["name"], r["flags"], r["why"])
            for r in sorted(fit, key=lambda r: -float(r["speedup"]))[:RUNNERS_UP]]
    if rows and chosen is not None and module_flags.data_tiling(chosen.args):
        sets.append(NO_FLAGS)
    return sets
