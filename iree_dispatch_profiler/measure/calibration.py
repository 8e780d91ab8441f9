"""The machine's state, measured in every session: a short fixed workload timed at its start and
end, so that a change of the machine (between sessions, or during one) is told apart from a
change of what is measured, and the roofline's ceilings are this session's.

The workload stresses what dispatches depend on, timed the way dispatches are (the session's
timing source, where they run):
- compute: an in-cache f32 `linalg.mmt4d` (256^3, 16x16x1 inner tiles), near the CPU's peak
  (27% slower at the end of a session here whose data-tiled configurations ran 2x slower);
  also the sentinel timed in every round of an operation, for changes that come and go;
- memory: an f32 row sum over 96 MiB, beyond the caches: read bandwidth;
- blas: numpy's 1024^3 f32 GEMM (when timing on this machine), named by its BLAS kernel.

A state is compact JSON (a CSV cell, a JSON field); two states are compared kernel by kernel,
as rates with intervals."""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import Device, Target
from iree_dispatch_profiler.iree import compile_cache
from iree_dispatch_profiler.iree.launchers import compile_command
from iree_dispatch_profiler.iree.process import run
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.measure.blas import blas_summary, timed_calls
from iree_dispatch_profiler.measure.protocol import Candidate, Protocol, measure

# A new workload makes states of the old one incomparable: bump it with any kernel's change.
WORKLOAD = "calibration-1"



def _mmt4d_mlir(name: str, element: str, k0: int, accumulator: str, zero: str) -> str:
    """An in-cache 256^3 `linalg.mmt4d` of `element` operands (16x16xk0 inner tiles)."""
    operand = f"tensor<16x{256 // k0}x16x{k0}x{element}>"
    result = f"tensor<16x16x16x16x{accumulator}>"
    return (f"func.func @{name}(%a: {operand}, %b: {operand}) -> {result} {{\n"
            f"  %zero = arith.constant {zero} : {accumulator}\n"
            f"  %empty = tensor.empty() : {result}\n"
            f"  %init = linalg.fill ins(%zero : {accumulator}) outs(%empty : {result}) -> {result}\n"
            f"  %c = linalg.mmt4d ins(%a, %b : {operand}, {operand})\n"
            f"                    outs(%init : {result}) -> {result}\n"
            f"  return %c : {result}\n}}\n")


_COMPUTE_MLIR = _mmt4d_mlir("compute", "f32", 1, "f32", "0.0")
_MEMORY_MLIR = """\
func.func @memory(%x: tensor<6144x4096xf32>) -> tensor<6144xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<6144xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<6144xf32>) -> tensor<6144xf32>
  %sum = linalg.reduce ins(%x : tensor<6144x4096xf32>) outs(%init : tensor<6144xf32>) dimensions = [1]
    (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
  return %sum : tensor<6144xf32>
}
"""
BLAS_SIZE = 1024
# The compute kernel's and numpy's GEMM's inputs: their ceiling holds for contractions of these
# only (on avx512_bf16 a bf16 dot product does twice the FLOPs of an f32 FMA a cycle, avx512_vnni's
# int8 one four times: an int8 matmul ran at 354 GOP/s here under a 300 GFLOP/s f32 ceiling)
CEILING_ELEMENT = "f32"


@dataclass(frozen=True)
class Kernel:
    name: str
    unit: str  # of its rate
    work: float  # flops or bytes per call / 1e6, so that work / ms is GFLOP/s or GB/s
    about: str
    mlir: str = ""
    inputs: tuple[str, ...] = ()  # splat --input values: the values do not change the time
    flags: tuple[str, ...] = ("--iree-llvmcpu-enable-ukernels=none",)  # iree-compile's


