"""Whole-model tuning (autotune.py --model): rank a model's dispatches by their share of its
time, tune the hot ones inside the model, merge the winners into one tuning spec, prove that it
applies, and measure the whole model with and without it.

A tuning target is a root op signature (operation name and operand types: what a spec matcher
sees); the dispatches whose root ops share it are tuned together. A candidate is the whole
model compiled with a one-entry spec: its config is checked in IREE's dumped configurations,
the model's outputs are verified against IREE's default, and its time is that of the target's
own dispatches inside the model (--dispatch_statistics), so fusion and calling context are
those of the real model."""
from __future__ import annotations

import csv
import dataclasses
import math
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import TuningConfiguration, UserError
from iree_dispatch_profiler.iree import modules, tunable
from iree_dispatch_profiler.iree.tunable import DispatchRoot
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, Benchmark, compile_command, run
from iree_dispatch_profiler.sweep.measurement import Candidate, Outcome, Protocol, measure
from iree_dispatch_profiler.sweep.plots import model_plot
from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning.engine import (DEFAULT, Build, OpResult, Settings, Toolchain,
                                                  Tuner, confirm, report, search)
from iree_dispatch_profiler.tuning.records import Log, TrialWriter, load_trials
from iree_dispatch_profiler.tuning.spec import Entry, Matcher

COVERAGE = 0.9  # hot dispatches: the top ones that together take this share of the time
SURVEY_SAMPLES = 3
RANKING_COLUMNS = ["rank", "dispatch", "root", "shape", "types", "target", "calls", "ms", "share",
                   "cumulative_share", "hot", "not_tunable"]
# Root ops are marked for the spec check; executables are dumped to find them.
SURVEY_FLAGS = ["--iree-codegen-add-tuner-attributes"]


@dataclass
class TuningTarget:
    """Dispatches whose root ops share a spec matcher's key, tuned as one op."""

    op: tunable.TunableOp  # its index is the target's number
    dispatches: tuple[str, ...]
    ms: float


class ModelTuner(Tuner):
    """Candidates are the whole model compiled with a one-entry spec; a candidate's time is that
    of the current target's dispatches inside the model."""

    focus: tuple[str, ...] = ()  # the dispatches of the target being tuned
    data_tiling: Build | None = None  # the model with IREE's data tiling, compiled once

    def __init__(self, s: Settings, toolchain: Toolchain, log: Log, lowered: Path, function: str):
        self.lowered, self.function = lowered, function
        super().__init__(s, toolchain, log)

    def signature_source(self) -> Path:
        return self.lowered

    def tile_outputs(self) -> str:
        return f"{self.s.output.stem}_tuning_spec.mlir (with the other targets' winners)"

    def build_point(self, op, point, name: str) -> Build:
        config = tuning_space.configuration(op, point)
        spec = self.work / f"{name}_spec.mlir"
        spec.write_text(tuning_spec.spec([(op, config)]))
        return self.build(name, None, [f"{SPEC_FLAG}={spec}"], config)

    def benchmark(self, build: Build, function: str) -> Benchmark:
        bench = super().benchmark(build, function)
        bench.dispatches = self.focus
        return bench

    def build_surveyed(self, name: str, flags: list[str]) -> tuple[Build, dict]:
        """A build with its root ops found in its dumped executables."""
        dump = self.work / f"{name}_benchmarks"
        build = self.build(name, None, [*flags, *SURVEY_FLAGS,
                                        f"--iree-hal-dump-executable-benchmarks-to={dump}"])
        roots = tunable.dispatch_roots(dump, self.function) if not build.reason else {}
        return build, roots


def lower(tools, target, source: Path, work: Path, timeout: float) -> Path:
    """The model after IREE's input phase: torch, StableHLO and TOSA become linalg, and the
    function signatures readable tensor types."""
    lowered = work / "model_input.mlir"
    result = run(compile_command(tools, target, source, lowered, ["--compile-to=input"]), timeout)
    if not result.ok:
        raise UserError(f"{source} does not compile: {result.failure('iree-compile', timeout)}")
    return lowered


