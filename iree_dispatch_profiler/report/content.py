"""What each report shows, from the outputs the scripts write (so a report made during a run and
one made afterwards from its files are the same): a profiler sweep (its CSV), a tuning run (its
trial CSV and answer JSON), a model tuning (its JSON) and a comparison (its JSON). Each builder
returns a Page; report.html renders it."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from iree_dispatch_profiler.measure.calibration import MachineState, within_session
from iree_dispatch_profiler.report import charts
from iree_dispatch_profiler.report.html import (Block, Cell, Row, Section, Table, number, render,
                                                with_interval)
from iree_dispatch_profiler.sweep.performance_report import PROVIDER_IREE
from iree_dispatch_profiler.tuning.records import OK, best_so_far

MAX_OPERATION_CHARTS = 60  # per-operation charts beyond these: the table has every row
HEADER_COLUMNS = ("target", "vector bytes", "cpu features", "cpu model", "IREE version",
                  "runtime device", "threads", "timing source", "timed on")


@dataclass
class Page:
    title: str
    header: list[tuple[str, str]]
    sections: list[Section] = field(default_factory=list)
    figures: dict = field(default_factory=dict)

    def chart(self, section: Section, name: str, figure, title: str = "") -> None:
        key = re.sub(r"\W", "_", f"{section.anchor}_{len(self.figures)}_{name}")
        self.figures[key] = figure
        section.blocks.append(Block("chart", title=title, chart=key))

    def html(self) -> str:
        return render(self.title, self.header, self.sections, self.figures)


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def header_from(facts: dict) -> list[tuple[str, str]]:
    return [(k, _text(v)) for k, v in facts.items() if _text(v)]


# --------------------------------------------------------------------------------------------
def machine_state_facts(states: list[tuple[MachineState, MachineState | None]]) -> dict:
    """The header's lines on the machine's state: the last session's calibrations and whether
    its start and end agree."""
    if not states:
        return {"machine state": "no calibration (written before sessions measured it)"}
    start, end = states[-1]
    facts = {"machine state at start": start.summary(),
             "machine state at end": end.summary() if end else "none (the session was cut short)"}
    if end is not None:
        facts["machine state verdict"] = within_session(start, end)
    if len(states) > 1:
        facts["sessions"] = f"{len(states)} (appended or resumed); the last one's state shown"
    return facts


def sweep(data: pd.DataFrame, states: list[tuple[MachineState, MachineState | None]],
          command: str = "") -> Page:
    """A profiler CSV: each operation's verdict first, then per operation its configurations'
    GFLOP/s with intervals (the significant leader marked), the sortable table of every row,
    and a roofline under the last session's measured ceilings."""
    iree = data[data["Provider"] == PROVIDER_IREE]
    first = (iree if len(iree) else data).iloc[0] if len(data) else pd.Series(dtype=object)
    facts = {k: first.get(k) for k in HEADER_COLUMNS}
    facts["date"] = first.get("timestamp")
    facts["dispatches"] = f"{len(data)} rows, {data['Operation'].nunique()} operations"
    facts.update(machine_state_facts(states))
    facts["command"] = command
    page = Page("Dispatch profile", header_from(facts))
    last = states[-1] if states else (None, None)
    peak = next((s.peak() for s in (last[1], last[0]) if s is not None and s.peak()), None)

    # Verdicts first: what each operation's sweep concluded, then its chart, then every row.
    leaders = {op: leader(rows) for op, rows in data.groupby("Operation", sort=False)}
    page.sections.append(verdicts(data, leaders))
    operations = Section("Configurations per operation", "operations")
    for charted, (operation, group) in enumerate(data.groupby("Operation", sort=False)):
        if charted == MAX_OPERATION_CHARTS:
            operations.blocks.append(Block("text", text=f"{data['Operation'].nunique() - charted} "
                                                        "more operations: see the table."))
            break
        timed = group[group["Runtime(ms)"] > 0]
        if timed.empty:
            continue
        flops = timed["flops"].astype(float)
        marked = [i for i, d in enumerate(timed["Dispatch"]) if d == leaders.get(operation)]
        figure = charts.interval_bars(
            [f"{c} ({p})" if p != PROVIDER_IREE else c
             for c, p in zip(timed["Configuration"], timed["Provider"])],
            flops / (timed["Runtime(ms)"] * 1e6), flops / (timed["ci_high"] * 1e6),
            flops / (timed["ci_low"] * 1e6), "GFLOP/s", marked[0] if marked else None,
            hover={"runtime ms": timed["Runtime(ms)"].round(4),
                   "speedup": timed["speedup"].round(3), "verified": timed["Verification"]})
        said = (f"leader: {leaders[operation]}" if leaders.get(operation)
                else "no significant leader")
        page.chart(operations, operation, figure, f"{operation}: {said}")
    page.sections.append(operations)

    table = Section("Dispatches", "dispatches")
    rows = []
    for _, r in data.iterrows():
        failed = r.get("Verification") in ("FAILED", "ERROR") or bool(_text(r.get("Reason")))
        best = leaders.get(r["Operation"]) == r["Dispatch"]
        rows.append(Row([
            Cell(_text(r["Dispatch"])), Cell(_text(r["Provider"])), Cell(_text(r["Configuration"])),
            with_interval(r.get("Runtime(ms)"), r.get("ci_low"), r.get("ci_high"), ".4f"),
            number(r.get("GFLOPs"), ".1f"), number(r.get("GB/s"), ".2f"),
            with_interval(r.get("speedup"), r.get("speedup_ci_low"), r.get("speedup_ci_high"), ".3f", "x"),
            Cell(_text(r.get("Verification"))), Cell(_text(r.get("Config applied"))),
            Cell(_text(r.get("Reason")))], "bad" if failed else "best" if best else ""))
    table.blocks.append(Block("table", table=Table(
        "dispatch-table", ["Dispatch", "Provider", "Configuration", "Runtime ms [95%]", "GFLOP/s",
                           "GB/s", "Speedup over default [95%]", "Verification", "Config applied",
                           "Reason"], rows)))
    table.blocks.append(Block("text", text="Green: the operation's significant leader (its "
                                           "GFLOP/s interval clears every other's); red: failed."))
    page.sections.append(table)

    timed = data[(data["Runtime(ms)"] > 0) & (data["Provider"] == PROVIDER_IREE)]
    if len(timed):
        roof = Section("Roofline", "roofline")
        page.chart(roof, "roofline", charts.roofline(
            timed["Dispatch"], timed["flops"] / timed["bytes"], timed["GFLOPs"], peak))
        if peak is None:
            roof.blocks.append(Block("text", text="No ceilings: no calibration of the session "
                                                  "that timed these rows measured them."))
        page.sections.append(roof)
    return page


