"""Results into the printed block per dispatch, CSV rows appended as they come, and summaries."""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.core.stats import CONFIDENCE, MIN_EFFECT, NO_ESTIMATE, Estimate
from iree_dispatch_profiler.measure.calibration import MachineState
from iree_dispatch_profiler.measure.protocol import Outcome

PROVIDER_IREE = "IREE Codegen"
PROVIDER_NUMPY = "numpy"
SEPARATOR = "-" * 64
# The session's calibration (measure/calibration.py) as JSON, at its start and at its end: the
# end is filled in when the session ends (an interrupted one has none); and the sentinel's
# reading during the operation's own rounds.
MACHINE_STATE, MACHINE_STATE_END = "machine state", "machine state at end"
MACHINE_STATE_DURING = "machine state during rounds"

COLUMNS = [
    "Dispatch", "Provider", "Operation", "Configuration", "op_kind", "m", "n", "k", "batch_count",
    "lhs", "rhs", "result", "split_k_mode", "split_k_slices", "bytes", "flops", "Verification",
    "Config applied", "Runtime(ms)", "ci_low", "ci_high", "speedup", "speedup_ci_low",
    "speedup_ci_high", "speedup_across_sessions_low", "speedup_across_sessions_high",
    "precision_reached", "drift", "GFLOPs", "GB/s", "cv", "repetitions",
    "timing source", "max_abs_error", "Reason", "compile log", "compile time(s)", "compiled on", "compile cache",
    "vmfb bytes", "target", "vector bytes", "cpu features", "runtime device", "cpu model",
    "threads", "timed on", "compile flags", "IREE version", "timestamp",
    MACHINE_STATE, MACHINE_STATE_DURING, MACHINE_STATE_END,
]


