"""Whole-model tuning (autotune.py --model): search IREE's module flags (tuning.flags) on the
whole model, rank its dispatches under the best flags by their share of its time, tune the hot
ones inside the model, merge the winners into one tuning spec, prove that flags and spec apply
together, and measure the whole model with and without them.

A tuning target is a root op signature (operation name and operand types: what a spec matcher
sees); the dispatches whose root ops share it are tuned together. A candidate is the whole
model compiled with a one-entry spec: its config is checked in IREE's dumped configurations,
the model's outputs are verified against IREE's default, and its time is that of the target's
own dispatches inside the model (--dispatch_statistics), so fusion and calling context are
those of the real model."""
from __future__ import annotations

import dataclasses
import json
import math
import shlex
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import TuningConfiguration, UserError
from iree_dispatch_profiler.iree import modules, tunable
from iree_dispatch_profiler.iree.tunable import DispatchRoot
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, Benchmark, compile_command, run
from iree_dispatch_profiler.sweep.measurement import Candidate, Outcome, Protocol, measure
from iree_dispatch_profiler.sweep.verification import Agreement
from iree_dispatch_profiler.sweep.plots import model_plot
from iree_dispatch_profiler.tuning import flags as module_flags
from iree_dispatch_profiler.tuning import kinds as tuned_kinds
from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning.engine import (DEFAULT, Build, OpResult, Settings, Toolchain,
                                                  Tuner, confirm, report, search)
from iree_dispatch_profiler.tuning.flags import FlagSet
from iree_dispatch_profiler.tuning.records import (COMPILE_FAILED, OK, TIMING_FAILED, Log,
                                                   TrialWriter, load_trials, read_table,
                                                   write_table)
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
    # The model as IREE compiles it by default. `default`, what candidates are measured
    # against, is the model with the chosen flags alone (it, when none won): the spec is tuned
    # under the flags it ships with.
    iree_default: Build | None = None

    def __init__(self, s: Settings, toolchain: Toolchain, log: Log, lowered: Path, function: str):
        self.lowered, self.function = lowered, function
        self.base_flags: list[str] = []  # the chosen flags: every candidate compiles with them
        self._data_tiling_said = False
        super().__init__(s, toolchain, log)

    def signature_source(self) -> Path:
        return self.lowered

    def tile_outputs(self) -> str:
        return f"{self.s.paths.tuning_spec.name} (with the other targets' winners)"

    def build_point(self, op, point, name: str) -> Build:
        config = tuning_space.configuration(op, point)
        spec = self.work / f"{name}_spec.mlir"
        spec.write_text(tuning_spec.spec([(op, config)]))
        return self.build(name, None, [*self.base_flags, f"{SPEC_FLAG}={spec}"], config)

    def benchmark(self, build: Build, function: str, per_dispatch: bool = True) -> Benchmark:
        bench = super().benchmark(build, function, per_dispatch=True)  # attributed per dispatch
        bench.dispatches = self.focus
        return bench

    def build_surveyed(self, name: str, flags: list[str]) -> tuple[Build, dict]:
        """A build with its root ops found in its dumped executables."""
        dump = self.work / f"{name}_benchmarks"
        build = self.build(name, None, [*flags, *SURVEY_FLAGS,
                                        f"--iree-hal-dump-executable-benchmarks-to={dump}"])
        roots = tunable.dispatch_roots(dump, self.function) if not build.reason else {}
        return build, roots

    def data_tiling_build(self) -> Build:
        """IREE's data tiling (compiled once, by the flag search or here); its failure to
        compile the model said once, on a line of its own."""
        if self.data_tiling is None:
            self.data_tiling = self.build("model_data_tiling", None,
                                          shlex.split(module_flags.DATA_TILING))
        if self.data_tiling.reason and not self._data_tiling_said:
            self._data_tiling_said = True
            self.log("IREE data tiling + ukernels does not compile this model: "
                     f"{self.data_tiling.reason.splitlines()[0][:300]}")
        return self.data_tiling


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
    work = s.paths.work
    work.mkdir(parents=True, exist_ok=True)
    lowered = lower(toolchain.tools, toolchain.target, s.input, work, s.compile_timeout)
    function = modules.find_function(lowered, s.function, shown=str(s.input), source=s.input).name
    cpu = toolchain.target.resolved_cpu()
    log = Log(s.paths.log)
    log(f"Model {s.input}, function {function}, for {cpu.summary}; timing source {s.timing_source}")
    tuner = ModelTuner(s, toolchain, log, lowered, function)
    tuner.check_inputs([function])
    return tune(tuner, cpu)