def verdicts(data: pd.DataFrame, leaders: dict) -> Section:
    """One row per operation: its significant leader (or none) with its speedup over IREE's
    default and interval, and how many configurations verified."""
    rows = []
    for operation, group in data.groupby("Operation", sort=False):
        iree = group[group["Provider"] == PROVIDER_IREE]
        timed = iree[iree["Runtime(ms)"] > 0]
        name = leaders.get(operation)
        shown = group[group["Dispatch"] == name] if name else timed.nsmallest(1, "Runtime(ms)")
        verified = int((iree["Verification"] == "SUCCESS").sum())
        failed = len(iree) - verified
        if name:
            said = f"leader: {shown['Configuration'].iloc[0]}"
        elif len(shown):
            said = f"no significant leader (fastest median: {shown['Configuration'].iloc[0]})"
        else:
            said = "nothing timed"
        speedup = (with_interval(shown["speedup"].iloc[0], shown["speedup_ci_low"].iloc[0],
                                 shown["speedup_ci_high"].iloc[0], ".3f", "x")
                   if len(shown) else Cell(""))
        rows.append(Row([Cell(_text(operation)), Cell(said), speedup,
                         Cell(f"{verified} of {len(iree)} SUCCESS"
                              + (f", {failed} FAILED/ERROR" if failed else ""))],
                        "bad" if failed else "best" if name else ""))
    section = Section("Verdicts", "verdicts")
    section.blocks.append(Block("table", table=Table(
        "verdict-table", ["Operation", "Verdict", "Speedup over default [95%]", "Verification"],
        rows)))
    section.blocks.append(Block("text", text="A leader's GFLOP/s interval clears every other "
                                             "configuration's; the speedup is the leader's, or "
                                             "the fastest median's when there is none."))
    return section


