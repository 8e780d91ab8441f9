"""Tuning the ops of a user's module one by one (autotune.py without --model), as a client of
the engine: the ops on the IR, their spaces, the search, the confirmed answers, and the outputs
beside the trial CSV: the best module, a tuning spec proven to apply, the best flags and a
progress plot."""
from __future__ import annotations

import json
import math
import shlex
import time
from pathlib import Path

from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree import tunable
from iree_dispatch_profiler.iree.config_check import configuration_applied
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG
from iree_dispatch_profiler.tuning.plots import progress_plot
from iree_dispatch_profiler.tuning.engine import (DEFAULT, OpResult, Settings, Toolchain, Tuner,
                                                  confirm, remember, report, reuse, search,
                                                  seeded)
from iree_dispatch_profiler.tuning.records import TrialWriter, best_so_far, load_trials, start_log
from iree_dispatch_profiler.tuning import kinds as tuned_kinds
from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.tuning import spec as tuning_spec


def choose_ops(found: list[tunable.TunableOp], text: str) -> list[tunable.TunableOp]:
    if text == "all":
        chosen = [op for op in found if not tuned_kinds.not_tunable(op)]
        if not chosen:
            raise UserError("no op of the module can be tuned (see --list)")
        return chosen
    chosen = []
    for item in text.split(","):
        if not item.strip().isdigit() or int(item) >= len(found):
            raise UserError(f"--op {item}: not an op number (the module has {len(found)} "
                            f"tunable ops, 0 to {len(found) - 1}; see --list)")
        op = found[int(item)]
        reason = tuned_kinds.not_tunable(op)
        if reason:
            raise UserError(f"op {op.index} ({op.name}) cannot be tuned: {reason}")
        chosen.append(op)
    return chosen


def print_list(path: Path, found: list[tunable.TunableOp]) -> None:
    print(f"{len(found)} tunable ops in {path}")
    print(f"{'op':>3}  {'function':<14} {'operation':<26} {'kind':<12} {'types':<12} shape")
    for op in found:
        reason = tuned_kinds.not_tunable(op)
        print(f"{op.index:>3}  {op.function:<14} {op.name:<26} {op.kind:<12} {op.types:<12} "
              f"{op.shape}" + (f"  (not tuned: {reason})" if reason else ""))


def tune(s: Settings, toolchain: Toolchain, chosen: list[tunable.TunableOp]) -> int:
    """Search each chosen op's space, confirm the leaders, report and export."""
    cpu = toolchain.target.resolved_cpu()
    spaces = []
    for op in chosen:
        space = tuning_space.build(op, cpu, s.lists, tuning_space.default_flag_points(op)
                                    if s.flag_points is None else s.flag_points, data_tiled=True)
        if not space.tiles:
            given = ", ".join(f"{k}={v}" for k, v in s.lists.items()) or "the derived lists"
            raise UserError(f"op {op.index} ({op.name} {op.shape}): no valid tile config in "
                            f"{given} for {cpu.name} (vector tiles must divide the distribution "
                            "tiles and stay within IREE's vector-size limit)")
        spaces.append(space)
    earlier, writer = load_trials(s.output), TrialWriter(s.output)
    log = start_log(s.paths, s.begun_with)
    for warning in s.warnings:
        log(f"warning: {warning}")
    log(f"Tuning {len(chosen)} op(s) of {s.input} for {cpu.summary} with {s.tuner}, "
        f"{s.n_trial} trials per op, seed {s.seed}; timing source {s.timing_source}")
    for op, space in zip(chosen, spaces):
        log(f"  op {op.index}: {op.name} {op.shape} ({op.types}) in {op.function}: "
            f"{len(space.tiles)} tile configs, {len(space.points) - len(space.tiles)} flag points")
    tuner = Tuner(s, toolchain, log)
    tuner.check_inputs([op.function for op in chosen])
    tuner.calibrate_start()
    start = time.perf_counter()
    tuner.default = tuner.build(DEFAULT, None, [])
    if tuner.default.reason:
        raise UserError(f"{s.input} does not compile with IREE's defaults: {tuner.default.reason}")
    for op in chosen:
        tuner.prepare_function(op.function)
    log.phase("baseline", time.perf_counter() - start)
    deadline = time.perf_counter() + (s.time_budget or math.inf)
    results = []
    for op, space in zip(chosen, spaces):
        reused = reuse(tuner, op, space) if earlier.empty else None  # a resumed run searches on
        if reused is not None:
            results.append(reused)
            continue
        began = time.perf_counter()
        rows = search(tuner, op, space, earlier, writer, deadline, seeded(tuner, op, space))
        results.append(OpResult(op, space, rows, complete=time.perf_counter() < deadline,
                                seconds=time.perf_counter() - began))
    answers = []
    for result in results:
        if not result.reused:
            began = time.perf_counter()
            confirm(tuner, result)
            result.seconds += time.perf_counter() - began
            remember(tuner, result)
        op = result.op
        answers.append({"op": op.index, "name": op.name, "shape": op.shape, "types": op.types,
                        "lines": report(tuner, result)})
    export(tuner, results)
    tuner.calibrate_end()
    answer = s.paths.answer
    write_atomically(answer, json.dumps({"kind": "tuning", "facts": tuner.facts, "ops": answers},
                                        indent=1) + "\n")
    progress = s.paths.progress_plot
    plot_progress(results, progress)
    log(f"Trials: {s.output}; progress plot: {progress}")
    log(tuner.store_summary(sum(r.reused for r in results), len(results)))
    log.timings()
    log(tuner.builder.summary())
    return 0