# --------------------------------------------------------------------------------------------
@dataclass
class FlagChoice:
    """What the flag search chose: the set the spec is tuned under and ships with (None:
    IREE's default flags), the model built with it alone and that build's dispatch roots."""

    chosen: FlagSet | None
    build: Build | None = None
    roots: dict = dataclasses.field(default_factory=dict)
    failed: list[FlagSet] = dataclasses.field(default_factory=list)  # sets that fail alone


def search_flags(tuner: ModelTuner, iree_roots: dict, path: Path) -> FlagChoice:
    """The flag sets (--flags, or the curated ones that can matter for the model's ops) on the
    whole model: compiled, verified, timed against IREE's default in one interleaved session;
    the fastest whose interval clears it is chosen. Recorded in `path`, read back to resume."""
    s, log = tuner.s, tuner.log
    if s.base_flags is not None:  # the user's: no search
        chosen = FlagSet("given", s.base_flags, "given with --base-flags") if s.base_flags else None
        built, failed = {}, []
        log(f"Flags: {s.base_flags or 'none'} (--base-flags): the spec is tuned under them")
    else:
        if path.is_file():
            rows, built = read_table(path, module_flags.COLUMNS, "a flag record"), {}
            log(f"Flag sets from {path}")
        else:
            kinds = {root.op.kind for root in iree_roots.values() if root.op}
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
        return FlagChoice(None, failed=failed)
    build, roots = built.get(chosen.name) or tuner.build_surveyed(f"model_{chosen.name}",
                                                                 chosen.args)
    if build.reason:
        raise UserError(f"the model does not compile with {chosen.flags}: {build.reason}")
    if s.base_flags is not None:
        status, reason, _ = tuner.verify(build, tuner.function)
        if reason:
            raise UserError(f"the model with {chosen.flags}: {status}: {reason}")
    return FlagChoice(chosen, build, roots, failed)


def measure_flags(tuner: ModelTuner, sets: list[FlagSet]) -> tuple[list[dict], dict]:
    """A row per set (module_flags.COLUMNS), and the builds with their roots by set name."""
    log = tuner.log
    log(f"Module flags: {len(sets)} set(s) on the whole model against IREE's default")
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=tuner.jobs) as pool:
        built = dict(zip([f.name for f in sets], pool.map(
            lambda f: tuner.build_surveyed(f"model_{f.name}", f.args), sets)))
    log.phase("compile", time.perf_counter() - start)
    rows, timed = [], []
    for flag_set in sets:
        build = built[flag_set.name][0]
        if flag_set.name == "data_tiling" and flag_set.flags == module_flags.DATA_TILING:
            tuner.data_tiling = build
        row = {"name": flag_set.name, "flags": flag_set.flags, "why": flag_set.why,
               "chosen": "no", "status": COMPILE_FAILED, "reason": build.reason}
        if not build.reason:
            row["status"], row["reason"], check = tuner.verify(build, tuner.function)
            row["max_abs_err"] = check.max_abs if check else math.nan
            if row["status"] == OK:
                timed.append(build)
        rows.append(row)
    start = time.perf_counter()
    outcomes = tuner.time(timed, tuner.function, tuner.s.confirm_seconds) if timed else {}
    log.phase("flags", time.perf_counter() - start)
    best, best_speedup = None, 1.0
    for row in rows:
        outcome = outcomes.get(f"model_{row['name']}")
        if outcome is None:
            continue
        if outcome.reason or outcome.speedup is None:
            row["status"] = TIMING_FAILED
            row["reason"] = outcome.reason or "IREE's default failed to time"
            continue
        row.update(median_ms=outcome.runtime.median, ci_low_ms=outcome.runtime.low,
                   ci_high_ms=outcome.runtime.high, speedup=outcome.speedup.median,
                   speedup_ci_low=outcome.speedup.low, speedup_ci_high=outcome.speedup.high)
        if (stats.significant(outcome.speedup, stats.MIN_EFFECT)
                and outcome.speedup.median > best_speedup):
            best, best_speedup = row, outcome.speedup.median
    if best is not None:
        best["chosen"] = "yes"
    return rows, built


