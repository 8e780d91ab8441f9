"""Compiles IREE 3.13 is known to abort on, by operation, configuration and target. The
generator leaves such dispatches out and says which and why in one line, rather than a sweep of
crash rows on machines where IREE cannot build them. Each rule has a test that compiles the
case directly and fails once IREE no longer aborts (tests/test_end_to_end.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from iree_dispatch_profiler.core.library import (DATA_TILING_CONFIGURATION, CpuTarget, DataType,
                                                 TuningConfiguration)


@dataclass(frozen=True)
class KnownFailure:
    what: str  # the dispatches it hits, in words
    message: str  # what IREE prints when it aborts
    hits: Callable[[DataType, TuningConfiguration, CpuTarget], bool]  # input type, config, CPU


def _bf16_data_tiling_with_avx512bf16_off(input_type: DataType, config: TuningConfiguration,
                                          cpu: CpuTarget) -> bool:
    """A VM that hides avx512bf16 from, e.g., an Emerald Rapids host: IREE resolves `host` to
    the CPU model (whose defaults have it) with `-avx512bf16`, picks the bf16 ukernel path from
    the first mention, and LLVM cannot lower it."""
    return (input_type is DataType.bf16 and config == DATA_TILING_CONFIGURATION
            and "+avx512bf16" in cpu.features.split(",")
            and "avx512bf16" not in cpu.enabled_features)


KNOWN_FAILURES = [
    KnownFailure("bf16 data tiling with ukernels on a CPU model with avx512bf16 turned off",
                 "LLVM ERROR: Do not know how to split this operator's operand!",
                 _bf16_data_tiling_with_avx512bf16_off),
]


def known_failure(input_type: DataType, config: TuningConfiguration,
                  cpu: CpuTarget | None) -> KnownFailure | None:
    """The rule IREE fails this compile by, if any (llvm-cpu targets only)."""
    if cpu is None:
        return None
    return next((rule for rule in KNOWN_FAILURES if rule.hits(input_type, config, cpu)), None)
