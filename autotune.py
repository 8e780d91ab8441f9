#!/usr/bin/env python3
"""Auto-tune the linalg ops of your own MLIR module on llvm-cpu.

  autotune.py --input model.mlir --output results.csv [--op INDEX|all] [--tuner xgb] [--n-trial N]
  autotune.py --config auto-scheduler.cfg          (input and output from its [Env])
  autotune.py --input model.mlir --list

The module is analysed on the IR: every contraction (matmul with any indexing maps,
batch_matmul, contraction-like linalg.generic) and 2-D convolution is a tunable op. Each op's
space holds tile configs derived from its shape and the target (kept within IREE's vector-size
rule), narrowed by the config file, plus compile-flag points (data tiling with ukernels) that
apply to the whole module. A candidate is compiled with its compilation_info injected into the
op, checked to carry it, verified against the module compiled with IREE's defaults on the same
seeded inputs, and timed in interleaved rounds against that default. The leaders are measured
again together at the end; a config is recommended only when its interval clears the default.

Outputs, named after the output CSV X.csv: X.csv (every trial), X_best.mlir (the module with the
best tile configs inlined), X_tuning_spec.mlir (the same configs for
--iree-codegen-tuning-spec-path, checked to apply), X_best_flags.txt (when a flag point wins),
X.log (phase timings) and X_progress.png. Rerunning with the same output resumes.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import shlex
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

import cluster
import modules
import options
import scheduler_config
import stats
import strategies
import tunable
import tuning_space
import tuning_spec
from launchers import (SPEC_FLAG, Benchmark, IreeTools, check_runnable, compile_command,
                       configuration_applied, resolve_target, run_module)
from library import Device, Target, UserError
from measurement import Candidate, Protocol, measure
from plots import progress_plot
from tuning_space import Point, Space
from verification import agreement

DEFAULT = "default"
COLUMNS = ["op", "function", "trial", "candidate", *tuning_space.TILE_KNOBS,
           "flags", "status", "reason", "config_applied", "verified", "max_abs_err",
           "median_ms", "ci_low_ms", "ci_high_ms", "speedup", "speedup_ci_low", "speedup_ci_high",
           "default_ms", "compile_s", "compiled_on", "timed_on", "strategy"]
# status of a trial; only "ok" trials have a speedup
OK, COMPILE_FAILED, NOT_APPLIED, RUN_FAILED, WRONG, TIMING_FAILED = (
    "ok", "compile-failed", "config-not-applied", "run-failed", "wrong-result", "timing-failed")


def parser() -> options.ArgumentParser:
    p = options.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, metavar="MODULE.mlir", help="the module to tune")
    p.add_argument("--config", type=Path, metavar="FILE.cfg",
                   help="the seed's auto-scheduler.cfg: [Env], [SearchSpace], [SearchStrategy]; "
                        "command-line options win over it")
    p.add_argument("--output", type=Path, metavar="X.csv", help="every trial; other outputs beside it")
    p.add_argument("--list", action="store_true",
                   help="list the tunable ops (with --model: the dispatch ranking) and exit")
    model = p.add_argument_group("whole models (--model)")
    model.add_argument("--model", action="store_true",
                       help="tune a whole model (any input iree-compile takes: torch, linalg, "
                            "StableHLO, TOSA): rank its dispatches, tune the hot ones, write one "
                            "tuning spec and measure the model with it")
    model.add_argument("--function", default=None,
                       help="the model's function (default: its only public one)")
    model.add_argument("--top", type=options.parse_positive, default=None, metavar="N",
                       help="tune the N costliest targets (default: those of the dispatches "
                            "that take 90%% of the time)")
    model.add_argument("--spec", type=Path, default=None, metavar="SPEC.mlir",
                       help="instead of tuning: check that this tuning spec applies to the "
                            "model, and measure the model with it")
    options.add_parameters(model)
    p.add_argument("--op", default="all", metavar="INDEX[,INDEX]|all",
                   help="which tunable ops (numbers from --list; default: all)")
    p.add_argument("--tuner", choices=[*strategies.NAMES, *strategies.CONFIG_NAMES], default=None,
                   help="search strategy (default: xgb)")
    p.add_argument("--n-trial", type=options.parse_positive, default=None, metavar="N",
                   help="candidates tried per op (default: 32)")
    p.add_argument("--time-budget", type=options.parse_seconds, default=None, metavar="SECONDS",
                   help="stop searching after this many seconds in all (default: none)")
    p.add_argument("--early-stop", type=options.parse_positive, default=None, metavar="N",
                   help="stop an op's search after N trials without a better speedup")
    p.add_argument("--flags", action="append", default=None, metavar='"FLAGS"',
                   help="a compile-flag point (repeatable); replaces the default points "
                        "(data tiling with ukernels); --flags='' for none")
    p.add_argument("--seed", type=int, default=None, help="seeds the strategy and the inputs (default: 0)")
    p.add_argument("--batch-size", type=options.parse_positive, default=4, metavar="N",
                   help="candidates compiled together and timed in one interleaved session "
                        "with the default (default: 4)")
    p.add_argument("--batch-seconds", type=options.parse_seconds, default=4.0, metavar="SECONDS",
                   help="interleaved timing per batch (default: 4)")
    p.add_argument("--confirm-seconds", type=options.parse_seconds, default=20.0, metavar="SECONDS",
                   help="interleaved timing of the leaders against the default at the end "
                        "(default: 20)")
    p.add_argument("-j", "--jobs", type=options.parse_num_cpu, default=os.cpu_count() or 1,
                   help="parallel iree-compile processes (default: all cores)")
    cluster.add_arguments(p)
    cluster.add_profile_on(p, scheduler_too=False)
    options.add_timeouts(p, 300.0, 120.0)
    options.add_iree_bin_dir(p)
    options.add_target(p, recorded=False)
    return p


@dataclass
class Settings:
    """Command line over config file over defaults."""

    input: Path
    output: Path
    ops: str
    tuner: str
    n_trial: int
    early_stop: int | None
    seed: int
    lists: dict[str, list[int]]
    flag_points: dict[str, str]
    iree_bin: Path | None
    warnings: list[str] = field(default_factory=list)


def settings(args: argparse.Namespace) -> Settings:
    config = scheduler_config.load(args.config) if args.config else None

    def pick(value, key: str, default=None):
        """The command line's value, else the config file's, else the default."""
        if value is not None:
            return value
        from_file = getattr(config, key, None) if config else None
        return from_file if from_file is not None else default

    if args.config is None and args.input is None:
        raise UserError("give --input MODULE.mlir or --config FILE.cfg")
    source = pick(args.input, "input_file")
    if source is None:
        raise UserError(f"{args.config} has no [Env] input_file; give --input")
    if not source.is_file():
        raise UserError(f"input {source} does not exist")
    warnings = []
    if config and config.gpu:
        warnings.append(f"{', '.join(config.gpu)} apply to GPU targets; ignored on llvm-cpu")
    given = [f for f in args.flags if f.strip()] if args.flags is not None else pick(None, "flags")
    flag_points = (dict(tuning_space.DEFAULT_FLAG_POINTS) if given is None
                   else {str(i): f for i, f in enumerate(given)})
    tuner = pick(args.tuner, "tuner", "xgb")
    return Settings(source, pick(args.output, "output_file"), args.op,
                    strategies.CONFIG_NAMES.get(tuner, tuner), pick(args.n_trial, "n_trial", 32),
                    pick(args.early_stop, "early_stop"), pick(args.seed, "seed", 0),
                    config.lists if config else {}, flag_points,
                    pick(args.iree_bin_dir, "iree_bin"), warnings)


def choose_ops(found: list[tunable.TunableOp], text: str) -> list[tunable.TunableOp]:
    if text == "all":
        chosen = [op for op in found if not tuning_space.tunable_reason(op)]
        if not chosen:
            raise UserError("no op of the module can be tuned (see --list)")
        return chosen
    chosen = []
    for item in text.split(","):
        if not item.strip().isdigit() or int(item) >= len(found):
            raise UserError(f"--op {item}: not an op number (the module has {len(found)} "
                            f"tunable ops, 0 to {len(found) - 1}; see --list)")
        op = found[int(item)]
        reason = tuning_space.tunable_reason(op)
        if reason:
            raise UserError(f"op {op.index} ({op.name}) cannot be tuned: {reason}")
        chosen.append(op)
    return chosen


def print_list(path: Path, found: list[tunable.TunableOp]) -> None:
    print(f"{len(found)} tunable ops in {path}")
    print(f"{'op':>3}  {'function':<14} {'operation':<26} {'kind':<12} {'types':<12} shape")
    for op in found:
        reason = tuning_space.tunable_reason(op)
        print(f"{op.index:>3}  {op.function:<14} {op.name:<26} {op.kind:<12} {op.types:<12} "
              f"{op.shape}" + (f"  (not tuned: {reason})" if reason else ""))


# --------------------------------------------------------------------------------------------
class Log:
    """Lines on stdout and in X.log, with the phase timings the seed's run.log had."""

    def __init__(self, path: Path):
        self.path = path
        self.start = time.perf_counter()
        self.phases: dict[str, float] = {}
        with open(path, "a", encoding="utf-8") as stream:
            stream.write(f"--- autotune.py started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        with open(self.path, "a", encoding="utf-8") as stream:
            stream.write(text + "\n")

    def phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def timings(self) -> None:
        total = time.perf_counter() - self.start
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.phases.items())
        self(f"Phase timings: {parts}; total {total:.1f} s")


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

    def __init__(self, args, s: Settings, tools: IreeTools, target, log: Log,
                 builder: cluster.Builder, machine: cluster.Here | cluster.Remote):
        self.args, self.s, self.tools, self.target, self.log = args, s, tools, target, log
        self.builder = builder
        self.runner, self.timed_on = machine.run, machine.label  # where candidates run
        self.jobs = builder.slots or args.jobs  # compiles at once: here, or on the cluster
        self.work = s.output.with_name(s.output.stem + "_work")
        self.work.mkdir(parents=True, exist_ok=True)
        self.device = options.runtime_device(args, target)
        self.run_flags = options.parameter_flags(args)
        self.signatures = {sig.name: sig for sig in modules.signatures(self.signature_source())}
        self.inputs: dict[str, list[str]] = {}
        self.expected: dict[str, list[np.ndarray]] = {}
        self.default: Build | None = None

    def signature_source(self) -> Path:
        return self.s.input

    def tile_outputs(self) -> str:
        """Where a winning tile config is written."""
        stem = self.s.output.stem
        return f"{stem}_tuning_spec.mlir or {stem}_best.mlir"

    def build(self, name: str, text: str | None, flags: Sequence[str],
              config=None) -> Build:
        """Compile the module (or `text`) with extra flags; with `config`, check it applied."""
        source = self.s.input
        if text is not None:
            source = self.work / f"{name}.mlir"
            source.write_text(text)
        vmfb, configs = self.work / f"{name}.vmfb", self.work / f"{name}_configs"
        flags = [*flags, f"--iree-hal-dump-executable-configurations-to={configs}"]
        result = self.builder.compile(source, vmfb, flags, self.args.compile_timeout)
        command = compile_command(self.tools, self.target, source, vmfb, flags)
        (self.work / f"{name}.compile.log").write_text(f"$ {shlex.join(command)}\n{result.stderr}")
        build = Build(name, compile_seconds=result.seconds, compiled_on=result.compiled_on)
        if not result.ok:
            build.reason = result.failure("iree-compile", self.args.compile_timeout)
            return build
        build.vmfb = vmfb
        if config is not None:
            build.applied = configuration_applied(configs, config)
        return build

    def build_point(self, op, point: Point, name: str) -> Build:
        """A flag point's module with its flags, or a tile point's config injected into `op`."""
        if point.is_flags:
            return self.build(name, None, shlex.split(point.flags))
        config = tuning_space.configuration(op, point)
        text = tunable.with_configs(self.s.input, {op.index: config.compilation_info})
        return self.build(name, text, [], config)

    def prepare_function(self, function: str) -> None:
        """Seeded inputs (saved as .npy) and IREE's default outputs for one function."""
        if function in self.expected:
            return
        signature = self.signatures.get(function)
        if signature is None:
            raise UserError(f"function {function} is private: autotune.py runs public functions")
        arrays = modules.random_inputs(signature, self.s.seed)
        paths = [self.work / f"{function}_input{i}.npy" for i in range(len(arrays))]
        for array, path in zip(arrays, paths):
            np.save(path, array)
        self.inputs[function] = [f"@{p}" for p in paths]
        outputs, reason = self.run(self.default, function)
        if reason:
            raise UserError(f"the module compiled with IREE's defaults fails to run {function}: {reason}")
        self.expected[function] = outputs

    def run(self, build: Build, function: str) -> tuple[list[np.ndarray], str]:
        signature = self.signatures[function]
        paths = [self.work / f"{build.name}_{function}_output{i}.bin"
                 for i in range(len(signature.results))]
        ran = run_module(self.tools, build.vmfb, function, self.device, self.inputs[function],
                         paths, self.args.run_timeout, self.run_flags, self.runner)
        if not ran.ok:
            return [], ran.reason
        try:
            return modules.read_outputs(paths, signature), ""
        except ValueError:
            return [], "an output has an unexpected size"

    def benchmark(self, build: Build, function: str) -> Benchmark:
        return Benchmark(self.tools, build.vmfb, function, self.device, self.inputs[function],
                         flags=self.run_flags, timeout=self.args.run_timeout,
                         dispatch_statistics=True, runner=self.runner)

    def verify(self, build: Build, function: str) -> tuple[str, str, float]:
        """(status, reason, max abs error) of a build's outputs against the default's."""
        outputs, reason = self.run(build, function)
        if reason:
            return RUN_FAILED, reason, math.nan
        worst, ok = 0.0, True
        for got, want in zip(outputs, self.expected[function]):
            check = agreement(got, want)
            worst, ok = max(worst, check.max_abs), ok and check.ok
        if not ok:
            return WRONG, f"outputs differ from IREE's default (max abs err {worst:.3g})", worst
        return OK, "", worst

    def time(self, builds: list[Build], function: str, seconds: float) -> dict:
        """Interleaved rounds of the default and `builds`: name -> Outcome."""
        candidates = [Candidate(b.name, self.benchmark(b, function).sample)
                      for b in [self.default, *builds]]
        measured = measure(candidates, DEFAULT, Protocol(time_budget=seconds))
        return measured.outcomes


