"""The tuning engine: one op's candidates (tile configs injected, or flags for the whole
module) compiled, checked to carry their config, verified against IREE's default and timed
with it in interleaved rounds; a strategy's search over a space; the leaders confirmed in a
final session; the answer reported. Single-op tuning (tuning.single_op) and model tuning
(tuning.model) are its clients."""
from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import Target, UserError
from iree_dispatch_profiler.iree import modules, tunable
from iree_dispatch_profiler.iree.builder import Builder
from iree_dispatch_profiler.iree.machines import Here, Remote
from iree_dispatch_profiler.iree.config_check import configuration_applied
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, compile_command, run_module
from iree_dispatch_profiler.iree.target import run_facts
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.iree.timers import DEFAULT_SOURCE, Timer, Timers
from iree_dispatch_profiler.measure import calibration
from iree_dispatch_profiler.measure.calibration import Calibration, MachineState
from iree_dispatch_profiler.measure.protocol import (Candidate, Protocol,
                                                       fastest_significant, measure)
from iree_dispatch_profiler.measure.verification import Agreement, non_finite, outputs_agreement
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning import strategies
from iree_dispatch_profiler.tuning.paths import TuningPaths
from iree_dispatch_profiler.tuning.records import (COMPILE_FAILED, NOT_APPLIED, OK, RUN_FAILED,
                                                   TIMING_FAILED, WRONG, Log, TrialWriter,
                                                   speedup_text, trial_row)
from iree_dispatch_profiler.store import results
from iree_dispatch_profiler.tuning.space import (TILE_KNOBS, Point, Space, configuration,
                                                 spec_matchers)

DEFAULT = "default"
STORED = "from the results store: "  # the reason of a trial row that came from the store
LEADERS = 3  # tile configs confirmed at the end of a search (and a flag point)
NEAR_SHAPES = 2  # stored shapes whose winners seed a search
NEAR_SHARE = 8  # a seeded search runs this fraction of --n-trial (a batch: the seeds, mostly)


@dataclass
class Settings:
    """What a tuning run is asked to do (the command line over the seed's config file over
    defaults: cli.autotune decides)."""

    input: Path
    output: Path
    ops: str
    tuner: str
    n_trial: int
    early_stop: int | None
    seed: int
    lists: dict[str, list[int]]
    flag_points: dict[str, str] | None  # --flags; None: the defaults (single op, or --model)
    iree_bin: Path | None
    warnings: list[str] = field(default_factory=list)
    time_budget: float | None = None  # seconds of search in all
    batch_size: int = 4  # candidates compiled together and timed in one session
    batch_seconds: float = 4.0
    confirm_seconds: float = 20.0
    compile_timeout: float = 300.0
    run_timeout: float = 120.0
    jobs: int = 1  # iree-compile processes at once here
    function: str | None = None  # --model: the model's function
    top: int | None = None  # --model: tune the N costliest targets
    dispatches: list[re.Pattern] | None = None  # --model: tune only these dispatches' targets
    spec: Path | None = None  # --model: check this spec instead of tuning
    spec_library: bool = False  # --spec holds entries for other models' ops too
    base_flags: str | None = None  # --model: tune under these flags instead of searching them
    rewrites: tuple[str, ...] | None = None  # --model: the source rewrites it may adopt (None: all)
    runtimes: tuple[str, ...] | None = None  # --model: the runtimes timed beside (None: all)
    list_only: bool = False
    timing_source: str = DEFAULT_SOURCE
    calibration: str = "full"  # measure.calibration's level, or off
    store: str | None = None  # the results store's URL (None: the default SQLite), or off
    command: str = ""  # the command line, for the reports
    # --inputs: per argument of the tuned function a .npy file or a type to draw at random at
    inputs: list[modules.InputItem] | None = None
    begun_with: dict[str, str] | None = None  # run_settings, once checked against a run resumed

    @property
    def paths(self) -> TuningPaths:
        return TuningPaths(self.output)

    def run_settings(self, toolchain: Toolchain, version: str, model: bool) -> dict[str, str]:
        """What a rerun must share with the run it resumes (records.check_same_run): what
        decides the files it reads back, the dispatches and what is measured; not how long
        or how the search goes (--n-trial, --tuner, --time-budget, --op extend a run)."""
        digest = hashlib.sha256()
        with open(self.input, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 24), b""):
                digest.update(chunk)
        cpu = toolchain.target.cpu_target
        return {
            "--input": digest.hexdigest(), "--model": str(model), "--function": str(self.function),
            "--parameters": " ".join(toolchain.run_flags), "--inputs": " ".join(map(str, self.inputs or [])),
            "--base-flags": str(self.base_flags), "--flags": json.dumps(self.flag_points),
            "--rewrites": str(self.rewrites), "--spec": str(self.spec),
            "target CPU": f"{cpu.summary} {cpu.triple}" if cpu else toolchain.target.name,
            "--runtime-device": toolchain.device, "--timing-source": self.timing_source,
            "IREE version": version}


