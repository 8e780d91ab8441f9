"""Interactive charts for the HTML reports (Bokeh models, rendered offline by report.html):
bars with interval whiskers, a roofline, a progress curve, knob scatters with the whole
configuration on hover, and before/after bars. Values arrive as plain lists."""
from __future__ import annotations

import math
from typing import Mapping, Sequence

LEADER, OTHER, FAILED = "#2a9d3f", "#4c72b0", "#c44e52"
WIDTH = 620


def _clean(values: Sequence[float]) -> list[float]:
    return [float(v) if v is not None and math.isfinite(float(v)) else math.nan for v in values]


def interval_bars(labels: Sequence[str], values: Sequence[float], lows: Sequence[float],
                  highs: Sequence[float], x_label: str, marked: int | None = None,
                  reference: float | None = None, hover: dict[str, Sequence] | None = None):
    """One horizontal bar per label with its interval as a whisker; `marked` (an index) drawn
    as the leader; a vertical line at `reference` (a speedup of 1)."""
    from bokeh.models import ColumnDataSource, HoverTool, Span, Whisker
    from bokeh.plotting import figure

    labels = [str(label) for label in labels]
    colours = [LEADER if i == marked else OTHER for i in range(len(labels))]
    data = {"label": labels, "value": _clean(values), "low": _clean(lows), "high": _clean(highs),
            "colour": colours, **{k: [str(v) for v in vs] for k, vs in (hover or {}).items()}}
    source = ColumnDataSource(data)
    chart = figure(y_range=list(reversed(labels)), width=WIDTH,
                   height=max(140, 24 * len(labels) + 70), x_axis_label=x_label,
                   toolbar_location="right", tools="pan,wheel_zoom,box_zoom,reset,save")
    chart.hbar(y="label", right="value", height=0.7, color="colour", source=source)
    chart.add_layout(Whisker(source=source, base="label", lower="low", upper="high",
                             dimension="width", line_color="#333"))
    if reference is not None:
        chart.add_layout(Span(location=reference, dimension="height", line_dash="dashed",
                              line_color="#888"))
    tooltips = [("", "@label"), (x_label, "@value{0.000} [@low{0.000}, @high{0.000}]")]
    tooltips += [(k, f"@{{{k}}}") for k in (hover or {})]
    chart.add_tools(HoverTool(tooltips=tooltips))
    chart.x_range.start = 0
    return chart


def roofline(names: Sequence[str], intensity: Sequence[float], gflops: Sequence[float],
             peak: dict | None):
    """Every dispatch at (FLOP per byte, GFLOP/s) on log axes, under the machine's measured
    compute and memory ceilings when known."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    source = ColumnDataSource({"name": [str(n) for n in names], "x": _clean(intensity),
                               "y": _clean(gflops)})
    chart = figure(width=WIDTH + 200, height=420, x_axis_type="log", y_axis_type="log",
                   x_axis_label="arithmetic intensity (FLOP/byte)", y_axis_label="GFLOP/s",
                   tools="pan,wheel_zoom,box_zoom,reset,save")
    chart.scatter("x", "y", size=7, alpha=0.7, color=OTHER, source=source)
    finite = [x for x in source.data["x"] if x > 0]
    if peak and finite:
        low, high = min(finite) / 2, max(finite) * 2
        ridge = peak["gflops"] / peak["gbps"]
        xs = [low, *([ridge] if low < ridge < high else []), high]
        chart.line(xs, [min(peak["gflops"], x * peak["gbps"]) for x in xs], line_color=FAILED,
                   line_width=2, legend_label=f"this session's ceilings {peak['gflops']:.0f} GFLOP/s "
                                             f"({peak['element']} inputs), "
                                             f"{peak['gbps']:.0f} GB/s")
        chart.legend.location = "bottom_right"
    chart.add_tools(HoverTool(tooltips=[("", "@name"), ("FLOP/byte", "@x{0.00}"),
                                        ("GFLOP/s", "@y{0.0}")]))
    return chart


def progress(curves: Mapping[str, Sequence[float]]):
    """Best speedup found against trials, one line per op."""
    from bokeh.palettes import Category10
    from bokeh.plotting import figure

    chart = figure(width=WIDTH, height=320, x_axis_label="trial",
                   y_axis_label="best speedup over IREE's default", tools="pan,box_zoom,reset,save")
    for (label, curve), colour in zip(curves.items(), Category10[10] * 10):
        chart.step(list(range(1, len(curve) + 1)), _clean(curve), mode="after", line_width=2,
                   color=colour, legend_label=str(label))
    if curves:
        chart.legend.location = "bottom_right"
    return chart


def knob_scatters(knobs: dict[str, Sequence[float]], speedup: Sequence[float],
                  names: Sequence[str], configuration: Sequence[str]):
    """One scatter per knob: its value against the speedup; hovering shows the configuration."""
    from bokeh.layouts import gridplot
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    data = {"speedup": _clean(speedup), "name": [str(n) for n in names],
            "configuration": [str(c) for c in configuration],
            **{k: _clean(v) for k, v in knobs.items()}}
    source = ColumnDataSource(data)
    charts = []
    for knob in knobs:
        chart = figure(width=300, height=240, x_axis_label=knob, y_axis_label="speedup",
                       tools="pan,box_zoom,reset")
        chart.scatter(knob, "speedup", size=7, alpha=0.6, color=OTHER, source=source)
        chart.add_tools(HoverTool(tooltips=[("", "@name"), ("speedup", "@speedup{0.000}"),
                                            ("config", "@configuration")]))
        charts.append(chart)
    return gridplot(charts, ncols=3)


def before_after(labels: Sequence[str], before: Sequence[float], after: Sequence[float],
                 x_label: str):
    """Two bars per label: before (IREE's default or the flags alone) and after (tuned)."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure
    from bokeh.transform import dodge

    labels = [str(label) for label in labels]
    source = ColumnDataSource({"label": labels, "before": _clean(before), "after": _clean(after)})
    chart = figure(y_range=list(reversed(labels)), width=WIDTH + 200,
                   height=max(160, 40 * len(labels) + 90), x_axis_label=x_label,
                   tools="pan,box_zoom,reset,save")
    for when, shift, colour in (("before", 0.18, OTHER), ("after", -0.18, LEADER)):
        chart.hbar(y=dodge("label", shift, range=chart.y_range), right=when, height=0.34,
                   color=colour, source=source, legend_label=when)
    chart.add_tools(HoverTool(tooltips=[("", "@label"), ("before", "@before{0.0000}"),
                                        ("after", "@after{0.0000}")]))
    chart.legend.location = "bottom_right"
    chart.x_range.start = 0
    return chart
