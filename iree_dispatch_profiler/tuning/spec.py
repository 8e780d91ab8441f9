"""IREE tuning specs for tuned ops (text: ops.mlir_text.tuning_spec). Each tuned op gets a
matcher on its operation name and the exact types of all its operands (an attention: of its
query, key and value), so two matmuls of other shapes are left alone. A spec file is read back
as entries: each matcher's config and what the matcher accepts."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.core.library import TuningConfiguration, UserError
from iree_dispatch_profiler.iree import modules
from iree_dispatch_profiler.iree.tunable import TunableOp
from iree_dispatch_profiler.ops import mlir_text
from iree_dispatch_profiler.tuning import kinds

def entries(tuned: list[tuple[TunableOp, TuningConfiguration]],
            matchers: dict[int, "Matcher"] | None = None,
            intended: dict[int, tuple[str, ...]] | None = None) -> list["Entry"]:
    """One entry per (op, config) pair, named by mlir_text.spec_entry_name; ops of identical
    name and types must share a config. `matchers` (op index -> Matcher) stand in for an op's
    own, e.g. for the mmt4d data tiling makes of it (the entry is named after that op);
    `intended`: op index -> the dispatches its entry is meant to configure."""
    found = []
    for op, config in tuned:
        stand_in = (matchers or {}).get(op.index)
        named = stand_in.op_names[0] if stand_in else op.name
        found.append(Entry(mlir_text.spec_entry_name(named, op.index), config,
                           stand_in or Matcher.of(op), (intended or {}).get(op.index, ())))
    return found


def text(spec_entries: list["Entry"]) -> str:
    """The spec file holding exactly these entries, under their names."""
    return mlir_text.tuning_spec([mlir_text.SpecEntry(e.name, e.matcher.op_names,
                                                      e.matcher.operand_types,
                                                      e.config.compilation_info or "")
                                  for e in spec_entries if e.matcher is not None])


def spec(tuned: list[tuple[TunableOp, TuningConfiguration]],
         matchers: dict[int, "Matcher"] | None = None) -> str:
    """The spec text for (op, config) pairs (see `entries`)."""
    return text(entries(tuned, matchers))


# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Matcher:
    """What a matcher accepts: ops of these names whose operands at these positions have these
    types (transform.iree.match.cast_compatible_type: a `?` size matches any)."""

    op_names: tuple[str, ...]
    operand_types: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, op: TunableOp) -> "Matcher":
        """The matcher `spec` writes for `op`: its name and its operands' types, or what its
        tuned kind matches instead (tuning/kinds.py)."""
        kind = kinds.of(op)
        return cls((kind.matched_op or op.name,),
                   tuple(enumerate(op.operand_types[:kind.matched_operands])))

    def accepts(self, name: str, operand_types: Sequence[str]) -> bool:
        return name in self.op_names and all(
            position < len(operand_types) and _compatible(operand_types[position], wanted)
            for position, wanted in self.operand_types)


def _compatible(got: str, wanted: str) -> bool:
    first, second = (re.fullmatch(r"tensor<((?:[0-9?]+x)*)([^x,>]+)>", t) for t in (got, wanted))
    if got == wanted or first is None or second is None:
        return got == wanted
    (a, element_a), (b, element_b) = first.groups(), second.groups()
    a, b = a.split("x")[:-1], b.split("x")[:-1]
    return element_a == element_b and len(a) == len(b) and all(
        x == y or "?" in (x, y) for x, y in zip(a, b))


@dataclass
class Entry:
    """One spec entry: its name, the config it hands out, what its matcher accepts (None: the
    matcher has conditions this module does not read) and the dispatches it is meant to
    configure (empty: unknown)."""

    name: str
    config: TuningConfiguration
    matcher: Matcher | None
    intended: tuple[str, ...] = ()


# Ops a matcher of ours is made of; any other condition makes its Matcher unknown.
_MATCHER_OPS = {"transform.match.operation_name", "transform.get_operand",
                "transform.iree.match.cast_compatible_type", "transform.param.constant",
                "transform.yield"}


def read_entries(path: Path) -> list[Entry]:
    """The entries of a tuning spec file: one per matcher that hands out a compilation_info."""
    from iree.compiler import ir
    from iree.compiler.dialects import iree_codegen

    entries = []
    with ir.Context() as context:
        module = modules.parse(modules.read(path), str(path), context)
        for op in modules.walk(module.operation):
            if op.operation.name != "transform.param.constant":
                continue
            info = iree_codegen.CompilationInfoAttr(op.operation.attributes["value"])
            sequence = op.operation.parent
            name = ir.StringAttr(sequence.attributes["sym_name"]).value
            entries.append(Entry(name, TuningConfiguration(
                name, str(info.lowering_config), str(info.translation_info)), _read_matcher(sequence)))
    if not entries:
        raise UserError(f"{path} hands out no compilation_info: not a tuning spec")
    return entries


def _read_matcher(sequence) -> Matcher | None:
    from iree.compiler import ir

    names: list[str] = []
    positions, types = [], []  # (value, position) of each get_operand; (value, type) of each cast
    for op in modules.walk(sequence):
        kind, attributes = op.operation.name, op.operation.attributes
        if kind not in _MATCHER_OPS:
            return None
        if kind == "transform.match.operation_name":
            names += [ir.StringAttr(a).value for a in ir.ArrayAttr(attributes["op_names"])]
        elif kind == "transform.get_operand":
            where = list(ir.DenseI64ArrayAttr(attributes["raw_position_list"]))
            if len(where) != 1 or "is_inverted" in attributes or "is_all" in attributes:
                return None
            positions.append((op.results[0], where[0]))
        elif kind == "transform.iree.match.cast_compatible_type":
            types.append((op.operands[0], str(ir.TypeAttr(attributes["target_type"]).value)))
    operand_types = []
    for value, type_text in types:
        position = next((p for v, p in positions if v == value), None)
        if position is None:
            return None
        operand_types.append((position, type_text))
    return Matcher(tuple(names), tuple(operand_types)) if names else None