# --------------------------------------------------------------------------------------------
def load_trials(path: Path) -> pd.DataFrame:
    """Finished trials of an earlier run with the same output (a kill may cut the last line)."""
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame(columns=COLUMNS)
    try:
        frame = pd.read_csv(path, on_bad_lines="skip", keep_default_na=False,
                            na_values={"speedup": [""], "median_ms": [""]})
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read {path} to resume: {error}") from None
    if list(frame.columns) != COLUMNS:
        raise UserError(f"{path} exists and is not an autotune.py trial CSV; choose another --output")
    return frame[frame["status"].astype(str).str.len() > 0]


class TrialWriter:
    """Rows reach the CSV as each trial finishes, so an interrupted run loses nothing."""

    def __init__(self, path: Path):
        self.path = path
        if not path.is_file() or path.stat().st_size == 0:
            with open(path, "w", newline="", encoding="utf-8") as stream:
                csv.writer(stream).writerow(COLUMNS)

    def write(self, row: dict) -> None:
        with open(self.path, "a", newline="", encoding="utf-8") as stream:
            csv.writer(stream).writerow([_cell(row.get(c, "")) for c in COLUMNS])
            stream.flush()
            os.fsync(stream.fileno())


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def _row(op, point: Point, trial: int, strategy: str) -> dict:
    return {"op": op.index, "function": op.function, "trial": trial, "candidate": point.name,
            "flags": point.flags, "strategy": strategy, "config_applied": "n.a.",
            "verified": "no", **point.knobs()}


