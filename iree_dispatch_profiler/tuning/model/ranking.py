"""Phase 2: the model's dispatches ranked by their share of its time, under the chosen flags;
the hot ones grouped into tuning targets (X_dispatches.csv, read back to resume)."""
from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import numpy as np

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.core.values import matches, shown_patterns
from iree_dispatch_profiler.iree.tunable import MMT4D, DispatchRoot
from iree_dispatch_profiler.tuning import flags as module_flags
from iree_dispatch_profiler.tuning import kinds as tuned_kinds
from iree_dispatch_profiler.tuning.model.tuner import ModelTuner, TuningTarget
from iree_dispatch_profiler.tuning.records import read_table, write_table
from iree_dispatch_profiler.tuning.spec import Matcher

COVERAGE = 0.9  # hot dispatches: the top ones that together take this share of the time


SURVEY_SAMPLES = 3


RANKING_COLUMNS = ["rank", "dispatch", "root", "shape", "types", "target", "calls", "ms", "share",
                   "cumulative_share", "hot", "not_tunable"]


def rank(tuner: ModelTuner, roots: dict, under: str | None, path: Path | None = None,
         numbers: dict[Matcher, int] | None = None, first: int = 0) -> list[dict]:
    """The ranking (read back from `path` when a run resumes), printed; `under`: the chosen
    flags' name; `numbers`/`first`: as survey's."""
    s, log, path = tuner.s, tuner.log, path or tuner.s.paths.ranking
    start = time.perf_counter()
    if path.is_file() and not s.list_only:
        # resume: the same targets, numbered as before
        rows = read_table(path, RANKING_COLUMNS, "a dispatch ranking")
        log(f"Dispatch ranking from {path}")
        if s.top is not None or s.dispatches:  # this run's choice: a rerun may name others
            choose_hot(rows, s.top, None, s.dispatches)
            selected(rows, s.dispatches, numbers, under)
            write_table(path, RANKING_COLUMNS, rows)
    else:
        rows, call_ms = survey(tuner, roots, s.batch_seconds, numbers, first)
        small = choose_hot(rows, s.top, call_ms, s.dispatches)
        selected(rows, s.dispatches, numbers, under)
        if small:
            log(f"Target(s) {', '.join(map(str, small))} left untuned: each takes under "
                f"{stats.MIN_EFFECT:.0%} of the whole call ({call_ms:.3f} ms), so even tuned to "
                "nothing it could not change the call by a difference this tool claims")
        if not s.list_only:
            write_table(path, RANKING_COLUMNS, rows)
    log.phase("survey", time.perf_counter() - start)
    if under is not None:
        log(f"Dispatches under the flags {under}:")
    print_ranking(rows, log)
    return rows


def survey(tuner: ModelTuner, roots: dict, seconds: float, numbers: dict[Matcher, int] | None = None,
           first: int = 0) -> tuple[list[dict], float | None]:
    """The ranking: every dispatch of the default build, its calls and time per model call;
    and the whole call's median ms (None where the benchmark gave none).
    Targets keep the numbers in `numbers` (matcher -> number: those tuned before); new ones
    are numbered from `first` on, after those."""
    bench = tuner.benchmark(tuner.default, tuner.function)
    for _ in range(SURVEY_SAMPLES):
        sample = bench.sample(seconds / SURVEY_SAMPLES)
        if not sample.ok:
            raise UserError(f"the model fails to run with IREE's defaults: {sample.reason}")
    if not bench.rows or not bench.rows[-1]:
        raise UserError("iree-benchmark-module reported no dispatch times for the model")
    names = bench.rows[-1]
    ms = {n: float(np.median([r[n][1] for r in bench.rows if n in r])) for n in names}
    total = sum(ms.values())
    keys: dict = dict(numbers or {})  # root signature -> target number
    start = max([first, *(n + 1 for n in keys.values())])
    fresh = iter(range(start, start + len(ms)))  # never a number given in `numbers`
    rows, cumulative = [], 0.0
    for rank, name in enumerate(sorted(ms, key=ms.get, reverse=True), 1):
        root = roots.get(name)
        op = root.op if root else None
        target, why = "", not_tunable(root, tuner.base_flags)
        if not why:  # one target per spec matcher: what the spec cannot tell apart is tuned once
            matcher = Matcher.of(op)
            if matcher not in keys:
                keys[matcher] = next(fresh)
            target = keys[matcher]
        cumulative += ms[name] / total
        rows.append({"rank": rank, "dispatch": name, "root": root.name if root else "",
                     "shape": op.shape if op else "", "types": op.types if op else "",
                     "target": target, "calls": names[name][0], "ms": ms[name],
                     "share": ms[name] / total, "cumulative_share": cumulative, "hot": "",
                     "not_tunable": why})
    return rows, float(np.median(bench.invocations)) if bench.invocations else None


def configurable(op, roots: dict, flags: list[str]) -> tuple[str, ...]:
    """The dispatches a spec entry for `op` configures under `flags`: those whose root op its
    matcher accepts, less those IREE configures after specs apply (not_tunable)."""
    matcher = Matcher.of(op)
    return tuple(d for d, root in roots.items() if not not_tunable(root, flags)
                 and matcher.accepts(root.name, root.operand_types))