def run_model(s: Settings, toolchain: Toolchain) -> int:
    """autotune.py --model."""
    work = s.output.with_name(s.output.stem + "_work")
    work.mkdir(parents=True, exist_ok=True)
    lowered = lower(toolchain.tools, toolchain.target, s.input, work, s.compile_timeout)
    function = modules.find_function(lowered, s.function, shown=str(s.input)).name
    cpu = toolchain.target.resolved_cpu()
    log = Log(s.output.with_suffix(".log"))
    log(f"Model {s.input}, function {function}, for {cpu.summary}")
    tuner = ModelTuner(s, toolchain, log, lowered, function)
    return tune(tuner, cpu)


# --------------------------------------------------------------------------------------------
def survey(tuner: ModelTuner, roots: dict, seconds: float) -> list[dict]:
    """The ranking: every dispatch of the default build, its calls and time per model call."""
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
    keys: dict = {}  # root signature -> target number
    rows, cumulative = [], 0.0
    for rank, name in enumerate(sorted(ms, key=ms.get, reverse=True), 1):
        root = roots.get(name)
        op = root.op if root else None
        target, why = "", not_tunable(root)
        if not why:  # one target per spec matcher: what the spec cannot tell apart is tuned once
            target = keys.setdefault(Matcher.of(op), len(keys))
        cumulative += ms[name] / total
        rows.append({"rank": rank, "dispatch": name, "root": root.name if root else "",
                     "shape": op.shape if op else "", "types": op.types if op else "",
                     "target": target, "calls": names[name][0], "ms": ms[name],
                     "share": ms[name] / total, "cumulative_share": cumulative, "hot": "",
                     "not_tunable": why})
    return rows


def not_tunable(root: DispatchRoot | None) -> str:
    """Why a dispatch is not tuned, or '' if it is."""
    if root is None:
        return "IREE marked no root op in its executable"
    if root.op is None:
        return f"its root op {root.name} is not a contraction, convolution or attention"
    return tuning_space.tunable_reason(root.op)


def choose_hot(rows: list[dict], top: int | None) -> None:
    """Mark the targets to tune: the first `top`, or those of the dispatches that together
    cover COVERAGE of the time."""
    chosen: list = []
    for row in rows:
        if row["target"] == "" or row["target"] in chosen:
            continue
        if top is not None and len(chosen) >= top:
            break
        if top is None and row["cumulative_share"] - row["share"] >= COVERAGE:
            break
        chosen.append(row["target"])
    for row in rows:
        row["hot"] = "yes" if row["target"] != "" and row["target"] in chosen else "no"


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
    return list(found.values())