def export(tuner: Tuner, results: list[OpResult]) -> None:
    """X_best.mlir and X_tuning_spec.mlir for the best tile configs (whatever won), the spec
    proven to apply, and X_best_flags.txt when a flag point won."""
    s, log, paths = tuner.s, tuner.log, tuner.s.paths
    start = time.perf_counter()
    tuned = [(r.op, r.best_tile, tuning_space.configuration(r.op, r.best_tile))
             for r in results if r.best_tile]
    if tuned:
        attached = {op.index: c.compilation_info or "" for op, _, c in tuned if not c.spec_root}
        if attached:
            best = paths.best_module
            best.write_text(tunable.with_configs(s.input, attached))
            log(f"Best module: {best}")
        # a data-tiled config reaches its mmt4d only under data tiling's flags
        flags = list(dict.fromkeys(f for _, _, c in tuned for f in c.flags))
        if flags:
            path = paths.spec_flags
            path.write_text(" ".join(flags) + "\n")
            log(f"Flags the tuning spec needs (a data-tiled config): {path} ({' '.join(flags)})")
        matchers = {}
        for op, point, _ in tuned:
            matchers.update(tuning_space.spec_matchers(op, point))
        spec = paths.tuning_spec
        spec.write_text(tuning_spec.spec([(op, c) for op, _, c in tuned], matchers))
        check = tuner.build("spec_check", None, [*flags, f"{SPEC_FLAG}={spec.resolve()}"])
        if check.reason:
            log(f"Tuning spec {spec}: does NOT compile: {check.reason}")
        else:
            dumped = tuner.work / "spec_check_configs"
            applied = {op.index: configuration_applied(dumped, c) for op, _, c in tuned}
            shown = ", ".join(f"op {i} {a}" for i, a in applied.items())
            log(f"Tuning spec {spec}: applies to the untouched module: {shown}")
            if any(a != "yes" for a in applied.values()):
                log("  (an op without its config: IREE rewrote it before codegen, e.g. a batch-1 conv)")
    flag_winners = [r for r in results if r.winner.startswith("flags_")]
    if flag_winners:
        point = next(p for p in flag_winners[0].space.points if p.name == flag_winners[0].winner)
        path = paths.best_flags
        shown = shlex.join(shlex.split(point.flags))  # quoted for a shell, as --model's
        path.write_text(shown + "\n")
        log(f"Best flags: {path} ({shown})")
    log.phase("export", time.perf_counter() - start)


def plot_progress(results: list[OpResult], path: Path) -> None:
    progress_plot([(f"op {r.op.index} {r.op.name}", best_so_far(r.rows)) for r in results], path)