@dataclass
class OpResult:
    op: tunable.TunableOp
    space: Space
    rows: list[dict]  # every trial of this op, earlier runs included
    confirmed: dict = field(default_factory=dict)  # name -> Outcome of the final session
    best_tile: Point | None = None
    winner: str = DEFAULT  # what to use: a candidate name or DEFAULT


def search(tuner: Tuner, op, space: Space, earlier: pd.DataFrame, writer: TrialWriter,
           deadline: float) -> list[dict]:
    s, log = tuner.s, tuner.log
    # Flag points are few and are IREE's own strategies: always tried, in the first batch.
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
    if rows:
        log(f"op {op.index}: resuming after {len(rows)} finished trials")
    done = {r["candidate"] for r in rows}
    flag_points = [p for p in space.points if p.is_flags and p.name not in done]
    best, since_best = max([r["speedup"] for r in rows if r["status"] == OK] or [0.0]), 0
    while len(rows) < s.n_trial and time.perf_counter() < deadline:
        if s.early_stop and since_best >= s.early_stop:
            log(f"op {op.index}: early stop, no better speedup in {s.early_stop} trials")
            break
        size = min(tuner.args.batch_size, s.n_trial - len(rows))
        points, flag_points = flag_points[:size], flag_points[size:]
        points += [tiles[i] for i in strategy.ask(size - len(points))]
        if not points:
            break
        for point, outcome_row in zip(points, run_batch(tuner, op, points, len(rows))):
            rows.append(outcome_row)
            writer.write(outcome_row)
            ok = outcome_row["status"] == OK
            if point.name in by_name:
                strategy.tell(by_name[point.name], outcome_row["speedup"] if ok else None)
            if ok and outcome_row["speedup"] > best:
                best, since_best = outcome_row["speedup"], 0
            else:
                since_best += 1
            shown = (f"{outcome_row['speedup']:.3f}x [{outcome_row['speedup_ci_low']:.3f}, "
                     f"{outcome_row['speedup_ci_high']:.3f}]" if ok
                     else f"{outcome_row['status']}: {outcome_row['reason']}")
            log(f"op {op.index} trial {outcome_row['trial'] + 1}/{s.n_trial} {point.name}: "
                f"{shown}  (best {best:.3f}x)")
    return rows