def print_flags(rows: list[dict], log) -> None:
    width = max([len(row["name"]) for row in rows] + [4])
    for row in rows:
        if row["status"] == OK:
            shown = (f"{float(row['speedup']):.2f}x [{float(row['speedup_ci_low']):.2f}, "
                     f"{float(row['speedup_ci_high']):.2f}], {float(row['median_ms']):.3f} ms")
        else:
            shown = f"{row['status']}: {row['reason']}"
        mark = "  <- chosen" if row["chosen"] == "yes" else ""
        log(f"  flags {row['name']:<{width}} {shown}{mark}")
    chosen = [row for row in rows if row["chosen"] == "yes"]
    log(f"Flags: {chosen[0]['name']} ({chosen[0]['flags']}): the spec is tuned under them"
        if chosen else "Flags: none is faster than IREE's default: the spec is tuned without flags")


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
    if root.name in ("linalg.mmt4d", "linalg.batch_mmt4d"):  # data tiling's packed matmuls
        return f"a data-tiled matmul ({root.name}, tiled by data tiling)"
    if root.op is None:
        return f"its root op {root.name} is not a contraction, convolution or attention"
    return tuned_kinds.not_tunable(root.op)


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

    @property
    def answer(self) -> bool:
        return self.spec is not None or self.flags is not None

    @property
    def outputs_ok(self) -> bool:
        return self.agreement is None or self.agreement.ok


def time_model(tuner: ModelTuner, builds: dict[str, Build], seconds: float,
               ) -> tuple[dict[str, Outcome], dict[str, Benchmark]]:
    """The whole model's builds, and IREE's data tiling beside them, in interleaved rounds
    against IREE's default. A vmfb shared by two names (data tiling chosen as the flags) is
    timed once and reported under both."""
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
                       Protocol(time_budget=seconds))
    tuner.log.phase("model", time.perf_counter() - start)
    outcomes = dict(measured.outcomes)
    for name, build in builds.items():
        outcomes[name], benches[name] = outcomes[first[build.vmfb]], benches[first[build.vmfb]]
    return outcomes, benches


def measure_model(tuner: ModelTuner, entries: list[Entry], spec: Path | None, flags: FlagSet | None,
                  default_roots: dict, targets_by_number: dict[int, TuningTarget],
                  seconds: float) -> ModelResult:
    """Compile the model with the flags and the spec together, check every entry, verify, and
    time it against IREE's default, its data tiling and the flags alone in interleaved rounds.
    Without a spec the answer is the flags alone (verified by the flag search); without
    either, IREE's default is timed beside its data tiling."""
    problems, builds, check = [], {}, None
    answer = tuner.s.paths.answer_build  # what bench_model.py times
    answer.unlink(missing_ok=True)
    if spec is not None:
        tuned, tuned_roots = tuner.build_surveyed("model_tuned", [*tuner.base_flags,
                                                                  f"{SPEC_FLAG}={spec.resolve()}"])
        if tuned.reason:
            raise UserError(f"the model does not compile with {spec}: {tuned.reason}")
        problems = check_spec(entries, default_roots, tuned_roots)
        check = answer_agreement(tuner, tuned)
        builds.update({"flags": tuner.default} if flags is not None else {})
        builds["tuned"] = tuned
    elif flags is not None:
        shutil.copyfile(tuner.default.vmfb, answer)
        check = answer_agreement(tuner, tuner.default)
        builds["tuned"] = tuner.default
    outcome, benches = time_model(tuner, builds, seconds)
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
                       model_times(outcome, benches))


