"""The one registry of operation kinds: each kind names the module of its family.

Adding a family is its module (see `Family`) and its kinds in KINDS; nothing else changes:
the generator's options and operations, the manifest's reader and the tuning spaces all come
from here.
"""
from __future__ import annotations

import argparse
from typing import Protocol

from iree_dispatch_profiler.core.library import (DataType, Target, TensorDescription,
                                                 TuningConfiguration, UserError)
from iree_dispatch_profiler.ops import attention, conv, matmul


class Operation(Protocol):
    """What every family's operation dataclass provides (see matmul.MatmulOperation)."""

    kind: str
    name: str
    flops: int
    bytes: int
    reduction_length: int
    compile_flags: tuple[str, ...]
    inputs: list[tuple[tuple[int, ...], DataType]]
    output: tuple[tuple[int, ...], DataType]
    arguments: str
    accumulator: DataType  # the type its sums are rounded in (verification's tolerance)

    def emit_mlir(self, function_name: str, config: TuningConfiguration) -> str: ...
    def compute(self, *inputs, dtype=...): ...
    def reference(self, *inputs): ...
    def accumulation_scale(self, *inputs): ...  # per result element: sqrt(K * sum_k t_k^2)
    def report_fields(self) -> dict: ...
    def to_json(self) -> dict: ...


class Family(Protocol):
    """What a family's module provides (matmul.py, conv.py, attention.py)."""

    OPERATION: type  # its Operation dataclass; OPERATION.from_json(data) reads a manifest entry

    def tuning_configurations(self, op, target: Target) -> list[TuningConfiguration]:
        """IREE's default first (the baseline of every sweep), then the target's variants."""

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        """The generator's options for the family's shapes."""

    def operations(self, args: argparse.Namespace, kind: str,
                   data_types: list[tuple[TensorDescription, ...]]) -> list:
        """The generator's operations of `kind` for its options."""


# In the order `--operation-kind=all` generates them.
KINDS: dict[str, Family] = {
    "matmul": matmul, "batch_matmul": matmul, "split_k_matmul": matmul, "conv2d": conv,
    "fused_matmul": matmul, "attention": attention,
}


def families() -> list[Family]:
    """Each family once, in the order of its first kind."""
    return list(dict.fromkeys(KINDS.values()))


def operation_from_json(data: dict) -> Operation:
    try:
        return KINDS[data["kind"]].OPERATION.from_json(data)
    except KeyError as error:
        raise UserError(f"manifest names an unknown operation kind {error}") from None


def tuning_configurations(operation: Operation, target: Target) -> list[TuningConfiguration]:
    return KINDS[operation.kind].tuning_configurations(operation, target)
