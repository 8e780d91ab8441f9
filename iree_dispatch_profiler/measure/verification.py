"""Inputs, cached numpy references and the one tolerance rule for checking a dispatch's result.

Inputs. Floats are drawn uniformly from [-1, 1) and rounded to the input type (subnormals made
0): realistic magnitudes with every mantissa bit in use, so a dispatch that drops precision
(inputs demoted to bf16 or f16, a truncated accumulator) shows it. The reference is computed
in float64 from the rounded values, so it is the exact result of what the dispatch read, up to
float64's own rounding (1e-16 relative, far below any tolerance here). Integers are drawn over
the input type's range, capped so that no i32 sum can overflow: integer results must be exact.

Tolerance (per element i, float results):

    |result_i - ref_i| <= u_out * |ref_i| + LAMBDA * u_acc * (A_i + |ref_i|)

- u_out * |ref_i|: the final rounding to the output type (u = eps / 2, half an ulp).
- u_acc * A_i: the accumulation. A length-K sum in the accumulator type (u_acc) rounds each
  partial sum s_k once: the error is sum_k d_k s_k with |d_k| <= u_acc. With zero-mean inputs the
  partial sums are a random walk, |s_k| ~ sqrt(k) * rms(t), and the d_k are independent, so the
  error is about u_acc * sqrt(sum_k s_k^2) ~ u_acc * sqrt(K * sum_k t_k^2) / sqrt(2): the
  op's `accumulation_scale`, A_i = sqrt(K * sum_k t_k^2) for a matmul or convolution
  (t_k = a_ik * b_kj), computed exactly from the inputs. Any summation order (tiles, vector
  lanes, split-K, data tiling) has partial sums no larger than the sequential ones.
- u_acc * |ref_i|: roundings after the sum (bias, activation, softmax normalisation).
- A truncating accumulator (NVIDIA's tensor cores; ops.cuda_tiles.truncating_block) rounds each
  block of b products' sum toward zero: K / b roundings of up to 2 u_acc |s_j| that share the
  partial sum's sign, so they add linearly, about u_acc * sum_j |s_j| ~ u_acc * (K / b) *
  sqrt(sum_k t_k^2) = A_i * sqrt(K) / b. Its A_i is multiplied by max(1, sqrt(K) / b): at
  K = 4096 and b = 4, 16 times the round-to-nearest allowance, still about 1/20 of a result off by 1%.
- LAMBDA: the error is a sum of many independent bounded terms, close to normal; the largest of
  N elements lies near sqrt(2 ln N) of its standard deviation (about 5.8 for 16M elements).
  Measured on every configuration of the default and breadth sweeps on an AVX2 CPU, the worst
  element needed 3.9 (README, "Verification"); LAMBDA = 8 leaves twice that.

What this rejects: inputs demoted from f32 to bf16 (u = 2^-9) or f16 (2^-11) add errors
u_demoted * sqrt(sum_k t_k^2) per element, 2^15 and 2^13 times u_f32 * sqrt(sum_k t_k^2):
hundreds of tolerances at K = 1024, and still over one at K = 2^24 for bf16. A result off by
0.99 (or one element off by 1%) is off by 0.01 * |ref|, about 10^5 u_f32 |ref|. The accumulator
is the op's (`accumulator`): for a matmul or convolution the result's type, as linalg declares
it, so an f16 result accumulated in f16 is allowed the errors an f16 accumulator makes (IREE's
default for f16 x f16 -> f16 on CPUs without native f16 arithmetic rounds every partial sum to
f16): at K = 1024 several % of a typical result, which still rejects a result off by half.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from iree_dispatch_profiler.core.files import atomic_file
from iree_dispatch_profiler.core.library import DataType
from iree_dispatch_profiler.iree.launchers import Buffer

LAMBDA = 8.0
INPUTS = "uniform2"  # the input scheme above; names the reference cache's folder
I32_MAX = 2 ** 31 - 1


def unit_roundoff(dtype: DataType) -> float:
    """Half an ulp at 1 (0 for integers)."""
    return dtype.eps / 2


def integer_bound(dtype: DataType, reduction_length: int) -> int:
    """The largest |value| drawn for an integer input: the type's range, capped so that a sum
    of `reduction_length` products cannot overflow i32."""
    top = 2 ** (dtype.bits - 1) - 1
    return max(1, min(top, math.isqrt(I32_MAX // max(reduction_length, 1))))


def seeded_inputs(operation, seed: int) -> list[np.ndarray]:
    """Each operand its own draw from one seeded generator (the module docstring)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in operation.inputs:
        if dtype.is_float:
            values = rng.uniform(-1.0, 1.0, size=shape).astype(dtype.numpy)
            # no subnormals: kernels may flush them to zero (IREE's f16 data tiling on a CPU
            # without F16C does), a platform's convention rather than a configuration's error
            values[np.abs(values) < ml_dtypes.finfo(dtype.numpy).tiny] = 0
            arrays.append(values)
        else:
            bound = integer_bound(dtype, operation.reduction_length)
            arrays.append(rng.integers(-bound, bound + 1, size=shape).astype(dtype.numpy))
    return arrays