def leader(group: pd.DataFrame) -> str | None:
    """The dispatch whose GFLOP/s interval lies above every other's (its runtime interval's
    upper end below every other's lower end), or None."""
    timed = group[(group["Runtime(ms)"] > 0) & group["ci_high"].notna()]
    if len(timed) < 2:
        return None
    best = timed.loc[timed["Runtime(ms)"].idxmin()]
    others = timed.drop(index=best.name)
    return str(best["Dispatch"]) if (best["ci_high"] < others["ci_low"]).all() else None


# --------------------------------------------------------------------------------------------
def tuning(answer: dict, trials: pd.DataFrame, knobs: list[str], spec_text: str = "",
           flags_text: str = "") -> Page:
    """A single-op tuning run: per op the progress curve, knob scatters, the default's rank,
    the confirmed answer; the spec and flags shipped."""
    page = Page("Auto-tuning", header_from(answer.get("facts", {})))
    curves = {}
    # without the answer (a run still going, or interrupted): every op of the trials, unnamed
    ops = answer.get("ops") or [{"op": int(i), "name": "", "shape": "", "types": "", "lines": []}
                                for i in sorted(trials["op"].unique())]
    for op in ops:
        named = f": {op['name']} {op['shape']} ({op['types']})" if op["name"] else ""
        section = Section(f"op {op['op']}{named}", f"op{op['op']}")
        rows = trials[trials["op"] == op["op"]].sort_values("trial")
        ok = rows[rows["status"] == OK]
        if op["lines"]:
            section.blocks.append(Block("lines", title="Answer", lines=op["lines"]))
        curves[f"op {op['op']}"] = best_so_far(rows.to_dict("records"))
        used = [k for k in knobs if k in ok and ok[k].nunique() > 1]
        if len(ok) and used:
            page.chart(section, "knobs", charts.knob_scatters(
                {k: ok[k].astype(float) for k in used}, ok["speedup"], ok["candidate"],
                [", ".join(f"{k}={r[k]:g}" for k in knobs if k in r) for _, r in ok.iterrows()]),
                "Each knob against the speedup (hover: the configuration)")
        section.blocks.append(Block("table", title="Trials", table=Table(
            f"trials-op{op['op']}", ["trial", "candidate", "status", "speedup [95%]", "median ms",
                                     "config applied", "verified", "reason"],
            [Row([number(r["trial"] + 1, ".0f"), Cell(_text(r["candidate"])), Cell(_text(r["status"])),
                  with_interval(r.get("speedup"), r.get("speedup_ci_low"), r.get("speedup_ci_high"),
                                ".3f", "x"),
                  number(r.get("median_ms"), ".4f"), Cell(_text(r.get("config_applied"))),
                  Cell(_text(r.get("verified"))), Cell(_text(r.get("reason")))],
                 "" if r["status"] == OK else "bad") for _, r in rows.iterrows()])))
        page.sections.append(section)
    if curves:
        overview = Section("Progress", "progress")
        page.chart(overview, "progress", charts.progress(curves),
                   "Best verified speedup over IREE's default against trials")
        page.sections.insert(0, overview)
    _shipped(page, spec_text, flags_text)
    return page


def _shipped(page: Page, spec_text: str, flags_text: str) -> None:
    if not (spec_text or flags_text):
        return
    section = Section("What to ship", "shipped")
    if flags_text:
        section.blocks.append(Block("code", title="Flags", text=flags_text))
    if spec_text:
        section.blocks.append(Block("code", title="Tuning spec", text=spec_text))
    page.sections.append(section)


