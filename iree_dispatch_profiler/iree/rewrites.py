"""Rewrites of a model's linalg input (after IREE's input phase) that no IREE flag offers, each
with why; autotune.py --model measures one on the whole model before adopting it.

depthwise_taps: a 2-D depthwise convolution as the sum of its kernel taps. IREE 3.13 lowers
PyTorch's `linalg.depthwise_conv_2d_nchw_chw` to scalar code (its conv vectorizer takes
channels-last depthwise only); the same arithmetic written as one elementwise op over KH*KW
shifted slices of the input vectorizes along the contiguous width like any elementwise op.
On an AVX2 EPYC, alone: 1x144x56x56 3x3 3.80 -> 0.16 ms, batch 2 19.5 -> 0.39 ms, 7x7 16.2 ->
0.97 ms, stride 2 8.2 -> 2.7 ms; a MobileNetV2 block's whole call 5.7-7.4 -> 1.5-2.0 ms. IREE's
channels-last depthwise (`_nhwc_hwc`) vectorizes, and taps were slower there (0.24 -> 0.26 ms):
it is left alone."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from iree_dispatch_profiler.iree import modules

DEPTHWISE = "linalg.depthwise_conv_2d_nchw_chw"  # input NxCxHxW, kernel CxKHxKW
MAX_TAPS = 49  # 7x7 (ConvNeXt); a larger kernel makes an elementwise op of too many inputs


@dataclass(frozen=True)
class Rewrite:
    name: str
    why: str
    apply: Callable[[str], tuple[str, int]]  # module text -> (rewritten text, ops rewritten)


def _ints(attribute) -> list[int]:
    from iree.compiler import ir

    return [int(v) for v in ir.DenseIntElementsAttr(attribute)]


def _rewritable(op) -> bool:
    from iree.compiler import ir

    if op.name != DEPTHWISE or len(op.operands) != 3 or len(op.results) != 1:
        return False
    types = [ir.RankedTensorType(v.type) for v in op.operands]
    if not all(t.has_static_shape for t in types):
        return False
    _, kh, kw = types[1].shape
    return kh * kw <= MAX_TAPS and all(isinstance(t.element_type, ir.FloatType) for t in types)


def _as_taps(op) -> None:
    """Replace one depthwise convolution `op` by an elementwise linalg.generic over its taps:
    out = init + sum over (kh, kw) of input[strided slice at (kh, kw)] * kernel[kh, kw, :]."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, linalg, tensor

    x, k, init = op.operands
    x_type, k_type = ir.RankedTensorType(x.type), ir.RankedTensorType(k.type)
    out_type = ir.RankedTensorType(op.results[0].type)
    strides = _ints(op.attributes["strides"]) if "strides" in op.attributes else [1, 1]
    dilations = _ints(op.attributes["dilations"]) if "dilations" in op.attributes else [1, 1]
    channels, kh_count, kw_count = k_type.shape
    element = out_type.element_type
    rank = out_type.rank
    identity = ir.AffineMap.get_identity(rank)
    per_channel = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(1)])
    with ir.InsertionPoint(op), op.location:
        slices, taps = [], []
        for kh in range(kh_count):
            for kw in range(kw_count):
                slices.append(tensor.ExtractSliceOp(
                    ir.RankedTensorType.get(out_type.shape, x_type.element_type), x, [], [], [],
                    [0, 0, kh * dilations[0], kw * dilations[1]], out_type.shape,
                    [1, 1, *strides]).result)
                taps.append(tensor.ExtractSliceOp(
                    ir.RankedTensorType.get([channels], k_type.element_type), k, [], [], [],
                    [0, kh, kw], [channels, 1, 1], [1, 1, 1]).result)
        maps = [identity] * len(slices) + [per_channel] * len(taps) + [identity]
        generic = linalg.GenericOp(
            [out_type], slices + taps, [init],
            ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
            ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * rank))
        block = generic.regions[0].blocks.append(
            *[x_type.element_type] * len(slices), *[k_type.element_type] * len(taps), element)
        with ir.InsertionPoint(block):
            def widened(value):
                return value if value.type == element else arith.extf(element, value)
            total = block.arguments[-1]
            for i in range(len(slices)):
                product = arith.mulf(widened(block.arguments[i]),
                                     widened(block.arguments[len(slices) + i]))
                total = arith.addf(total, product)
            linalg.YieldOp([total])
    op.results[0].replace_all_uses_with(generic.results[0])
    op.erase()


def depthwise_taps(text: str) -> tuple[str, int]:
    """`text` with every static, floating-point NCHW depthwise convolution (up to MAX_TAPS taps)
    written as the sum of its taps; and how many were."""
    from iree.compiler import ir

    with ir.Context() as context:
        module = modules.parse(text, "the model", context)
        found = [op.operation for op in modules.walk(module.operation) if _rewritable(op.operation)]
        for op in found:
            _as_taps(op)
        if found:
            module.operation.verify()
        return (str(module) if found else text), len(found)


REWRITES = (
    Rewrite("depthwise_taps", "depthwise convolutions as sums of their kernel taps: one "
            "elementwise op that vectorizes along the width, where IREE runs PyTorch's NCHW "
            "depthwise convolution as scalar code", depthwise_taps),
)