def truncation_growth(operation, block: int) -> float:
    """How much more a sum rounded toward zero every `block` products errs (module docstring);
    1 where `block` is 0 (round to nearest)."""
    return max(1.0, math.sqrt(operation.reduction_length) / block) if block else 1.0


def tolerance(operation, reference: np.ndarray, scale: np.ndarray | float,
              block: int = 0) -> np.ndarray | float:
    """Allowed |result - reference| per element (module docstring); `scale` is the operation's
    accumulation_scale on the same inputs, `block` the products per truncated rounding of a
    truncating accumulator (0: it rounds to nearest)."""
    output_type = operation.output[1]
    if not output_type.is_float:
        return 0.0
    magnitude = np.abs(reference)
    return (unit_roundoff(output_type) * magnitude + LAMBDA * unit_roundoff(operation.accumulator)
            * (scale * truncation_growth(operation, block) + magnitude))


@dataclass
class Comparison:
    passed: bool
    max_abs_error: float
    max_rel_error: float
    allowed: float  # the tolerance at the element that used most of its own
    worst_index: tuple[int, ...]
    rule: str

    @property
    def detail(self) -> str:
        where = ",".join(map(str, self.worst_index))
        return (f"max abs err {self.max_abs_error:.3g}, max rel err {self.max_rel_error:.3g}; "
                f"allowed {self.allowed:.3g} at [{where}] ({self.rule})")


def compare(result: np.ndarray, reference: np.ndarray, operation,
            scale: np.ndarray | None = None, block: int = 0) -> Comparison:
    """`result` against the float64 `reference` under the one tolerance rule (`block`: see
    tolerance)."""
    output_type = operation.output[1]
    u_acc = unit_roundoff(operation.accumulator)
    growth = f"{truncation_growth(operation, block):.3g}*" if block else ""
    rule = ("exact" if not output_type.is_float else
            f"{unit_roundoff(output_type):.2g}*|ref| + {LAMBDA:g}*{u_acc:.2g}*({growth}sqrt(K*sum "
            f"t^2) + |ref|), K={operation.reduction_length}, {operation.accumulator.short} "
            "accumulator" + (f" truncating every {block} products" if block else ""))
    got = result.astype(np.float64)
    if result.shape != reference.shape:
        return Comparison(False, math.inf, math.inf, 0.0, (), f"shape {result.shape} is not "
                          f"{reference.shape}")
    error = np.abs(got - reference)
    error[~np.isfinite(got)] = math.inf
    allowed = tolerance(operation, reference, scale if scale is not None else 0.0, block)
    allowed = np.broadcast_to(allowed, error.shape)
    # the element nearest to (or furthest past) its own allowance
    used = error / np.maximum(allowed, np.finfo(np.float64).tiny)
    worst = np.unravel_index(int(np.argmax(used)), used.shape) if used.size else ()
    max_rel = float((error / np.maximum(np.abs(reference), 1e-30)).max(initial=0.0))
    return Comparison(bool(np.all(error <= allowed)), float(error.max(initial=0.0)), max_rel,
                      float(allowed[worst]) if used.size else 0.0,
                      tuple(int(i) for i in worst), rule)