def not_tunable(root: DispatchRoot | None, flags: list[str]) -> str:
    """Why a dispatch is not tuned under `flags` (the candidates'), or '' if it is."""
    if root is None:
        return "IREE marked no root op in its executable"
    if root.op and root.op.kind == MMT4D and module_flags.late_data_tiling(flags):
        return (f"a packed matmul of late data tiling ({root.name}): IREE configures it after "
                f"specs apply (tunable under data_tiling_early)")
    if root.op is None:
        return (f"its root op {root.name} is not a contraction, convolution, attention or "
                "packed matmul")
    return tuned_kinds.not_tunable(root.op)


def choose_hot(rows: list[dict], top: int | None, call_ms: float | None = None,
               dispatches: list[re.Pattern] | None = None) -> list:
    """Mark the targets to tune: the first `top`; or those of the dispatches that together
    cover COVERAGE of the time, less those whose dispatches take under stats.MIN_EFFECT of
    the whole call (`call_ms`), which even tuned to nothing could not change the call by a
    difference this tool claims (a text classifier's: 60 trials over targets of 1.3-3.7 us
    in a 0.12 ms call). Those left out, in rank order. `dispatches` (--dispatches): only the
    targets of the dispatches a pattern finds, all of them (or the first `top`): the user's
    choice, not the timing's."""
    target_ms: dict = {}
    for row in rows:
        if row["target"] != "":
            target_ms[row["target"]] = target_ms.get(row["target"], 0.0) + float(row["ms"])
    chosen: list = []
    small: list = []
    for row in rows:
        if row["target"] == "" or row["target"] in chosen or row["target"] in small:
            continue
        if dispatches and not matches(row["dispatch"], dispatches):
            continue
        if top is not None and len(chosen) >= top:
            break
        if dispatches:
            chosen.append(row["target"])
            continue
        if top is None and row["cumulative_share"] - row["share"] >= COVERAGE:
            break
        if top is None and call_ms and target_ms[row["target"]] < stats.MIN_EFFECT * call_ms:
            small.append(row["target"])
            continue
        chosen.append(row["target"])
    for row in rows:
        row["hot"] = "yes" if row["target"] != "" and row["target"] in chosen else "no"
    return small


def selected(rows: list[dict], dispatches: list[re.Pattern] | None,
             numbers: dict[Matcher, int] | None, under: str | None) -> None:
    """Refuse a first ranking (no `numbers`) in which --dispatches chose no target; a later
    one, under other flags, may have nothing new to tune."""
    if dispatches and numbers is None and not any(r["hot"] == "yes" for r in rows):
        raise UserError(unselected(rows, dispatches, under))


def unselected(rows: list[dict], dispatches: list[re.Pattern], under: str | None = None) -> str:
    """Why --dispatches chose no target of the ranking `rows` (under the flags named `under`:
    data tiling renames a matmul's dispatch mmt4d): what it found, or what it could."""
    shown = shown_patterns(dispatches)
    found = [r["dispatch"] for r in rows if matches(r["dispatch"], dispatches)]
    names = found or [r["dispatch"] for r in rows]
    listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    head = f"--dispatches={shown} selects no tunable dispatch of the model's {len(rows)}: "
    if found:
        return f"{head}{listed} not tunable"
    return (f"{head}they are {listed}"
            + (f" under the flags {under} (`--list --base-flags=` with them ranks them so)"
               if under else " (--list ranks them)"))


def targets(rows: list[dict], roots: dict) -> list[TuningTarget]:
    found: dict[int, TuningTarget] = {}
    for row in rows:
        if row["hot"] != "yes":
            continue
        number = int(row["target"])
        if number not in found:
            op = dataclasses.replace(roots[row["dispatch"]].op, index=number)
            found[number] = TuningTarget(op, (), 0.0)
        found[number].dispatches += (row["dispatch"],)
        found[number].ms += float(row["ms"])
        found[number].flops += float(row["calls"]) * (found[number].op.flops or 0)
    return list(found.values())


def print_ranking(rows: list[dict], log) -> None:
    """The ranking, dispatch names whole (a name cut short reads as another shape)."""
    width = max([len(row["dispatch"]) for row in rows] + [8])
    log(f"{'rank':>4} {'dispatch':<{width}} {'root op and shape':<58} {'calls':>5} {'ms':>8} "
        f"{'share':>6}  target")
    for row in rows:
        root = f"{row['root']} {row['shape']}".strip() or "-"
        tag = (f"{row['target']}" + (" (hot)" if row["hot"] == "yes" else "")
               if row["target"] != "" else
               "not tunable" + (f": {row['not_tunable']}" if row["not_tunable"] else ""))
        log(f"{int(row['rank']):>4} {row['dispatch']:<{width}} {root:<58} "
            f"{float(row['calls']):>5.0f} {float(row['ms']):>8.4f} {float(row['share']):>6.1%}  {tag}")
