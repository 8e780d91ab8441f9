"""PNG plots (matplotlib, no display): GFLOP/s per configuration of each operation, a roofline,
compare.py's speedups; `subplots` and `save` for the tuner's plots (tuning/plots.py)."""
from __future__ import annotations

from pathlib import Path

from iree_dispatch_profiler.sweep.performance_report import (
    PROVIDER_IREE, PROVIDER_NUMPY, PerformanceResult)


def _pyplot():
    """matplotlib, loaded at the first plot: half a second that a script's start need not pay."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt
    return plt


def subplots(width: float, height: float):
    """A new figure and its one axis."""
    return _pyplot().subplots(figsize=(width, height))


def save(figure, path: Path) -> None:
    """Lay out, write and close a figure (the tuner's plots too)."""
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    _pyplot().close(figure)


def configuration_plot(operation: str, results: list[PerformanceResult], path: Path) -> None:
    """Bars of GFLOP/s per IREE configuration; default in orange, numpy as a dashed line."""
    iree = [r for r in results if r.provider != PROVIDER_NUMPY and r.gflops > 0]
    iree.sort(key=lambda r: r.gflops)
    numpy = [r for r in results if r.provider == PROVIDER_NUMPY and r.gflops > 0]
    figure, axis = subplots(9, 0.35 * len(iree) + 1.8)
    colours = ["tab:orange" if r.configuration == "default"
               else "tab:gray" if r.config_applied == "no" else "tab:blue" for r in iree]
    # GFLOP/s interval from the runtime interval (a slower bound is a lower throughput)
    errors = [[max(r.gflops - r.flops / (r.runtime.high * 1e6), 0) if r.runtime.high > 0 else 0
               for r in iree],
              [max(r.flops / (r.runtime.low * 1e6) - r.gflops, 0) if r.runtime.low > 0 else 0
               for r in iree]]
    axis.barh([r.configuration for r in iree], [r.gflops for r in iree], color=colours,
              xerr=errors, capsize=2, error_kw={"elinewidth": 0.8})
    for r in numpy:
        axis.axvline(r.gflops, color="tab:green", linestyle="--", label=f"numpy {r.gflops:.1f}")
    if numpy:
        axis.legend(loc="lower right")
    axis.set_xlabel("GFLOP/s with 95% interval (orange: IREE default; gray: config not applied)")
    axis.set_title(operation, fontsize=9)
    save(figure, path)


def roofline_plot(results: list[PerformanceResult], peak: dict | None, path: Path) -> None:
    """Every dispatch by intensity and GFLOP/s, under this session's measured ceilings (none
    drawn when the session was not calibrated)."""
    timed = [r for r in results if r.gflops > 0 and r.bytes > 0]
    figure, axis = subplots(8, 5.5)
    intensities = [r.flops / r.bytes for r in timed] or [1.0]
    low, high = min(intensities) / 2, max(intensities) * 2
    if peak is not None:
        ridge = peak["gflops"] / peak["gbps"]
        xs = sorted({low, high, min(max(ridge, low), high)})
        axis.plot(xs, [min(peak["gflops"], x * peak["gbps"]) for x in xs], color="black",
                  label=f"this session's ceilings: {peak['gflops']:.0f} GFLOP/s "
                        f"({peak['element']} inputs), "
                        f"{peak['gbps']:.1f} GB/s read (calibration)")
    else:
        axis.set_title("no ceilings: the session was not calibrated (--calibration off)",
                       fontsize=9)
    for provider, marker in ((PROVIDER_IREE, "o"), (PROVIDER_NUMPY, "s")):
        points = [r for r in timed if r.provider == provider]
        if points:
            axis.scatter([r.flops / r.bytes for r in points], [r.gflops for r in points],
                         marker=marker, alpha=0.6, label=provider)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("arithmetic intensity (FLOP/byte)")
    axis.set_ylabel("GFLOP/s")
    axis.set_title("roofline of all dispatches")
    axis.legend(fontsize=8)
    axis.grid(True, which="both", alpha=0.3)
    save(figure, path)


def speedup_plot(comparisons: list[dict], path: Path, title: str) -> None:
    """Bars of old/new speedup per dispatch with their intervals; regressions in red."""
    rows = sorted(comparisons, key=lambda c: c["speedup"])
    figure, axis = subplots(9, 0.3 * len(rows) + 1.8)
    colours = ["tab:red" if c["flag"] == "REGRESSION" else "tab:green" if c["flag"] else "tab:gray"
               for c in rows]
    low = [max(c["speedup"] - c["ci_low"], 0) if c["ci_low"] == c["ci_low"] else 0 for c in rows]
    high = [max(c["ci_high"] - c["speedup"], 0) if c["ci_high"] == c["ci_high"] else 0 for c in rows]
    axis.barh([c["dispatch"] for c in rows], [c["speedup"] for c in rows], color=colours,
              xerr=[low, high], capsize=2, error_kw={"elinewidth": 0.8})
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_xlabel("speedup old/new with interval (red: regression, green: improvement)")
    axis.set_title(title, fontsize=9)
    axis.tick_params(axis="y", labelsize=6)
    save(figure, path)


def write_plots(results: list[PerformanceResult], folder: Path, peak: dict | None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    by_operation: dict[str, list[PerformanceResult]] = {}
    for result in results:
        by_operation.setdefault(result.operation, []).append(result)
    for operation, rows in by_operation.items():
        if any(r.gflops > 0 for r in rows):  # NaN (untimed) compares False
            path = folder / f"{operation}.png"
            configuration_plot(operation, rows, path)
            written.append(path)
    path = folder / "roofline.png"
    roofline_plot(results, peak, path)
    written.append(path)
    return written
