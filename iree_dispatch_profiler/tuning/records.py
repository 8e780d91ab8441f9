"""What a tuning run leaves as it goes: the trial CSV (a row per trial, on disk as soon as the
trial ends, read back to resume) and the run log with its phase timings."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from pathlib import Path

import pandas as pd

from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.tuning.paths import TuningPaths
from iree_dispatch_profiler.tuning.space import TILE_KNOBS, Point

COLUMNS = ["op", "function", "trial", "candidate", *TILE_KNOBS,
           "flags", "status", "reason", "config_applied", "verified", "max_abs_err",
           "median_ms", "ci_low_ms", "ci_high_ms", "speedup", "speedup_ci_low", "speedup_ci_high",
           "default_ms", "compile_s", "compiled_on", "timed_on", "timing_source", "strategy"]
# status of a trial; only "ok" trials have a speedup
OK, COMPILE_FAILED, NOT_APPLIED, RUN_FAILED, WRONG, TIMING_FAILED = (
    "ok", "compile-failed", "config-not-applied", "run-failed", "wrong-result", "timing-failed")


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


def check_same_run(path: Path, begun: dict[str, str], output: Path) -> None:
    """A rerun resumes the ranking, records and trials beside `output`: they are the same
    run's only if it was begun with the same settings (`begun`; start_log records them in
    `path`); a UserError naming those that differ otherwise."""
    try:
        earlier = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read {path} to resume: {error}") from None
    if earlier is None:
        return
    differ = [name for name in begun if earlier.get(name) != begun[name]]
    if differ:
        raise UserError(f"{output} is of a run begun with other {', '.join(differ)}: give "
                        f"another --output, or remove that run's files ({output.with_suffix('')}*) to "
                        "begin anew")


class TrialWriter:
    """Rows reach the CSV as each trial finishes, so an interrupted run loses nothing."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, row: dict) -> None:
        # the header with the first row: a run that ends before any trial leaves no file
        header = not self.path.is_file() or self.path.stat().st_size == 0
        with open(self.path, "a", newline="", encoding="utf-8") as stream:
            if header:
                csv.writer(stream).writerow(COLUMNS)
            csv.writer(stream).writerow([_cell(row.get(c, "")) for c in COLUMNS])
            stream.flush()
            os.fsync(stream.fileno())


def _cell(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)


def trial_row(op, point: Point, trial: int, strategy: str) -> dict:
    """A trial's row before it ran: what was tried."""
    return {"op": op.index, "function": op.function, "trial": trial, "candidate": point.name,
            "flags": point.flags, "strategy": strategy, "config_applied": "n.a.",
            "verified": "no", **point.knobs()}


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


def start_log(paths: TuningPaths, begun: dict[str, str] | None) -> Log:
    """The run's log, begun: from here on the run leaves files a rerun reads back, so what it
    was begun with is recorded (once: a resumed run's was, and check_same_run agreed)."""
    if begun is not None and not paths.run.is_file():
        write_atomically(paths.run, json.dumps(begun, indent=1) + "\n")
    return Log(paths.log)


def write_table(path: Path, columns: list[str], rows: list[dict]) -> None:
    """A record written whole (atomically: a kill leaves the old one or the new one)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, text.getvalue())


def read_table(path: Path, columns: list[str], what: str) -> list[dict]:
    """The rows of a record written by write_table; `what` names it in the error."""
    with open(path, newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    if not rows or list(rows[0]) != columns:
        raise UserError(f"{path} is not {what} of autotune.py --model; remove it")
    return rows


def speedup_text(row: dict, digits: int = 2) -> str:
    """`1.23x [1.20, 1.26]`: a row's speedup and its bounds (numbers, or text read back)."""
    return (f"{float(row['speedup']):.{digits}f}x [{float(row['speedup_ci_low']):.{digits}f}, "
            f"{float(row['speedup_ci_high']):.{digits}f}]")


def best_so_far(rows: list[dict]) -> list[float]:
    """The best verified speedup after each trial, in trial order (NaN before the first): the
    progress curve of the PNG and of the HTML report."""
    best, curve = 0.0, []
    for row in sorted(rows, key=lambda row: int(row["trial"])):
        if row["status"] == OK:
            best = max(best, float(row["speedup"]))
        curve.append(best if best > 0 else math.nan)
    return curve
