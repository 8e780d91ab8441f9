"""Phase 1a: the source rewrites (iree.rewrites) that apply to the model, each compiled,
verified and timed on the whole model against IREE's default in one interleaved session, and
under the flag sets it names (Rewrite.under) against the model's own source under them. The
fastest whose interval clears its reference (and faster than IREE's default) is adopted: its
module (X_source.mlir), with the flags it needs (Rewrite.flags), is what every later build
compiles and what the answer ships, and what the flags and the spec are measured against
(X_rewrites.csv, read back to resume)."""
from __future__ import annotations

import dataclasses
import math

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import CpuTarget, UserError
from iree_dispatch_profiler.iree import rewrites
from iree_dispatch_profiler.tuning.engine import DEFAULT
from iree_dispatch_profiler.tuning.model import flag_search
from iree_dispatch_profiler.tuning.model.tuner import ModelTuner
from iree_dispatch_profiler.tuning import flags as module_flags
from iree_dispatch_profiler.tuning.records import (COMPILE_FAILED, OK, read_table, speedup_text,
                                                   write_table)

# under: the flag set both sides were compiled with ("": IREE's default flags); default_ms:
# IREE's default's median in the row's own session
COLUMNS = ["name", "under", "ops", "status", "reason", "max_abs_err", "median_ms", "ci_low_ms",
           "ci_high_ms", "default_ms", "speedup", "speedup_ci_low", "speedup_ci_high", "chosen",
           "why"]


def search_rewrites(tuner: ModelTuner, roots: dict, cpu: CpuTarget) -> dict:
    """The model's dispatch roots from here on: the rewritten model's where a rewrite is
    adopted, `roots` (IREE's default's) otherwise."""
    s, log = tuner.s, tuner.log
    path = s.paths.rewrites_record
    applies = candidates(tuner.lowered.read_text(), cpu, s.rewrites)
    if not applies:
        return roots
    if path.is_file():
        rows = read_table(path, COLUMNS, "a rewrite record")
        log(f"Rewrites from {path}")
    else:
        kinds = {root.op.kind for root in roots.values() if root.op}
        rows = measure(tuner, applies, kinds)
        write_table(path, COLUMNS, rows)
    for row in rows:
        shown = (speedup_text(row) if row["status"] == OK
                 else f"{row['status']}: {row['reason']}")
        under = ""
        if row["under"]:
            under = f" under {row['under']}, against the model's own source under it"
            if row["status"] == OK:
                shown += (f", {float(row['median_ms']):.3f} ms (IREE's default beside it "
                          f"{float(row['default_ms']):.3f} ms)")
        log(f"  rewrite {row['name']} ({row['ops']} op(s)){under}: {shown}"
            + ("  <- adopted" if row["chosen"] == "yes" else ""))
    chosen = next((r["name"] for r in rows if r["chosen"] == "yes"), None)
    if chosen is None or chosen not in applies:
        log("Source: the model's own (no rewrite is significantly faster than IREE's default, "
            "and than the model's own source under the flags it was measured under)")
        return roots
    why, text, _ = applies[chosen]
    write_atomically(s.paths.rewritten_source, text)
    tuner.source_flags = flags_of(chosen)
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


def candidates(source: str, cpu: CpuTarget, allowed: tuple[str, ...] | None = None
               ) -> dict[str, tuple[str, str, int]]:
    """name -> (why, rewritten text, ops rewritten) of each rewrite (of `allowed`, None: any)
    that applies to `source` for `cpu`; where more than one does, all of them too (`a+b`),
    each applied to what those before it wrote: they rewrite different ops, and a later one
    may take what an earlier one wrote (packed_matmuls, patch_matmuls' matmul). Where three or
    more do, all but each one too: one may lose where the others gain (Winograd on a 3-D
    UNet's 2-D convs, beside conv_transpose_phases' matmul). A rewrite that is another way of
    writing one's ops (Rewrite.instead_of) is measured alone, and joined in its place with all
    the others (not in the sets of all but one: each of its rows costs a model's build)."""
    chosen = [r for r in rewrites.REWRITES if allowed is None or r.name in allowed]
    found = {}
    for rewrite in chosen:
        text, count = rewrite.run(source, cpu)
        if count:
            found[rewrite.name] = (rewrite.why, text, count)

    def add_joined(kept: list[rewrites.Rewrite]) -> list[rewrites.Rewrite]:
        text, count, joined = source, 0, []
        for rewrite in kept:
            text, more = rewrite.run(text, cpu)
            if more:
                count += more
                joined.append(rewrite)
        name = "+".join(r.name for r in joined)
        if len(joined) > 1 and name not in found:
            found[name] = ("; ".join(r.why for r in joined), text, count)
        return joined
    names = {r.name for r in chosen}
    main = [r for r in chosen if r.instead_of not in names]
    every = add_joined(main)
    if len(every) > 2:
        for left in every:
            add_joined([r for r in main if r is not left])
    for other in chosen:  # the other way of writing a rewrite's ops, in its place in them all
        if other.instead_of in names:
            add_joined([other if r.name == other.instead_of else r for r in main])
    return found


