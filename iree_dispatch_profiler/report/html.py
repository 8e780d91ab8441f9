"""One self-contained HTML file per report: a Jinja2 template (autoescaped: dispatch names,
reasons and file contents are text, never markup) with Bokeh's JavaScript and the charts' data
inlined, so it opens from disk with no server and no network. Tables are plain HTML (readable
without JavaScript); a small inline script sorts and filters them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Sequence

import jinja2

from iree_dispatch_profiler.core.files import write_atomically

TEMPLATES = Path(__file__).with_name("templates")


@dataclass(frozen=True)
class Cell:
    text: str
    sort: float | None = None  # numeric cells sort by this

    @property
    def numeric(self) -> bool:
        return self.sort is not None


@dataclass
class Row:
    cells: list[Cell]
    css: str = ""  # "bad" (failed), "best" (a significant leader)


@dataclass
class Table:
    anchor: str
    columns: list[str]
    rows: list[Row]
    sortable: bool = True


@dataclass
class Block:
    """One piece of a section: text, a list of lines, code (a spec), a chart or a table."""

    kind: str
    title: str = ""
    text: str = ""
    lines: Sequence[str] = ()
    chart: str = ""  # key into the report's charts
    table: Table | None = None


@dataclass
class Section:
    title: str
    anchor: str
    blocks: list[Block] = field(default_factory=list)


def number(value, spec: str = ".3f") -> Cell:
    """A numeric cell ('' for a missing value, which sorts last)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return Cell("", math.nan)
    return Cell("" if math.isnan(value) else format(value, spec), value)


def with_interval(median, low, high, spec: str = ".3f", suffix: str = "") -> Cell:
    """`1.234x [1.200, 1.260]`, sorting by the median."""
    cell = number(median, spec)
    if not cell.text:
        return cell
    bounds = [number(v, spec).text for v in (low, high)]
    shown = f"{cell.text}{suffix}" + (f" [{bounds[0]}, {bounds[1]}]" if all(bounds) else "")
    return Cell(shown, cell.sort)


def render(title: str, header: Sequence[tuple[str, str]], sections: list[Section],
           figures: dict) -> str:
    """The page: header facts, sections, and `figures` (name -> Bokeh model) with Bokeh inlined."""
    from bokeh.embed import components
    from bokeh.resources import Resources

    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                                     autoescape=True, undefined=jinja2.StrictUndefined)
    script, divs = components(figures) if figures else ("", {})
    resources = Resources(mode="inline", components=["bokeh"]).render_js() if figures else ""
    return environment.get_template("report.html.j2").render(
        title=title, header=[(str(k), str(v)) for k, v in header], sections=sections,
        charts=divs, chart_resources=resources, chart_script=script,
        generated=datetime.now().isoformat(timespec="seconds"))


def write(path: Path, text: str) -> None:
    """Complete or not at all: an interrupted run leaves no half-written report."""
    write_atomically(path, text)