def answer_agreement(tuner: ModelTuner, build: Build) -> Agreement:
    """The answer's outputs against IREE's default's on the inputs the tuner used."""
    status, reason, check = tuner.verify(build, tuner.function)
    return check if check is not None else Agreement(
        math.inf, math.inf, 0, (), False, 0.0, f"not run: {status}: {reason}")


def medians(rows: list[dict]) -> dict[str, float]:
    """dispatch -> its median ms over the rounds of a session."""
    return {d: float(np.median([r[d][1] for r in rows if d in r])) for d in rows[-1]} if rows else {}


def model_times(outcome: dict[str, Outcome], benches: dict[str, Benchmark],
                ) -> dict[str, tuple[stats.Estimate, float]]:
    return {name: (outcome[name].runtime, float(np.median(benches[name].invocations)))
            for name in BUILD_NAMES
            if name in outcome and not outcome[name].reason and benches[name].invocations}


BUILD_NAMES = {DEFAULT: "IREE default", "data_tiling": "IREE data tiling", "flags": "flags alone",
               "tuned": "tuned"}


def times_line(result: ModelResult) -> str:
    """`Model times: IREE default 5.12 ms [5.01, 5.30], ...` (and each whole call)."""
    parts = [f"{BUILD_NAMES[n]} {e.median:.3f} ms {e.interval('.3f')} (whole call {call:.3f} ms)"
             for n, (e, call) in result.times.items()]
    return "Model times, summed dispatches per call: " + "; ".join(parts) if parts else ""


def model_line(result: ModelResult) -> str:
    """`Model: faster by 2.10x [1.95, 2.24] than IREE data tiling, the better of IREE's default
    and its data tiling`; `slower by ...`, or no significant difference."""
    if not result.answer:
        return "Model: unchanged (no flags or spec beat IREE's default)"
    if not result.outputs_ok:
        return "Model: no answer: its outputs disagree with IREE's default (not shipped)"
    speedup, against = result.speedup, "IREE's default"
    if (result.data_tiling is not None and result.data_tiling.median > 1
            and result.over_data_tiling is not None):
        speedup, against = result.over_data_tiling, "IREE data tiling"
    if speedup is None or not speedup.n:
        return "Model: not timed"
    best = f"{against}, the better of IREE's default and its data tiling"
    if not stats.significant(speedup, stats.MIN_EFFECT):
        return f"Model: no significant difference from {best}"
    return f"Model: {stats.direction(speedup)} than {best}"


def answer_flags(result: ModelResult) -> list[str]:
    """The flags the answer adds to the target's."""
    return ([*result.flags.args] if result.flags else []) + (
        [f"{SPEC_FLAG}={result.spec.resolve()}"] if result.spec else [])


def answer_line(result: ModelResult, script: Path) -> str:
    """What to compile the model with."""
    if not result.answer:
        return "Answer: IREE's default"
    if not result.outputs_ok:
        return "Answer: IREE's default (the tuned answer's outputs disagree: not shipped)"
    return f"Answer: sh {script} (the iree-compile command that was timed; inside, the same for another CPU)"