@dataclass
class Toolchain:
    """IREE's tools, the target, where candidates compile (builder) and where they run and are
    timed (machine, on its runtime device with the module's parameter flags)."""

    tools: IreeTools
    target: Target
    builder: Builder
    machine: Here | Remote
    device: str
    run_flags: list[str]


@dataclass
class Build:
    """One compiled variant of the module, ready to run the function of an op."""

    name: str
    vmfb: Path | None = None
    reason: str = ""
    applied: str = "n.a."
    compile_seconds: float = 0.0
    compiled_on: str = "local"


class Tuner:
    """Compiles, verifies and times candidates of the user's module against IREE's default."""

    reference = "IREE's default"  # what `default` is, in what the tuner reports
    source = "tuner"  # what its results are in the store: a standalone op's

    def __init__(self, s: Settings, toolchain: Toolchain, log: Log):
        self.s, self.log = s, log
        self.tools, self.target, self.builder = toolchain.tools, toolchain.target, toolchain.builder
        machine = toolchain.machine
        self.runner, self.timed_on = machine.run, machine.label  # where candidates run
        self.jobs = self.builder.slots or s.jobs  # compiles at once: here, or on the cluster
        self.work = s.paths.work
        self.work.mkdir(parents=True, exist_ok=True)
        self.device, self.run_flags = toolchain.device, toolchain.run_flags
        # no close needed: the resident worker ends with this process (its stdin closes)
        self.timers = Timers(s.timing_source, self.tools, machine.run, self.work)
        self.sources: dict[str, str] = {}  # build name -> the timing source that timed it
        self.signatures = {sig.name: sig for sig in modules.signatures(self.signature_source(),
                                                                       source=s.input)}
        self.inputs: dict[str, modules.Inputs] = {}
        self.expected: dict[str, list[np.ndarray]] = {}
        self.default: Build | None = None
        self.facts = {**run_facts(self.tools, self.target, self.device, machine.facts,
                                  machine.label, s.timing_source), "command": s.command}
        self.calibration = Calibration(self.tools, self.target, self.device, self.timers,
                                       not machine.remote, s.calibration)
        self.machine_start: MachineState | None = None
        self.machine_end: MachineState | None = None
        self.store = results.open_optional(s.store, log)
        self.session = f"{s.output.resolve()} {results.now()}"  # this run's session, in the store
        self.started = time.perf_counter()
        self.reused_seconds = 0.0  # re-confirming the store's answers
        self.searched_seconds = 0.0  # what those answers' searches took when they ran

    @property
    def flags_text(self) -> str:
        """The flags every candidate compiles with (a model's chosen ones): part of each
        stored result's and answer's question."""
        return " ".join(getattr(self, "base_flags", []))

    def question(self, op) -> dict:
        """What a stored result or answer must share to answer for `op` here."""
        return {"signature": results.op_fields(op)["signature"], "flags": self.flags_text,
                "target": results.target_fields(self.target.resolved_cpu())["target"],
                "iree_version": self.tools.version()}

    def store_failed(self, error: Exception) -> None:
        """The store went away: said once, and the run goes on without it."""
        if self.store is not None:
            self.log(f"warning: results store {self.store.url}: {type(error).__name__}: "
                     f"{str(error).splitlines()[0] if str(error) else ''}; no longer used")
        self.store = None

    def keep(self, op, rows: list[dict]) -> None:
        """Verified, timed trials into the results store as they finish."""
        if self.store is None:
            return
        shared = results.context(op, self.target.resolved_cpu(), self.tools.version(),
                                 self.session, self.timed_on, self.source)
        records = [{**row, **shared,
                    "flags": " ".join(f for f in (self.flags_text, str(row.get("flags", "")))
                                      if f),
                    "configuration": json.dumps({k: row[k] for k in TILE_KNOBS if k in row},
                                                default=int)}
                   for row in rows if row.get("status") == OK]
        try:
            self.store.record(records)
        except Exception as error:
            self.store_failed(error)

    def remember(self, scope: str, question: dict, answer: dict, trials: int,
                 speedup: stats.Estimate | None) -> None:
        """A finished search's answer into the store: asked again, it is re-confirmed."""
        if self.store is None:
            return
        try:
            self.store.remember({**question, "scope": scope, "answer": answer, "trials": trials,
                                 "speedup": speedup.median if speedup else None,
                                 "speedup_ci_low": speedup.low if speedup else None,
                                 "speedup_ci_high": speedup.high if speedup else None,
                                 "machine": self.timed_on, "session": self.session,
                                 "recorded_at": results.now()})
        except Exception as error:
            self.store_failed(error)

    def store_summary(self, reused: int, ops: int) -> str:
        """Which answers came from the store, and what that saved."""
        if self.store is None:
            return "Results store: none"
        took = (f" (their searches took {self.searched_seconds:.0f} s)"
                if self.searched_seconds else "")
        saved = (f"; {reused} of {ops} answered from it, re-confirmed in "
                 f"{self.reused_seconds:.1f} s instead of searched{took}" if reused else
                 f"; no answer reused ({ops} searched)")
        return f"Results store: {self.store.url} ({self.store.count()} results){saved}"

    def stored(self, op, space: Space) -> tuple[list[dict], dict | None]:
        """What the store knows of this op here: the candidates to re-confirm, as trial rows
        (status ok), and the answer of an earlier search at least as long as this run's (None:
        none; then the candidates are those whose measured interval cleared IREE's default)."""
        if self.store is None:
            return [], None
        question = self.question(op)
        points = {p.name: p for p in space.points}
        try:
            answer = self.store.answer("op", **question)
            if answer is not None and (answer["trials"] or 0) < min(self.s.n_trial,
                                                                  len(space.tiles)):
                answer = None  # a shorter search than asked for: search
            names = None if answer is None else [n for n in answer["answer"].get("leaders", [])
                                                 if n in points]
            found = self.store.best(**question, limit=len(names) if names else LEADERS,
                                    names=names)
            if not found and answer is None:
                self.say_elsewhere(op, question)
        except Exception as error:
            self.store_failed(error)
            return [], None
        rows = [{**trial_row(op, points[r["candidate"]], i, "store"), "status": OK,
                 "verified": "yes",
                 **{k: r[k] for k in ("median_ms", "ci_low_ms", "ci_high_ms", "speedup",
                                      "speedup_ci_low", "speedup_ci_high", "default_ms")},
                 "reason": f"{STORED}{r['recorded_at']} on {r['machine']}"}
                for i, r in enumerate(x for x in found if x["candidate"] in points)]
        return rows, answer

    def say_elsewhere(self, op, question: dict) -> None:
        """One line when the store knows the op only on other targets or IREE versions."""
        assert self.store is not None
        counted = self.store.counts(("target", "iree_version"), signature=question["signature"])
        other = [(t, v, n) for t, v, n in counted
                 if (t, v) != (question["target"], question["iree_version"])]
        if other:
            versions = sorted({v for _, v, _ in other} - {question["iree_version"]})
            cpus = sorted({t.split()[0] for t, _, _ in other if t != question["target"]})
            self.log(f"op {op.index}: the results store has {sum(n for *_, n in other)} results "
                     "for this op, from " + " and ".join(
                         x for x in (f"IREE {', '.join(versions)}" if versions else "",
                                     f"CPU {', '.join(cpus)}" if cpus else "") if x)
                     + f", not IREE {question['iree_version']} on this CPU: searching")

    def ask_store(self, query: Callable[..., list], *args) -> list:
        """A Store query method (Store.near, ...) with `args`, on this target and IREE version;
        [] without a store or when it fails (said once)."""
        if self.store is None:
            return []
        target = results.target_fields(self.target.resolved_cpu())["target"]
        try:
            return query(self.store, *args, target, self.tools.version())
        except Exception as error:
            self.store_failed(error)
            return []

    def near(self, op, space: Space) -> list[Point]:
        """This space's points nearest to the stored winners of the nearest shapes of the same
        kind and types (NEAR_SHAPES of them, LEADERS each): where a search starts."""
        return near_points(op, self.ask_store(results.Store.near, results.op_fields(op)), space)

    def kept_nearby(self, op, space: Space) -> int:
        """How many of the NEAR_SHAPES stored shapes nearest to `op` (of those with answers)
        kept their default after searches at least as long as this one's; 0 unless all did."""
        answers = self.ask_store(results.Store.near_answers, results.op_fields(op))
        return nearest_kept(op, answers, min(self.s.n_trial, len(space.tiles)))

    def calibrate_start(self) -> None:
        """This session's first calibration, said against the last session of the run it
        resumes, and recorded at once in X_machine.json (a killed session keeps its start)."""
        self.machine_start = self.calibration.measure()
        self.log(calibration.block("start", self.machine_start))
        earlier = self.recorded() if self.s.output.is_file() else []
        if earlier:
            last = [MachineState.from_json(earlier[-1].get(k)) for k in ("start", "end")]
            before = calibration.span([x for x in last if x is not None])
            why = calibration.comparable(before, self.machine_start)
            moved = [] if why else [x for x in calibration.shifts(before, self.machine_start)
                                    if x.significant]
            self.log("Machine state against the session this run resumes: " + (
                f"not compared ({why})" if why else "agrees" if not moved else
                "the machine now runs " + "; ".join(x.said for x in moved)
                + " (each trial's speedup is from one session's rounds; the leaders are "
                  "confirmed together in this one)"))
        self.record(calibration.state_dict(self.machine_start, None), replace_last=False)

    def peak(self) -> dict | None:
        """The session's ceilings as calibrated at its start (None: not calibrated)."""
        return self.machine_start.peak() if self.machine_start is not None else None

    def calibrate_end(self) -> None:
        """The session's last calibration: its verdict in the facts of every report and in
        X_machine.json."""
        if self.machine_start is None:
            return
        end = self.machine_end = self.calibration.measure()
        verdict = calibration.within_session(self.machine_start, end)
        self.log(calibration.block("end", end, verdict))
        self.facts["machine state"] = f"{self.machine_start.summary()}; {verdict}"
        self.record(calibration.state_dict(self.machine_start, end), replace_last=True)

    def recorded(self) -> list[dict]:
        """The sessions of this run, as X_machine.json holds them."""
        try:
            data = json.loads(self.s.paths.machine.read_text())
        except (OSError, ValueError):
            return []
        return [x for x in data if isinstance(x, dict)] if isinstance(data, list) else []

    def record(self, session: dict, replace_last: bool) -> None:
        sessions = self.recorded()
        sessions = [*(sessions[:-1] if replace_last else sessions), session]
        write_atomically(self.s.paths.machine, json.dumps(sessions, indent=1) + "\n")

    def signature_source(self) -> Path:
        return self.s.input

    def tile_outputs(self) -> str:
        """Where a winning tile config is written."""
        paths = self.s.paths
        return f"{paths.tuning_spec.name} or {paths.best_module.name}"

    def build(self, name: str, text: str | None, flags: Sequence[str],
              config=None, source: Path | None = None) -> Build:
        """Compile the module (or `text`, or `source`) with extra flags; with `config`, check
        it applied."""
        source = source or self.s.input
        if text is not None:
            source = self.work / f"{name}.mlir"
            source.write_text(text)
        vmfb, configs = self.work / f"{name}.vmfb", self.work / f"{name}_configs"
        flags = [*flags, f"--iree-hal-dump-executable-configurations-to={configs}"]
        result = self.builder.compile(source, vmfb, flags, self.s.compile_timeout)
        command = compile_command(self.tools, self.target, source, vmfb, flags)
        (self.work / f"{name}.compile.log").write_text(f"$ {shlex.join(command)}\n{result.stderr}")
        build = Build(name, compile_seconds=result.seconds, compiled_on=result.compiled_on)
        if not result.ok:
            build.reason = result.failure("iree-compile", self.s.compile_timeout)
            return build
        build.vmfb = vmfb
        if config is not None:
            build.applied = configuration_applied(configs, config)
        return build

    def build_point(self, op, point: Point, name: str) -> Build:
        """A flag point's module with its flags, a tile point's config injected into `op`, or a
        data-tiled point's flags with a spec for the mmt4d data tiling makes of `op`."""
        if point.is_flags:
            return self.build(name, None, shlex.split(point.flags))
        config = configuration(op, point)
        if config.spec_root:
            spec = self.work / f"{name}_spec.mlir"
            spec.write_text(tuning_spec.spec([(op, config)], spec_matchers(op, point)))
            return self.build(name, None, [*config.flags, f"{SPEC_FLAG}={spec}"], config)
        text = tunable.with_configs(self.s.input, {op.index: config.compilation_info})
        return self.build(name, text, [], config)

    def check_inputs(self, functions: list[str]) -> None:
        """--inputs against each function they will feed (without them: that random ones can
        be made), before anything compiles."""
        for function in dict.fromkeys(functions):
            if function not in self.signatures:
                continue
            modules.require_static(modules.concrete(self.signatures[function], self.s.inputs))

    def prepare_function(self, function: str) -> None:
        """The function's inputs (--inputs, or seeded random ones saved as .npy, index
        arguments valid, a mask drawn again as zeros where ones give NaN/inf) and IREE's
        default outputs on them, which must be finite."""
        if function in self.expected:
            return
        signature = self.signatures.get(function)
        if signature is None:
            raise UserError(f"function {function} is private: autotune.py runs public functions")
        unbounded = ""  # integer arguments drawn in [-4, 4], which may be what failed
        given = self.s.inputs
        if (files := modules.all_files(given)) is not None:
            tries: Iterable[modules.Inputs] = [modules.given_inputs(files, signature)]
        else:  # drawn, at the types --inputs gives where it does
            bounds = modules.index_bounds(self.signature_source(), function)
            drawn_at, given_files = modules.concrete(signature, given), modules.given_files(given)
            if drawn := [i for i in modules.unbounded_integers(drawn_at, bounds)
                         if i not in given_files]:
                unbounded = (f" (integer argument(s) {', '.join(map(str, drawn))} drawn in "
                             "[-4, 4]: give the values they take with --inputs)")
            # a mask under one convention, then the other where the first gives NaN/inf
            values = list(modules.MASK_VALUES) if modules.masks(drawn_at, bounds) else [1]
            # lazily: each draw overwrites the files of the last
            tries = (modules.draw_inputs(drawn_at, self.s.seed, bounds, self.work, function, mask,
                                         given_files) for mask in values)
        for made in tries:
            self.inputs[function] = made
            self.log(f"Inputs of {function}: {made.about}")
            outputs, reason = self.run(self.default, function)
            if reason:
                raise UserError(f"the module compiled with IREE's defaults fails to run "
                                f"{function}: {reason}{unbounded}")
            bad = non_finite(outputs)
            if not bad:
                break
            self.log(f"  IREE's default gives NaN/inf on them ({bad})")
        if bad:
            raise UserError(f"IREE's default gives NaN/inf on these inputs of {function} ({bad}): "
                            "an input problem, not a verdict on any candidate; give the inputs "
                            f"the function takes with --inputs{unbounded}")
        self.expected[function] = outputs

    def run(self, build: Build, function: str) -> tuple[list[np.ndarray], str]:
        signature = self.signatures[function]
        paths = modules.output_paths(self.work, f"{build.name}_{function}_output", signature)
        ran = run_module(self.tools, build.vmfb, function, self.device, self.inputs[function].flags,
                         paths, self.s.run_timeout, self.run_flags, self.runner)
        if not ran.ok:
            return [], ran.reason
        try:
            return modules.read_outputs(paths, signature), ""
        except ValueError:
            return [], "an output has an unexpected size"

    def benchmark(self, build: Build, function: str, per_dispatch: bool = False) -> Timer:
        return self.timers.benchmark(build.vmfb, function, self.device,
                                     self.inputs[function].flags, flags=self.run_flags,
                                     timeout=self.s.run_timeout, per_dispatch=per_dispatch)

    def verify(self, build: Build, function: str) -> tuple[str, str, Agreement | None]:
        """(status, reason, agreement) of a build's outputs against IREE's default's on the
        same inputs (None: not compared)."""
        outputs, reason = self.run(build, function)
        if reason:
            return RUN_FAILED, reason, None
        check = outputs_agreement(outputs, self.expected[function])
        if not check.ok:
            return WRONG, f"outputs differ from IREE's default: {check.detail}", check
        return OK, "", check

    def time(self, builds: list[Build], function: str, seconds: float,
             decide: bool = False, reference: Build | None = None) -> dict:
        """Interleaved rounds of the default (or `reference`, in its place) and `builds`: name
        -> Outcome (with `decide`, until the choice among them is clear: Protocol.decide)."""
        baseline = self.default if reference is None else replace(reference, name=DEFAULT)
        timers = {b.name: self.benchmark(b, function) for b in [baseline, *builds]}
        measured = measure([Candidate(name, t.sample) for name, t in timers.items()], DEFAULT,
                           Protocol(time_budget=seconds, decide=decide))
        self.sources.update({name: t.source for name, t in timers.items()})
        return measured.outcomes