KERNELS = (
    Kernel("compute", "GFLOP/s", 2 * 256**3 / 1e6, "IREE linalg.mmt4d 256^3 f32, in cache",
           _COMPUTE_MLIR, ("16x256x16x1xf32=1", "16x256x16x1xf32=1")),
    Kernel("memory", "GB/s", 6144 * 4096 * 4 / 1e6, "IREE f32 row sum over 96 MiB (read)",
           _MEMORY_MLIR, ("6144x4096xf32=1",)),
    Kernel("blas", "GFLOP/s", 2 * BLAS_SIZE**3 / 1e6, f"numpy {BLAS_SIZE}^3 f32 GEMM"),
)
BY_NAME = {k.name: k for k in KERNELS}
# The ceilings of contractions of other inputs, each IREE's in-cache mmt4d of that element,
# measured where a model has such contractions: not every session. On its microkernel: the
# generated bf16 mmt4d ran 160 GFLOP/s against the microkernel's 698 (Zen 5, avx512_bf16;
# the f32 kernel 350), and a bf16 MLP's data-tiled matmuls ran at 730-743 GFLOP/s. Their
# inner tiles are those IREE's data tiling gives a model's bf16 and int8 matmuls there.
ELEMENT_KERNELS = {
    element: Kernel(f"compute_{element}", "GFLOP/s", 2 * 256**3 / 1e6,
                    f"IREE linalg.mmt4d 256^3 {element} -> {accumulator}, microkernel, in cache",
                    _mmt4d_mlir(f"compute_{element}", element, 2, accumulator, zero),
                    (f"16x128x16x2x{element}=1",) * 2, ("--iree-llvmcpu-enable-ukernels=all",))
    for element, accumulator, zero in (("bf16", "f32", "0.0"), ("i8", "i32", "0"))}
SENTINEL = "compute"  # the kernel also timed in every operation's rounds
# How each kernel's change is said: "the machine ran compute-bound kernels 15% slower"
SAID = {"compute": "compute-bound kernels", "memory": "memory-bound kernels",
        "blas": "numpy's BLAS"}


@dataclass(frozen=True)
class Reading:
    """A kernel's rate (its unit per second) with the 95% interval of its median."""

    rate: float
    low: float
    high: float

    @classmethod
    def of(cls, kernel: Kernel, ms: stats.Estimate) -> "Reading":
        return cls(kernel.work / ms.median, kernel.work / ms.high, kernel.work / ms.low)


@dataclass
class MachineState:
    at: str  # when it was taken, ISO 8601 UTC
    readings: dict[str, Reading] = field(default_factory=dict)
    blas: str = ""  # numpy's BLAS (library, kernel, threads), when it was timed
    workload: str = WORKLOAD
    reason: str = ""  # why it was not measured

    def to_json(self) -> str:
        """One line (a CSV cell)."""
        data = {"at": self.at, "workload": self.workload,
                **{k: [round(v, 4) for v in (r.rate, r.low, r.high)] for k, r in self.readings.items()}}
        if self.blas:
            data["blas_library"] = self.blas
        if self.reason:
            data["reason"] = self.reason
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text) -> "MachineState | None":
        """The state in a CSV cell or JSON field; None for an empty or unreadable one."""
        if isinstance(text, str):
            try:
                text = json.loads(text)
            except ValueError:
                return None
        if not isinstance(text, dict) or "at" not in text:
            return None
        readings = {k: Reading(*map(float, text[k])) for k in BY_NAME
                    if isinstance(text.get(k), list) and len(text[k]) == 3}
        return cls(text["at"], readings, text.get("blas_library", ""),
                   text.get("workload", ""), text.get("reason", ""))

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) per kernel: `compute`, `99.6 GFLOP/s [99.1, 100.2] (IREE ...)`."""
        if not self.readings:
            return [("not measured", self.reason or "no kernel ran")]
        out = []
        for name, r in self.readings.items():
            kernel = BY_NAME[name]
            about = kernel.about + (f": {self.blas}" if name == "blas" and self.blas else "")
            out.append((name, f"{_rate(r.rate)} {kernel.unit} [{_rate(r.low)}, {_rate(r.high)}] "
                              f"({about})"))
        return out

    def summary(self) -> str:
        """One line: `compute 99.6 GFLOP/s [..], memory 18.6 GB/s [..] at 11:30:02 UTC`."""
        if not self.readings:
            return f"not measured ({self.reason})"
        parts = [f"{name} {_rate(r.rate)} {BY_NAME[name].unit} [{_rate(r.low)}, {_rate(r.high)}]"
                 for name, r in self.readings.items()]
        return ", ".join(parts) + f" at {self.at}"

    def peak(self) -> dict | None:
        """The roofline's ceilings from this state: the faster of IREE's compute kernel and
        numpy's GEMM, and the read bandwidth; None without both."""
        compute = [(r.rate, n) for n, r in self.readings.items() if BY_NAME[n].unit == "GFLOP/s"]
        if not compute or "memory" not in self.readings:
            return None
        gflops, source = max(compute)
        name = BY_NAME[source].about + (f" ({self.blas})" if source == "blas" and self.blas else "")
        return {"gflops": gflops, "gbps": self.readings["memory"].rate, "element": CEILING_ELEMENT,
                "source": f"{name}; {BY_NAME['memory'].about}; measured {self.at}"}