class ReferenceCache:
    """Seeded inputs, the expected result and its accumulation scale for one operation,
    computed once and kept on disk (`generated/reference_cache/<operation>/<INPUTS>/`) for all
    its dispatches and later runs."""

    def __init__(self, folder: Path, operation, block: int = 0):
        # a folder per input scheme: caches made with other inputs are never mixed in
        self.folder = folder / INPUTS
        self.operation = operation
        self.block = block  # products per truncated rounding on the target (tolerance)
        self._expected: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def buffers(self) -> list[Buffer]:
        return [Buffer(self.folder / f"input{i}.bin", shape, dtype.mlir)
                for i, (shape, dtype) in enumerate(self.operation.inputs)]

    @property
    def expected_path(self) -> Path:
        return self.folder / "expected.npz"

    def ensure_inputs(self) -> list[Buffer]:
        buffers = self.buffers
        if all(b.path.is_file() for b in buffers):
            return buffers
        # Seeded by the operation's name: the same problem always gets the same data.
        arrays = seeded_inputs(self.operation, zlib.crc32(self.operation.name.encode()))
        for buffer, values in zip(buffers, arrays):
            with atomic_file(buffer.path) as handle:
                values.tofile(handle)
        return buffers

    def load_inputs(self) -> list[np.ndarray]:
        return [np.fromfile(b.path, dtype=dtype.numpy).reshape(shape)
                for b, (shape, dtype) in zip(self.ensure_inputs(), self.operation.inputs)]

    def expected(self) -> tuple[np.ndarray, np.ndarray]:
        """The float64 reference and the operation's accumulation scale on the same inputs."""
        if self._expected is None:
            if self.expected_path.is_file():
                with np.load(self.expected_path) as saved:
                    self._expected = saved["reference"], saved["scale"]
            else:
                inputs = self.load_inputs()
                self._expected = (self.operation.reference(*inputs),
                                  self.operation.accumulation_scale(*inputs))
                with atomic_file(self.expected_path) as handle:
                    np.savez(handle, reference=self._expected[0], scale=self._expected[1])
        return self._expected

    def compare(self, result: np.ndarray) -> Comparison:
        reference, scale = self.expected()
        return compare(result, reference, self.operation, scale, self.block)

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
    worst_index: tuple[int, ...]  # the element that used most of its allowance
    ok: bool
    allowed: float = 0.0  # the tolerance at that element
    rule: str = ""  # what the tolerance is and scales with
    output: int = 0  # which of a function's results

    @property
    def detail(self) -> str:
        where = ",".join(map(str, self.worst_index))
        return (f"max abs err {self.max_abs:.3g}, max rel err {self.max_rel:.3g}; allowed "
                f"{self.allowed:.3g} at output {self.output} [{where}], {self.rule}")


def agreement(got: np.ndarray, expected: np.ndarray, output: int = 0) -> Agreement:
    """How far `got` is from `expected`: integers must match exactly, floats within
    AGREEMENT_RTOL of their type times (|expected| + the output's RMS)."""
    if got.shape != expected.shape:
        return Agreement(np.inf, np.inf, int(expected.size), (), False, 0.0,
                         f"shape {'x'.join(map(str, got.shape))} is not "
                         f"{'x'.join(map(str, expected.shape))}", output)
    a, b = got.astype(np.float64), expected.astype(np.float64)
    error = np.abs(a - b)
    error[np.isnan(a) != np.isnan(b)] = np.inf
    error[np.isnan(a) & np.isnan(b)] = 0.0
    kind = np.dtype(expected.dtype).name
    rtol = AGREEMENT_RTOL.get(kind, 0.0)
    scale = float(np.sqrt(np.nanmean(b * b))) if b.size else 0.0
    allowed = rtol * (np.abs(b) + scale)
    used = error / np.maximum(allowed, np.finfo(np.float64).tiny)
    worst = np.unravel_index(int(np.argmax(used)), used.shape) if used.size else ()
    rule = (f"{rtol:g} x (|expected| + its rms {scale:.3g}) for {kind}" if rtol
            else f"exact for {kind}")
    return Agreement(float(error.max(initial=0.0)),
                     # relative to |expected|, floored where it crosses zero
                     float((error / np.maximum(np.abs(b), 1e-3 * scale or 1.0)).max(initial=0.0)),
                     int(np.count_nonzero(error > allowed)), tuple(int(i) for i in worst),
                     bool(np.all(error <= allowed)),
                     float(allowed[worst]) if used.size else 0.0, rule, output)


def outputs_agreement(got: list[np.ndarray], expected: list[np.ndarray]) -> Agreement:
    """All of a function's results at once: the first that disagrees, else the one nearest to
    its tolerance."""
    if len(got) != len(expected):
        return Agreement(np.inf, np.inf, 0, (), False, 0.0,
                         f"{len(got)} results where {len(expected)} were expected")
    checks = [agreement(g, e, i) for i, (g, e) in enumerate(zip(got, expected))]
    if not checks:
        return Agreement(0.0, 0.0, 0, (), True, 0.0, "no results")
    failed = [c for c in checks if not c.ok]
    if failed:
        return failed[0]
    return max(checks, key=lambda c: c.max_abs / c.allowed if c.allowed else 0.0)


def non_finite(arrays: list[np.ndarray]) -> str:
    """'' when every float element is finite, else which output holds NaN or inf and how many."""
    for i, array in enumerate(arrays):
        if array.dtype.kind in "fV":  # bf16 is a "V" dtype
            values = array.astype(np.float64)
            bad = int(np.count_nonzero(~np.isfinite(values)))
            if bad:
                return f"output {i} has {bad} NaN/inf of {values.size} elements"
    return ""