@dataclass
class OpResult:
    op: tunable.TunableOp
    space: Space
    rows: list[dict]  # every trial of this op, earlier runs included
    confirmed: dict = field(default_factory=dict)  # name -> Outcome of the final session
    best_tile: Point | None = None
    winner: str = DEFAULT  # what to use: a candidate name or DEFAULT
    reused: bool = False  # the answer came from the results store, re-confirmed
    complete: bool = True  # its search ran to its limit (not cut by --time-budget)
    seconds: float = 0.0  # its search and confirmation took


def distance(op, loops: str) -> float:
    """How far a stored shape (its loop bounds, JSON) is from `op`'s: in log2 of each bound."""
    return sum(abs(math.log2(a / b)) for a, b in zip(op.loops, json.loads(loops))
               if a > 0 and b > 0)


def nearest_kept(op, answers: list[dict], enough: int) -> int:
    """How many of the NEAR_SHAPES answered shapes nearest to `op` (Store.near_answers, latest
    first) kept their default after at least `enough` trials; 0 unless all of them did."""
    latest: dict[str, dict] = {}
    for row in answers:
        latest.setdefault(row["signature"], row)
    nearest = sorted(latest.values(), key=lambda r: distance(op, r["loops"]))[:NEAR_SHAPES]
    kept = all(r["answer"].get("winner") == DEFAULT and (r["trials"] or 0) >= enough
               for r in nearest)
    return len(nearest) if kept else 0


