"""Attention: out = softmax(Q K^T * scale) V per batch x head, as iree_linalg_ext.attention: the
operation, its MLIR, its numpy reference, its tuning space per target and generator options."""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from iree_dispatch_profiler.core import values
from iree_dispatch_profiler.core.library import (DECOMPOSED_CONFIGURATION, DEFAULT_CONFIGURATION,
                                                 DataType, Device, Target,
                                                 TensorDescription, TuningConfiguration, UserError)
from iree_dispatch_profiler.ops import cpu_tiles
from iree_dispatch_profiler.ops.mlir_text import attribute_dictionary, function, tensor_type

# The loops, in the order of the indexing maps emitted below (IREE's own order): the tile lists
# of a config follow it.
LOOPS = ("b", "m", "k1", "k2", "n")
MAPS = ("(b, m, k1)", "(b, k2, k1)", "(b, k2, n)", "()", "(b, m, n)")  # Q, K, V, scale, result


@dataclass(frozen=True)
class AttentionOperation:
    """Q: batch x m x k1, K: batch x k2 x k1, V: batch x k2 x n -> batch x m x n; batch is the
    model's batch times its heads. Scaled by 1/sqrt(k1), as PyTorch's SDPA does."""

    batch: int
    m: int
    k1: int
    k2: int
    n: int
    dtype: DataType = DataType.f32  # of Q, K, V and the result
    kind = "attention"

    @property
    def name(self) -> str:
        return f"attention_{self.batch}x{self.m}x{self.k1}x{self.k2}x{self.n}_{self.dtype.short}"

    @property
    def scale(self) -> float:
        """1/sqrt(k1), rounded to the element type as the emitted constant is."""
        return float(self.dtype.numpy.type(1 / math.sqrt(self.k1)))

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k2 * (self.k1 + self.n)

    @property
    def bytes(self) -> int:
        b = self.batch
        return (b * self.m * self.k1 + b * self.k2 * self.k1 + b * self.k2 * self.n
                + b * self.m * self.n) * self.dtype.bytes

    @property
    def reduction_length(self) -> int:
        """What rounding accumulates over: the softmax-weighted sum of k2 rows of V."""
        return self.k2

    @property
    def compile_flags(self) -> tuple[str, ...]:
        return ()

    @property
    def inputs(self) -> list[tuple[tuple[int, ...], DataType]]:
        b = self.batch
        return [((b, self.m, self.k1), self.dtype), ((b, self.k2, self.k1), self.dtype),
                ((b, self.k2, self.n), self.dtype)]

    @property
    def output(self) -> tuple[tuple[int, ...], DataType]:
        return (self.batch, self.m, self.n), self.dtype

    @property
    def arguments(self) -> str:
        return (f"--batch_count={self.batch} --m={self.m} --k1={self.k1} --k2={self.k2} "
                f"--n={self.n} --dtype={self.dtype.short} --scale={self.scale:.6g}")

    def report_fields(self) -> dict:
        t = self.dtype.short
        return {"op_kind": self.kind, "m": self.m, "n": self.n, "k": self.k1,
                "batch_count": self.batch, "lhs": t, "rhs": t, "result": t,
                "split_k_mode": "N/A", "split_k_slices": "N/A"}

    def compute(self, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                dtype=np.float64) -> np.ndarray:
        """softmax(Q K^T * scale) V through BLAS in `dtype` (float64: the reference)."""
        q, k, v = (a.astype(dtype, copy=False) for a in (query, key, value))
        scores = (q @ np.swapaxes(k, -1, -2)) * dtype(self.scale)
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        return weights @ v

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        return self.compute(*inputs)

    @property
    def accumulator(self) -> DataType:
        """IREE sums in f32 but rounds the softmax weights to the element type before they
        meet V (as flash attention does): that rounding, u of the element type per term,
        dominates for f16 and bf16."""
        return self.dtype

    def accumulation_scale(self, query: np.ndarray, key: np.ndarray,
                           value: np.ndarray) -> np.ndarray:
        """sqrt(k2 * sum_j (p_j v_j)^2) per output element, p the softmax weights: the partial
        sums of the weighted sum over k2 rows of V (as for a matmul of P and V)."""
        q, k, v = (a.astype(np.float64) for a in (query, key, value))
        scores = (q @ np.swapaxes(k, -1, -2)) * self.scale
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        return np.sqrt(self.k2 * (np.square(weights) @ np.square(v)))

    def emit_mlir(self, function_name: str, config: TuningConfiguration) -> str:
        (q_shape, t), (k_shape, _), (v_shape, _) = self.inputs
        q, k, v = (tensor_type(s, t) for s in (q_shape, k_shape, v_shape))
        out = tensor_type(*self.output)
        loops = ", ".join(LOOPS)
        maps = ", ".join(f"affine_map<({loops}) -> {m}>" for m in MAPS)
        attributes = ["compilation_info = #compilation"] if config.source_compilation_info else []
        return function(
            config, function_name, f"%query: {q}, %key: {k}, %value: {v}", out,
            f"  %scale = arith.constant {self.scale!r} : {t.mlir}\n"
            f"  %empty = tensor.empty() : {out}\n"
            f"  %result = iree_linalg_ext.attention <{{indexing_maps = [{maps}]}}>"
            f"{attribute_dictionary(attributes)}\n"
            f"      ins(%query, %key, %value, %scale : {q}, {k}, {v}, {t.mlir}) outs(%empty : {out}) {{\n"
            "    ^bb0(%score: f32):\n"
            "      iree_linalg_ext.yield %score : f32\n"
            f"  }} -> {out}\n")

    def to_json(self) -> dict:
        return {"kind": self.kind, "batch": self.batch, "m": self.m, "k1": self.k1, "k2": self.k2,
                "n": self.n, "dtype": self.dtype.short}

    @classmethod
    def from_json(cls, data: dict) -> "AttentionOperation":
        return cls(data["batch"], data["m"], data["k1"], data["k2"], data["n"],
                   DataType.parse(data["dtype"]))