@dataclass
class PerformanceResult:
    dispatch: str
    operation: str
    configuration: str
    arguments: str
    operation_fields: dict
    flops: int
    bytes: int
    provider: str = PROVIDER_IREE
    verification: str = "Not verified"  # SUCCESS / FAILED / ERROR / Not verified
    config_applied: str = "n.a."
    runtime: Estimate = NO_ESTIMATE  # ms per computation
    speedup: Estimate | None = None  # over IREE's default, from the same rounds
    precision_reached: str = ""  # yes / no, empty when not timed
    drift: str = ""  # no / re-measured / yes
    # why the rounds took longer than the budget, samples taken again after a crash
    measurement_note: str = ""
    samples: list[float] = field(default_factory=list)  # ms per round, paired across the operation
    timing_source: str = ""  # what timed the samples (iree.timers.TIMING_SOURCES, or numpy's)
    max_abs_error: float = math.nan
    reason: str = ""
    target_summary: str = ""  # `llvm-cpu:znver3, x86_64, 32-byte vectors (avx avx2 f16c fma)`
    environment: dict = field(default_factory=dict)  # target, compile time, versions, tags...

    @property
    def runtime_ms(self) -> float:
        return self.runtime.median

    def set_timing(self, outcome: Outcome, drift: str, budget_note: str = "",
                   source: str = "") -> None:
        self.timing_source = source
        if outcome.reason:
            self.reason = outcome.reason
            return
        self.runtime, self.speedup, self.drift = outcome.runtime, outcome.speedup, drift
        retried = (f"{len(outcome.retried)} sample(s) taken again after: {outcome.retried[0]}"
                   if outcome.retried else "")
        self.measurement_note = "; ".join(n for n in (budget_note, retried) if n)
        self.samples = outcome.samples
        self.precision_reached = "yes" if outcome.precision_reached else "no"

    @property
    def gflops(self) -> float:
        return self.flops / (self.runtime_ms * 1e6) if self.runtime_ms > 0 else math.nan

    @property
    def gbps(self) -> float:
        return self.bytes / (self.runtime_ms * 1e6) if self.runtime_ms > 0 else math.nan

    @property
    def failed(self) -> bool:
        return self.verification in ("FAILED", "ERROR") or bool(self.reason)

    def row(self) -> dict:
        speedup = self.speedup or NO_ESTIMATE
        across = stats.across_sessions(speedup)
        row = {
            "Dispatch": self.dispatch, "Provider": self.provider, "Operation": self.operation,
            "Configuration": self.configuration, **self.operation_fields, "bytes": self.bytes,
            "flops": self.flops, "Verification": self.verification,
            "Config applied": self.config_applied, "Runtime(ms)": _round(self.runtime.median, 6),
            "ci_low": _round(self.runtime.low, 6), "ci_high": _round(self.runtime.high, 6),
            "speedup": _round(speedup.median, 4), "speedup_ci_low": _round(speedup.low, 4),
            "speedup_ci_high": _round(speedup.high, 4),
            "speedup_across_sessions_low": _round(across.low, 4),
            "speedup_across_sessions_high": _round(across.high, 4),
            "precision_reached": self.precision_reached, "drift": self.drift,
            "GFLOPs": _round(self.gflops, 3), "GB/s": _round(self.gbps, 3),
            "cv": _round(self.runtime.cv, 4) if self.runtime.n > 1 else math.nan,
            "repetitions": self.runtime.n, "timing source": self.timing_source,
            "max_abs_error": self.max_abs_error,
            "Reason": self.reason,
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        row.update(self.environment)
        return row

    def block(self) -> str:
        lines = [
            SEPARATOR,
            f"Dispatch      : {self.dispatch}",
            f"Provider      : {self.provider}",
            f"OpKind        : {self.operation_fields.get('op_kind', '')}",
            f"Operation     : {self.operation}",
            f"Configuration : {self.configuration}",
            f"Target        : {self.target_summary or self.environment.get('target', '')}",
            "Arguments     : " + self.arguments.replace("\n", "\n" + " " * 16),
            f"Verification  : {self.verification}",
            f"Config applied: {self.config_applied}" + (
                "  (IREE ignored the requested configuration: this times its own)"
                if self.config_applied == "no" else ""),
            f"Runtime(ms)   : {_format(self.runtime.median, '.3f')}" + (
                f"  {self.runtime.interval()} (median of {self.runtime.n} rounds, "
                f"{CONFIDENCE:.0%} interval; cv {self.runtime.cv:.1%})"
                if self.runtime.has_interval else
                f"  {self.runtime.interval()}: not ranked" if self.runtime.n else ""),
            f"GFLOPs        : {_format(self.gflops, '.2f')}",
        ]
        if self.timing_source:
            lines.append(f"Timing source : {self.timing_source}")
        if self.speedup is not None:
            lines.append(f"Speedup       : {self.speedup.median:.3f}x {self.speedup.interval()} "
                         "over default, same rounds; "
                         f"{stats.across_sessions(self.speedup).interval()} across sessions")
        note = f"; {self.measurement_note}" if self.measurement_note else ""
        if self.precision_reached == "no" or self.drift not in ("", "no") or note:
            lines.append(f"Measurement   : precision reached {self.precision_reached}, "
                         f"drift {self.drift}{note}")
        if self.reason:
            lines.append(f"Reason        : {self.reason}")
        return "\n".join(lines)


def _round(value: float, digits: int) -> float:
    return round(value, digits) if not math.isnan(value) else value


def _format(value: float, spec: str) -> str:
    return "N/A" if math.isnan(value) else format(value, spec)


class CsvReport:
    """One row per dispatch, appended (and flushed) as each finishes, so an interrupted run
    keeps everything it measured and `--resume` can pick up after the last row."""

    def __init__(self, path: Path | None, append: bool, tags: dict[str, str]):
        self.path = path
        self.tags = tags
        self.columns = COLUMNS + [k for k in tags if k not in COLUMNS]
        if path is None:
            return
        if path.is_dir():
            raise UserError(f"--output={path} is a folder")
        if append and path.is_file() and path.stat().st_size:
            with open(path, newline="") as handle:
                header = next(csv.reader(handle), [])
            if header != self.columns:
                raise UserError(f"--output={path} has other columns than this run writes "
                                "(same --tags needed to append)")
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "w", newline="") as handle:
                    csv.writer(handle).writerow(self.columns)
            except OSError as error:
                raise UserError(f"cannot write --output={path}: {error.strerror}") from None

    def done_dispatches(self) -> set[str]:
        """Dispatches that already have a row (for --resume)."""
        if self.path is None or not self.path.is_file() or not self.path.stat().st_size:
            return set()
        return set(pd.read_csv(self.path, usecols=["Dispatch"])["Dispatch"].astype(str))

    def append(self, result: PerformanceResult) -> None:
        if self.path is None:
            return
        frame = pd.DataFrame([{**result.row(), **self.tags}], columns=self.columns)
        frame.to_csv(self.path, mode="a", header=False, index=False)

    def end_session(self, start: str, end: str) -> None:
        """The end calibration into this session's rows (those with its start state); the file
        is replaced whole, so a kill leaves it as it was."""
        if self.path is None or not self.path.is_file():
            return
        with open(self.path, newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows or MACHINE_STATE_END not in rows[0]:
            return
        at, end_at = rows[0].index(MACHINE_STATE), rows[0].index(MACHINE_STATE_END)
        for row in rows[1:]:
            if len(row) == len(rows[0]) and row[at] == start:
                row[end_at] = end
        text = io.StringIO()
        csv.writer(text).writerows(rows)
        write_atomically(self.path, text.getvalue())


def sessions(data: pd.DataFrame) -> list[tuple[MachineState, MachineState | None]]:
    """The (start, end) calibrations of each session whose rows a profiler CSV holds, in order."""
    if MACHINE_STATE not in data.columns:
        return []
    pairs = data[[MACHINE_STATE, MACHINE_STATE_END]] if MACHINE_STATE_END in data.columns \
        else data[[MACHINE_STATE]].assign(**{MACHINE_STATE_END: None})
    found = []
    for start, end in pairs.drop_duplicates(MACHINE_STATE).itertuples(index=False):
        state = MachineState.from_json(start)
        if state is not None:
            found.append((state, MachineState.from_json(end)))
    return found


def summary(results: list[PerformanceResult], min_effect: float = MIN_EFFECT) -> str:
    """Per operation: the fastest verified IREE configuration, named as the best only when it is
    significantly faster than the runner-up, its speedup over IREE's default, and numpy.

    Ratios come from samples of the same rounds. A configuration IREE did not apply is no
    candidate: its time is that of another config."""
    lines = []
    by_operation: dict[str, list[PerformanceResult]] = {}
    for result in results:
        by_operation.setdefault(result.operation, []).append(result)
    for operation, rows in by_operation.items():
        timed = [r for r in rows if r.runtime_ms > 0 and r.config_applied != "no"
                 and r.verification in ("SUCCESS", "Not verified")]
        # A runtime without an interval is never ranked or called a leader.
        unranked = [r.configuration for r in timed if not r.runtime.has_interval]
        timed = [r for r in timed if r.runtime.has_interval]
        iree = sorted((r for r in timed if r.provider == PROVIDER_IREE), key=lambda r: r.runtime_ms)
        numpy = next((r for r in timed if r.provider == PROVIDER_NUMPY), None)
        if not iree:
            line = f"{operation}: no IREE configuration timed"
        else:
            best = iree[0]
            line = (f"{operation}: fastest {best.configuration} {best.runtime_ms:.3f} ms "
                    f"{best.runtime.interval()}, {best.gflops:.1f} GFLOP/s")
            if best.speedup is not None:
                line += f", {best.speedup.median:.2f}x {best.speedup.interval('.2f')} vs default"
            tied = [r.configuration for r in iree[1:] if _paired(r, best)
                    and not stats.significant(stats.speedup(r.samples, best.samples), min_effect)]
            if len(iree) > 1 and tied:
                line += f"; tied with {', '.join(tied)} (no significant difference)"
            elif len(iree) > 1 and _paired(iree[1], best):
                ratio = stats.speedup(iree[1].samples, best.samples)
                line += (f"; best: faster than runner-up {iree[1].configuration} by "
                         f"{ratio.median:.2f}x {ratio.interval('.2f')}")
            if numpy and _paired(numpy, best):
                ratio = stats.speedup(numpy.samples, best.samples)
                line += f"; best IREE / numpy {ratio.median:.2f}x {ratio.interval('.2f')}"
        if numpy:
            line += f"; numpy {numpy.runtime_ms:.3f} ms, {numpy.gflops:.1f} GFLOP/s"
        if unranked:
            line += f"; not ranked (no interval: too few rounds): {', '.join(unranked)}"
        lines.append(line)
    return "\n".join(lines)


def _paired(a: PerformanceResult, b: PerformanceResult) -> bool:
    """Samples from the same rounds (a resumed run may have measured them apart)."""
    return len(a.samples) == len(b.samples) > 0