def write_compile_script(tuner: ModelTuner, result: ModelResult, path: Path) -> None:
    """`X_compile.sh`: the exact iree-compile command of the timed answer (this target's flags
    as IREE resolved them), the same with `host` for another machine, and the run command."""
    s, target = tuner.s, tuner.target
    vmfb = s.paths.tuned_vmfb
    timed = compile_command(tuner.tools, target, s.input.resolve(), Path(vmfb), answer_flags(result))
    portable = dataclasses.replace(target, cpu="host", cpu_features="", target_triple="",
                                   cpu_target=None)
    elsewhere = compile_command(tuner.tools, portable, s.input.resolve(), Path(vmfb),
                                answer_flags(result))
    run_line = ["iree-run-module", f"--module={vmfb}", f"--device={tuner.device}",
                f"--function={tuner.function}", *tuner.run_flags,
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
        "# For another machine, the same flags with the CPU IREE finds there:",
        "#   " + shlex.join(["iree-compile", *elsewhere[1:]]),
        "# Run it as it was verified:",
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
    lines = []
    if not result.outputs_ok:
        return lines
    for estimate, what in ((result.speedup, "the tuned model against IREE's default"),
                           (result.data_tiling, "IREE data tiling + ukernels against IREE's default"),
                           (result.over_data_tiling, "the tuned model against IREE data tiling"),
                           (result.over_flags, "flags + spec against the flags alone")):
        if estimate is not None and estimate.n:
            lines.append(f"{what}: {estimate.median:.2f}x {estimate.interval('.2f')}")
    return lines


def verdict_lines(result: ModelResult) -> list[str]:
    return [outputs_line(result), model_line(result), *([times_line(result)] if result.times else []),
            *comparison_lines(result)]


def dispatch_rows(rows: list[dict], result: ModelResult, tuned_targets: set[int]) -> list[dict]:
    """Each ranked dispatch before (the flags alone) and after (with the spec), its share of
    each, and its target's speedup in the final session."""
    total = {when: sum(times.get(r["dispatch"], 0.0) for r in rows) or math.nan
             for when, times in (("before", result.default_ms), ("after", result.tuned_ms))}
    dispatches = []
    for row in rows:
        number = int(row["target"]) if row["target"] != "" else None
        speedup = result.per_target.get(number) if number is not None else None
        before = result.default_ms.get(row["dispatch"], math.nan)
        after = result.tuned_ms.get(row["dispatch"], math.nan)
        dispatches.append({
            "dispatch": row["dispatch"], "root": f"{row['root']} {row['shape']}",
            "share": float(row["share"]), "before_ms": before, "after_ms": after,
            "share_before": before / total["before"], "share_after": after / total["after"],
            "speedup": speedup.median if speedup else None,
            "speedup_low": speedup.low if speedup else None,
            "speedup_high": speedup.high if speedup else None,
            "speedup_text": f"{speedup.median:.2f}x {speedup.interval('.2f')}" if speedup else "-",
            "in_spec": "yes" if number in tuned_targets else "no"})
    return dispatches


def write_report(path: Path, dispatches: list[dict], result: ModelResult) -> None:
    lines = ["# Model tuning report", "",
             f"Flags: `{result.flags.flags}` ({result.flags.name})" if result.flags
             else "Flags: none",
             f"Tuning spec: `{result.spec.name}`" if result.spec else "Tuning spec: none", "",
             "| dispatch | root op | share | flags alone ms | tuned ms | target speedup [95%] | in spec |",
             "|---|---|---:|---:|---:|---|---|"]
    for d in dispatches:
        lines.append(f"| {d['dispatch']} | {d['root']} | {d['share']:.1%} | {d['before_ms']:.4f} | "
                     f"{d['after_ms']:.4f} | {d['speedup_text']} | {d['in_spec']} |")
    lines += ["", *verdict_lines(result),
              "(times: the summed time of the model's dispatches per call, interleaved rounds)"]
    if result.problems:
        lines += ["", "Spec problems:", *(f"- {p}" for p in result.problems)]
    path.write_text("\n".join(lines) + "\n")


def write_summary(path: Path, facts: dict, dispatches: list[dict], lines: list[str]) -> None:
    """The model's answer as JSON (what its HTML report shows)."""
    write_atomically(path, json.dumps({"kind": "model", "facts": facts, "lines": lines,
                                       "dispatches": dispatches}, indent=1, default=float) + "\n")


# --------------------------------------------------------------------------------------------
def tune(tuner: ModelTuner, cpu) -> int:
    s, log, paths = tuner.s, tuner.log, tuner.s.paths
    start = time.perf_counter()
    tuner.iree_default, default_roots = tuner.build_surveyed(DEFAULT, [])
    if tuner.iree_default.reason:
        raise UserError(f"{s.input} does not compile with IREE's defaults: "
                        f"{tuner.iree_default.reason}")
    tuner.default = tuner.iree_default
    tuner.prepare_function(tuner.function)
    log.phase("baseline", time.perf_counter() - start)
    flags = FlagChoice(None)
    # --list ranks the dispatches of IREE's default, quickly; a given spec is checked under
    # IREE's default flags or --base-flags
    if not s.list_only and (s.spec is None or s.base_flags is not None):
        flags = search_flags(tuner, default_roots, paths.flags_record)
    if flags.chosen is not None:
        # Candidates are measured against, and their specs checked against, the flags alone.
        tuner.base_flags, default_roots = flags.chosen.args, flags.roots
        tuner.default = dataclasses.replace(flags.build, name=DEFAULT)
        tuner.reference = f"the flags {flags.chosen.name} alone"
    start = time.perf_counter()
    ranking_path = paths.ranking
    if ranking_path.is_file() and not s.list_only:
        # resume: the same targets, numbered as before
        rows = read_table(ranking_path, RANKING_COLUMNS, "a dispatch ranking")
        log(f"Dispatch ranking from {ranking_path}")
    else:
        rows = survey(tuner, default_roots, s.batch_seconds)
        choose_hot(rows, s.top)
        if not s.list_only:
            write_table(ranking_path, RANKING_COLUMNS, rows)
    log.phase("survey", time.perf_counter() - start)
    if flags.chosen is not None:
        log(f"Dispatches under the flags {flags.chosen.name}:")
    print_ranking(rows, log)
    if s.list_only:
        return 0
    if s.spec is not None:  # check a given spec and measure the model with it
        result = measure_model(tuner, tuning_spec.read_entries(s.spec), s.spec, flags.chosen,
                               default_roots, {}, s.confirm_seconds)
        return conclude(tuner, rows, result, set())
    chosen = targets(rows, default_roots)
    earlier, writer = load_trials(s.output), TrialWriter(s.output)
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
    spec = paths.tuning_spec
    while winners:
        # the entries as written: the check names what is in the file
        entries = tuning_spec.entries([(by_number[n].op, configs[n]) for n in winners],
                                      intended={n: by_number[n].dispatches for n in winners})
        spec.write_text(tuning_spec.text(entries))
        result = measure_model(tuner, entries, spec, flags.chosen, default_roots, by_number,
                               s.confirm_seconds)
        # A winner measured alone can lose beside the others: drop it and measure again.
        losers = [n for n in winners if n in result.per_target
                  and stats.significant(result.per_target[n], stats.MIN_EFFECT)
                  and result.per_target[n].median < 1]
        if not losers:
            break
        log(f"dropped from the spec, slower inside the tuned model: target(s) {losers}")
        winners = {n: r for n, r in winners.items() if n not in losers}
    if not winners:
        log("No tuned config beat " + ("the flags alone" if flags.chosen else "IREE's default")
            + " inside the model: no tuning spec")
        spec.unlink(missing_ok=True)
        result = measure_model(tuner, [], None, flags.chosen, default_roots, {}, s.confirm_seconds)
    status = conclude(tuner, rows, result, set(winners))
    if result.spec is not None and result.speedup is not None and result.outputs_ok:
        retry_failed_flags(tuner, flags.failed, result.spec)
    return status


def retry_failed_flags(tuner: ModelTuner, failed: list[FlagSet], spec: Path) -> None:
    """Flag sets that failed to compile the model alone, tried again with the spec: IREE's
    data tiling fails on some attention dispatches at the vector sizes of its own config, which
    the spec replaces. What compiles is verified and timed against the answer; reported, not
    shipped (the spec was tuned under other flags)."""
    for flag_set in failed:
        build = tuner.build(f"model_{flag_set.name}_spec", None,
                            [*flag_set.args, f"{SPEC_FLAG}={spec.resolve()}"])
        line = f"Flags {flag_set.name}, which fail alone, with {spec.name}: "
        if build.reason:
            tuner.log(line + f"still fail: {build.reason}")
            continue
        status, reason, _ = tuner.verify(build, tuner.function)
        if reason:
            tuner.log(line + f"compile, but {status}: {reason}")
            continue
        answer = tuner.s.paths.answer_build
        benches = {n: tuner.benchmark(b, tuner.function) for n, b in
                   (("answer", Build("answer", answer)), (flag_set.name, build))}
        measured = measure([Candidate(n, b.sample) for n, b in benches.items()], "answer",
                           Protocol(time_budget=tuner.s.confirm_seconds))
        outcome, answered = measured.outcomes[flag_set.name], measured.outcomes["answer"]
        shown = (f"{outcome.runtime.median:.3f} ms, " + stats.verdict(
            flag_set.name, "the answer", outcome.speedup, stats.MIN_EFFECT)
                 if outcome.speedup is not None
                 else f"failed to time: {outcome.reason or answered.reason}")
        tuner.log(line + f"compile, outputs agree; {shown} ({flag_set.flags} "
                  f"{SPEC_FLAG}={spec})")


def iree_own(config: TuningConfiguration, dispatches: tuple[str, ...], default_roots: dict) -> bool:
    """Whether IREE already gives these dispatches this lowering config by itself."""
    from iree.compiler import ir

    with ir.Context() as context:
        wanted = str(ir.Attribute.parse(config.lowering_config, context))
    return all(default_roots[d].lowering_config == wanted for d in dispatches if d in default_roots)


def conclude(tuner: ModelTuner, rows: list[dict], result: ModelResult,
             tuned_targets: set[int]) -> int:
    log = tuner.log
    paths = tuner.s.paths
    flags_path, script = paths.best_flags, paths.compile_script
    flags_path.unlink(missing_ok=True)
    script.unlink(missing_ok=True)
    shipped = result.answer and result.outputs_ok
    if shipped and result.flags is not None:
        flags_path.write_text(result.flags.flags + "\n")
    if result.spec is not None and not result.outputs_ok:
        # kept to look at, under a name no one ships by mistake
        result.spec.replace(paths.rejected_spec if result.spec == paths.tuning_spec
                            else result.spec.with_name(f"{result.spec.stem}_rejected.mlir"))
    for problem in result.problems:
        log(f"Spec problem: {problem}")
    if result.spec is not None and result.outputs_ok:
        together = f" with the flags in {flags_path}" if result.flags else ""
        log(f"Tuning spec {result.spec}{together}: " + (
            "applies as intended" if not result.problems
            else f"{len(result.problems)} problem(s)"))
    log(f"Inputs: {tuner.inputs[tuner.function].about}")
    log(outputs_line(result))
    log(model_line(result))
    if result.times:
        log(times_line(result))
    for line in comparison_lines(result):
        log(f"({line})")
    if shipped:
        write_compile_script(tuner, result, script)
    log(answer_line(result, script))
    report_path, plot = paths.model_report, paths.model_plot
    dispatches = dispatch_rows(rows, result, tuned_targets)
    write_report(report_path, dispatches, result)
    write_summary(paths.model_summary, tuner.facts, dispatches,
                  [*verdict_lines(result), answer_line(result, script), *result.problems])
    model_plot([r["dispatch"] for r in rows], result.default_ms, result.tuned_ms, plot)
    log(f"Report: {report_path}; plot: {plot}; ranking: {paths.ranking}")
    log.timings()
    log(tuner.builder.summary())
    return 0 if result.outputs_ok and not result.problems else 1
