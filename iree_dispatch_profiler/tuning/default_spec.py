"""A CPU's default tuning spec from the results store (as IREE ships default specs per GPU
architecture): for every op the store holds on one target and IREE version under the same
flags, its best verified configuration, one spec entry each. An op whose finished search
answered IREE's default (or a flag point, which is no spec entry) gets none; so does an op whose
stored candidates never cleared IREE's default. The spec is compiled once to prove IREE loads
it; `autotune.py --model --spec ... --spec-library` checks it on a model."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import Target, TuningConfiguration
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, compile_command
from iree_dispatch_profiler.iree.process import run
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.iree.tunable import TunableOp
from iree_dispatch_profiler.store import results
from iree_dispatch_profiler.store.results import ANSWERS, RESULTS, Store
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning.engine import DEFAULT
from iree_dispatch_profiler.tuning.space import Point, configuration, spec_matchers

SPEEDUP = ("speedup", "speedup_ci_low", "speedup_ci_high")
# What the load check compiles: any module will do, the spec is parsed and verified first.
PROBE = "func.func @probe(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n"


@dataclass
class Chosen:
    """One op's entry: the op rebuilt from its stored fields, the point and its config."""

    op: TunableOp
    point: Point
    config: TuningConfiguration
    record: dict  # the stored result it comes from

    @property
    def line(self) -> str:
        r = self.record
        speedup = stats.Estimate(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"], 0.0, 0)
        return (f"{self.op.name} {self.op.shape} ({self.op.types}): {self.point.name}, "
                f"{speedup.median:.3f}x {speedup.interval('.3f')} over IREE's default "
                f"({r['source']}, {r['recorded_at']} on {r['machine']})")


def choose(store: Store, target: str, iree_version: str, flags: str,
           ) -> tuple[list[Chosen], list[str]]:
    """Each op's entry, best first, and a line for each op left out."""
    question = {"target": target, "iree_version": iree_version, "flags": flags}
    answers = {a["signature"]: a for a in store.where(ANSWERS, scope="op", **question)}  # the latest
    by_op: dict[str, list[dict]] = {}
    for row in store.where(RESULTS, **question):
        by_op.setdefault(row["signature"], []).append(row)
    chosen: list[Chosen] = []
    left_out: list[str] = []
    for signature, rows in by_op.items():
        rows.sort(key=lambda r: -(r["speedup"] or 0.0))
        op = results.op_of(rows[0], len(chosen))
        about = f"{op.name} {op.shape} ({op.types})"
        answer = answers.get(signature)
        winner = json.loads(answer["answer"] or "{}").get("winner") if answer else None
        if winner == DEFAULT:
            left_out.append(f"{about}: its search kept IREE's default")
            continue
        if winner is not None and winner.startswith("flags_"):
            left_out.append(f"{about}: {winner} won (flags for a whole module, not a spec entry)")
            continue
        best = next((r for r in rows if r["candidate"] == winner) if winner else
                    (r for r in rows if not r["candidate"].startswith("flags_")
                     and r["candidate"] != DEFAULT
                     and (r["speedup_ci_low"] or 0) > 1 + stats.MIN_EFFECT), None)
        if best is None:
            left_out.append(f"{about}: no stored candidate cleared IREE's default")
            continue
        if answer is not None and answer["speedup"] is not None:  # its confirmed speedup
            best = {**best, **{k: answer[k] for k in SPEEDUP}}
        point = Point.of(json.loads(best["configuration"] or "{}"))
        chosen.append(Chosen(op, point, configuration(op, point), best))
    chosen.sort(key=lambda c: -c.record["speedup"])
    # two ops a matcher cannot tell apart (name and operand types) share one entry: the faster's
    kept: dict[tuning_spec.Matcher, Chosen] = {}
    for entry in chosen:
        matcher = (spec_matchers(entry.op, entry.point).get(entry.op.index)
                   or tuning_spec.Matcher.of(entry.op))
        if matcher in kept:
            left_out.append(f"{entry.op.name} {entry.op.shape}: a spec matcher cannot tell it "
                            f"from {kept[matcher].op.shape}, whose entry is faster")
            continue
        kept[matcher] = entry
    return list(kept.values()), left_out


def write(chosen: list[Chosen], path: Path) -> list[str]:
    """The spec file; the flags its entries need (a data-tiled config's), in order."""
    matchers = {}
    for entry in chosen:
        matchers.update(spec_matchers(entry.op, entry.point))
    path.write_text(tuning_spec.spec([(c.op, c.config) for c in chosen], matchers))
    return list(dict.fromkeys(f for c in chosen for f in c.config.flags))


def check_loads(tools: IreeTools, target: Target, spec: Path, flags: list[str],
                work: Path, timeout: float) -> str:
    """Why IREE does not load the spec ("" when it does): a module compiled with it."""
    probe, vmfb = work / "spec_probe.mlir", work / "spec_probe.vmfb"
    probe.write_text(PROBE)
    result = run(compile_command(tools, target, probe, vmfb,
                                 [*flags, f"{SPEC_FLAG}={spec.resolve()}"]), timeout)
    vmfb.unlink(missing_ok=True)
    return "" if result.ok else result.failure("iree-compile", timeout)


def question(cpu, iree_version: str, flags: str) -> dict:
    return {"target": results.target_fields(cpu)["target"], "iree_version": iree_version,
            "flags": flags}