def _parts(name: str) -> list[rewrites.Rewrite]:
    """The rewrites of a name (`a+b`: joined)."""
    by_name = {r.name: r for r in rewrites.REWRITES}
    return [by_name[part] for part in name.split("+") if part in by_name]


def under(name: str) -> list[str]:
    """The flag sets a rewrite (or rewrites joined: `a+b`) is also measured under."""
    return sorted({f for r in _parts(name) for f in r.under})


def flags_of(name: str) -> list[str]:
    """The flags every build of the model rewritten by `name` takes (Rewrite.flags)."""
    return list(dict.fromkeys(f for r in _parts(name) for f in r.flags))


def measure(tuner: ModelTuner, applies: dict, kinds: set[str]) -> list[dict]:
    """A row per rewrite that applies (COLUMNS) against IREE's default, and one per flag set it
    names against the model's own source under that set, with IREE's default in the same
    session; of those significantly faster than their reference (and, under flags, with a
    median below IREE's default's by the minimum effect) the one of the lowest median marked
    chosen."""
    tuner.log(f"Source rewrites: {len(applies)} on the whole model against IREE's default")
    rows = flag_search.verify_and_time(tuner, [
        ({"name": name, "under": "", "ops": count, "why": why, "chosen": "no"},
         tuner.build_surveyed(f"model_{name}", flags_of(name), text)[0])
        for name, (why, text, count) in applies.items()], "rewrites")
    for row in flag_search.timed_rows(rows):
        row["default_ms"] = row["reference_ms"]
    by_name = {f.name: f for f in module_flags.CURATED}
    # under the sets that can matter for the model's root op `kinds` only (im2col: convs)
    relevant = {f.name for f in module_flags.relevant(module_flags.CURATED, kinds)}
    unders = {name: [f for f in under(name) if f in relevant] for name in applies}
    for flag_name in sorted({f for names in unders.values() for f in names}):
        flag_set = by_name[flag_name]
        paired = [({"name": name, "under": flag_name, "ops": count, "why": why, "chosen": "no"},
                   tuner.build(f"model_{name}+{flag_name}", text,
                               [*flag_set.args, *flags_of(name)]))
                  for name, (why, text, count) in applies.items() if flag_name in unders[name]]
        own = tuner.build(f"model_own+{flag_name}", None, flag_set.args)
        if own.reason:  # nothing to measure them against
            for row, _ in paired:
                row.update(status=COMPILE_FAILED, reason=f"the model's own source under "
                           f"{flag_name} does not compile: {own.reason}")
            rows += [row for row, _ in paired]
            continue
        default = {"name": DEFAULT}  # timed beside them: a median from another session
        flag_search.verify_and_time(  # is not one to compare with on a noisy machine
            tuner, [*paired, (default, dataclasses.replace(tuner.default, name="iree_default"))],
            "rewrites", reference=own)
        for row, _ in paired:
            row["default_ms"] = default.get("median_ms", math.nan)
        rows += [row for row, _ in paired]
    mark_chosen(rows)
    return rows


def mark_chosen(rows: list[dict]) -> None:
    """Of the rows significantly faster than their reference, and under flags also with a
    median below IREE's default's in the same session by the minimum effect, the one of the
    lowest median marked chosen: a rewrite under flags that beats the model's own source under
    them only because those flags slow the model is not adopted. Nor is one slower by more
    than the minimum effect, each as a share of IREE's default timed beside it, than the
    model's own source under a set a rewrite was measured under: that set alone gives more
    (an attention layer's packed matmuls, 1.60x over IREE's default, where its own source
    under early data tiling ran 1.65x: the answer ended 1.06x slower than IREE's data
    tiling)."""
    def share(row: dict, ms: float) -> float:  # of IREE's default timed beside the row
        return ms / float(row["default_ms"])

    # a row under flags is timed against the model's own source under them: speedup x median
    own = min((share(r, float(r["median_ms"]) * float(r["speedup"]))
               for r in flag_search.timed_rows(rows) if r["under"]), default=math.inf)
    faster = [r for r in flag_search.faster_rows(rows)
              if (not r["under"] or share(r, float(r["median_ms"])) * (1 + stats.MIN_EFFECT) < 1)
              and share(r, float(r["median_ms"])) < own * (1 + stats.MIN_EFFECT)]
    if faster:
        min(faster, key=lambda r: float(r["median_ms"]))["chosen"] = "yes"