def run_batch(tuner: Tuner, op, points: list[Point], first_trial: int) -> list[dict]:
    """Compile in parallel, check, verify, then time the survivors with the default."""
    s, log = tuner.s, tuner.log
    rows = [_row(op, p, first_trial + i, s.tuner) for i, p in enumerate(points)]

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
            row["status"], row["reason"], row["max_abs_err"] = tuner.verify(build, op.function)
            row["verified"] = "yes" if row["status"] == OK else "no"
            if row["status"] == OK:
                timed.append((row, build))
    log.phase("verify", time.perf_counter() - start)
    if timed:
        start = time.perf_counter()
        outcomes = tuner.time([b for _, b in timed], op.function, tuner.args.batch_seconds)
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
                       default_ms=default.runtime.median, timed_on=tuner.timed_on)
    for build in builds:  # keep the work folder small: vmfbs and dumps are rebuilt when needed
        if build.vmfb is not None:
            build.vmfb.unlink(missing_ok=True)
        shutil.rmtree(tuner.work / f"{build.name}_configs", ignore_errors=True)
    return rows


# --------------------------------------------------------------------------------------------
LEADERS = 3


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
        if build.vmfb is not None:
            builds.append(build)
    start = time.perf_counter()
    result.confirmed = tuner.time(builds, op.function, tuner.args.confirm_seconds)
    tuner.log.phase("confirm", time.perf_counter() - start)
    speedup = {n: o.speedup.median for n, o in result.confirmed.items() if o.speedup is not None}
    tiles = [n for n in speedup if not n.startswith("flags_")]
    if tiles:
        result.best_tile = points[max(tiles, key=speedup.get)]
    winners = [n for n in speedup if speedup[n] > 1
               and stats.significant(result.confirmed[n].speedup, stats.MIN_EFFECT)]
    if winners:
        result.winner = max(winners, key=speedup.get)