def cpu_configuration(tile: cpu_tiles.AttentionTile) -> TuningConfiguration:
    """LinalgExtTileAndVectorize over (b, m, k1, k2, n): one head at a time, k1 whole."""
    t = tile
    return cpu_tiles.configuration(cpu_tiles.tile_config_name(t.dm, t.dn, t.vm, t.vn, t.vk2),
                                   [1, t.dm, 0, 0, t.dn], [1, t.vm, 0, 0, t.vn],
                                   [0, 0, 0, t.vk2, 0], "LinalgExtTileAndVectorize")


def tuning_configurations(op: AttentionOperation, target: Target) -> list[TuningConfiguration]:
    """IREE's default, plus on llvm-cpu its decomposition into matmuls and tile configs."""
    configs = [DEFAULT_CONFIGURATION]
    if target.device is Device.LLVMCPU:
        configs += [DECOMPOSED_CONFIGURATION]
        configs += [cpu_configuration(t) for t in
                    cpu_tiles.attention_tiles(target.resolved_cpu(), op.m, op.n, op.k1, op.k2)]
    return configs


# ---------------------------------------------------------------------------------------------
# The generator's part: options and operations (ops.registry).
OPERATION = AttentionOperation
# (batch x heads, m, k1, k2, n): a BERT-base layer's 12 heads at sequence 128, and 8 heads of
# a longer context.
PREDEFINED_SHAPES = [(12, 128, 64, 128, 64), (8, 256, 64, 256, 64)]


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "attention (with --problem-b: batch x heads, --problem-m: queries, --problem-n: value "
        "head dim)")
    group.add_argument("--problem-k1", type=values.parse_sizes, default=None, metavar="SIZES",
                       help="query/key head dim (default: predefined shapes)")
    group.add_argument("--problem-k2", type=values.parse_sizes, default=None, metavar="SIZES",
                       help="keys (sequence length of K and V)")


def operations(args: argparse.Namespace, kind: str,
               data_types: list[tuple[TensorDescription, ...]]) -> list[AttentionOperation]:
    """Attentions in each floating-point type of `data_types` whose inputs and result agree."""
    if args.problems_file is not None:
        raise UserError("--problems-file has no attention shapes: give --problem-b, --problem-m, "
                        "--problem-n, --problem-k1 and --problem-k2")
    given = [args.problem_b, args.problem_m, args.problem_k1, args.problem_k2, args.problem_n]
    if all(v is None for v in given):
        shapes = PREDEFINED_SHAPES
    elif any(v is None for v in given):
        raise UserError("attention takes --problem-b, --problem-m, --problem-n, --problem-k1 and "
                        "--problem-k2 together")
    else:
        shapes = [(b, m, k1, k2, n) for b in args.problem_b for m in args.problem_m
                  for k1 in args.problem_k1 for k2 in args.problem_k2 for n in args.problem_n]
    types = list(dict.fromkeys(a.dtype for a, b, c in data_types
                               if a.dtype == b.dtype == c.dtype and a.dtype.is_float))
    return [AttentionOperation(*shape, dtype=t) for shape in shapes for t in types]
