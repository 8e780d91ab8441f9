"""The tuner's PNG plots: the best speedup against trials, and a model's time per dispatch
before and after (matplotlib, set up by sweep.plots; the HTML reports draw the same with
Bokeh, interactive, where a PNG is what a terminal, a log folder or a pull request shows)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from iree_dispatch_profiler.sweep.plots import save, subplots


def progress_plot(curves: list[tuple[str, list[float]]], path: Path) -> None:
    """Best verified speedup over IREE's default against trials, one line per op."""
    figure, axis = subplots(7, 4)
    for label, curve in curves:
        axis.step(range(1, len(curve) + 1), curve, where="post", label=label)
    axis.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="IREE default")
    axis.set_xlabel("trial")
    axis.set_ylabel("best speedup over IREE's default so far")
    axis.legend(fontsize=7)
    axis.grid(True, alpha=0.3)
    save(figure, path)


def model_plot(dispatches: list[str], before: dict[str, float], after: dict[str, float],
               path: Path) -> None:
    """Time per dispatch in one model call, IREE's default against the tuned model."""
    shown = dispatches[:20]
    figure, axis = subplots(8, 1.2 + 0.35 * len(shown))
    rows = np.arange(len(shown))
    axis.barh(rows - 0.2, [before.get(d, 0.0) for d in shown], height=0.4, label="IREE default")
    axis.barh(rows + 0.2, [after.get(d, 0.0) for d in shown], height=0.4, label="tuned (spec)")
    axis.set_yticks(rows, [d.split("_dispatch_", 1)[-1][:40] for d in shown], fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel("ms per model call")
    axis.legend(fontsize=7)
    axis.grid(True, axis="x", alpha=0.3)
    save(figure, path)