def report(tuner: Tuner, result: OpResult) -> None:
    log, op = tuner.log, result.op
    ok = [r for r in result.rows if r["status"] == OK]
    failed = len(result.rows) - len(ok)
    rank = 1 + sum(r["speedup"] > 1.0 for r in ok)
    log(f"op {op.index} ({op.name} {op.shape}, {op.types}): {len(result.rows)} trials, "
        f"{len(ok)} verified and timed, {failed} failed; IREE's default ranks {rank} of "
        f"{len(ok) + 1} in the search")
    for name, outcome in result.confirmed.items():
        if name == DEFAULT or outcome.speedup is None:
            continue
        log(f"  confirmed {name}: {outcome.runtime.median:.4f} ms, "
            + stats.verdict(name, DEFAULT, outcome.speedup, stats.MIN_EFFECT))
    if result.winner == DEFAULT:
        log("  answer: keep IREE's default (no candidate's interval clears it)")
    else:
        speedup = result.confirmed[result.winner].speedup
        how = (f"its flags for the whole module ({tuner.s.output.stem}_best_flags.txt)"
               if result.winner.startswith("flags_") else tuner.tile_outputs())
        log(f"  answer: {result.winner}, {speedup.median:.3f}x {speedup.interval('.3f')} faster "
            f"than IREE's default; use {how}")