def write_ranking(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, RANKING_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def read_ranking(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    if not rows or list(rows[0]) != RANKING_COLUMNS:
        raise UserError(f"{path} is not a dispatch ranking of autotune.py --model; remove it")
    return rows


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


# --------------------------------------------------------------------------------------------
def check_spec(entries: list[Entry], default_roots: dict, tuned_roots: dict) -> list[str]:
    """Problems: an entry whose matcher matches no dispatch, matches others than it is meant
    for, or matches one its config did not reach; a dispatch that changed config with no entry
    matching it. An entry is attributed to the dispatches whose root op its matcher accepts (so
    two entries may hand out the same config); one whose matcher we cannot read, to the
    dispatches that got its config."""
    from iree.compiler import ir

    problems, touched = [], set()
    with ir.Context() as context:
        for entry in entries:
            wanted = str(ir.Attribute.parse(entry.config.lowering_config, context))
            configured = {d for d, root in tuned_roots.items() if root.lowering_config == wanted}
            matched = configured if entry.matcher is None else {
                d for d, root in default_roots.items()
                if entry.matcher.accepts(root.name, root.operand_types)}
            intended = set(entry.intended)
            touched |= matched | intended
            if not matched:
                problems.append(f"spec entry {entry.name} matches no dispatch")
            elif intended and matched - intended:
                problems.append(f"spec entry {entry.name} also configures "
                                f"{', '.join(sorted(matched - intended))}")
            elif (intended | matched) - configured:
                problems.append(f"spec entry {entry.name} misses "
                                f"{', '.join(sorted((intended | matched) - configured))}")
    changed = {d for d, root in tuned_roots.items()
               if d in default_roots and root.lowering_config != default_roots[d].lowering_config}
    for dispatch in sorted(changed - touched):
        problems.append(f"dispatch {dispatch} changed config without a spec entry for it")
    return problems


@dataclass
class ModelResult:
    spec: Path | None  # None: no spec, the model as IREE compiles it
    problems: list[str]
    outputs_ok: bool
    max_abs: float
    speedup: stats.Estimate | None
    data_tiling: stats.Estimate | None  # IREE's data tiling against its default
    over_data_tiling: stats.Estimate | None  # the tuned model against IREE's data tiling
    per_target: dict[int, stats.Estimate]  # target number -> speedup of its dispatches
    default_ms: dict[str, float]  # dispatch -> ms in the final session
    tuned_ms: dict[str, float]
    # build (default, tuned, data_tiling) -> the summed dispatch time per model call, and the
    # whole call's median ms, from the final session
    times: dict[str, tuple[stats.Estimate, float]] = dataclasses.field(default_factory=dict)


def time_model(tuner: ModelTuner, builds: dict[str, Build], seconds: float,
               ) -> tuple[dict[str, Outcome], dict[str, Benchmark]]:
    """The whole model's builds, and IREE's data tiling beside them, in interleaved rounds."""
    if tuner.data_tiling is None:  # compiled once, timed again beside each spec
        tuner.data_tiling = tuner.build("model_data_tiling", None,
                                        shlex.split(tuning_space.DEFAULT_FLAG_POINTS["data_tiling"]))
        if tuner.data_tiling.reason:
            tuner.log("IREE data tiling + ukernels does not compile this model: "
                      f"{tuner.data_tiling.reason.splitlines()[0][:300]}")
    if not tuner.data_tiling.reason:
        builds = {**builds, "data_tiling": tuner.data_tiling}
    tuner.focus = ()  # the whole model's dispatches now
    benches = {name: tuner.benchmark(build, tuner.function) for name, build in builds.items()}
    start = time.perf_counter()
    measured = measure([Candidate(n, b.sample) for n, b in benches.items()], DEFAULT,
                       Protocol(time_budget=seconds))
    tuner.log.phase("model", time.perf_counter() - start)
    return measured.outcomes, benches


def measure_model(tuner: ModelTuner, entries: list[Entry], spec: Path, default_roots: dict,
                  targets_by_number: dict[int, TuningTarget], seconds: float) -> ModelResult:
    """Compile the model with the spec, check every entry, verify, and time it against the
    default (and IREE's data tiling) in interleaved rounds."""
    tuned, tuned_roots = tuner.build_surveyed("model_tuned",
                                              [f"{SPEC_FLAG}={spec.resolve()}"])
    if tuned.reason:
        raise UserError(f"the model does not compile with {spec}: {tuned.reason}")
    problems = check_spec(entries, default_roots, tuned_roots)
    status, reason, worst = tuner.verify(tuned, tuner.function)
    outcome, benches = time_model(tuner, {DEFAULT: tuner.default, "tuned": tuned}, seconds)
    rounds = min(len(benches[DEFAULT].rows), len(benches["tuned"].rows))
    before, after = benches[DEFAULT].rows[-rounds:], benches["tuned"].rows[-rounds:]
    per_target = {}
    for number, target in targets_by_number.items():
        a = [sum(r.get(d, (0, 0.0))[1] for d in target.dispatches) for r in before]
        b = [sum(r.get(d, (0, 0.0))[1] for d in target.dispatches) for r in after]
        if rounds and all(v > 0 for v in b):
            per_target[number] = stats.speedup(a, b)

    def medians(rows):
        return {d: float(np.median([r[d][1] for r in rows if d in r])) for d in rows[-1]} if rows else {}

    tiling = outcome.get("data_tiling")
    timed = tiling is not None and not tiling.reason and not outcome["tuned"].reason
    return ModelResult(spec, problems, status == "ok", worst if not reason else math.nan,
                       outcome["tuned"].speedup, tiling.speedup if tiling else None,
                       stats.speedup(tiling.samples, outcome["tuned"].samples) if timed else None,
                       per_target, medians(before), medians(after), model_times(outcome, benches))


def model_times(outcome: dict[str, Outcome], benches: dict[str, Benchmark],
                ) -> dict[str, tuple[stats.Estimate, float]]:
    return {name: (outcome[name].runtime, float(np.median(benches[name].invocations)))
            for name in (DEFAULT, "data_tiling", "tuned")
            if name in outcome and not outcome[name].reason and benches[name].invocations}


def times_line(result: ModelResult) -> str:
    """`Model times: IREE default 5.12 ms [5.01, 5.30], ...` (and each whole call)."""
    names = {DEFAULT: "IREE default", "data_tiling": "IREE data tiling", "tuned": "tuned"}
    parts = [f"{names[n]} {e.median:.3f} ms {e.interval('.3f')} (whole call {call:.3f} ms)"
             for n, (e, call) in result.times.items()]
    return "Model times, summed dispatches per call: " + "; ".join(parts) if parts else ""


def model_line(speedup: stats.Estimate | None) -> str:
    """`Model: faster by 1.18x [1.12, 1.24]`, `slower by ...` or no significant difference."""
    if speedup is None or not speedup.n:
        return "Model: unchanged (no tuning spec)"
    if not stats.significant(speedup, stats.MIN_EFFECT):
        return "Model: no significant difference"
    return f"Model: {stats.direction(speedup)}"


def outputs_line(result: ModelResult) -> str:
    if result.spec is None:
        return "Outputs: unchanged (no tuning spec)"
    word = "agree" if result.outputs_ok else "DISAGREE"
    return f"Outputs: {word} (max abs err {result.max_abs:.2g})"


def comparison_lines(result: ModelResult) -> list[str]:
    """The figures behind the Model line, and IREE's other answer (its data tiling and
    ukernels) against its default and against the spec."""
    lines = []
    for estimate, what in ((result.speedup, "the tuned model against IREE's default"),
                           (result.data_tiling, "IREE data tiling + ukernels against IREE's default"),
                           (result.over_data_tiling, "the tuned model against IREE data tiling")):
        if estimate is not None and estimate.n:
            lines.append(f"{what}: {estimate.median:.2f}x {estimate.interval('.2f')}")
    return lines


def write_report(path: Path, rows: list[dict], result: ModelResult, tuned_targets: set[int]) -> None:
    lines = ["# Model tuning report", "",
             f"Tuning spec: `{result.spec.name}`" if result.spec else "Tuning spec: none", "",
             "| dispatch | root op | share | default ms | tuned ms | target speedup [95%] | in spec |",
             "|---|---|---:|---:|---:|---|---|"]
    for row in rows:
        number = int(row["target"]) if row["target"] != "" else None
        speedup = result.per_target.get(number) if number is not None else None
        shown = f"{speedup.median:.2f}x {speedup.interval('.2f')}" if speedup else "-"
        lines.append(f"| {row['dispatch']} | {row['root']} {row['shape']} | "
                     f"{float(row['share']):.1%} | {result.default_ms.get(row['dispatch'], math.nan):.4f} | "
                     f"{result.tuned_ms.get(row['dispatch'], math.nan):.4f} | {shown} | "
                     f"{'yes' if number in tuned_targets else 'no'} |")
    lines += ["", outputs_line(result), model_line(result.speedup), times_line(result),
              *comparison_lines(result),
              "(times: the summed time of the model's dispatches per call, interleaved rounds)"]
    if result.problems:
        lines += ["", "Spec problems:", *(f"- {p}" for p in result.problems)]
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------
def tune(tuner: ModelTuner, cpu) -> int:
    s, log, output = tuner.s, tuner.log, tuner.s.output
    stem = output.with_name(output.stem)
    start = time.perf_counter()
    tuner.default, default_roots = tuner.build_surveyed(DEFAULT, [])
    if tuner.default.reason:
        raise UserError(f"{s.input} does not compile with IREE's defaults: {tuner.default.reason}")
    tuner.prepare_function(tuner.function)
    ranking_path = Path(f"{stem}_dispatches.csv")
    if ranking_path.is_file() and not s.list_only:
        rows = read_ranking(ranking_path)  # resume: the same targets, numbered as before
        log(f"Dispatch ranking from {ranking_path}")
    else:
        rows = survey(tuner, default_roots, s.batch_seconds)
        choose_hot(rows, s.top)
        if not s.list_only:
            write_ranking(rows, ranking_path)
    log.phase("survey", time.perf_counter() - start)
    print_ranking(rows, log)
    if s.list_only:
        return 0
    if s.spec is not None:  # check a given spec and measure the model with it
        result = measure_model(tuner, tuning_spec.read_entries(s.spec), s.spec, default_roots, {},
                               s.confirm_seconds)
        return conclude(tuner, rows, result, set(), stem)
    chosen = targets(rows, default_roots)
    earlier, writer = load_trials(output), TrialWriter(output)
    deadline = time.perf_counter() + (s.time_budget or math.inf)
    results = []
    for target in chosen:
        space = tuning_space.build(target.op, cpu, s.lists, {})
        log(f"target {target.op.index}: {target.op.name} {target.op.shape} ({target.op.types}) in "
            f"{', '.join(target.dispatches)}: {float(target.ms):.4f} ms, {len(space.tiles)} tile configs")
        if not space.tiles:
            continue
        tuner.focus = target.dispatches
        result = OpResult(target.op, space, search(tuner, target.op, space, earlier, writer, deadline))
        confirm(tuner, result)
        report(tuner, result)
        results.append(result)
    by_number = {t.op.index: t for t in chosen}
    winners = {r.op.index: r for r in results if r.winner != DEFAULT}
    configs = {n: tuning_space.configuration(r.op, next(p for p in r.space.points
                                                        if p.name == r.winner))
               for n, r in winners.items()}
    for number in [n for n in winners if iree_own(configs[n], by_number[n].dispatches, default_roots)]:
        log(f"target {number}: its winner {winners.pop(number).winner} is IREE's own config there "
            "(a speedup measured on the same code is noise): left out of the spec")
    spec, result = Path(f"{stem}_tuning_spec.mlir"), None
    while winners:
        tuned = [(by_number[n].op, configs[n]) for n in winners]
        spec.write_text(tuning_spec.spec(tuned))
        entries = [Entry(f"match_op{op.index}", config, Matcher.of(op),
                         by_number[op.index].dispatches) for op, config in tuned]
        result = measure_model(tuner, entries, spec, default_roots, by_number, s.confirm_seconds)
        # A winner measured alone can lose beside the others: drop it and measure again.
        losers = [n for n in winners if n in result.per_target
                  and stats.significant(result.per_target[n], stats.MIN_EFFECT)
                  and result.per_target[n].median < 1]
        if not losers:
            break
        log(f"dropped from the spec, slower inside the tuned model: target(s) {losers}")
        winners = {n: r for n, r in winners.items() if n not in losers}
    if not winners:
        log("No tuned config beat IREE's default inside the model: no tuning spec")
        spec.unlink(missing_ok=True)
        ms = {row["dispatch"]: float(row["ms"]) for row in rows}
        outcome, benches = time_model(tuner, {DEFAULT: tuner.default}, s.confirm_seconds)
        tiling = outcome.get("data_tiling")
        result = ModelResult(None, [], True, 0.0, None, tiling.speedup if tiling else None, None,
                             {}, ms, ms, model_times(outcome, benches))
    return conclude(tuner, rows, result, set(winners), stem)


def iree_own(config: TuningConfiguration, dispatches: tuple[str, ...], default_roots: dict) -> bool:
    """Whether IREE already gives these dispatches this lowering config by itself."""
    from iree.compiler import ir

    with ir.Context() as context:
        wanted = str(ir.Attribute.parse(config.lowering_config, context))
    return all(default_roots[d].lowering_config == wanted for d in dispatches if d in default_roots)


def conclude(tuner: ModelTuner, rows: list[dict], result: ModelResult, tuned_targets: set[int],
             stem: Path) -> int:
    log = tuner.log
    for problem in result.problems:
        log(f"Spec problem: {problem}")
    if result.spec is not None:
        log(f"Tuning spec {result.spec}: " + ("applies as intended" if not result.problems
                                             else f"{len(result.problems)} problem(s)"))
    log(outputs_line(result))
    log(model_line(result.speedup))
    if result.times:
        log(times_line(result))
    for line in comparison_lines(result):
        log(f"({line})")
    report_path, plot = Path(f"{stem}_model_report.md"), Path(f"{stem}_model.png")
    write_report(report_path, rows, result, tuned_targets)
    model_plot([r["dispatch"] for r in rows], result.default_ms, result.tuned_ms, plot)
    log(f"Report: {report_path}; plot: {plot}; ranking: {stem}_dispatches.csv")
    log.timings()
    log(tuner.builder.summary())
    return 0 if result.outputs_ok and not result.problems else 1
