"""Inputs, cached numpy references and the one tolerance rule for checking a dispatch's result."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iree_dispatch_profiler.core.files import atomic_file
from iree_dispatch_profiler.core.library import DataType
from iree_dispatch_profiler.iree.launchers import Buffer

# Integer-valued inputs in [-INPUT_RANGE, INPUT_RANGE] are exact in every input type, so the
# float64 reference is exact and only the output type's rounding can differ.
INPUT_RANGE = 2


def tolerance(output_type: DataType, reduction_length: int, reference: np.ndarray) -> np.ndarray | float:
    """Allowed |result - reference| per element.

    Integers: exact. Floats: the final rounding (eps * |ref|) plus accumulation error that grows
    like sqrt(K) rounding steps of the largest partial sums (low-precision outputs accumulate in
    their own type on some targets).
    """
    if not output_type.is_float:
        return 0.0
    scale = float(np.max(np.abs(reference), initial=1.0))
    return output_type.eps * (np.abs(reference) + np.sqrt(reduction_length) * scale)


@dataclass
class Comparison:
    passed: bool
    max_abs_error: float
    max_rel_error: float

    @property
    def detail(self) -> str:
        return f"max abs err {self.max_abs_error:.3g}, max rel err {self.max_rel_error:.3g}"


def compare(result: np.ndarray, reference: np.ndarray, output_type: DataType,
            reduction_length: int) -> Comparison:
    got = result.astype(np.float64)
    error = np.abs(got - reference)
    if not np.all(np.isfinite(got)):
        return Comparison(False, float("inf"), float("inf"))
    max_abs = float(error.max(initial=0.0))
    max_rel = float((error / np.maximum(np.abs(reference), 1.0)).max(initial=0.0))
    allowed = tolerance(output_type, reduction_length, reference)
    return Comparison(bool(np.all(error <= allowed)), max_abs, max_rel)


class ReferenceCache:
    """Seeded inputs and the expected result of one operation, computed once and kept on disk
    (`generated/reference_cache/<operation>/`) for all its dispatches and later runs."""

    def __init__(self, folder: Path, operation):
        self.folder = folder
        self.operation = operation
        self._expected: np.ndarray | None = None

    @property
    def buffers(self) -> list[Buffer]:
        return [Buffer(self.folder / f"input{i}.bin", shape, dtype.mlir)
                for i, (shape, dtype) in enumerate(self.operation.inputs)]

    @property
    def expected_path(self) -> Path:
        return self.folder / "expected.npy"

    def ensure_inputs(self) -> list[Buffer]:
        buffers = self.buffers
        if all(b.path.is_file() for b in buffers):
            return buffers
        # Seeded by the operation's name: the same problem always gets the same data, and each
        # operand its own draw (lhs != rhs).
        rng = np.random.default_rng(zlib.crc32(self.operation.name.encode()))
        for buffer, (shape, dtype) in zip(buffers, self.operation.inputs):
            values = rng.integers(-INPUT_RANGE, INPUT_RANGE + 1, size=shape).astype(dtype.numpy)
            with atomic_file(buffer.path) as handle:
                values.tofile(handle)
        return buffers

    def load_inputs(self) -> list[np.ndarray]:
        return [np.fromfile(b.path, dtype=dtype.numpy).reshape(shape)
                for b, (shape, dtype) in zip(self.ensure_inputs(), self.operation.inputs)]

    def expected(self) -> np.ndarray:
        if self._expected is None:
            if self.expected_path.is_file():
                self._expected = np.load(self.expected_path)
            else:
                self._expected = self.operation.reference(*self.load_inputs())
                with atomic_file(self.expected_path) as handle:
                    np.save(handle, self._expected)
        return self._expected

    def read_result(self, path: Path) -> np.ndarray:
        shape, dtype = self.operation.output
        return np.fromfile(path, dtype=dtype.numpy).reshape(shape)


# Relative tolerance per float type for outputs of models compiled two ways (unknown reduction
# lengths, arbitrary inputs): reordered f32 sums differ by ~1e-6, inputs demoted to bf16 by ~1e-3.
AGREEMENT_RTOL = {"float64": 1e-10, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


@dataclass
class Agreement:
    max_abs: float
    max_rel: float
    mismatches: int  # elements beyond the tolerance
    worst_index: tuple[int, ...]  # where the largest difference sits
    ok: bool


def agreement(got: np.ndarray, expected: np.ndarray) -> Agreement:
    """How far `got` is from `expected`: integers must match exactly, floats within
    AGREEMENT_RTOL of their type times (|expected| + the output's RMS)."""
    if got.shape != expected.shape:
        return Agreement(np.inf, np.inf, int(expected.size), (), False)
    a, b = got.astype(np.float64), expected.astype(np.float64)
    error = np.abs(a - b)
    error[np.isnan(a) != np.isnan(b)] = np.inf
    error[np.isnan(a) & np.isnan(b)] = 0.0
    rtol = AGREEMENT_RTOL.get(np.dtype(expected.dtype).name, 0.0)
    scale = float(np.sqrt(np.nanmean(b * b))) if b.size else 0.0
    allowed = rtol * (np.abs(b) + scale)
    worst = np.unravel_index(int(np.argmax(error)), error.shape) if error.size else ()
    return Agreement(float(error.max(initial=0.0)),
                     # relative to |expected|, floored where it crosses zero
                     float((error / np.maximum(np.abs(b), 1e-3 * scale or 1.0)).max(initial=0.0)),
                     int(np.count_nonzero(error > allowed)), tuple(int(i) for i in worst),
                     bool(np.all(error <= allowed)))