def export(tuner: Tuner, results: list[OpResult]) -> None:
    """X_best.mlir and X_tuning_spec.mlir for the best tile configs (whatever won), the spec
    proven to apply, and X_best_flags.txt when a flag point won."""
    s, log, output = tuner.s, tuner.log, tuner.s.output
    start = time.perf_counter()
    tuned = [(r.op, tuning_space.configuration(r.op, r.best_tile)) for r in results if r.best_tile]
    if tuned:
        best = output.with_name(output.stem + "_best.mlir")
        best.write_text(tunable.with_configs(s.input, {op.index: c.compilation_info for op, c in tuned}))
        spec = output.with_name(output.stem + "_tuning_spec.mlir")
        spec.write_text(tuning_spec.spec(tuned))
        check = tuner.build("spec_check", None, [f"{SPEC_FLAG}={spec.resolve()}"])
        if check.reason:
            log(f"Tuning spec {spec}: does NOT compile: {check.reason}")
        else:
            dumped = tuner.work / "spec_check_configs"
            applied = {op.index: configuration_applied(dumped, c) for op, c in tuned}
            shown = ", ".join(f"op {i} {a}" for i, a in applied.items())
            log(f"Tuning spec {spec}: applies to the untouched module: {shown}")
            if any(a != "yes" for a in applied.values()):
                log("  (an op without its config: IREE rewrote it before codegen, e.g. a batch-1 conv)")
        log(f"Best module: {best}")
    flag_winners = [r for r in results if r.winner.startswith("flags_")]
    if flag_winners:
        point = next(p for p in flag_winners[0].space.points if p.name == flag_winners[0].winner)
        path = output.with_name(output.stem + "_best_flags.txt")
        path.write_text(point.flags + "\n")
        log(f"Best flags: {path} ({point.flags})")
    log.phase("export", time.perf_counter() - start)