def _rate(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def span(states: list[MachineState]) -> MachineState | None:
    """Several states of one run (its start and end, appended sessions) as one: each kernel's
    median rate, and an interval from the lowest low to the highest high."""
    states = [s for s in states if s is not None and s.readings and s.workload == WORKLOAD]
    if not states:
        return None
    readings = {}
    for name in BY_NAME:
        seen = [s.readings[name] for s in states if name in s.readings]
        if seen:
            readings[name] = Reading(float(np.median([r.rate for r in seen])),
                                     min(r.low for r in seen), max(r.high for r in seen))
    ats = sorted(s.at for s in states)
    return MachineState(ats[0] if len(ats) == 1 else f"{ats[0]} to {ats[-1]}", readings,
                        next((s.blas for s in states if s.blas), ""))


@dataclass(frozen=True)
class Shift:
    """How a kernel ran in a later state against an earlier one: later rate / earlier rate with
    an interval from both intervals (above 1: the machine ran it faster later)."""

    kernel: str
    ratio: stats.Estimate
    significant: bool

    @property
    def said(self) -> str:
        r = self.ratio
        if r.median >= 1:
            return (f"{SAID[self.kernel]} {r.median - 1:.0%} faster "
                    f"[{r.low - 1:+.0%}, {r.high - 1:+.0%}]")
        return f"{SAID[self.kernel]} {1 - r.median:.0%} slower [{r.low - 1:+.0%}, {r.high - 1:+.0%}]"


def shifts(earlier: MachineState, later: MachineState,
           min_effect: float = stats.MIN_EFFECT) -> list[Shift]:
    """Each kernel both states measured, compared; a shift is significant as a speedup is
    (its whole interval beyond min_effect)."""
    out = []
    for name, before in earlier.readings.items():
        after = later.readings.get(name)
        if after is None or not before.low > 0 or not after.low > 0:
            continue
        ratio = stats.Estimate(after.rate / before.rate, after.low / before.high,
                               after.high / before.low, math.nan, 1)
        out.append(Shift(name, ratio, stats.significant(ratio, min_effect)))
    return out


def band(found: list[Shift]) -> tuple[float, float]:
    """The range of speedups the machine alone could explain: from the slowest kernel's low end
    to the fastest one's high end (always including 1)."""
    return (min([1.0, *(s.ratio.low for s in found)]),
            max([1.0, *(s.ratio.high for s in found)]))


def comparable(earlier: MachineState | None, later: MachineState | None) -> str:
    """'' when the two states can be compared, else why not."""
    for state in (earlier, later):
        if state is None:
            return "no calibration"
        if not state.readings:
            return f"calibration not measured ({state.reason})"
        if state.workload != WORKLOAD:
            return f"a calibration of another workload ({state.workload or 'unnamed'})"
    return ""


def within_session(start: MachineState, end: MachineState,
                   min_effect: float = stats.MIN_EFFECT) -> str:
    """The session's end against its start, in one line."""
    why = comparable(start, end)
    if why:
        return f"start and end not compared: {why}"
    found = [s for s in shifts(start, end, min_effect) if s.significant]
    if not found:
        return "the machine's state at the end agrees with the start"
    return ("the machine CHANGED during this session: at the end it ran "
            + "; ".join(s.said for s in found) + " (timings of this session mix two states)")


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    rounds: int  # at least this many interleaved rounds
    seconds_per_sample: float
    time_budget: float


# full: eight rounds gave the compute kernel a +-0.4% interval here (six: one slow round
# widened it to 20%); quick: an interval at all, for tests
LEVELS = {"full": Settings(8, 0.05, 4.0), "quick": Settings(3, 0.01, 0.5)}
OFF = "off"


class Calibration:
    """The workload built for `target` (once per IREE version and target, in the cache folder)
    and timed by `timers` where the session's dispatches run; numpy's GEMM only when that is
    this machine."""

    def __init__(self, tools: IreeTools, target: Target, device: str, timers, local: bool,
                 level: str = "full", timeout: float = 120.0):
        self.tools, self.target, self.device, self.timers = tools, target, device, timers
        self.local, self.level, self.timeout = local, level, timeout
        self.built: dict[str, Path] | None = None
        self.elements: dict[str, Reading | None] = {}  # element_ceilings' readings
        self.reason = ""

    def folder(self) -> Path:
        key = json.dumps([WORKLOAD, self.tools.version(), self.target.compiler_flags()])
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return compile_cache.default_dir().parent / "calibration" / digest

    def build(self) -> dict[str, Path]:
        """The kernels' vmfbs (compiled the first time); a kernel that fails is left out and
        its reason kept."""
        if self.built is not None:
            return self.built
        self.built = {}
        for kernel in KERNELS:
            vmfb = self.build_kernel(kernel) if kernel.mlir else None
            if vmfb is not None:
                self.built[kernel.name] = vmfb
        return self.built

    def build_kernel(self, kernel: Kernel) -> Path | None:
        """`kernel`'s vmfb, compiled the first time; None where it fails (`reason` says why)."""
        folder = self.folder()
        folder.mkdir(parents=True, exist_ok=True)
        vmfb = folder / f"{kernel.name}.vmfb"
        if not vmfb.is_file():
            source = folder / f"{kernel.name}.mlir"
            write_atomically(source, kernel.mlir)
            partial = folder / f".{kernel.name}.{os.getpid()}.vmfb"
            command = compile_command(self.tools, self.target, source, partial, list(kernel.flags))
            result = run(command, self.timeout)
            write_atomically(folder / f"{kernel.name}.compile.log", result.stderr)
            if not result.ok:
                partial.unlink(missing_ok=True)
                self.reason = result.failure("iree-compile", self.timeout)
                return None
            os.replace(partial, vmfb)  # two sessions building at once: either copy wins
        return vmfb

    def element_ceilings(self, elements) -> dict[str, tuple[Kernel, Reading]]:
        """element -> (its kernel, its rate), for those of `elements` that ELEMENT_KERNELS
        has and that compile and time here; each measured once a session (None: not)."""
        if self.level == OFF or self.target.device is not Device.LLVMCPU:
            return {}
        for element in sorted(set(elements) & set(ELEMENT_KERNELS) - set(self.elements)):
            kernel, self.elements[element] = ELEMENT_KERNELS[element], None
            vmfb = self.build_kernel(kernel)
            if vmfb is None:
                continue
            outcome = self.timed([Candidate(kernel.name, self.timer(kernel, vmfb).sample)]
                                 ).outcomes[kernel.name]
            if outcome.runtime.has_interval:
                self.elements[element] = Reading.of(kernel, outcome.runtime)
        return {e: (ELEMENT_KERNELS[e], r) for e in elements
                if (r := self.elements.get(e)) is not None}

    def measure(self) -> MachineState:
        at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if self.level == OFF:
            return MachineState(at, reason="--calibration=off")
        if self.target.device is not Device.LLVMCPU:
            return MachineState(at, reason=f"the calibration times CPUs; the target is "
                                           f"{self.target.device.value}")
        candidates = [Candidate(name, self.timer(BY_NAME[name], vmfb).sample)
                      for name, vmfb in self.build().items()]
        blas = ""
        if self.local:
            a = np.ones((BLAS_SIZE, BLAS_SIZE), dtype=np.float32)
            candidates.append(Candidate("blas", lambda seconds: timed_calls(lambda: a @ a, seconds)))
            blas = blas_summary()[0]
        if not candidates:
            return MachineState(at, reason=self.reason)
        measured = self.timed(candidates)
        readings, failures = {}, [self.reason] if self.reason else []
        for name, outcome in measured.outcomes.items():
            if outcome.runtime.has_interval:
                readings[name] = Reading.of(BY_NAME[name], outcome.runtime)
            elif outcome.reason:
                failures.append(f"{name}: {outcome.reason}")
        return MachineState(at, readings, blas if "blas" in readings else "",
                            reason="; ".join(failures))

    def sentinel(self) -> Candidate | None:
        """The compute kernel as a sentinel for an operation's rounds (protocol.measure), so
        that a machine that changes between the session's start and end calibrations is seen
        where it changed; None when it cannot be timed."""
        if self.level == OFF or self.target.device is not Device.LLVMCPU:
            return None
        vmfb = self.build().get(SENTINEL)
        if vmfb is None:
            return None
        return Candidate(f"machine sentinel ({SENTINEL})", self.timer(BY_NAME[SENTINEL], vmfb).sample)

    def timer(self, kernel: Kernel, vmfb: Path):
        """`kernel` timed by a dispatch source: its own time, whatever times the session's
        calls."""
        return self.timers.benchmark(vmfb, kernel.name, self.device, list(kernel.inputs),
                                     timeout=self.timeout, per_dispatch=True)

    def timed(self, candidates: list[Candidate]):
        """The kernels' `candidates` measured interleaved, at this calibration's level."""
        settings = LEVELS[self.level]
        return measure(candidates, None, Protocol(
            precision=0.01, time_budget=settings.time_budget,
            seconds_per_sample=settings.seconds_per_sample, min_rounds=settings.rounds))


def during(outcome) -> MachineState | None:
    """The machine's state during some rounds, from their sentinel's samples (an Outcome)."""
    if outcome is None or not outcome.runtime.has_interval:
        return None
    return MachineState(datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        {SENTINEL: Reading.of(BY_NAME[SENTINEL], outcome.runtime)})


def disturbed(start: MachineState | None, meanwhile: MachineState | None,
              end: MachineState | None = None, min_effect: float = stats.MIN_EFFECT) -> str:
    """'' when the machine ran the sentinel during the rounds as at the session's start (or,
    when known, as at its end: a start that was itself off does not count), else how it
    differed from the start."""
    if start is None or meanwhile is None or comparable(start, meanwhile):
        return ""
    if end is not None and not comparable(end, meanwhile) and not any(
            s.significant for s in shifts(end, meanwhile, min_effect)):
        return ""
    moved = [s for s in shifts(start, meanwhile, min_effect) if s.significant]
    return ("the machine changed during these rounds: it ran " + "; ".join(s.said for s in moved)
            + " than at the session's start") if moved else ""


def block(label: str, state: MachineState, verdict: str = "") -> str:
    """The report block of one calibration, in the profiler's block style."""
    lines = ["-" * 64, f"Machine state : {label}, {state.at}"]
    lines += [f"{name:<14}: {text}" for name, text in state.lines()]
    if state.readings and state.reason:
        lines.append(f"{'not measured':<14}: {state.reason}")
    if verdict:
        lines.append(f"{'verdict':<14}: {verdict}")
    return "\n".join(lines)


def state_dict(start: MachineState, end: MachineState | None) -> dict:
    """A session's states for a JSON output: {start, end, verdict}."""
    return {"start": json.loads(start.to_json()),
            "end": json.loads(end.to_json()) if end is not None else None,
            "verdict": within_session(start, end) if end is not None else "no end calibration"}
