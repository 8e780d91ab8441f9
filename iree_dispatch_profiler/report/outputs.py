"""Which report a result file is (a profiler CSV, a tuner's trial CSV, a model tuning summary,
compare.py's results), read with the files beside it that its report also shows; and the one
call every script makes to write its report."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.report import content, html
from iree_dispatch_profiler.report.content import Page
from iree_dispatch_profiler.sweep.performance_report import sessions
from iree_dispatch_profiler.tuning.paths import TuningPaths
from iree_dispatch_profiler.tuning.space import TILE_KNOBS

SWEEP_COLUMNS = {"Dispatch", "Provider", "Operation", "Runtime(ms)"}
TRIAL_COLUMNS = {"op", "trial", "candidate", "status"}


def _read(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def sweep_page(data: pd.DataFrame, command: str = "") -> Page:
    """The roofline's ceilings and the machine's state come from the calibrations of the
    sessions that timed the rows (the last one's), never from another day's."""
    return content.sweep(data, sessions(data), command)


def page_for(path: Path, command: str = "") -> Page:
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    if path.suffix == ".csv":
        try:
            data = pd.read_csv(path, dtype={"Reason": str, "reason": str})
        except (OSError, ValueError) as error:
            raise UserError(f"cannot read {path}: {error}") from None
        if SWEEP_COLUMNS <= set(data.columns):
            return sweep_page(data, command)
        if TRIAL_COLUMNS <= set(data.columns):
            paths = TuningPaths(path)
            if paths.model_summary.is_file():
                return page_for(paths.model_summary)
            facts = (json.loads(paths.answer.read_text()) if paths.answer.is_file()
                     else {"ops": []})
            return content.tuning(facts, data, list(TILE_KNOBS), _read(paths.tuning_spec),
                                  _read(paths.spec_flags) or _read(paths.best_flags))
    elif path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise UserError(f"cannot read {path}: {error}") from None
        if isinstance(data, dict) and data.get("kind") == "model":
            paths = TuningPaths.beside(path, "_model.json")
            return content.model(data, _read(paths.tuning_spec), _read(paths.best_flags))
        if isinstance(data, dict) and ("variants" in data or "comparisons" in data):
            return content.comparison(data)
    raise UserError(f"{path} is not a profiler CSV, an autotune.py trial CSV, a model summary "
                    "(X_model.json) or compare.py results (JSON)")


def write(path: Path, page: Page) -> int:
    """Write the report; its size in bytes."""
    text = page.html()
    try:
        html.write(path, text)
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror}") from None
    return len(text.encode())