def near_points(op, found: list[dict], space: Space) -> list[Point]:
    """The points of `space` nearest to the winners (LEADERS each, best first) of the
    NEAR_SHAPES stored shapes nearest to `op` (in log2 of each loop bound)."""
    by_shape: dict[str, list[dict]] = {}
    for row in found:  # best first
        by_shape.setdefault(row["signature"], []).append(row)

    points: list[Point] = []
    for rows in sorted(by_shape.values(), key=lambda r: distance(op, r[0]["loops"]))[:NEAR_SHAPES]:
        for row in rows[:LEADERS]:
            point = space.nearest(json.loads(row["configuration"] or "{}"))
            if point is not None and point not in points:
                points.append(point)
    return points


def reuse(tuner: Tuner, op, space: Space) -> OpResult | None:
    """The store's answer for `op`, re-confirmed against IREE's default in one short session;
    None when there is none or it no longer holds (then the op is searched). An earlier
    search's answer holds when the re-confirmation agrees with it (IREE's default included);
    candidates without one, when one of them still wins."""
    stored, answer = tuner.stored(op, space)
    if not stored and answer is None:
        return None
    start = time.perf_counter()
    result = OpResult(op, space, stored, reused=True)
    if stored:
        confirm(tuner, result)
    seconds = time.perf_counter() - start
    said = answer["answer"].get("winner") if answer else None
    if result.winner == DEFAULT and said != DEFAULT:
        tuner.log(f"op {op.index}: the results store's {len(stored)} candidates no longer beat "
                  f"{tuner.reference} here ({seconds:.1f} s): searching")
        return None
    tuner.reused_seconds += seconds
    searched = float(answer["answer"].get("seconds", 0.0)) if answer else 0.0
    tuner.searched_seconds += searched
    where = (f"searched in {answer['trials']} trials" + (f" and {searched:.0f} s" if searched
                                                         else "")
             + f" on {answer['recorded_at']} on {answer['machine']}" if answer
             else stored[0]["reason"].removeprefix(STORED))
    tuner.log(f"op {op.index}: answer from the results store ({where}), re-confirmed in "
              f"{seconds:.1f} s; the search ({tuner.s.n_trial} trials) skipped")
    return result


