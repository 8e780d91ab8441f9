"""Phase 1a: the source rewrites (iree.rewrites) that apply to the model, each compiled,
verified and timed on the whole model against IREE's default in one interleaved session. The
fastest whose interval clears it is adopted: its module (X_source.mlir) is what every later
build compiles and what the answer ships, and what the flags and the spec are measured against
(X_rewrites.csv, read back to resume)."""
from __future__ import annotations

import dataclasses

from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree import rewrites
from iree_dispatch_profiler.tuning.engine import DEFAULT
from iree_dispatch_profiler.tuning.model import flag_search
from iree_dispatch_profiler.tuning.model.tuner import ModelTuner
from iree_dispatch_profiler.tuning.records import OK, read_table, write_table

COLUMNS = ["name", "ops", "status", "reason", "max_abs_err", "median_ms", "ci_low_ms",
           "ci_high_ms", "speedup", "speedup_ci_low", "speedup_ci_high", "chosen", "why"]


def search_rewrites(tuner: ModelTuner, roots: dict) -> dict:
    """The model's dispatch roots from here on: the rewritten model's where a rewrite is
    adopted, `roots` (IREE's default's) otherwise."""
    s, log = tuner.s, tuner.log
    path = s.paths.rewrites_record
    applies = candidates(tuner.lowered.read_text())
    if not applies:
        return roots
    if path.is_file():
        rows = read_table(path, COLUMNS, "a rewrite record")
        log(f"Rewrites from {path}")
    else:
        rows = measure(tuner, applies)
        write_table(path, COLUMNS, rows)
    for row in rows:
        shown = (f"{float(row['speedup']):.2f}x [{float(row['speedup_ci_low']):.2f}, "
                 f"{float(row['speedup_ci_high']):.2f}]" if row["status"] == OK
                 else f"{row['status']}: {row['reason']}")
        log(f"  rewrite {row['name']} ({row['ops']} op(s)): {shown}"
            + ("  <- adopted" if row["chosen"] == "yes" else ""))
    chosen = next((r["name"] for r in rows if r["chosen"] == "yes"), None)
    if chosen is None or chosen not in applies:
        log("Source: the model's own (no rewrite is significantly faster than IREE's default)")
        return roots
    why, text, _ = applies[chosen]
    write_atomically(s.paths.rewritten_source, text)
    build, rewritten_roots = tuner.build_surveyed(f"model_{chosen}", [], text)
    if build.reason:
        raise UserError(f"the model rewritten by {chosen} does not compile: {build.reason}")
    s.input = s.paths.rewritten_source
    tuner.rewrite = chosen
    tuner.source_default = dataclasses.replace(build, name=DEFAULT)
    tuner.without_flags()
    log(f"Source: {s.paths.rewritten_source}, the model with {why}: the flags and the "
        "spec are tuned on it, and the answer compiles it in place of the model")
    return rewritten_roots


def candidates(source: str) -> dict[str, tuple[str, str, int]]:
    """name -> (why, rewritten text, ops rewritten) of each rewrite that applies to `source`;
    where more than one does, all of them too (`a+b`): they rewrite different ops."""
    found = {}
    for rewrite in rewrites.REWRITES:
        text, count = rewrite.apply(source)
        if count:
            found[rewrite.name] = (rewrite.why, text, count)
    if len(found) > 1:  # the first one's text, with the others applied to it
        first, *others = found
        _, text, count = found[first]
        for rewrite in (r for r in rewrites.REWRITES if r.name in others):
            text, more = rewrite.apply(text)
            count += more
        found["+".join(found)] = ("; ".join(why for why, _, _ in found.values()), text, count)
    return found


def measure(tuner: ModelTuner, applies: dict) -> list[dict]:
    """A row per rewrite that applies (COLUMNS); the fastest significantly faster than IREE's
    default marked chosen."""
    tuner.log(f"Source rewrites: {len(applies)} on the whole model against IREE's default")
    rows = [({"name": name, "ops": count, "why": why, "chosen": "no"},
             tuner.build_surveyed(f"model_{name}", [], text)[0])
            for name, (why, text, count) in applies.items()]
    rows = flag_search.verify_and_time(tuner, rows, "rewrites")
    faster = flag_search.faster_rows(rows)
    if faster:
        max(faster, key=lambda r: r["speedup"])["chosen"] = "yes"
    return rows