# --------------------------------------------------------------------------------------------
def model(summary: dict, spec_text: str = "", flags_text: str = "") -> Page:
    """A model tuning: the dispatch ranking with shares and times before and after, the
    per-target speedups with intervals, the verdict lines, flags and spec."""
    page = Page("Model tuning", header_from(summary.get("facts", {})))
    verdict = Section("Verdict", "verdict")
    verdict.blocks.append(Block("lines", lines=summary.get("lines", [])))
    page.sections.append(verdict)
    dispatches = summary.get("dispatches", [])
    ranking = Section("Dispatches", "dispatches")
    if dispatches:
        page.chart(ranking, "times", charts.before_after(
            [d["dispatch"] for d in dispatches], [d["before_ms"] for d in dispatches],
            [d["after_ms"] for d in dispatches], "ms per call"),
            "Time per dispatch: before (the flags alone) and after (flags + spec)")
        ranking.blocks.append(Block("table", table=Table("model-dispatches", [
            "dispatch", "root op", "share before (%)", "share after (%)", "before ms", "after ms",
            "after GFLOP/s", "of ceiling (%)", "target trials", "target speedup [95%]", "in spec"], [
            Row([Cell(d["dispatch"]), Cell(d["root"]), number(100 * d["share_before"], ".1f"),
                 number(100 * d["share_after"], ".1f"), number(d["before_ms"], ".4f"),
                 number(d["after_ms"], ".4f"), number(d.get("gflops"), ".1f"),
                 number(100 * d["of_ceiling"] if d.get("of_ceiling") else None, ".0f"),
                 number(d.get("trials", 0), ".0f"),
                 with_interval(d["speedup"], d["speedup_low"], d["speedup_high"], ".2f", "x"),
                 Cell(d["in_spec"])], "best" if d["in_spec"] == "yes" else "")
            for d in dispatches])))
    page.sections.append(ranking)
    targets = [d for d in dispatches if d["speedup"] is not None and math.isfinite(d["speedup"])]
    if targets:
        speedups = Section("Per-target speedups", "targets")
        page.chart(speedups, "targets", charts.interval_bars(
            [d["dispatch"] for d in targets], [d["speedup"] for d in targets],
            [d["speedup_low"] for d in targets], [d["speedup_high"] for d in targets],
            "speedup inside the model", reference=1.0))
        page.sections.append(speedups)
    _shipped(page, spec_text, flags_text)
    return page


# --------------------------------------------------------------------------------------------
def comparison(report: dict) -> Page:
    """compare.py's results: variants with intervals, the verdicts, output agreement; or, for
    two profiler CSVs, each dispatch's old/new speedup."""
    page = Page("A/B comparison", header_from(report.get("facts", {})))
    if "variants" in report:
        variants = Section("Variants", "variants")
        rows = report["variants"]
        page.chart(variants, "variants", charts.interval_bars(
            [v["name"] for v in rows], [v["median_ms"] for v in rows],
            [v["ci_low_ms"] for v in rows], [v["ci_high_ms"] for v in rows], "ms per call"),
            "Median time per call with its 95% interval (the first is the baseline)")
        variants.blocks.append(Block("table", table=Table("variants", [
            "variant", "median ms [95%]", "cv", "rounds"], [
            Row([Cell(v["name"]), with_interval(v["median_ms"], v["ci_low_ms"], v["ci_high_ms"], ".4f"),
                 number(v.get("cv"), ".1%"), number(v.get("rounds"), ".0f")]) for v in rows])))
        failures = [f"{f['variant']} FAILED: {f['reason']}" for f in report.get("failures", [])]
        variants.blocks.append(Block("lines", title="Verdict",
                                     lines=[c["verdict"] for c in report.get("comparisons", [])] + failures))
        page.sections.append(variants)
        agreement = Section("Output agreement", "agreement")
        agreement.blocks.append(Block("table", table=Table("agreement", [
            "variant", "against", "output", "max abs", "max rel", "over tolerance", "agree"], [
            Row([Cell(a["variant"]), Cell(a["baseline"]), number(a["output"], ".0f"),
                 number(a["max_abs"], ".3g"), number(a["max_rel"], ".3g"),
                 number(a["mismatches"], ".0f"), Cell("yes" if a["ok"] else "NO")],
                "" if a["ok"] else "bad") for a in report.get("agreement", [])])))
        page.sections.append(agreement)
    else:
        pairs = report.get("comparisons", [])
        section = Section("Dispatches: old time / new time", "dispatches")
        machine = report.get("machine", {}).get("lines")
        if machine:
            section.blocks.append(Block("lines", title="Machine state", lines=machine))
        if pairs:
            page.chart(section, "pairs", charts.interval_bars(
                [c["dispatch"] for c in pairs], [c["speedup"] for c in pairs],
                [c["ci_low"] for c in pairs], [c["ci_high"] for c in pairs],
                "speedup (old/new)", reference=1.0))
        section.blocks.append(Block("table", table=Table("pairs", [
            "dispatch", "old ms", "new ms", "speedup [95%]", "flag"], [
            Row([Cell(c["dispatch"]), number(c["old_ms"], ".4f"), number(c["new_ms"], ".4f"),
                 with_interval(c["speedup"], c["ci_low"], c["ci_high"], ".3f", "x"), Cell(c["flag"])],
                "bad" if c["flag"].startswith("REGRESSION") else
                "best" if c["flag"].startswith("improved") else "")
            for c in pairs])))
        page.sections.append(section)
    return page