def remember(tuner: Tuner, result: OpResult) -> None:
    """A searched op's answer (its winner or IREE's default, and the leaders it confirmed),
    standing for --n-trial trials when its search ran to its limit (a seeded one too)."""
    if result.reused:
        return
    winner = result.confirmed.get(result.winner)
    tuner.remember("op", tuner.question(result.op),
                   {"winner": result.winner,
                    "leaders": [n for n in result.confirmed if n != DEFAULT],
                    "seconds": round(result.seconds, 1)},
                   tuner.s.n_trial if result.complete else len(result.rows),
                   winner.speedup if winner is not None else None)


def seeded(tuner: Tuner, op, space: Space) -> int:
    """The op's trial limit: --n-trial, or a NEAR_SHARE of it (at least a batch) when the
    store's winners of nearby shapes seed its search (they are tried first), or when the
    nearest shapes' searches all kept their default."""
    space.near = tuner.near(op, space)
    limit = min(tuner.s.n_trial, max(tuner.s.batch_size, math.ceil(tuner.s.n_trial / NEAR_SHARE)))
    if space.near:
        tuner.log(f"op {op.index}: {len(space.near)} config(s) from the results store's nearest "
                  f"shapes of this op seed its search ({', '.join(p.name for p in space.near)}); "
                  f"{limit} trials instead of {tuner.s.n_trial}")
        return limit
    # Nothing beat the default on the nearest shapes: a short search checks that here too.
    kept = tuner.kept_nearby(op, space)
    if kept:
        tuner.log(f"op {op.index}: the results store's {kept} nearest shape(s) of this op kept "
                  f"their default after full searches; {limit} trials instead of "
                  f"{tuner.s.n_trial}")
        return limit
    return tuner.s.n_trial