def plot_progress(results: list[OpResult], path: Path) -> None:
    curves = []
    for r in results:
        best, curve = 0.0, []
        for row in sorted(r.rows, key=lambda row: int(row["trial"])):
            if row["status"] == OK:
                best = max(best, float(row["speedup"]))
            curve.append(best if best > 0 else math.nan)
        curves.append((f"op {r.op.index} {r.op.name}", curve))
    progress_plot(curves, path)


def prepare(args, s: Settings) -> tuple[IreeTools, Target, cluster.Builder, cluster.Here | cluster.Remote]:
    """Checks the output, finds the tools, connects to the cluster, resolves the target (`host`:
    the machine that times, this one or --profile-on's)."""
    if s.output is None:
        raise UserError("give --output X.csv (or output_file in the config's [Env])")
    if s.output.suffix != ".csv":
        raise UserError(f"--output {s.output} must be a .csv file")
    tools = IreeTools.locate(s.iree_bin)
    version = tools.version()
    client = cluster.connect(args.scheduler, version) if args.scheduler else None
    machine = cluster.machine_from_args(args, version, client)
    target = resolve_target(tools, options.target_from_args(args), machine.run)
    if target.device is not Device.LLVMCPU:
        raise UserError(f"autotune.py tunes llvm-cpu; {target.device.value} is not supported yet")
    check_runnable(tools, target, machine.run, machine.name)
    try:
        s.output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot write {s.output}: {error.strerror}") from None
    return tools, target, cluster.Builder.from_args(args, tools, target, version, client), machine


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    s = settings(args)
    if args.model:
        import model_tuning  # it builds on this module
        return model_tuning.run_model(args, s)
    found = tunable.find(s.input)
    if args.list:
        print_list(s.input, found)
        return 0
    if not found:
        raise UserError(f"{s.input} has no tunable op (contraction or convolution)")
    chosen = choose_ops(found, s.ops)
    tools, target, builder, machine = prepare(args, s)
    cpu = target.resolved_cpu()
    spaces = []
    for op in chosen:
        space = tuning_space.build(op, cpu, s.lists, s.flag_points)
        if not space.tiles:
            given = ", ".join(f"{k}={v}" for k, v in s.lists.items()) or "the derived lists"
            raise UserError(f"op {op.index} ({op.name} {op.shape}): no valid tile config in "
                            f"{given} for {cpu.name} (vector tiles must divide the distribution "
                            "tiles and stay within IREE's vector-size limit)")
        spaces.append(space)
    earlier, writer = load_trials(s.output), TrialWriter(s.output)
    log = Log(s.output.with_suffix(".log"))
    for warning in s.warnings:
        log(f"warning: {warning}")
    log(f"Tuning {len(chosen)} op(s) of {s.input} for {cpu.summary} with {s.tuner}, "
        f"{s.n_trial} trials per op, seed {s.seed}")
    for op, space in zip(chosen, spaces):
        log(f"  op {op.index}: {op.name} {op.shape} ({op.types}) in {op.function}: "
            f"{len(space.tiles)} tile configs, {len(space.points) - len(space.tiles)} flag points")
    tuner = Tuner(args, s, tools, target, log, builder, machine)
    start = time.perf_counter()
    tuner.default = tuner.build(DEFAULT, None, [])
    if tuner.default.reason:
        raise UserError(f"{s.input} does not compile with IREE's defaults: {tuner.default.reason}")
    for op in chosen:
        tuner.prepare_function(op.function)
    log.phase("baseline", time.perf_counter() - start)
    deadline = time.perf_counter() + (args.time_budget or math.inf)
    results = []
    for op, space in zip(chosen, spaces):
        rows = search(tuner, op, space, earlier, writer, deadline)
        results.append(OpResult(op, space, rows))
    for result in results:
        confirm(tuner, result)
        report(tuner, result)
    export(tuner, results)
    progress = s.output.with_name(s.output.stem + "_progress.png")
    plot_progress(results, progress)
    log(f"Trials: {s.output}; progress plot: {progress}")
    log.timings()
    log(tuner.builder.summary())
    return 0


if __name__ == "__main__":
    options.run_main(main)