def search(tuner: Tuner, op, space: Space, earlier: pd.DataFrame, writer: TrialWriter,
           deadline: float, limit: int | None = None, resumed: bool = True) -> list[dict]:
    """Trials of `op` until it has `limit` (default --n-trial), counting those in `earlier`
    (said as a resumed run's when `resumed`), or the deadline passes; all its rows."""
    s, log = tuner.s, tuner.log
    limit = s.n_trial if limit is None else limit
    tiles = space.tiles
    by_name = {p.name: i for i, p in enumerate(tiles)}
    features = np.array([space.features(p) for p in tiles])
    strategy = strategies.make(s.tuner, [p.knobs() for p in tiles], features, s.seed)
    rows = []
    for row in earlier[earlier["op"] == op.index].to_dict("records"):
        rows.append(row)
        if row["candidate"] in by_name:
            score = float(row["speedup"]) if row["status"] == OK else None
            strategy.tell(by_name[row["candidate"]], score)
    if rows and resumed:
        log(f"op {op.index}: resuming after {len(rows)} finished trials")
    done = {r["candidate"] for r in rows}
    # Flag points and the space's seeds: always tried, in the first batch.
    first = [p for p in space.points if p.is_flags and p.name not in done]
    first += [p for p in space.seeds if p.name not in done]
    best, since_best = max([r["speedup"] for r in rows if r["status"] == OK] or [0.0]), 0
    while len(rows) < limit and time.perf_counter() < deadline:
        if s.early_stop and since_best >= s.early_stop:
            log(f"op {op.index}: early stop, no better speedup in {s.early_stop} trials")
            break
        size = min(s.batch_size, limit - len(rows))
        points, first = first[:size], first[size:]
        strategy.claim([by_name[p.name] for p in points if p.name in by_name])
        points += [tiles[i] for i in strategy.ask(size - len(points))]
        if not points:
            break
        batch = run_batch(tuner, op, points, len(rows))
        tuner.keep(op, batch)
        for point, outcome_row in zip(points, batch):
            rows.append(outcome_row)
            writer.write(outcome_row)
            ok = outcome_row["status"] == OK
            if point.name in by_name:
                strategy.tell(by_name[point.name], outcome_row["speedup"] if ok else None)
            if ok and outcome_row["speedup"] > best:
                best, since_best = outcome_row["speedup"], 0
            else:
                since_best += 1
            shown = (speedup_text(outcome_row, 3) if ok
                     else f"{outcome_row['status']}: {outcome_row['reason']}")
            log(f"op {op.index} trial {outcome_row['trial'] + 1}/{limit} {point.name}: "
                f"{shown}  (best {best:.3f}x)")
    return rows


def run_batch(tuner: Tuner, op, points: list[Point], first_trial: int) -> list[dict]:
    """Compile in parallel, check, verify, then time the survivors with the default."""
    s, log = tuner.s, tuner.log
    rows = [trial_row(op, p, first_trial + i, s.tuner) for i, p in enumerate(points)]

    def compile_one(point: Point) -> Build:
        return tuner.build_point(op, point, f"op{op.index}_{point.name}")

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=tuner.jobs) as pool:
        builds = list(pool.map(compile_one, points))
    log.phase("compile", time.perf_counter() - start)
    start = time.perf_counter()
    timed = []
    for row, build in zip(rows, builds):
        row["compile_s"] = round(build.compile_seconds, 2)
        row["compiled_on"] = build.compiled_on
        row["config_applied"] = build.applied
        if build.reason:
            row["status"], row["reason"] = COMPILE_FAILED, build.reason
        elif build.applied == "no":
            row["status"] = NOT_APPLIED
            row["reason"] = "IREE compiled the op with another config (dumped configuration)"
        else:
            row["status"], row["reason"], check = tuner.verify(build, op.function)
            row["max_abs_err"] = check.max_abs if check else math.nan
            row["verified"] = "yes" if row["status"] == OK else "no"
            if row["status"] == OK:
                timed.append((row, build))
    log.phase("verify", time.perf_counter() - start)
    if timed:
        start = time.perf_counter()
        outcomes = tuner.time([b for _, b in timed], op.function, s.batch_seconds)
        log.phase("measure", time.perf_counter() - start)
        default = outcomes[DEFAULT]
        for row, build in timed:
            outcome = outcomes[build.name]
            if outcome.reason or outcome.speedup is None:
                row["status"] = TIMING_FAILED
                row["reason"] = outcome.reason or f"the default failed to time: {default.reason}"
                continue
            row.update(median_ms=outcome.runtime.median, ci_low_ms=outcome.runtime.low,
                       ci_high_ms=outcome.runtime.high, speedup=outcome.speedup.median,
                       speedup_ci_low=outcome.speedup.low, speedup_ci_high=outcome.speedup.high,
                       default_ms=default.runtime.median, timed_on=tuner.timed_on,
                       timing_source=tuner.sources.get(build.name, ""))
    for build in builds:  # keep the work folder small: vmfbs and dumps are rebuilt when needed
        if build.vmfb is not None:
            build.vmfb.unlink(missing_ok=True)
        shutil.rmtree(tuner.work / f"{build.name}_configs", ignore_errors=True)
    return rows


# --------------------------------------------------------------------------------------------


def confirm(tuner: Tuner, result: OpResult) -> None:
    """Measure the leaders (best tile configs, best flag point) again, together with the
    default, for the answer: a search's speedups each come from a short session."""
    ok = sorted((r for r in result.rows if r["status"] == OK), key=lambda r: -r["speedup"])
    names = [r["candidate"] for r in ok if not str(r["candidate"]).startswith("flags_")][:LEADERS]
    names += [r["candidate"] for r in ok if str(r["candidate"]).startswith("flags_")][:1]
    if not names:
        return
    points = {p.name: p for p in result.space.points}
    op, builds = result.op, []
    for name in names:
        # The search deleted its vmfbs to keep the work folder small: build the leaders again.
        build = tuner.build_point(op, points[name], f"confirm_op{op.index}_{name}")
        build.name = name
        if build.vmfb is None:
            continue
        # the answer is verified as built, on the inputs it is timed on
        status, reason, _ = tuner.verify(build, op.function)
        if reason:
            tuner.log(f"  {name} rebuilt for the confirmation: {status}: {reason}; left out")
            continue
        builds.append(build)
    start = time.perf_counter()
    result.confirmed = tuner.time(builds, op.function, tuner.s.confirm_seconds, decide=True)
    tuner.log.phase("confirm", time.perf_counter() - start)
    speedup = {n: o.speedup.median for n, o in result.confirmed.items() if o.speedup is not None}
    tiles = [n for n in speedup if not n.startswith("flags_")]
    if tiles:
        result.best_tile = points[max(tiles, key=speedup.get)]
    winner = fastest_significant(result.confirmed)
    if winner is not None:
        result.winner = winner


def report(tuner: Tuner, result: OpResult) -> list[str]:
    """The verdict on one op, logged; its lines (for the HTML report)."""
    op = result.op
    ok = [r for r in result.rows if r["status"] == OK]
    failed = len(result.rows) - len(ok)
    rank = 1 + sum(r["speedup"] > 1.0 for r in ok)
    lines = [f"op {op.index} ({op.name} {op.shape}, {op.types}): {len(result.rows)} trials, "
             f"{len(ok)} verified and timed, {failed} failed; {tuner.reference} ranks {rank} of "
             f"{len(ok) + 1} in the search"]
    for name, outcome in result.confirmed.items():
        if name == DEFAULT or outcome.speedup is None:
            continue
        lines.append(f"  confirmed {name}: {outcome.runtime.median:.4f} ms, "
                     + stats.verdict(name, tuner.reference, outcome.speedup, stats.MIN_EFFECT))
    if result.winner == DEFAULT:
        lines.append(f"  answer: keep {tuner.reference} (no candidate's interval clears it)")
    else:
        speedup = result.confirmed[result.winner].speedup
        paths = tuner.s.paths
        point = next(p for p in result.space.points if p.name == result.winner)
        if point.is_flags:
            how = f"its flags for the whole module ({paths.best_flags.name})"
        elif point.data_tiling:
            how = f"{paths.tuning_spec.name} with the flags in {paths.spec_flags.name}"
        else:
            how = tuner.tile_outputs()
        lines.append(f"  answer: {result.winner}, {speedup.median:.3f}x {speedup.interval('.3f')} "
                     f"faster than {tuner.reference}; use {how}")
    for line in lines:
        tuner.log(line)
    return lines
