"""Rewrites of a model's linalg input (after IREE's input phase) that no IREE flag offers, each
with why; autotune.py --model measures them on the whole model before adopting one.

The first three take the convolutions PyTorch exports channels-first that IREE 3.13 runs as
scalar code (its conv vectorizer takes channels-last depthwise convs only, and no flag reaches
grouped ones: im2col, channels-last and data tiling all left a grouped conv at 9.2 ms), and
write the same arithmetic from ops IREE vectorizes: shifted (strided, dilated) slices of the
input, one per kernel tap.
- depthwise_taps: an NCHW depthwise conv as one elementwise op, the sum over its taps of a
  slice times the tap's channel vector; it vectorizes along the contiguous width. Alone, on an
  AVX2 EPYC: 1x144x56x56 3x3 3.80 -> 0.16 ms, batch 2 19.5 -> 0.39 ms, 7x7 16.2 -> 0.97 ms,
  stride 2 8.2 -> 2.7 ms. IREE's channels-last depthwise (`_nhwc_hwc`) vectorizes, and taps
  were slower there (0.24 -> 0.26 ms): it is left alone.
- grouped_taps: an NCHW grouped conv of unit width stride (and rows of at least
  TAPS_MIN_WIDTH) as one op summing, over the taps, the filter's tap (GxFxC) contracted with
  the tap's slice: the input read in place, no im2col copy. ResNeXt's, tuned inside the
  bottleneck (Zen 4): 0.173 ms, 167 GFLOP/s, where grouped_im2col's contraction took 0.27 ms
  and its nine tap copies 0.29 ms. Its op carries its own config: IREE's on AVX2 computes one
  position at a time.
- grouped_im2col, for the other grouped convs (strided along the width: their slices are
  strided reads, which the im2col copy makes once; or of narrow rows): an NCHW grouped conv
  as its taps' slices joined along the channels (im2col, per group) and one batched
  contraction over them with the filter reordered to match:
  ResNeXt's 1x256x28x28, 32 groups, 3x3: 9.2 -> 1.6-2.3 ms (PyTorch eager 0.75 ms) on an AVX2
  EPYC. The filter is the contraction's first operand, its filters M and the output's
  positions N: on an AVX-512 EPYC its contraction then ran 0.45 ms against 1.54 alone, and
  0.24 ms (122 GFLOP/s) tuned inside the model, where the other order left the tuner no tile
  config (n = 8 filters) and ran at 21.6 GFLOP/s.

The fourth cuts the arithmetic of dense 3x3 stride-1 convolutions, which IREE already runs near
the compute ceiling: winograd applies IREE's Winograd F(6,3) pass (no flag applies it right to
PyTorch's convs: the pass drops the bias, and IREE's hoisting leaves the filter transform in
every call) and then writes its input and output transforms as channels-last weighted sums,
which IREE vectorizes along the channels: IREE's own ops transform one channel's 8x8 tile at a
time and store it to 64 places tiles x channels apart. A UNet block's 128-channel 32x32 conv
on an Emerald Rapids: IREE's transforms 0.93 ms (0.74 ms in, 0.19 ms out, with the channels
padded to 144 so that those stores did not share a few cache sets), the weighted sums and
their transposes from and to NCHW 0.44 ms.

The fifth cuts causal attention's arithmetic: IREE 3.13 computes every query against every
key and adds the mask, where a causal mask gives the keys after a query no weight.
causal_blocks splits the queries into blocks, each against the keys up to its last query only
(PyTorch's flash attention skips those blocks too): 8 blocks do 56% of the work.

The sixth, cache_attention, takes a decode step's attention (few queries) whose K and V are the KV cache
joined with the step's own keys and values (torch.cat): IREE copies the joined K and V on every
call, and under data tiling with the attention decomposed packs them again for its matmuls,
where PyTorch reads the cache where it lies. It writes the softmax out over the pieces (each
piece's scores, their max and sum chained through the pieces, each piece's weighted values
summed), so that the cache is read in place, and marks the model's other matmuls with IREE's
data tiling hint (iree.opt.data_tiling: where any op carries it, data tiling takes those only),
which keeps its own contractions unpacked. Where K and V repeat grouped KV heads for their query
heads (LLaMA's repeat_interleave, a copy), its loops run over the KV heads and each one's query
heads, and the cache is read once per KV head, not copied into every query head. GPT-2 small's
decode step (511 cached tokens, d 768) on an Emerald Rapids, per-dispatch medians: 0.844 ->
0.617 ms, the concat copies (0.065 ms x 2) and the cache's packs (0.080 + 0.058 ms) gone; a
LLaMA-style step (2 KV heads for 8, d 512) under O3: 0.570 -> 0.260 ms, IREE's attention op
(0.29 ms for one query) and the repeated cache's copies gone.

The seventh takes a gather: torch-mlir lowers adaptive pooling (the AdaptiveAvgPool2d((1, 1))
that ends torchvision's classifiers) to a generic over the window that reads each element of
a padded copy with tensor.extract, which IREE runs as scalar code. global_pool reads the input
through its indexing map where the pool is global: in a small CNN classifier exported from
PyTorch, a pool of 64 x 16 x 16 floats took 96 us, half of the model's dispatch time (Zen 4);
with it rewritten, the model's dispatches went from 0.264 ms (IREE's default) to 0.081 ms
under Winograd and channels-last, where without it they took 0.190 ms.
The eighth takes PyTorch's Conv1d (audio front ends), which IREE runs as the 1-D op as is (its
im2col flag takes 2-D convolutions only): conv1d_taps writes it as grouped_im2col writes a
grouped conv of one group, its taps' strided slices joined and one contraction. A wav2vec-style
front end (Conv1d 1->64 k10 s5, Conv1d 64->64 k3 s2, a depthwise Conv1d, LayerNorm, Linear) on
16000 samples: 5.35x [4.55, 6.26] against IREE's default rewritten, and its tuned dispatches
took 0.764 ms where IREE's default took 6.345 ms (Zen 4). At batch 1 the contraction is a
named matmul, and where one reduces fewer than SHALLOW_K elements (the first conv over raw
samples: 1 channel x 10 taps), the others get IREE's data tiling hint and that one stays out
of data tiling.

The ninth depends on the CPU: packed_matmuls writes a matmul (a Linear layer's, also on a batch
of sequences: a batch matmul of one B, its batches rows) as data tiling does, packs, a
linalg.mmt4d and an unpack, but with the register tile of cpu_tiles.register_tile (AVX-512
12x32, or 8x32 where that pads the op's rows less; AVX2 6x16, NEON 12x8) where data tiling
takes IREE's (AVX-512 16x16, whose microkernel loads 17 vectors for 16 FMAs: load-bound on two
FMA units). IREE computes a weight's pack at load (a weight passed in as an argument: every
call, as data tiling does); the activations' pack fuses with their producer. IREE's default
lowers every f32 mmt4d to its microkernel, which runs other tiles as scalar code, so the
rewritten model compiles with ukernels off (Rewrite.flags). A BERT layer on an Emerald Rapids,
its four projections tuned inside the model: 258-303 GFLOP/s where the microkernel reached
202-225, the call 9.35 -> 7.88 ms under SCHED_BATCH (PyTorch eager 7.89).
packed_matmuls_swapped, measured in its place, packs the same matmuls to compute C^T = W X^T,
the weight's rows the tile's rows and the positions its columns, and writes the elementwise ops
between two such products again over (features, positions) where each of their operands is per
feature: the next pack then copies N0-wide rows where packed_matmuls' transposes each M0 x N0
tile, and a channels-first model's own transposes cancel the product's (a ConvNeXt block on a
Zen 3: the dispatch of its GELU 1.9-2.2 -> 0.9-1.2 ms, its last 1.0-1.2 -> 0.2-0.25). The
tenth, patch_matmuls, writes a patch embedding's conv (stride = kernel) as the patches' rows
times the filter's rows, a Linear's matmul, which packed_matmuls, applied after it, then packs
too. A matmul into anything but zeros (a conv's bias broadcast) is packed from zeros and the
accumulator added after the unpack: packed, IREE hoisted the pack of a parameter's broadcast
bias into an initializer it vectorized whole (a 64x400 bias: one 4800-lane vector, 23 s of LLVM
for a dilated-TCN block; 2.2 s after). pointwise_matmuls, before it too, writes a 1x1 NCHW conv
of one image as the filter times the image's channels by positions (NCHW as it lies: reshapes,
no transpose), which packed_matmuls then packs: ResNeXt's two 256 -> 256 1x1 convs over 28x28
on a Zen 3, 2.65 -> 1.88 ms, where IREE's im2col and data tiling ran its 8x8 microkernel.

The eleventh, conv3d_im2col, takes PyTorch's Conv3d (video, volumes), which IREE runs as
scalar code and whose im2col flag takes 2-D convolutions only: its taps' slices joined and one
contraction, as conv1d_taps. On an Emerald Rapids, a 3-D UNet's double conv (16 -> 32 -> 32
channels, 3x3x3, 16x32x32, batch norm, ReLU): IREE's default 218.8 ms, rewritten and tuned
50.1 ms (PyTorch eager 35.3 ms: data tiling's pack of the joined taps, 27 times the input,
takes half the call); with global_pool, which takes 1-D and 3-D pools as 2-D ones, a Conv3d 8
-> 16 with a global pool went from 3.75 to 0.22 ms of dispatches. The twelfth,
conv3d_as_conv2d, takes the same convs as one channels-last 2-D conv over their depth taps
(each output depth a batch, its channels the KD depth taps' slices joined): a KD-fold copy of
the input where im2col makes a KD*KH*KW-fold one, and a 2-D conv, which IREE runs as direct
vector code (and Winograd, after it in the list, takes). The same block, in one session:
6.63 ms, conv3d_im2col 51.1 ms, and with Winograd 7.79 ms (at 48 and 96 channels its
transforms cost more than the products they save); tuned, 5.78 ms a call against PyTorch
eager's 32.8 ms, its 2-D convs at 273 GFLOP/s.

The thirteenth, conv_transpose_phases, takes PyTorch's ConvTranspose1d, 2d and 3d (UNet
decoders, GAN generators, vocoders), which torch-mlir lowers to a conv over the input spread
stride apart in zeros: stride^2 times the products (2-D), most of them of zeros. Each output
phase (its position modulo the stride) is reached by its own taps, at consecutive input shifts:
a conv per phase of its taps alone over the input itself (one stacked matmul where the kernel
is the stride), then the phases interleaved. A DCGAN generator (Zen 4): 2.47x [2.40, 2.55] over
IREE's default, the tuned call 1.33 ms, where one conv over the shifts' span of every phase
(2.25x the products) took 4.55 ms. The fourteenth, nearest_upsample, takes nearest-neighbour
upsampling by whole factors, which torch-mlir lowers to a gather (tensor.extract at an index
computed from the loop indices: scalar code), as a broadcast of each element to its block; it
evaluates the index computation over every loop index to know the factors (1x128x64x64 by 2:
2.3-3.2 -> 0.87-0.97 ms, Zen 4, one session). The fifteenth, rational_erf, writes the f32 erf
of PyTorch's exact GELU as one rational function (ERF_NUMERATOR): IREE's approximation selects
each coefficient of three pieces, and a Whisper-tiny stem's unpack + GELU dispatch took 3.27 ms
with it, 2.55 ms rewritten, 1.72 ms with no erf at all (Zen 3). The sixteenth,
narrow_int_matmuls, takes the integer matmul of a model quantized by hand: CPU PyTorch has no
int8 matmul, so `x.to(torch.int32) @ w.to(torch.int32)` is written, and torch-mlir sums those
widened copies in i64, which IREE runs with no microkernel (and the tuner takes no i64). The
i8 x i8 -> i32 matmul of the sources gives the same sums wherever they fit i32, which the
depth bounds (NARROW_MAX_DEPTH); it is widened after, and IREE folds that into the i32 the
model truncates to."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod
from typing import Any, Callable

from iree_dispatch_profiler.core.library import KEEP_TRANSPOSES, NO_UKERNELS, CpuTarget, DataType
from iree_dispatch_profiler.iree import modules, tunable
from iree_dispatch_profiler.ops import cpu_tiles

DEPTHWISE = "linalg.depthwise_conv_2d_nchw_chw"  # input NxCxHxW, filter CxKHxKW
GROUPED = "linalg.conv_2d_ngchw_gfchw"  # input NxGxCxHxW, filter GxFxCxKHxKW, output NxGxFxOHxOW
CONV_1D = "linalg.conv_1d_ncw_fcw"  # input NxCxW, filter FxCxK, output NxFxOW
CONV_3D = "linalg.conv_3d_ncdhw_fcdhw"  # input NxCxDxHxW, filter FxCxKDxKHxKW
# Winograd F(6,3): the layouts IREE's pass takes (filter FxCx3x3, then 3x3xCxF), its mark
# for the convs it is to convert, and the pass
WINOGRAD_CONVS = ("linalg.conv_2d_nchw_fchw", "linalg.conv_2d_nhwc_hwcf")
WINOGRAD_MARK = "__winograd_conv"
WINOGRAD_PASS = ("builtin.module(util.func(iree-linalg-ext-convert-conv2d-to-winograd), "
                 "func.func(iree-linalg-ext-convert-conv2d-to-winograd))")  # IREE's, MLIR's
ATTENTION = "iree_linalg_ext.attention"
RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")
# Query blocks of causal_blocks: at most 8 (they do 56% of the work; each is several
# dispatches) of at least 128 rows, rounded up to 16 (the data-tiled matmuls' tile). A causal
# block of seq 256 in 4 blocks of 64 failed to compile decomposed and data-tiled (a dispatch
# over 32 KiB of stack); seq 1024, 8 heads of 64, in 8 blocks: 4.1x faster decomposed and
# data-tiled, 1.75x under IREE's default (Zen 4)
CAUSAL_MAX_BLOCKS = 8
CAUSAL_MIN_ROWS = 128
CAUSAL_ROUND = 16
# A mask value that gives its score no weight: exp underflows to exactly 0 (-inf, or the
# float minimum that Hugging Face models add)
MASKED_BELOW = -1e30
# arith.cmpi's predicates (slt ... uge) as the relation of lhs to rhs
CMPI = {2: "<", 3: "<=", 4: ">", 5: ">=", 6: "<", 7: "<=", 8: ">", 9: ">="}
FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
POOL_COMBINES = ("arith.addf", "arith.maximumf")  # average (summed, then divided) and max
POOL_SPATIAL = (1, 2, 3)  # adaptive pools of Conv1d, Conv2d and Conv3d models
MAX_TAPS = 49  # 7x7 (ConvNeXt); a larger kernel makes an elementwise op of too many inputs
# The narrowest output row grouped_taps takes: a vector of f32 on the widest SIMD. Below it,
# IREE's own config of its op (untuned, as the rewrite search measures it) was slower than the
# scalar named conv (ResNeXt-50's 7x7, 32 groups of 32: 6.5 against 5.9 ms; grouped_im2col
# 1.0 ms, tuned 0.44; Zen 4), so the search would keep the named conv: im2col takes those.
TAPS_MIN_WIDTH = 16
# grouped_taps pads the input's rows to a multiple of this: a whole vector of f32 on the widest
# SIMD (and so of every narrower one)
FLAT_ROW = 16


@dataclass(frozen=True)
class Rewrite:
    name: str
    why: str
    # module text (and with `targeted`, the CPU) -> (rewritten text, ops rewritten)
    apply: Callable[..., tuple[str, int]]
    # flag sets (tuning.flags) it is also measured under, each against the model's own source
    # under them: where its gain shows only beside what they do
    under: tuple[str, ...] = ()
    # flags every build of the rewritten model takes, last on the command line (the answer too)
    flags: tuple[str, ...] = ()
    targeted: bool = False  # its rewrite depends on the CPU
    # the rewrite it is the other way of writing (the same ops, done otherwise): measured in
    # its place, alone and joined with the others, never beside it
    instead_of: str = ""

    def run(self, text: str, cpu: CpuTarget) -> tuple[str, int]:
        return self.apply(text, cpu) if self.targeted else self.apply(text)


def _ints(attribute) -> list[int]:
    from iree.compiler import ir

    return [int(v) for v in ir.DenseIntElementsAttr(attribute)]


def _window(op, attribute: str, spatial: int = 2) -> list[int]:
    """A convolution's strides or dilations (ones where the op leaves them out)."""
    return _ints(op.attributes[attribute]) if attribute in op.attributes else [1] * spatial


def _conv_window(strides: list[int], dilations: list[int]) -> dict:
    """A named convolution's strides and dilations attributes, as its builder takes them."""
    from iree.compiler import ir

    return {name: ir.Attribute.parse(f"dense<{values}> : vector<{len(values)}xi64>")
            for name, values in (("strides", strides), ("dilations", dilations))}


def _static_types(op, element: str = "F32Type") -> list | None:
    """The ranked types of `op`'s operands where every one is static of `element` (an
    ir type class's name: F32Type, FloatType for any float); None otherwise."""
    from iree.compiler import ir

    types = [ir.RankedTensorType(v.type) for v in op.operands]
    kind = getattr(ir, element)
    ok = all(t.has_static_shape and isinstance(t.element_type, kind) for t in types)
    return types if ok else None


def _takes(name: str, spatial: int = 2):
    """A check of an op: whether it is a static, floating-point `name` op of at most MAX_TAPS
    taps (over its filter's last `spatial` dims)."""
    def check(op) -> bool:

        if op.name != name or len(op.operands) != 3 or len(op.results) != 1:
            return False
        types = _static_types(op, "FloatType")
        return types is not None and prod(types[1].shape[-spatial:]) <= MAX_TAPS
    return check


def _slice(value, offsets: list[int], sizes: list[int], strides: list[int] | None = None,
           shape: list[int] | None = None):
    """`value`'s slice at `offsets` of `sizes` (`strides` apart, 1 unless given), as a tensor
    of `shape` (`sizes` unless given: a rank-reducing slice drops unit dims)."""
    from iree.compiler import ir
    from iree.compiler.dialects import tensor

    element = ir.RankedTensorType(value.type).element_type
    return tensor.ExtractSliceOp(ir.RankedTensorType.get(sizes if shape is None else shape,
                                                         element), value, [], [], [], offsets,
                                 sizes, strides or [1] * len(sizes)).result


def _tap_slices(op, spatial: int = 2) -> list:
    """One slice of the input per kernel tap (row-major over the taps): what the tap multiplies
    at every output position, the output's shape with the input's channels."""
    from iree.compiler import ir

    x, k, _ = op.operands
    x_type, out_type = ir.RankedTensorType(x.type), ir.RankedTensorType(op.results[0].type)
    strides, dilations = (_window(op, a, spatial) for a in ("strides", "dilations"))
    lead = x_type.shape[:-spatial]  # batch, (groups,) channels
    sizes = [*lead, *out_type.shape[-spatial:]]
    kernel = ir.RankedTensorType(k.type).shape[-spatial:]
    return [_slice(x, [0] * len(lead) + [t * d for t, d in zip(tap, dilations)], sizes,
                   [1] * len(lead) + strides)
            for tap in itertools.product(*(range(size) for size in kernel))]


def _filter_taps(op) -> list:
    """The filter's slice at each kernel tap (row-major over the taps, as _tap_slices): its
    leading dims (depthwise: channels; grouped: groups, filters, channels)."""
    from iree.compiler import ir

    *lead, kh_count, kw_count = ir.RankedTensorType(op.operands[1].type).shape
    return [_slice(op.operands[1], [0] * len(lead) + [kh, kw], [*lead, 1, 1], shape=lead)
            for kh in range(kh_count) for kw in range(kw_count)]


def _generic(inputs: list, maps: list, init, reductions: int, combine) -> Any:
    """A linalg.generic over `inputs` into `init` (parallel loops, then `reductions` reduction
    loops); its body yields combine(arguments widened to the output's type, accumulator)."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, linalg

    out_type = ir.RankedTensorType(init.type)
    element = out_type.element_type
    loops = maps[-1].n_dims
    iterators = ["parallel"] * (loops - reductions) + ["reduction"] * reductions
    generic = linalg.GenericOp(
        [out_type], inputs, [init], ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
        ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{i}>") for i in iterators]))
    block = generic.regions[0].blocks.append(
        *[ir.RankedTensorType(v.type).element_type for v in inputs], element)
    with ir.InsertionPoint(block):
        args = [a if a.type == element else arith.extsi(element, a)
                if isinstance(element, ir.IntegerType) else arith.extf(element, a)
                for a in block.arguments[:-1]]
        linalg.YieldOp([combine(args, block.arguments[-1])])
    return generic


def _depthwise_as_taps(op):
    """out = init + sum over the taps of slice * the filter's channel vector for the tap."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith

    init = op.operands[2]
    slices, taps = _tap_slices(op), _filter_taps(op)
    identity = ir.AffineMap.get_identity(4)
    per_channel = ir.AffineMap.get(4, 0, [ir.AffineDimExpr.get(1)])

    def combine(args, total):
        for x, w in zip(args[:len(slices)], args[len(slices):]):
            total = arith.addf(total, arith.mulf(x, w))
        return total
    return _generic(slices + taps, [identity] * len(slices) + [per_channel] * len(taps) +
                    [identity], init, 0, combine)


def _im2col_operands(op) -> tuple:
    """Of a grouped conv: the filter GxFxCxKHxKW reordered to Gx F x (KH KW C), and the taps'
    slices joined along the channels to N x G x (KH KW C) x OH x OW (tap-major: index
    t * C + c), the two operands of its contraction."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    _, k, init = op.operands
    k_type = ir.RankedTensorType(k.type)
    groups, filters, channels, kh_count, kw_count = k_type.shape
    n, _, _, oh, ow = ir.RankedTensorType(init.type).shape
    depth = kh_count * kw_count * channels
    slices = _tap_slices(op)
    joined = tensor.ConcatOp(ir.RankedTensorType.get(
        [n, groups, depth, oh, ow], ir.RankedTensorType(slices[0].type).element_type), 2,
        slices).result
    reordered = linalg.transpose(
        k, outs=[tensor.EmptyOp([groups, filters, kh_count, kw_count, channels],
                                k_type.element_type).result],
        permutation=[0, 1, 3, 4, 2])
    return _reshaped(reordered.results[0], [groups, filters, depth], [[0], [1], [2, 3, 4]]), joined


def _grouped_as_im2col(op):
    """out = init + the batched contraction of a grouped conv's _im2col_operands."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith

    matrix, joined = _im2col_operands(op)
    d = [ir.AffineDimExpr.get(i) for i in range(6)]  # n, g, f, oh, ow, then the depth
    # The filter first: IREE takes the first operand's dims as M and the second's as N, and
    # vectorizes N, which must be the output's contiguous positions (oh, ow), not its filters
    maps = [ir.AffineMap.get(6, 0, [d[1], d[2], d[5]]),
            ir.AffineMap.get(6, 0, [d[0], d[1], d[5], d[3], d[4]]), ir.AffineMap.get(6, 0, d[:5])]
    return _generic([matrix, joined], maps, op.operands[2], 1,
                    lambda args, total: arith.addf(total, arith.mulf(args[0], args[1])))


def _summed_taps(taps: list, slices: list, init, positions: int, batch: bool = True):
    """init + the sum over the taps of the filter's tap (GxFxC) contracted with the tap's
    slice over the channels ([N x] G x C x `positions` dims: without `batch`, no images). The
    products are summed before the accumulator is added: IREE vectorizes a reduction only
    where the accumulator has one combiner."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith

    lead = int(batch)
    loops = 3 + lead + positions  # [n,] g, f, the positions, then the channels
    d = [ir.AffineDimExpr.get(i) for i in range(loops)]
    g, f = d[lead], d[lead + 1]
    # The filter's taps first: the tuner reads the first operand's dims as M, the filters, and
    # vectorizes N, the output's contiguous positions (as grouped_im2col orders its operands)
    maps = ([ir.AffineMap.get(loops, 0, [g, f, d[-1]])] * len(taps)
            + [ir.AffineMap.get(loops, 0, [*d[:lead], g, d[-1], *d[lead + 2:-1]])]
            * len(slices)
            + [ir.AffineMap.get(loops, 0, d[:-1])])

    def combine(args, total):
        products = [arith.mulf(w, x) for w, x in zip(args[:len(taps)], args[len(taps):])]
        summed = products[0]
        for product in products[1:]:
            summed = arith.addf(summed, product)
        return arith.addf(total, summed)
    return _generic(taps + slices, maps, init, 1, combine).results[0]


def _grouped_as_taps(op, cpu: CpuTarget) -> list:
    """out = init + the sum over the taps of each tap's contraction (_summed_taps): one op
    that reads the input where it lies, with no im2col copy. Of unit height stride, over the
    input's rows padded to whole vectors and flattened, so that each tap's slice is one
    contiguous run and the positions one loop whose vectors never straddle a row end (28-wide
    rows: ResNeXt's conv in the tuned call 0.327 -> 0.146 ms, Emerald Rapids); the columns past
    the output's width are computed and dropped. That op carries its config
    (cpu_tiles.summed_taps_configuration): IREE's own on AVX2 computes one position at a time,
    and the rewrite search, which measures a rewrite under the configs it compiles with, kept
    ResNeXt's scalar conv on a Zen 3 (0.90x). Of one image, the op has no images loop: IREE
    folds a unit loop away and the config with it."""
    from iree.compiler import ir

    x, _, init = op.operands
    taps = _filter_taps(op)
    if _window(op, "strides")[0] != 1:
        return [_summed_taps(taps, _tap_slices(op), init, 2)]
    n, groups, channels, height, width = ir.RankedTensorType(x.type).shape
    *lead, out_h, out_w = ir.RankedTensorType(init.type).shape
    kernel = ir.RankedTensorType(op.operands[1].type).shape[-2:]
    dilations = _window(op, "dilations")
    row = -(-width // FLAT_ROW) * FLAT_ROW
    batch = n != 1
    images = [n] if batch else []
    # the rows and their columns as one dim (of one image, its unit dim dropped too)
    flattened = [[0], [1], [2], [3, 4]] if batch else [[0, 1], [2], [3, 4]]
    # a row more: the last tap's run of the last output row reaches past the input's last row
    flat = _reshaped(_zero_padded(x, [n, groups, channels, height + 1, row]),
                     [*images, groups, channels, (height + 1) * row], flattened)
    count = out_h * row
    slices = [_slice(flat, [0] * (len(images) + 2) + [kh * dilations[0] * row + kw * dilations[1]],
                     [*images, groups, channels, count])
              for kh in range(kernel[0]) for kw in range(kernel[1])]
    start = _reshaped(_zero_padded(init, [*lead, out_h, row]), [*images, *lead[1:], count],
                      flattened)
    summed = _summed_taps(taps, slices, start, 1, batch)
    summed.owner.attributes["compilation_info"] = ir.Attribute.parse(
        cpu_tiles.summed_taps_configuration(cpu, lead[2], count, batch).compilation_info)
    rows = _reshaped(summed, [*lead, out_h, row], flattened)
    return [_slice(rows, [0] * 5, [*lead, out_h, out_w])]


def _replaced(module, takes, replacement) -> int:
    """Every op of `module` `takes` accepts replaced by `replacement(op)` (an op, or a value
    per result), in place; how many were."""
    from iree.compiler import ir

    found = [op.operation for op in modules.walk(module.operation) if takes(op.operation)]
    for op in found:
        with ir.InsertionPoint(op), op.location:
            new = replacement(op)
        for result, fresh in zip(op.results, new if isinstance(new, list) else new.results):
            result.replace_all_uses_with(fresh)
        op.erase()
    return len(found)


def _rewrite(text: str, takes, replacement, after=None) -> tuple[str, int]:
    """`text` with every op `takes` accepts replaced (_replaced), and then, where any was,
    `after(module)` done to the whole module; how many were."""
    from iree.compiler import ir

    with ir.Context() as context:
        module = modules.parse(text, "the model", context)
        count = _replaced(module, takes, replacement)
        if not count:
            return text, 0
        if after is not None:
            after(module)
        module.operation.verify()
        return str(module), count


# The transforms are vectors along the channels, and the batch matmul's depth is the channels:
# an image's first conv (3 channels) is left direct
WINOGRAD_MIN_CHANNELS = 16


def _winograd_takes(op) -> bool:
    """A static f32 3x3 convolution of stride and dilation 1 in a layout IREE's Winograd pass
    takes (F(6,3) is too coarse for lower precisions), of WINOGRAD_MIN_CHANNELS channels and
    filters or more."""

    if op.name not in WINOGRAD_CONVS or len(op.operands) != 3:
        return False
    types = _static_types(op)
    if types is None:
        return False
    nchw = op.name == WINOGRAD_CONVS[0]
    kernel = types[1].shape[-2:] if nchw else types[1].shape[:2]
    channels = types[0].shape[1 if nchw else 3]
    filters = types[2].shape[1 if nchw else 3]
    return (kernel == [3, 3] and min(channels, filters) >= WINOGRAD_MIN_CHANNELS
            and _window(op, "strides") == _window(op, "dilations") == [1, 1])


# Winograd F(6,3) turns each 6x6 output tile into an 8x8 one. Its input and output transforms
# (IREE's matrices, LinalgExt/Utils/WinogradConstants.h): V = BT d BT^T per 8x8 input tile d,
# Y = AT m AT^T per 8x8 product tile m.
WINOGRAD_TILE = 6
WINOGRAD_BT = ((1, 0, -21 / 4, 0, 21 / 4, 0, -1, 0),
               (0, 1, 1, -17 / 4, -17 / 4, 1, 1, 0),
               (0, -1, 1, 17 / 4, -17 / 4, -1, 1, 0),
               (0, 1 / 2, 1 / 4, -5 / 2, -5 / 4, 2, 1, 0),
               (0, -1 / 2, 1 / 4, 5 / 2, -5 / 4, -2, 1, 0),
               (0, 2, 4, -5 / 2, -5, 1 / 2, 1, 0),
               (0, -2, 4, 5 / 2, -5, -1 / 2, 1, 0),
               (0, -1, 0, 21 / 4, 0, -21 / 4, 0, 1))
WINOGRAD_AT = ((1, 1, 1, 1, 1, 1, 1, 0),
               (0, 1, -1, 2, -2, 1 / 2, -1 / 2, 0),
               (0, 1, 1, 4, 4, 1 / 4, 1 / 4, 0),
               (0, 1, -1, 8, -8, 1 / 8, -1 / 8, 0),
               (0, 1, 1, 16, 16, 1 / 16, 1 / 16, 0),
               (0, 1, -1, 32, -32, 1 / 32, -1 / 32, 1))
WINOGRAD_TRANSFORMS = ("iree_linalg_ext.winograd.input_transform",
                       "iree_linalg_ext.winograd.output_transform")


def _zeros(shape: list[int], element):
    """A tensor of `shape` filled with zeros of the float or integer type `element`."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, linalg, tensor

    zero = 0 if isinstance(element, ir.IntegerType) else 0.0
    return linalg.fill(arith.constant(element, zero), outs=[tensor.EmptyOp(shape, element).result])


def _zero_padded(value, shape: list[int], low: list[int] | None = None):
    """`value` widened to `shape` by zeros: `low` before it in each dimension (none unless
    given), the rest after (a tensor.pad: IREE 3.13 folded an insert_slice into zeros, of a
    transposed pad, into an invalid one)."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, tensor

    source = ir.RankedTensorType(value.type)
    if list(source.shape) == shape:
        return value
    low = low or [0] * len(shape)
    pad = tensor.PadOp(ir.RankedTensorType.get(shape, source.element_type), value, [], [], low,
                       [s - d - b for s, d, b in zip(shape, source.shape, low)])
    block = pad.regions[0].blocks.append(*[ir.IndexType.get()] * len(shape))
    with ir.InsertionPoint(block):
        tensor.YieldOp(arith.constant(source.element_type, 0.0))
    return pad.result


def _conv_from_zero(op):
    """The convolution from a zero accumulator, marked for IREE's Winograd pass, and its old
    accumulator (PyTorch's bias) added after: the pass drops a convolution's accumulator
    (IREE 3.13: a bias-initialized conv came out without its bias)."""
    from iree.compiler import ir

    init = op.operands[2]
    out_type = ir.RankedTensorType(init.type)
    zero = _zeros(out_type.shape, out_type.element_type)
    conv = op.clone()
    conv.operands[2] = zero
    conv.attributes[WINOGRAD_MARK] = ir.UnitAttr.get()
    return _added(conv.results[0], init)


def _added(value, init):
    """init + `value`, elementwise (the op: its result is the sum)."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith

    identity = ir.AffineMap.get_identity(ir.RankedTensorType(init.type).rank)
    return _generic([value], [identity, identity], init, 0,
                    lambda args, total: arith.addf(total, args[0]))


def _permuted(value, permutation: list[int]):
    """`value` transposed: its dimension permutation[i] becomes dimension i."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    source = ir.RankedTensorType(value.type)
    empty = tensor.EmptyOp([source.shape[p] for p in permutation], source.element_type).result
    return linalg.transpose(value, outs=[empty], permutation=permutation).results[0]


def _weighted_sums(slices: list, weights, at: int, order: list[int]):
    """out[k] = sum over s of weights[k][s] * slices[s], for each row k of `weights`: one
    elementwise op whose loops are the slices' dims with k inserted at loop `at`, its output's
    dims those loops in `order`. Each weight is a constant vector over k. The channels (the
    slices' last dim) stay innermost, and k just outside them, so that IREE vectorizes the
    channels and each slice's vector, loaded once, serves all of k."""
    import numpy as np
    from iree.compiler import ir
    from iree.compiler.dialects import arith, tensor

    source = ir.RankedTensorType(slices[0].type)
    element = source.element_type
    rows = np.array(weights, dtype=np.float32)
    loops = source.rank + 1
    d = [ir.AffineDimExpr.get(i) for i in range(loops)]
    sizes = [*source.shape[:at], len(rows), *source.shape[at:]]
    columns = [arith.constant(ir.RankedTensorType.get([len(rows)], element),
                              ir.DenseElementsAttr.get(np.ascontiguousarray(rows[:, s])))
               for s in range(len(slices))]
    maps = ([ir.AffineMap.get(loops, 0, d[:at] + d[at + 1:])] * len(slices)
            + [ir.AffineMap.get(loops, 0, [d[at]])] * len(slices)
            + [ir.AffineMap.get(loops, 0, [d[i] for i in order])])
    init = tensor.EmptyOp([sizes[i] for i in order], element).result

    def combine(args, _):
        total = arith.mulf(args[0], args[len(slices)])
        for x, w in zip(args[1:len(slices)], args[len(slices) + 1:]):
            total = arith.addf(total, arith.mulf(x, w))
        return total
    return _generic(slices + columns, maps, init, 0, combine).results[0]


def _strided(value, dim: int, offset: int, count: int, stride: int):
    """`count` entries of `value` along `dim`, from `offset`, `stride` apart."""
    from iree.compiler import ir

    source = ir.RankedTensorType(value.type)
    sizes, offsets, strides = list(source.shape), [0] * source.rank, [1] * source.rank
    sizes[dim], offsets[dim], strides[dim] = count, offset, stride
    return _slice(value, offsets, sizes, strides)


def _at(value, dim: int, index: int):
    """`value` at `index` of `dim`, without that dim."""
    from iree.compiler import ir

    source = ir.RankedTensorType(value.type)
    sizes, offsets = list(source.shape), [0] * source.rank
    sizes[dim], offsets[dim] = 1, index
    return _slice(value, offsets, sizes, shape=sizes[:dim] + sizes[dim + 1:])


def _input_transform(op):
    """IREE's Winograd input transform (NCHW or NHWC image -> 8x8xNxTHxTWxC), channels-last:
    the image, its tiles made whole with zeros, as NxHxWxC; then BT along the rows (each
    tile row i: the rows 6 ty + i) and along the columns. IREE's own op transforms one
    channel's 8x8 tile at a time and stores it to 64 places tiles x channels apart."""
    from iree.compiler import ir

    image = op.operands[0]
    _, _, n, tiles_h, tiles_w, channels = ir.RankedTensorType(op.results[0].type).shape
    if _array_ints(op.attributes["image_dimensions"]) == [2, 3]:  # NCHW
        image = _permuted(image, [0, 2, 3, 1])
    side = WINOGRAD_TILE + 2  # an 8x8 input tile, 6 apart
    height, width = WINOGRAD_TILE * tiles_h + 2, WINOGRAD_TILE * tiles_w + 2
    image = _zero_padded(image, [n, height, width, channels])
    rows = _weighted_sums([_strided(image, 1, i, tiles_h, WINOGRAD_TILE) for i in range(side)],
                          WINOGRAD_BT, 3, [3, 0, 1, 2, 4])  # 8 x N x TH x W x C
    return _weighted_sums([_strided(rows, 3, j, tiles_w, WINOGRAD_TILE) for j in range(side)],
                          WINOGRAD_BT, 4, [0, 4, 1, 2, 3, 5])  # 8 x 8 x N x TH x TW x C


def _output_transform(op):
    """IREE's Winograd output transform (8x8xNxTHxTWxF -> an NCHW or NHWC image of whole
    tiles), channels-last: AT along the tiles' rows, then along their columns into
    N x TH x 6 x TW x 6 x F, the image's rows and columns; transposed to NCHW where the op's
    result is."""
    from iree.compiler import ir

    products = op.operands[0]
    _, side, n, tiles_h, tiles_w, filters = ir.RankedTensorType(products.type).shape
    rows = _weighted_sums([_at(products, 0, a) for a in range(side)], WINOGRAD_AT, 4,
                          [4, 0, 1, 2, 3, 5])  # 6 x 8 x N x TH x TW x F
    tiles = _weighted_sums([_at(rows, 1, b) for b in range(side)], WINOGRAD_AT, 4,
                           [1, 2, 0, 3, 4, 5])  # N x TH x 6 x TW x 6 x F
    image = _reshaped(tiles, [n, WINOGRAD_TILE * tiles_h, WINOGRAD_TILE * tiles_w, filters],
                      [[0], [1, 2], [3, 4], [5]])
    if _array_ints(op.attributes["image_dimensions"]) == [2, 3]:  # NCHW
        return _permuted(image, [0, 3, 1, 2])
    return image


def _transform_as_sums(op) -> list:
    return [_input_transform(op) if op.name == WINOGRAD_TRANSFORMS[0]
            else _output_transform(op)]


# What a filter transform's input may be made of to be computed at load: a global, constants,
# and reorderings of them (conv3d_as_conv2d's filter is a parameter transposed and reshaped)
LOAD_TIME_OPS = ("util.global.load", "tensor.empty", "arith.constant", "linalg.fill",
                 "tensor.insert_slice", "linalg.transpose", "tensor.collapse_shape",
                 "tensor.expand_shape")


def _load_time_slice(value) -> list | None:
    """The ops that compute `value` from globals and constants alone (LOAD_TIME_OPS),
    producers first; None where a function argument or another op feeds it."""
    from iree.compiler import ir

    ops: list = []

    def visit(v) -> bool:
        owner = v.owner
        if isinstance(owner, ir.Block) or owner.name not in LOAD_TIME_OPS:
            return False
        if any(owner == o for o in ops):
            return True
        if not all(visit(operand) for operand in owner.operands):
            return False
        ops.append(owner)
        return True

    return ops if visit(value) else None


def _hoist_filter_transforms(module) -> None:
    """Each Winograd filter transform of a global (a parameter) computed once (_hoisted): IREE
    refuses the 3x3 -> 8x8 filter (ResNet's 128x128x3x3: 2.15 ms of a 5.5 ms call on a Zen 4)."""
    _hoisted(module, [op for op in modules.walk(module.operation)
                      if op.name == "iree_linalg_ext.winograd.filter_transform"], "winograd")


def _hoisted(module, ops: list, suffix: str) -> None:
    """Each of `ops` (of operands: a value computed from one global alone, LOAD_TIME_OPS, and an
    empty tensor it writes into) computed once, in an initializer into a global of its own
    (the global's name and `suffix`), and read from that global where it was: IREE's
    const-expr hoisting leaves in every call a value that grows the globals by over 1 MiB."""
    from iree.compiler import ir
    from iree.compiler.dialects import util

    hoisted: dict[str, str] = {}  # the op's computation -> its global's name
    for target in ops:
        computed = _load_time_slice(target.operands[0])
        empty = target.operands[1].owner
        if computed is None or isinstance(empty, ir.Block) or empty.name != "tensor.empty" \
                or empty.operands:
            continue
        loads = [op for op in computed if op.name == "util.global.load"]
        if len(loads) != 1:
            continue
        source = loads[0].attributes["global"]
        result_type = target.results[0].type
        key = f"{source} {target.operands[0].type}"
        if key not in hoisted:
            name = f"{ir.FlatSymbolRefAttr(source).value}${suffix}"
            while name in hoisted.values():  # the same global computed another way
                name += "_"
            hoisted[key] = name
            pieces = ir.Module.parse(
                f"util.global private @{name} : {result_type}\n"
                f"util.initializer {{\n"
                f"  %e = tensor.empty() : {result_type}\n"
                f"  util.global.store %e, @{name} : {result_type}\n"
                f"  util.return\n}}")
            # after the globals: initializers run in module order, after the source's own
            after = next(op for op in module.body.operations if op.name != "util.global")
            new_global, initializer = list(pieces.body.operations)
            for piece in (new_global, initializer):
                piece.detach_from_parent()
                ir.InsertionPoint(after).insert(piece)
            e, store, _ = list(initializer.regions[0].blocks[0].operations)
            copies: dict = {}  # an op of the function's slice -> its copy in the initializer
            for op in computed:
                copy = op.clone(ip=ir.InsertionPoint(store))
                for i, operand in enumerate(op.operands):
                    copy.operands[i] = copies[operand.owner].results[0]
                copies[op] = copy
            copy = target.clone(ip=ir.InsertionPoint(store))
            copy.operands[0] = copies[target.operands[0].owner].results[0]
            copy.operands[1] = e.results[0]
            store.operands[0] = copy.results[0]
        with ir.InsertionPoint(target), target.location:
            value = util.GlobalLoadOp(result_type, hoisted[key], is_immutable=True).result
        target.results[0].replace_all_uses_with(value)
        target.erase()
        for op in [empty, *reversed(computed)]:
            if not any(True for _ in op.results[0].uses):
                op.erase()


def _winograd_after_marking(module) -> None:
    """IREE's Winograd pass on the marked convs, their filter transforms hoisted, their input
    and output transforms written as sums."""
    from iree.compiler.passmanager import PassManager

    PassManager.parse(WINOGRAD_PASS).run(module.operation)
    _hoist_filter_transforms(module)
    _replaced(module, lambda op: op.name in WINOGRAD_TRANSFORMS, _transform_as_sums)


def winograd(text: str) -> tuple[str, int]:
    return _rewrite(text, _winograd_takes, _conv_from_zero, after=_winograd_after_marking)


def depthwise_taps(text: str) -> tuple[str, int]:
    return _rewrite(text, _takes(DEPTHWISE), _depthwise_as_taps)


_grouped_takes = _takes(GROUPED)


def _taps_take(op) -> bool:
    """A grouped conv of unit width stride (its slices contiguous rows) and an output row of
    at least TAPS_MIN_WIDTH."""
    from iree.compiler import ir

    return (_grouped_takes(op) and _window(op, "strides")[1] == 1
            and ir.RankedTensorType(op.results[0].type).shape[-1] >= TAPS_MIN_WIDTH)


def grouped_taps(text: str, cpu: CpuTarget) -> tuple[str, int]:
    return _rewrite(text, _taps_take, lambda op: _grouped_as_taps(op, cpu))


def grouped_im2col(text: str) -> tuple[str, int]:
    return _rewrite(text, lambda op: _grouped_takes(op) and not _taps_take(op),
                    _grouped_as_im2col)


def _attention_maps(rank: int) -> list[str]:
    """The indexing maps of an attention whose operands have `rank` dims (the leading ones
    batch): Q (m, k1), K (k2, k1), V (k2, n), the scale, the mask (m, k2), out (m, n)."""
    batch = [f"d{i}" for i in range(rank - 2)]
    m, n, k1, k2 = (f"d{i}" for i in range(rank - 2, rank + 2))
    dims = ", ".join(batch + [m, n, k1, k2])
    return [f"affine_map<({dims}) -> ({', '.join(batch + pair if pair else [])})>"
            for pair in ([m, k1], [k2, k1], [k2, n], [], [m, k2], [m, n])]


def _producer_dims(value, dims: list[int]):
    """The op that makes `value` through reshapes, and which of its result's dims `dims` (of
    `value`) are; None where a dim is merged with another that is not a unit."""
    found = _producer_chain(value, dims)
    return None if found is None else found[:2]


def _copied_dims(op, dims: list[int]) -> list[int] | None:
    """Where `op` is a copy of its one input into more dims (a broadcast: torch-mlir's
    repeat_interleave of grouped KV heads), which of the input's dims its result's `dims` are;
    None where `op` is no such copy or a dim is one it adds."""
    from iree.compiler import ir

    if op.name != "linalg.generic" or len(op.operands) != 2:
        return None
    body = list(op.regions[0].blocks[0].operations)
    if len(body) != 1 or list(body[0].operands) != [op.regions[0].blocks[0].arguments[0]]:
        return None
    source, result = (ir.AffineMapAttr(m).value
                      for m in ir.ArrayAttr(op.attributes["indexing_maps"]))
    if result != ir.AffineMap.get_identity(result.n_dims):
        return None
    read = _dim_positions(source)
    return [read.index(d) for d in dims] if all(d in read for d in dims) else None


def _dim_positions(affine_map) -> list[int | None]:
    """Each result of `affine_map`: the position of the dim it is, None if it is no dim."""
    from iree.compiler import ir

    return [e.position if isinstance(e, ir.AffineDimExpr) else None for e in affine_map.results]


def _producer_chain(value, dims: list[int], through_copies: bool = False):
    """_producer_dims, and the reshapes (and with `through_copies`, the copies of
    _copied_dims) on the way from that op's result to `value`, each with which of its
    result's dims `dims` are (from `value` back)."""
    from iree.compiler import ir

    chain: list = []
    while not isinstance(value.owner, ir.Block):
        op = value.owner.operation
        copied = _copied_dims(op, dims) if through_copies else None
        if copied is not None:
            chain.append((op, dims))
            dims, value = copied, op.operands[0]
            continue
        if op.name not in RESHAPES or len(op.operands) != 1:
            return op, dims, chain
        chain.append((op, dims))
        groups = _groups_of(op)
        source = ir.RankedTensorType(op.operands[0].type).shape
        if op.name == "tensor.collapse_shape":  # a result dim is a group of the source's
            wide = [[d for d in groups[i] if source[d] != 1] for i in dims]
            if any(len(w) != 1 for w in wide):
                return None
            dims = [w[0] for w in wide]
        else:  # a source dim is a group of the result's
            result = ir.RankedTensorType(value.type).shape
            owner = {d: i for i, g in enumerate(groups) for d in g}
            if any(result[d] != 1 for i in dims for d in groups[owner[i]] if d != i):
                return None
            dims = [owner[i] for i in dims]
        value = op.operands[0]
    return None


def _ints_of(array) -> list[int]:
    from iree.compiler import ir

    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(array)]


def _groups_of(reshape) -> list[list[int]]:
    """An expand_shape's or collapse_shape's reassociation, as lists of dims."""
    return [_ints_of(g) for g in reshape.attributes["reassociation"]]


def _constant(value) -> float | None:
    from iree.compiler import ir

    if isinstance(value.owner, ir.Block) or value.owner.operation.name != "arith.constant":
        return None
    attribute = value.owner.operation.attributes["value"]
    return ir.FloatAttr(attribute).value if isinstance(attribute, ir.FloatAttr) else None


def _is_causal_mask(mask) -> bool:
    """Whether `mask` (..., query, key) gives every key after its query no weight: made
    (through reshapes) by a generic of no inputs that selects on its query and key indices,
    a masking constant where the key is later."""
    from iree.compiler import ir

    rank = ir.RankedTensorType(mask.type).rank
    found = _producer_dims(mask, [rank - 2, rank - 1])
    if found is None:
        return False
    generic, (query, key) = found
    if generic.name != "linalg.generic" or len(generic.operands) != 1:
        return False
    (out_map,) = ir.ArrayAttr(generic.attributes["indexing_maps"])  # its indices: its dims
    if ir.AffineMapAttr(out_map).value != ir.AffineMap.get_identity(
            ir.RankedTensorType(generic.results[0].type).rank):
        return False
    body = list(generic.regions[0].blocks[0].operations)
    yielded = body[-1].operands[0] if body and len(body[-1].operands) == 1 else None
    if yielded is None or isinstance(yielded.owner, ir.Block):
        return False
    select = yielded.owner.operation
    if select.name != "arith.select" or isinstance(select.operands[0].owner, ir.Block):
        return False
    compare = select.operands[0].owner.operation
    if compare.name != "arith.cmpi":
        return False
    relation = CMPI.get(ir.IntegerAttr(compare.attributes["predicate"]).value)
    sides = []
    for operand in compare.operands:
        index = None if isinstance(operand.owner, ir.Block) else operand.owner.operation
        if index is None or index.name != "linalg.index":
            return False
        sides.append(ir.IntegerAttr(index.attributes["dim"]).value)
    if relation is None or sorted(sides) != sorted([query, key]) or query == key:
        return False
    if sides[0] == key:  # as query <relation> key
        relation = FLIPPED[relation]
    chosen, other = (_constant(v) for v in select.operands[1:])
    masks = [v is not None and v < MASKED_BELOW for v in (chosen, other)]
    # where the key is later the condition is false (q >= k, q > k), or true (q < k, q <= k)
    if masks == [False, True]:
        return relation in (">=", ">")
    if masks == [True, False]:
        return relation in ("<", "<=")
    return False


def _plain_attention(op) -> bool:
    """A static attention of the usual maps (_attention_maps, with a mask or without one) that
    yields its scores as they are."""
    from iree.compiler import ir

    if op.name != ATTENTION or len(op.operands) not in (5, 6) or len(op.results) != 1:
        return False
    tensors = [v for i, v in enumerate(op.operands) if i != 3]  # all but the scale
    if not all(ir.RankedTensorType(t.type).has_static_shape for t in tensors):
        return False
    expected = _attention_maps(ir.RankedTensorType(tensors[0].type).rank)
    if len(op.operands) == 5:  # no mask
        expected = expected[:4] + expected[5:]
    maps = [str(ir.AffineMapAttr(m)) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    body = list(op.regions[0].blocks[0].operations) if op.regions else []
    return (maps == expected and len(body) == 1
            and list(body[0].operands) == list(op.regions[0].blocks[0].arguments))


def _causal_takes(op) -> bool:
    """A plain attention (_plain_attention) with a causal mask and enough queries for two
    blocks."""
    from iree.compiler import ir

    return (_plain_attention(op) and len(op.operands) == 6
            and ir.RankedTensorType(op.operands[0].type).shape[-2] >= 2 * CAUSAL_MIN_ROWS
            and _is_causal_mask(op.operands[4]))


def _query_blocks(rows: int) -> list[tuple[int, int]]:
    count = min(CAUSAL_MAX_BLOCKS, rows // CAUSAL_MIN_ROWS)
    size = -(-rows // count)
    size = -(-size // CAUSAL_ROUND) * CAUSAL_ROUND
    return [(start, min(rows, start + size)) for start in range(0, rows, size)]


def _causal_as_blocks(op):
    """The attention once per block of queries, against the keys up to the block's last query
    only (the mask gives the later ones no weight), the blocks' outputs joined."""
    from iree.compiler import ir
    from iree.compiler.dialects import tensor

    q, k, v, scale, mask, out = op.operands
    out_type = ir.RankedTensorType(out.type)
    rank = out_type.rank
    keys = ir.RankedTensorType(k.type).shape[-2]

    def rows(value, axis: int, start: int, stop: int, axis2: int | None = None, stop2=0):
        shape = ir.RankedTensorType(value.type).shape
        offsets, sizes = [0] * len(shape), list(shape)
        offsets[axis], sizes[axis] = start, stop - start
        if axis2 is not None:
            sizes[axis2] = stop2
        return _slice(value, offsets, sizes)

    pieces = []
    for start, stop in _query_blocks(out_type.shape[-2]):
        last = min(keys, stop)
        operands = (rows(q, rank - 2, start, stop), rows(k, rank - 2, 0, last),
                    rows(v, rank - 2, 0, last), scale,
                    rows(mask, rank - 2, start, stop, rank - 1, last),
                    rows(out, rank - 2, start, stop))
        block = op.clone()  # after its operands' slices
        for i, value in enumerate(operands):
            block.operands[i] = value
        block.results[0].set_type(ir.RankedTensorType.get(
            [*out_type.shape[:-2], stop - start, out_type.shape[-1]], out_type.element_type))
        pieces.append(block.results[0])
    return tensor.ConcatOp(out_type, rank - 2, pieces)


def causal_blocks(text: str) -> tuple[str, int]:
    return _rewrite(text, _causal_takes, _causal_as_blocks)


# The most queries cache_attention takes: it writes the scores out (queries x keys a head),
# which for a decode step's few queries is a row, and for a prompt IREE's own attention keeps
# in registers
CACHE_MAX_QUERIES = 16
# The named contractions IREE's data tiling takes: cache_attention marks them for it, which
# keeps its own contractions (over the cache, read in place) out of it
DATA_TILED = ("linalg.matmul", "linalg.batch_matmul")
DATA_TILING_HINT = "iree.opt.data_tiling"
# A contraction of a shorter reduction than one 512-bit vector of f32 is not packed: not by
# packed_matmuls, and not by data tiling where a rewrite marks contractions (_mark_for_data_tiling)
SHALLOW_K = 16


def _joined_keys(value, rank: int):
    """Where an attention's K or V (`rank` dims, keys second-innermost) is a tensor.concat
    along the keys (through reshapes): the concat and the reshapes from it to `value`, each
    with its result's dim of the keys (as _producer_chain); None otherwise."""

    found = _producer_chain(value, [rank - 2], through_copies=True)
    if found is None or found[0].name != "tensor.concat":
        return None
    concat, (dim,), chain = found
    return (concat, chain) if _concat_dim(concat) == dim else None


def _concat_dim(concat) -> int:
    from iree.compiler import ir

    return ir.IntegerAttr(concat.attributes["dim"]).value


def _piece_keys(concat) -> list[int]:
    """The keys of each piece a concat joins."""
    from iree.compiler import ir

    return [ir.RankedTensorType(p.type).shape[_concat_dim(concat)] for p in concat.operands]


def _key_layout(joined, operand) -> tuple[list[int], list[int], int] | None:
    """How the pieces of a joined K or V (`joined`: _joined_keys of `operand`) are read:
    (the batch dims the attention's are a regrouping of, the dims of those batch dims plus
    keys and head dims each piece's dims are, the position in the chain of a copy that
    repeats grouped KV heads, -1 without one); None where the copy is not such a repeat."""
    from iree.compiler import ir

    _, chain = joined
    shape = ir.RankedTensorType(operand.type).shape
    copies = [i for i, (op, _) in enumerate(chain) if op.name not in RESHAPES]
    if not copies:
        return list(shape[:-2]), list(range(len(shape))), -1
    if len(copies) > 1:
        return None
    at = copies[0]
    copy, (keys,) = chain[at]
    wide = ir.RankedTensorType(copy.results[0].type).shape
    source = ir.ArrayAttr(copy.attributes["indexing_maps"])[0]
    read = _dim_positions(ir.AffineMapAttr(source).value)
    # from the copy on, reshapes that only regroup the batch dims (their order kept)
    if (keys != len(wide) - 2 or wide[-1] != shape[-1] or len(shape) < 3
            or prod(wide[:-2]) != prod(shape[:-2]) or None in read):
        return None
    return list(wide[:-2]), read, at  # type: ignore[return-value]


def _key_pieces(joined, copy_at: int) -> list:
    """The concat's operands, each reshaped as its result is on the way to the attention (to
    the copy at `copy_at` in the chain, where there is one: the pieces are read through it)."""
    from iree.compiler import ir

    concat, chain = joined
    pieces = []
    for piece, keys in zip(concat.operands, _piece_keys(concat)):
        for op, (at,) in reversed(chain[copy_at + 1:]):
            shape = list(ir.RankedTensorType(op.results[0].type).shape)
            shape[at] = keys
            piece = _reshaped(piece, shape, _groups_of(op))
        pieces.append(piece)
    return pieces


def _rebatched(value, batch: list[int]):
    """`value` (batch dims, then two) with its batch dims regrouped into `batch` (the same
    elements in the same order)."""
    from iree.compiler import ir

    shape = ir.RankedTensorType(value.type).shape
    old = list(shape[:-2])
    if old == batch:
        return value
    if len(old) > 1:
        value = _reshaped(value, [prod(old), *shape[-2:]],
                          [list(range(len(old))), [len(old)], [len(old) + 1]])
    if len(batch) > 1:
        value = _reshaped(value, [*batch, *shape[-2:]],
                          [list(range(len(batch))), [len(batch)], [len(batch) + 1]])
    return value


def _cache_takes(op) -> bool:
    """A plain f32 attention (_plain_attention; its mask, if any, a float one) of at most
    CACHE_MAX_QUERIES queries, whose K and V are each joined along the keys from pieces of the
    same sizes (a KV cache and the step's own keys and values)."""
    from iree.compiler import ir

    if not _plain_attention(op):
        return False
    q, k, v = op.operands[:3]
    types = [ir.RankedTensorType(t.type) for t in [q, k, v, *op.operands[4:]]]
    if (not all(isinstance(t.element_type, ir.F32Type) for t in types)
            or types[0].shape[-2] > CACHE_MAX_QUERIES):
        return False
    joined = [_joined_keys(t, types[0].rank) for t in (k, v)]
    if None in joined:
        return False
    layouts = [_key_layout(j, t) for j, t in zip(joined, (k, v))]
    if None in layouts or layouts[0][0] != layouts[1][0]:  # type: ignore[index]
        return False
    return _piece_keys(joined[0][0]) == _piece_keys(joined[1][0])  # type: ignore[index]


def _cache_attention(op):
    """softmax(scale * Q K^T + mask) V written out over K's and V's pieces, read where they
    lie: each piece's scores, their max and the sum of their exponentials chained through the
    pieces, and each piece's weighted values summed into one accumulator, divided by that sum
    last. Where K and V repeat grouped KV heads, the loops run over the repeat's batch dims
    (KV heads, then the query heads of each), and each piece is read once per KV head."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, linalg, math, tensor

    q, k, v, scale = op.operands[:4]
    out = op.operands[-1]
    out_type = ir.RankedTensorType(out.type)
    f32 = out_type.element_type
    joined = [_joined_keys(t, out_type.rank) for t in (k, v)]
    (wide, read_k, copy_k), (_, read_v, copy_v) = (
        _key_layout(j, t) for j, t in zip(joined, (k, v)))  # type: ignore[misc]
    keys, values = _key_pieces(joined[0], copy_k), _key_pieces(joined[1], copy_v)
    q = _rebatched(q, wide)
    # the mask's columns of each piece's keys: added to its scaled scores
    masks: list = [[] for _ in keys]
    if len(op.operands) == 6:
        mask, start = _rebatched(op.operands[4], wide), 0
        for i, piece in enumerate(keys):
            count = ir.RankedTensorType(piece.type).shape[-2]
            masks[i] = [_strided(mask, len(wide) + 1, start, count, 1)]
            start += count
    nb = len(wide)
    batch = [ir.AffineDimExpr.get(i) for i in range(nb)]
    # the loops after the batch: (queries, keys, head dims) for the scores, (queries, keys)
    # over them, (queries, value dims, keys) for the weighted values, (queries, value dims)
    x, y, z = (ir.AffineDimExpr.get(i) for i in range(nb, nb + 3))
    rows = [*wide, out_type.shape[-2]]  # the batch dims and the queries

    def maps(loops: int, *results) -> list:
        return [ir.AffineMap.get(loops, 0, [*batch, *r]) for r in results]

    def piece_map(read: list[int], key, dim):  # a piece's dims among the loops
        return ir.AffineMap.get(nb + 3, 0, [batch[r] if r < nb else key if r == nb else dim
                                            for r in read])

    def filled(value: float, shape: list[int]):
        return linalg.fill(arith.constant(f32, value),
                           outs=[tensor.EmptyOp(shape, f32).result])

    scores = [_generic([q, piece], [*maps(nb + 3, [x, z]), piece_map(read_k, y, z),
                                    *maps(nb + 3, [x, y])],
                       filled(0.0, [*rows, ir.RankedTensorType(piece.type).shape[-2]]), 1,
                       lambda a, total: arith.addf(total, arith.mulf(a[0], a[1]))).results[0]
              for piece in keys]

    def scaled(a: list):  # a piece's score, scaled, and its mask's column added
        value = arith.mulf(a[0], scale)
        return arith.addf(value, a[1]) if len(a) > 1 else value

    top = filled(float("-inf"), rows)
    for score, mask in zip(scores, masks):
        top = _generic([score, *mask], maps(nb + 2, [x, y], *[[x, y]] * len(mask), [x]), top,
                       1, lambda a, best: arith.maximumf(best, scaled(a))).results[0]
    weights = [_generic([score, *mask, top], maps(nb + 2, [x, y], *[[x, y]] * len(mask), [x],
                                                   [x, y]),
                        tensor.EmptyOp(ir.RankedTensorType(score.type).shape, f32).result, 0,
                        lambda a, _: math.exp(arith.subf(scaled(a[:-1]), a[-1])))
               .results[0] for score, mask in zip(scores, masks)]
    total = filled(0.0, rows)
    for weight in weights:
        total = _generic([weight], maps(nb + 2, [x, y], [x]), total, 1,
                         lambda a, acc: arith.addf(acc, a[0])).results[0]
    summed = filled(0.0, [*rows, out_type.shape[-1]])
    for weight, piece in zip(weights, values):
        summed = _generic([weight, piece], [*maps(nb + 3, [x, z]), piece_map(read_v, z, y),
                                            *maps(nb + 3, [x, y])], summed, 1,
                          lambda a, acc: arith.addf(acc, arith.mulf(a[0], a[1]))).results[0]
    init = out if list(out_type.shape[:-2]) == wide else tensor.EmptyOp(
        [*rows, out_type.shape[-1]], f32).result
    result = _generic([summed, total], maps(nb + 2, [x, y], [x], [x, y]), init, 0,
                      lambda a, _: arith.divf(a[0], a[1])).results[0]
    return [_rebatched(result, list(out_type.shape[:-2]))]


def _mark_for_data_tiling(module, shallow_out: bool = False) -> None:
    """IREE's data tiling hint on each DATA_TILED contraction of `module`: where any op
    carries the hint, IREE's data tiling takes those only (AnnotateDataTilingHints). With
    `shallow_out`, only where one is _shallow, and then on the others (where none is, IREE's
    own hints take them all, the generic contractions too)."""
    from iree.compiler import ir

    named = [op for op in modules.walk(module.operation) if op.operation.name in DATA_TILED]
    if shallow_out:
        deep = [op for op in named if not _shallow(op)]
        if len(deep) == len(named):
            return
        named = deep
    for op in named:
        op.operation.attributes[DATA_TILING_HINT] = ir.UnitAttr.get()


def cache_attention(text: str) -> tuple[str, int]:
    return _rewrite(text, _cache_takes, _cache_attention, after=_mark_for_data_tiling)


def _pool_maps(spatial: int) -> list[str]:
    """torch-mlir's adaptive pool's maps of its window and its output: loops N, C, the
    output's `spatial` dims (OD, OH, OW), then the window's (KD, KH, KW)."""
    loops = 2 + 2 * spatial
    dims = ", ".join(f"d{i}" for i in range(loops))
    return [f"affine_map<({dims}) -> ({', '.join(f'd{i}' for i in picked)})>"
            for picked in (range(2 + spatial, loops), range(2 + spatial))]


def _window_reads(op):
    """Of torch-mlir's adaptive pooling (a generic over N, C, the output's 1-3 spatial dims
    and its window's, whose only input is an empty i1 tensor of the window's shape and whose
    body gathers its element from a padded copy of the input with tensor.extract, guarded by
    cmpi ult/slt against the input's extent): the unpadded input and how the first result
    combines, where the pool is global (an output of ones whose window is the whole input) so
    that every guard holds; None otherwise."""
    from iree.compiler import ir

    if op.name != "linalg.generic" or len(op.operands) != 3 or len(op.results) != 2:
        return None
    iterators = [str(i).removeprefix("#linalg.iterator_type<").removesuffix(">")
                 for i in ir.ArrayAttr(op.attributes["iterator_types"])]
    spatial = iterators.count("reduction")
    if spatial not in POOL_SPATIAL or iterators != (["parallel"] * (2 + spatial)
                                                    + ["reduction"] * spatial):
        return None
    maps = [str(ir.AffineMapAttr(m)) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if maps[:2] != _pool_maps(spatial):
        return None
    window, init, _ = op.operands
    window_type, out_type = ir.RankedTensorType(window.type), ir.RankedTensorType(init.type)
    if (not isinstance(window_type.element_type, ir.IntegerType)
            or isinstance(window.owner, ir.Block) or window.owner.name != "tensor.empty"
            or not out_type.has_static_shape or out_type.shape[2:] != [1] * spatial):
        return None
    body = list(op.regions[0].blocks[0].operations)
    block_args = list(op.regions[0].blocks[0].arguments)
    extracts = [o for o in body if o.name == "tensor.extract"]
    if len(extracts) != 1 or body[-1].name != "linalg.yield":
        return None
    extract = extracts[0]
    padded = extract.operands[0]
    if isinstance(padded.owner, ir.Block) or padded.owner.name != "tensor.pad":
        return None
    pad = padded.owner
    source = pad.operands[0]
    source_type = ir.RankedTensorType(source.type)
    if (not source_type.has_static_shape or source_type.shape[2:] != window_type.shape
            or source_type.shape[:2] != out_type.shape[:2]
            or any(v != 0 for v in _array_ints(pad.attributes["static_low"]))):
        return None

    def loop_index(value) -> int | None:
        if isinstance(value.owner, ir.Block) or value.owner.name != "linalg.index":
            return None
        return ir.IntegerAttr(value.owner.attributes["dim"]).value
    indices = [loop_index(v) for v in list(extract.operands)[1:]]
    batch_one = out_type.shape[0] == 1 and _index_constant(extract.operands[1]) == 0
    if indices[1:] != [1, *range(2 + spatial, 2 + 2 * spatial)] or not (indices[0] == 0
                                                                        or batch_one):
        return None
    # the value combined into the first result: the extract through guarding selects
    total, kept = body[-1].operands[0], extract.results[0]
    if isinstance(total.owner, ir.Block) or total.owner.name not in POOL_COMBINES:
        return None
    combine = total.owner
    if combine.operands[1] != block_args[1]:
        return None
    value = combine.operands[0]
    while value != kept:
        if isinstance(value.owner, ir.Block) or value.owner.name != "arith.select":
            return None
        condition, chosen = value.owner.operands[0], value.owner.operands[1]
        if not _guard_holds(condition, loop_index, window_type.shape):
            return None
        value = chosen
    counted = body[-1].operands[1]  # torch-mlir's count of the window: a constant
    if (isinstance(counted.owner, ir.Block) or counted.owner.name != "arith.constant"
            or any(o == counted.owner for o in body)):
        return None
    return source, combine.name, counted


def _guard_holds(condition, loop_index, window: list[int]) -> bool:
    """Whether `condition` is `index (< or <=) bound` over a window loop (the last
    len(window) loops) that never reaches the bound: true on every iteration."""
    from iree.compiler import ir

    if isinstance(condition.owner, ir.Block) or condition.owner.name != "arith.cmpi":
        return False
    predicate = ir.IntegerAttr(condition.owner.attributes["predicate"]).value
    loop = loop_index(condition.owner.operands[0])
    bound = _index_constant(condition.owner.operands[1])
    first = 2 + len(window)
    if loop not in range(first, first + len(window)) or bound is None \
            or CMPI.get(predicate) not in ("<", "<="):
        return False
    return window[loop - first] - 1 < bound


def _index_constant(value) -> int | None:
    from iree.compiler import ir

    if isinstance(value.owner, ir.Block) or value.owner.name != "arith.constant":
        return None
    attribute = value.owner.attributes["value"]
    return ir.IntegerAttr(attribute).value if isinstance(attribute, ir.IntegerAttr) else None


def _array_ints(attribute) -> list[int]:
    from iree.compiler import ir

    return list(ir.DenseI64ArrayAttr(attribute))


def _pool_takes(op) -> bool:
    return _window_reads(op) is not None


def _pool_in_place(op) -> list:
    """The same pool reading the unpadded input through its indexing map (n, c, and the
    window's loops), and its count filled in apart: a reduction of one result, which IREE
    vectorizes (with the count beside it, the pool after a channels-last conv took 52 us for
    64 x 256 floats)."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, linalg

    source, combine, counted = _window_reads(op)
    _, init, count_init = op.operands
    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    spatial = ir.RankedTensorType(source.type).rank - 2
    d = [ir.AffineDimExpr.get(i) for i in range(2 + 2 * spatial)]
    read = ir.AffineMapAttr.get(ir.AffineMap.get(2 + 2 * spatial, 0,
                                                 [d[0], d[1], *d[2 + spatial:]]))
    generic = linalg.GenericOp([init.type], [source], [init], ir.ArrayAttr.get([read, maps[1]]),
                               op.attributes["iterator_types"])
    block = generic.regions[0].blocks.append(ir.RankedTensorType(source.type).element_type,
                                             ir.RankedTensorType(init.type).element_type)
    with ir.InsertionPoint(block):
        x, total = block.arguments
        linalg.YieldOp([arith.addf(x, total) if combine == "arith.addf"
                        else arith.maximumf(x, total)])
    return [generic.result, linalg.fill(counted, outs=[count_init])]


def _conv1d_takes(op) -> bool:
    """A static floating-point channels-first 1-D convolution."""

    return (op.name == CONV_1D and len(op.operands) == 3 and len(op.results) == 1
            and _static_types(op, "FloatType") is not None)


def _reassociation(groups: list[list[int]]):
    from iree.compiler import ir

    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), i) for i in dims]) for dims in groups])


def _reshaped(value, shape: list[int], groups: list[list[int]]):
    """`value` expanded (or, to a lower rank, collapsed) to `shape` by `groups`."""
    from iree.compiler import ir
    from iree.compiler.dialects import tensor

    kind = ir.RankedTensorType(value.type)
    result = ir.RankedTensorType.get(shape, kind.element_type)
    if len(shape) < kind.rank:
        return tensor.CollapseShapeOp(result, value, _reassociation(groups)).result
    return tensor.ExpandShapeOp(result, value, _reassociation(groups), [], shape).result


def _conv1d_as_taps(op) -> list:
    """A 1-D convolution as the grouped 2-D one of one group and a unit height, written as
    grouped_im2col writes those: its taps' (strided) slices joined, and one contraction."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg

    x, k, init = op.operands
    (n, c, _), (f, _, taps), (_, _, width) = (ir.RankedTensorType(v.type).shape
                                              for v in (x, k, init))
    window = _conv_window([1, _window(op, "strides")[0]], [1, _window(op, "dilations")[0]])
    grouped = [[0], [1, 2], [3, 4]]  # N (G C) (1 W), and the filter's (G F) C (1 K)
    conv = linalg.conv_2d_ngchw_gfchw(
        _reshaped(x, [n, 1, c, 1, ir.RankedTensorType(x.type).shape[2]], grouped),
        _reshaped(k, [1, f, c, 1, taps], [[0, 1], [2], [3, 4]]),
        outs=[_reshaped(init, [n, 1, f, 1, width], grouped)], **window)
    if n > 1:
        generic = _grouped_as_im2col(conv.owner)
        conv.owner.erase()
        return [_reshaped(generic.results[0], [n, f, width], grouped)]
    # batch 1: the contraction as a named matmul, filters x (taps channels) by (taps channels)
    # x positions, on which IREE keeps the data tiling hint (the generic's unit dims are folded
    # into a new op, which drops it)
    matrix, joined = _im2col_operands(conv.owner)
    conv.owner.erase()
    depth = c * taps
    product = linalg.matmul(_reshaped(matrix, [f, depth], [[0, 1], [2]]),
                            _reshaped(joined, [depth, width], [[0, 1, 2], [3, 4]]),
                            outs=[_reshaped(init, [f, width], [[0, 1], [2]])])
    return [_reshaped(product, [n, f, width], [[0, 1], [2]])]


def _shallow(op) -> bool:
    """A contraction reducing fewer than SHALLOW_K elements (an audio front end's first conv:
    1 channel x 10 taps): packing it costs more than its products (its output unpacked,
    3.3 MB: 0.58 ms, where all its packed products took 0.13, a speech feature encoder's on
    Emerald Rapids)."""
    return tunable.describe(op, 0, "", tunable.CONTRACTION).size("k") < SHALLOW_K


def conv1d_taps(text: str) -> tuple[str, int]:
    return _rewrite(text, _conv1d_takes, _conv1d_as_taps,
                    after=lambda module: _mark_for_data_tiling(module, shallow_out=True))


def _conv3d_as_im2col(op) -> list:
    """A 3-D convolution as its taps' (strided, dilated) slices joined along the channels
    (N x (taps C) x OD x OH x OW, tap-major) and one contraction with the filter reordered to
    F x (taps C) (_filters_by_columns)."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    x, k, init = op.operands
    k_type, out_type = ir.RankedTensorType(k.type), ir.RankedTensorType(init.type)
    filters, channels, *kernel = k_type.shape
    n, _, *positions = out_type.shape
    depth, count = prod(kernel) * channels, prod(positions)
    slices = _tap_slices(op, spatial=3)
    joined = tensor.ConcatOp(ir.RankedTensorType.get(
        [n, depth, *positions], ir.RankedTensorType(x.type).element_type), 1, slices).result
    columns = _reshaped(joined, [n, depth, count], [[0], [1], [2, 3, 4]])
    reordered = linalg.transpose(
        k, outs=[tensor.EmptyOp([filters, *kernel, channels], k_type.element_type).result],
        permutation=[0, 2, 3, 4, 1])
    matrix = _reshaped(reordered.results[0], [filters, depth], [[0], [1, 2, 3, 4]])
    flat = _reshaped(init, [n, filters, count], [[0], [1], [2, 3, 4]])
    product = _filters_by_columns(matrix, columns, flat)
    return [_reshaped(product, list(out_type.shape), [[0], [1], [2, 3, 4]])]


def _filters_by_columns(matrix, columns, init):
    """init (N x F x P) + matrix (F x D) times columns (N x D x P), per batch: a named matmul
    at batch 1 (which packed_matmuls and data tiling take), a batched contraction otherwise."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, linalg

    n, filters, count = ir.RankedTensorType(init.type).shape
    depth = ir.RankedTensorType(matrix.type).shape[1]
    if n == 1:
        rows = [[0, 1], [2]]
        product = linalg.matmul(matrix, _reshaped(columns, [depth, count], rows),
                                outs=[_reshaped(init, [filters, count], rows)])
        return _reshaped(product, [n, filters, count], rows)
    d = [ir.AffineDimExpr.get(i) for i in range(4)]  # n, f, positions, then the depth
    maps = [ir.AffineMap.get(4, 0, [d[1], d[3]]), ir.AffineMap.get(4, 0, [d[0], d[3], d[2]]),
            ir.AffineMap.get(4, 0, d[:3])]
    return _generic([matrix, columns], maps, init, 1, lambda args, total: arith.addf(
        total, arith.mulf(args[0], args[1]))).result


_conv3d_takes = _takes(CONV_3D, spatial=3)


def conv3d_im2col(text: str) -> tuple[str, int]:
    return _rewrite(text, _conv3d_takes, _conv3d_as_im2col)


def _conv3d_as_conv2d(op) -> list:
    """A 3-D convolution as a 2-D one (channels-last) over its depth taps: each output depth
    is a batch of its own, whose channels are the input's depth taps' slices joined (tap-major),
    a KD-fold copy where im2col makes a KD*KH*KW-fold one; the filter reordered to
    KH x KW x (KD C) x F. The 2-D conv is what IREE's im2col and Winograd take."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    x, k, init = op.operands
    x_type, k_type = ir.RankedTensorType(x.type), ir.RankedTensorType(k.type)
    n, channels, _, height, width = x_type.shape
    filters, _, taps, _, _ = k_type.shape
    _, _, depth, out_h, out_w = ir.RankedTensorType(init.type).shape
    (stride, *strides), (dilation, *dilations) = (_window(op, a, 3)
                                                   for a in ("strides", "dilations"))
    # each depth tap's slice channels-last, N x OD x H x W x C; joined along the channels
    slices = [_permuted(_strided(x, 2, tap * dilation, depth, stride), [0, 2, 3, 4, 1])
              for tap in range(taps)]
    joined = tensor.ConcatOp(ir.RankedTensorType.get(
        [n, depth, height, width, taps * channels], x_type.element_type), 4, slices).result
    rows = [[0, 1], [2], [3], [4]]  # (N OD) H W C
    images = _reshaped(joined, [n * depth, height, width, taps * channels], rows)
    weights = _reshaped(_permuted(k, [3, 4, 2, 1, 0]),
                        [*k_type.shape[3:], taps * channels, filters], [[0], [1], [2, 3], [4]])
    start = _reshaped(_permuted(init, [0, 2, 3, 4, 1]), [n * depth, out_h, out_w, filters], rows)
    window = _conv_window(list(strides), list(dilations))
    conv = linalg.conv_2d_nhwc_hwcf(images, weights, outs=[start], **window)
    product = _reshaped(conv, [n, depth, out_h, out_w, filters], rows)
    return [_permuted(product, [0, 4, 1, 2, 3])]


def _conv3d_spatial_takes(op) -> bool:
    """A Conv3d conv3d_im2col takes with a window across the height or width: one of 1x1
    there (a (2+1)-D net's temporal conv) is a plain matmul as conv3d_im2col writes it, which
    data tiling packs, where as a 1x1 2-D conv IREE runs it as a generic matmul (22% of the
    ceiling in a video block, Emerald Rapids)."""
    from iree.compiler import ir

    return (_conv3d_takes(op)
            and prod(ir.RankedTensorType(op.operands[1].type).shape[3:]) > 1)


def conv3d_as_conv2d(text: str) -> tuple[str, int]:
    return _rewrite(text, _conv3d_spatial_takes, _conv3d_as_conv2d)


def _zero_stuffed(value) -> tuple[Any, list[int], list[int]] | None:
    """Of torch-mlir's transposed convolution's input, the input inserted `stride` apart into
    zeros: the input, its offsets and its strides along its spatial dims; None otherwise."""
    from iree.compiler import ir

    if isinstance(value.owner, ir.Block) or value.owner.name != "tensor.insert_slice":
        return None
    insert = value.owner
    if len(insert.operands) != 2:  # offsets, sizes or strides of SSA values
        return None
    source, dest = insert.operands
    offsets, sizes, strides = (_array_ints(insert.attributes[f"static_{a}"])
                               for a in ("offsets", "sizes", "strides"))
    if (not _zero_filled(dest)
            or sizes != list(ir.RankedTensorType(source.type).shape)
            or offsets[:2] != [0, 0] or strides[:2] != [1, 1] or max(strides) == 1):
        return None
    return source, offsets[2:], strides[2:]


# channels-first convs by their spatial dims: PyTorch's Conv1d, Conv2d and Conv3d
CHANNELS_FIRST = {1: CONV_1D, 2: "linalg.conv_2d_nchw_fchw", 3: CONV_3D}


def _transposed_takes(op) -> bool:
    """A static float channels-first conv of unit stride over a zero-stuffed input
    (_zero_stuffed): PyTorch's ConvTranspose1d, 2d or 3d as torch-mlir lowers it."""
    spatial = {name: dims for dims, name in CHANNELS_FIRST.items()}.get(op.name)
    return (spatial is not None and len(op.operands) == 3
            and _static_types(op, "FloatType") is not None
            and _window(op, "strides", spatial) == [1] * spatial
            and _zero_stuffed(op.operands[0]) is not None)


def _phase_shifts(kernel: int, offset: int, stride: int, dilation: int) -> list[tuple[int, int]]:
    """Along one dim of a conv over an input `stride` apart from `offset` in zeros: each tap's
    output phase a (the outputs stride*u + a it reaches) and the input row it reads there,
    u + shift; the only taps that meet an input row at those outputs."""
    reach = [tap * dilation - offset for tap in range(kernel)]
    return [(-r % stride, (-r % stride + r) // stride) for r in reach]


def _taps_placed(k, shape: list[int], sizes: list[int], places: list[tuple[list[int], list[int]]]):
    """Zeros of `shape` with taps of the filter `k` (F x C x kernel) inserted: for each place,
    the tap at its kernel index (an F x C slice), at its offsets, over `sizes`."""
    from iree.compiler import ir
    from iree.compiler.dialects import tensor

    filters, channels, *kernel = ir.RankedTensorType(k.type).shape
    taps = [_slice(k, [0, 0, *tap], [filters, channels, *[1] * len(kernel)],
                   shape=[filters, channels]) for tap, _ in places]
    placed = _zeros(shape, ir.RankedTensorType(k.type).element_type)
    for tap, (_, offsets) in zip(taps, places):
        placed = tensor.InsertSliceOp(tap, placed, [], [], [], offsets, sizes,
                                      [1] * len(shape)).result
    return placed


def _transposed_as_phases(op) -> list:
    """A transposed convolution as convs over its input (no zeros), one per output phase (its
    position modulo the stride), then the phases interleaved. Each phase is reached by its own
    taps (every stride-th, as dilated), which read the input at consecutive shifts: a conv of
    those taps alone over the input from the first shift. Where every phase has one tap (the
    kernel is the stride, a UNet's upsampling) the phases' filters are stacked into one matmul
    by the input itself. torch-mlir's conv multiplies the zeros between the input's rows and
    columns too: stride^k times these products."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    stuffed, k, init = op.operands
    taken = _zero_stuffed(stuffed)
    assert taken is not None  # as _transposed_takes found it
    x, offsets, strides = taken
    n, channels, *size = ir.RankedTensorType(x.type).shape
    filters, _, *kernel = ir.RankedTensorType(k.type).shape
    out = ir.RankedTensorType(init.type).shape[2:]
    dims = len(out)
    shifts = [_phase_shifts(*dim) for dim in zip(kernel, offsets, strides,
                                                  _window(op, "dilations", dims))]
    first = [min(d for _, d in dim) for dim in shifts]
    span = [max(d for _, d in dim) - f + 1 for dim, f in zip(shifts, first)]
    steps = [-(-o // s) for o, s in zip(out, strides)]  # outputs per phase, u
    phases = prod(strides)
    # the input's rows u + first .. u + first + span - 1 for every u: zeros where out of range
    reach = [s + p - 1 for s, p in zip(steps, span)]
    low = [max(0, -f) for f in first]
    start = [max(0, f) for f in first]
    padded = _zero_padded(x, [n, channels, *(max(r + s, z + b) for r, s, z, b in
                                               zip(reach, start, size, low))], [0, 0, *low])
    image = _slice(padded, [0, 0, *start], [n, channels, *reach])
    # the accumulator and the result: N x F x (U SH) x .. against N x (SH .. F) x U x ..
    interleaved = [[0], [1], *([2 + 2 * d, 3 + 2 * d] for d in range(dims))]
    whole = [n, filters, *(u * s for u, s in zip(steps, strides))]
    split = [n, filters, *itertools.chain(*zip(steps, strides))]  # N F U SH V SW ..
    by_phase = _permuted(_reshaped(_zero_padded(init, whole), split, interleaved),
                         [0, *(3 + 2 * d for d in range(dims)), 1, *(2 + 2 * d for d in range(dims))])
    phase_groups = [[0], list(range(1, 2 + dims)), *([d] for d in range(2 + dims, 2 + 2 * dims))]
    start_acc = _reshaped(by_phase, [n, phases * filters, *steps], phase_groups)
    element = ir.RankedTensorType(k.type).element_type
    if span == [1] * dims:
        # the phases' filters stacked, SH x .. x F x C: each tap at its phase
        stacked = _taps_placed(k, [*strides, filters, channels], [*[1] * dims, filters, channels],
                               [([t for t, _ in place], [*(a for _, (a, _) in place), 0, 0])
                                for place in itertools.product(*(enumerate(d) for d in shifts))])
        positions = [[0], [1], list(range(2, 2 + dims))]
        product = _reshaped(_filters_by_columns(
            _reshaped(stacked, [phases * filters, channels], [list(range(1 + dims)), [1 + dims]]),
            _reshaped(image, [n, channels, prod(steps)], positions),
            _reshaped(start_acc, [n, phases * filters, prod(steps)], positions)),
            [n, phases * filters, *steps], positions)
    else:
        conv = getattr(linalg, CHANNELS_FIRST[dims].removeprefix("linalg."))
        results = []
        # each from zeros, the accumulator added after: IREE 3.13 failed to distribute a conv
        # into a slice of the transposed accumulator
        acc = _zeros([n, filters, *steps], element)
        for phase in itertools.product(*(range(s) for s in strides)):
            taps = [[(t, d) for t, (a, d) in enumerate(dim) if a == want]
                    for dim, want in zip(shifts, phase)]
            if not all(taps):  # no tap reaches this phase: its accumulator alone
                results.append(acc)
                continue
            # consecutive taps of a phase read rows `gap` apart
            gap = [t[1][1] - t[0][1] if len(t) > 1 else 1 for t in taps]
            # its taps copied out one by one (a strided slice of the filter, fused into the
            # conv's dispatch, failed IREE 3.13's workgroup distribution)
            weights = _taps_placed(k, [filters, channels, *(len(t) for t in taps)],
                                   [filters, channels, *[1] * dims],
                                   [([t[j][0] for t, j in zip(taps, at)], [0, 0, *at])
                                    for at in itertools.product(*(range(len(t)) for t in taps))])
            window = _slice(image, [0, 0, *(t[0][1] - f for t, f in zip(taps, first))],
                            [n, channels, *(u + g * (len(t) - 1) for u, g, t in
                                            zip(steps, gap, taps))])
            results.append(conv(window, weights, outs=[acc], **_conv_window([1] * dims, gap)))
        product = _added(tensor.ConcatOp(ir.RankedTensorType(start_acc.type), 1,
                                         results).result, start_acc).result
    back = [0, 1 + dims, *itertools.chain(*((2 + dims + d, 1 + d) for d in range(dims)))]
    result = _reshaped(_permuted(_reshaped(product, [n, *strides, filters, *steps],
                                           phase_groups), back), whole, interleaved)
    return [result if whole[2:] == out else _slice(result, [0] * (2 + dims), [n, filters, *out])]


def conv_transpose_phases(text: str) -> tuple[str, int]:
    return _rewrite(text, _transposed_takes, _transposed_as_phases)


# the arith and math ops of an index computation, on numpy arrays
_INDEX_ARITHMETIC = {"arith.addf": "add", "arith.subf": "subtract", "arith.mulf": "multiply",
                     "arith.divf": "divide", "arith.addi": "add", "arith.subi": "subtract",
                     "arith.muli": "multiply", "arith.floordivsi": "floor_divide",
                     "arith.maximumf": "maximum", "arith.minimumf": "minimum",
                     "arith.maxsi": "maximum", "arith.minsi": "minimum", "math.floor": "floor",
                     "math.ceil": "ceil"}


def _evaluated(value, sizes: list[int], body) -> Any:
    """An index computation in a generic's `body` at every point of its loops (of `sizes`), a
    numpy array broadcast over them; None where it reads anything but the loop indices and
    constants, or an op it does not know, or mixes two loops (not separable: and its array
    would be their product's size)."""
    import numpy as np
    from iree.compiler import ir

    if isinstance(value.owner, ir.Block):
        return None
    op = value.owner
    if op.name == "linalg.index":
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        return np.arange(sizes[dim]).reshape([-1 if d == dim else 1 for d in range(len(sizes))])
    if op.name == "arith.constant":
        attribute = op.attributes["value"]
        if isinstance(attribute, ir.FloatAttr):
            return np.float32(ir.FloatAttr(attribute).value)
        return (np.int64(ir.IntegerAttr(attribute).value)
                if isinstance(attribute, ir.IntegerAttr) else None)
    if op.parent != body.owner:  # a value of the enclosing function: not the loops'
        return None
    operands = [_evaluated(v, sizes, body) for v in op.operands]
    if any(o is None for o in operands):
        return None
    if sum(n > 1 for n in np.broadcast_shapes(*(np.shape(o) for o in operands))) > 1:
        return None
    with np.errstate(all="ignore"):
        if op.name in _INDEX_ARITHMETIC:
            return getattr(np, _INDEX_ARITHMETIC[op.name])(*operands)
        if op.name in ("arith.index_cast", "arith.fptosi"):  # fptosi rounds toward zero
            return np.trunc(operands[0]).astype(np.int64)
        if op.name == "arith.sitofp" and isinstance(op.results[0].type, ir.F32Type):
            return np.asarray(operands[0]).astype(np.float32)
    return None


def _upsampled(op) -> tuple[Any, list[int]] | None:
    """Of torch-mlir's nearest-neighbour upsampling (a generic of no inputs whose body yields
    an element of its source gathered with tensor.extract, at indices computed from its loop
    indices alone): the source and each dim's integer scale, where each index is the output's
    along the same dim divided by the scale (PyTorch's floor(out * in / out)); None otherwise."""
    import numpy as np
    from iree.compiler import ir

    if (op.name != "linalg.generic" or len(op.operands) != 1 or len(op.results) != 1
            or not ir.RankedTensorType(op.results[0].type).has_static_shape):
        return None
    body = op.regions[0].blocks[0]
    yielded = list(body.operations)[-1].operands
    if (len(yielded) != 1 or isinstance(yielded[0].owner, ir.Block)
            or yielded[0].owner.name != "tensor.extract"):
        return None
    extract = yielded[0].owner
    source, *indices = extract.operands
    sizes = list(ir.RankedTensorType(op.results[0].type).shape)
    source_type = ir.RankedTensorType(source.type)
    if not source_type.has_static_shape or source_type.rank != len(sizes):
        return None
    scales = []
    for dim, (index, size, given) in enumerate(zip(indices, sizes, source_type.shape)):
        table = _evaluated(index, sizes, body)
        if table is None or size % given:
            return None
        table = np.asarray(table)
        if any(n > 1 for d, n in enumerate(table.shape) if d != dim):  # of other dims too
            return None
        scale = size // given
        if not np.array_equal(np.broadcast_to(table.reshape(-1), [size]),
                              np.arange(size) // scale):
            return None
        scales.append(scale)
    return (source, scales) if any(s > 1 for s in scales) else None


def _upsample_as_broadcast(op) -> list:
    """The upsampling as a broadcast: each source element copied to its scale's block of
    outputs (each scaled dim split in two, the source's and its copies'), which IREE
    vectorizes, where it runs the gather as scalar code."""
    from iree.compiler import ir
    from iree.compiler.dialects import tensor

    taken = _upsampled(op)
    assert taken is not None  # as nearest_upsample found it
    source, scales = taken
    given = ir.RankedTensorType(source.type)
    shape: list[int] = []
    groups: list[list[int]] = []
    kept: list[int] = []
    for size, scale in zip(given.shape, scales):
        kept.append(len(shape))
        groups.append(list(range(len(shape), len(shape) + (2 if scale > 1 else 1))))
        shape += [size, scale] if scale > 1 else [size]
    d = [ir.AffineDimExpr.get(i) for i in range(len(shape))]
    copied = _generic([source], [ir.AffineMap.get(len(shape), 0, [d[i] for i in kept]),
                                 ir.AffineMap.get_identity(len(shape))],
                      tensor.EmptyOp(shape, given.element_type).result, 0,
                      lambda args, _: args[0]).results[0]
    return [_reshaped(copied, list(ir.RankedTensorType(op.results[0].type).shape), groups)]


def nearest_upsample(text: str) -> tuple[str, int]:
    return _rewrite(text, lambda op: _upsampled(op) is not None, _upsample_as_broadcast)


def global_pool(text: str) -> tuple[str, int]:
    return _rewrite(text, _pool_takes, _pool_in_place)


# An i8 x i8 product is at most 2^14 in magnitude: a sum of this many of them fits i32
NARROW_MAX_DEPTH = (2**31 - 1) // 2**14
# The contractions narrow_int_matmuls takes, with the map of A whose last dim is the depth
NARROW_A_MAPS = {"linalg.matmul": "(d0, d2)", "linalg.batch_matmul": "(d0, d1, d3)"}


def _sign_extended_i8(value):
    """The i8 tensor that `value` sign-extends elementwise (torch-mlir's `.to(torch.int32)`: a
    linalg.generic of identity maps whose body is one arith.extsi of its input), or None."""
    from iree.compiler import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "linalg.generic" or len(owner.operands) != 2:
        return None
    source = owner.operands[0]
    identity = "(" + ", ".join(f"d{i}" for i in range(ir.RankedTensorType(value.type).rank)) + ")"
    block = owner.regions[0].blocks[0]
    body = list(block.operations)
    if (str(ir.RankedTensorType(source.type).element_type) != "i8"
            or set(_map_results(owner)) != {identity} or len(body) != 2
            or body[0].name != "arith.extsi" or body[0].operands[0] != block.arguments[0]
            or body[1].operands[0] != body[0].results[0]):
        return None
    return source


def _narrow_b(b):
    """The i8 tensor a matmul's B sign-extends, or the i8 matrix that a batch matmul's B
    broadcasts to every batch widened (a Linear's weight on a batch of sequences), or None."""
    matrix = _unbatched(b)
    return _sign_extended_i8(b) or (_sign_extended_i8(matrix) if matrix is not None else None)


def _zero_filled(value) -> bool:
    """Whether `value` is a linalg.fill of zero, float or integer."""
    from iree.compiler import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "linalg.fill":
        return False
    return _constant(owner.operands[0]) == 0.0 or _index_constant(owner.operands[0]) == 0


def _narrow_takes(op) -> bool:
    """A matmul or batch matmul of static i8 tensors each sign-extended to i32 or i64 (B also
    broadcast, _narrow_b), from zero, into i32, or into i64 over a depth whose sums fit i32
    (so that i32 sums are exact)."""
    from iree.compiler import ir

    if (op.name not in NARROW_A_MAPS or len(op.operands) != 3
            or not _static_types(op, "IntegerType")):
        return False
    a, b, init = op.operands
    result = ir.RankedTensorType(init.type).element_type
    depth = ir.RankedTensorType(a.type).shape[-1]
    return (_map_results(op)[0] == NARROW_A_MAPS[op.name]
            and _sign_extended_i8(a) is not None and _narrow_b(b) is not None
            and _zero_filled(init) and str(result) in ("i32", "i64")
            and (str(result) == "i32" or depth <= NARROW_MAX_DEPTH))


def _converted(value, element):
    """`value` elementwise as `element` (_generic's widening: extf, or extsi for integers)."""
    from iree.compiler import ir
    from iree.compiler.dialects import tensor

    shape = list(ir.RankedTensorType(value.type).shape)
    identity = ir.AffineMap.get_identity(len(shape))
    return _generic([value], [identity, identity], tensor.EmptyOp(shape, element).result, 0,
                    lambda args, _: args[0]).results[0]


def _same_contraction(op, a, b, init):
    """`op`'s matmul or batch matmul, with its indexing maps, of `a` and `b` into `init`."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg

    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    contract = linalg.matmul if op.name == "linalg.matmul" else linalg.batch_matmul
    return contract(a, b, outs=[init], indexing_maps=maps)


def _narrow_matmul(op) -> list:
    """The same contraction of the i8 tensors, summed in i32 (IREE's i8 x i8 -> i32 matmul,
    which data tiling runs on its microkernel), widened to the op's result type."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    a, b, init = op.operands
    out = ir.RankedTensorType(init.type)
    i32 = ir.IntegerType.get_signless(32)
    zeros = _zeros(list(out.shape), i32)
    narrow_b = _narrow_b(b)
    if ir.RankedTensorType(narrow_b.type).rank != ir.RankedTensorType(b.type).rank:
        empty = tensor.EmptyOp(list(ir.RankedTensorType(b.type).shape),
                               ir.RankedTensorType(narrow_b.type).element_type)
        narrow_b = linalg.broadcast(narrow_b, outs=[empty.result], dimensions=[0])
    product = _same_contraction(op, _sign_extended_i8(a), narrow_b, zeros)
    return [product if out.element_type == i32 else _converted(product, out.element_type)]


def narrow_int_matmuls(text: str) -> tuple[str, int]:
    return _rewrite(text, _narrow_takes, _narrow_matmul)


HALF_FLOATS = ("bf16", "f16")
WIDENED_WEIGHT = "__widened_weight"  # marks a weight's widening, for _hoist_widened_weights


def _half_takes(op) -> bool:
    """A matmul or batch matmul (any indexing maps) of static bf16 or f16 tensors into f32."""
    from iree.compiler import ir

    if (op.name not in ("linalg.matmul", "linalg.batch_matmul") or len(op.operands) != 3
            or not _static_types(op, "FloatType")):
        return False
    a, b, init = (ir.RankedTensorType(v.type).element_type for v in op.operands)
    return str(a) in HALF_FLOATS and str(b) in HALF_FLOATS and str(init) == "f32"


def _widened_matmul(op) -> list:
    """The same contraction of the operands widened to f32 first: each product of two bf16 or
    f16 values is exact in f32, and was summed in f32 before. A widened activation passes a
    barrier: IREE folds a widening into the matmul it feeds, back into the half matmul. A
    parameter's weight is widened at load (_hoist_widened_weights): behind a barrier IREE
    widened it in every call, and without one folded it back."""
    from iree.compiler import ir
    from iree.compiler.dialects import util

    def widened(value):
        wide = _converted(value, ir.F32Type.get())
        if _load_time_slice(value) is not None:
            wide.owner.attributes[WIDENED_WEIGHT] = ir.UnitAttr.get()
            return wide
        return util.optimization_barrier([wide.type], [wide])
    a, b, init = op.operands
    return [_same_contraction(op, widened(a), widened(b), init)]


def _hoist_widened_weights(module) -> None:
    """Each parameter's widening computed once (_hoisted): widening doubles a weight (a half
    MLP's 1536x384 f16 weights, widened and packed in every call, took 0.53 of its 1.16 ms a
    call; Zen 5)."""
    marked = [op for op in modules.walk(module.operation) if WIDENED_WEIGHT in op.attributes]
    for op in marked:
        del op.attributes[WIDENED_WEIGHT]
    _hoisted(module, marked, "f32")


def widened_half_matmuls(text: str) -> tuple[str, int]:
    return _rewrite(text, _half_takes, _widened_matmul, after=_hoist_widened_weights)


# erf(x) for f32 as Eigen's and XLA's generic_fast_erf_float write it: x clamped to [-4, 4]
# (erf is +-1 in f32 beyond), then x p(x^2) / q(x^2), odd numerator of 7 terms over an even
# denominator of 5. Against float64 erf on 2M points of [-6, 6]: 4.4e-7 at most, absolute and
# relative (4 ulp near 1).
ERF_CLAMP = 4.0
ERF_NUMERATOR = (-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04,
                 -5.69250639462346e-05, -2.10102402082508e-06, 2.77068142495902e-08,
                 -2.72614225801306e-10)  # x^1, x^3, ... x^13
ERF_DENOMINATOR = (-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03,
                   -2.13374055278905e-04, -1.45660718464996e-05)  # x^0, x^2, ... x^8


def _erf_takes(op) -> bool:
    """A scalar f32 math.erf (inside an elementwise op's body: PyTorch's exact GELU)."""
    from iree.compiler import ir

    return op.name == "math.erf" and isinstance(op.results[0].type, ir.F32Type)


def _rational_erf(op) -> list:
    """erf of the op's operand as ERF_NUMERATOR / ERF_DENOMINATOR say: one division, eleven
    multiply-adds, no selects."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, math

    f32 = ir.F32Type.get()

    def constant(value: float):
        return arith.constant(f32, ir.FloatAttr.get(f32, value))

    x = arith.maximumf(arith.minimumf(op.operands[0], constant(ERF_CLAMP)), constant(-ERF_CLAMP))
    square = arith.mulf(x, x)

    def horner(coefficients):
        total = constant(coefficients[-1])
        for coefficient in reversed(coefficients[:-1]):
            total = math.fma(square, total, constant(coefficient))
        return total
    return [arith.divf(arith.mulf(x, horner(ERF_NUMERATOR)), horner(ERF_DENOMINATOR))]


def rational_erf(text: str) -> tuple[str, int]:
    return _rewrite(text, _erf_takes, _rational_erf)


def _nchw_conv_shapes(op) -> list[list[int]] | None:
    """The input, filter and output shapes of a static f32 NCHW conv (conv_2d_nchw_fchw);
    None for any other op."""
    if op.name != CHANNELS_FIRST[2] or len(op.operands) != 3:
        return None
    types = _static_types(op)
    return None if types is None else [t.shape for t in types]


def _patch_takes(op) -> bool:
    """A static f32 NCHW conv whose stride is its kernel (larger than 1x1), undilated, over
    whole patches: a vision transformer's patch embedding (ViT 16x16, ConvNeXt 4x4)."""
    shapes = _nchw_conv_shapes(op)
    if shapes is None:
        return False
    (_, _, h, w), (_, _, kh, kw), (_, _, oh, ow) = shapes
    return (_window(op, "strides") == [kh, kw] and _window(op, "dilations") == [1, 1]
            and kh * kw > 1 and (h, w) == (oh * kh, ow * kw))


def _patches_as_matmul(op) -> list:
    """The patches as rows (N OH OW) x (C KH KW), the filter as F x (C KH KW) (a Linear's
    weight, as packed_matmuls takes one), one matmul into the accumulator's positions by
    filters, and its result back to NCHW: where IREE's im2col writes the patch conv as a
    matmul of another layout, whose data tiling left it at 67-79% of the ceiling (ViT stem,
    Emerald Rapids), this one is the Linear layers' kind."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    x, k, init = op.operands
    (n, c, _, _), (f, _, kh, kw), (_, _, oh, ow) = (ir.RankedTensorType(v.type).shape
                                                    for v in (x, k, init))
    f32 = ir.F32Type.get()
    rows, depth = n * oh * ow, c * kh * kw

    def transposed(value, shape: list[int], permutation: list[int]):
        return linalg.transpose(value, outs=[tensor.EmptyOp(shape, f32).result],
                                permutation=permutation).results[0]

    patches = transposed(_reshaped(x, [n, c, oh, kh, ow, kw], [[0], [1], [2, 3], [4, 5]]),
                         [n, oh, ow, c, kh, kw], [0, 2, 4, 1, 3, 5])
    a = _reshaped(patches, [rows, depth], [[0, 1, 2], [3, 4, 5]])
    b = _reshaped(k, [f, depth], [[0], [1, 2, 3]])
    acc = _reshaped(transposed(init, [n, oh, ow, f], [0, 2, 3, 1]), [rows, f], [[0, 1, 2], [3]])
    d = [ir.AffineDimExpr.get(i) for i in range(3)]  # m, n, k
    maps = [ir.AffineMap.get(3, 0, [d[i], d[j]])
            for i, j in ((0, 2), (1, 2), (0, 1))]
    product = linalg.matmul(a, b, outs=[acc], indexing_maps=maps)
    return [transposed(_reshaped(product, [n, oh, ow, f], [[0, 1, 2], [3]]), [n, f, oh, ow],
                       [0, 3, 1, 2])]


def patch_matmuls(text: str) -> tuple[str, int]:
    return _rewrite(text, _patch_takes, _patches_as_matmul)


def _pointwise_takes(op) -> bool:
    """A static f32 NCHW 1x1 conv of stride 1 over one image (a bottleneck's, an inverted
    residual's expand and project)."""
    shapes = _nchw_conv_shapes(op)
    return (shapes is not None and shapes[0][0] == 1 and shapes[1][2:] == [1, 1]
            and _window(op, "strides") == [1, 1])


def _pointwise_as_matmul(op) -> list:
    """The filter (F x C) times the image's channels by its positions (C x HW: NCHW as it
    lies), into the accumulator's filters by positions: no transpose either way, and the
    filter a parameter packed_matmuls packs once, at load."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg

    x, k, init = op.operands
    (_, c, h, w), (f, *_), _ = (ir.RankedTensorType(v.type).shape for v in (x, k, init))
    image = [[0, 1], [2, 3]]
    product = linalg.matmul(_reshaped(k, [f, c], [[0], [1, 2, 3]]),
                            _reshaped(x, [c, h * w], image),
                            outs=[_reshaped(init, [f, h * w], image)])
    return [_reshaped(product, [1, f, h, w], image)]


def pointwise_matmuls(text: str) -> tuple[str, int]:
    return _rewrite(text, _pointwise_takes, _pointwise_as_matmul)


# Matmul operand maps (d0 the batch of batch_matmul): A is MxK; B is KxN, or NxK as a
# Linear's weight reaches the matmul where transposes were propagated into it
_MATMUL_MAPS = {
    "linalg.matmul": ("(d0, d2)", {"(d2, d1)": False, "(d1, d2)": True}),
    "linalg.batch_matmul": ("(d0, d1, d3)", {"(d0, d3, d2)": False, "(d0, d2, d3)": True}),
}
# The fewest register tiles of rows a packed matmul takes: padding M up to whole tiles costs
# the fewer rows more (a decode step's single row would run 12 times over).
PACKED_MIN_ROW_TILES = 4


def _map_results(op) -> list[str]:
    """The results of each of a linalg op's indexing maps: `(d0, d2)`."""
    from iree.compiler import ir

    return [str(ir.AffineMapAttr(m).value).split("-> ")[1]
            for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _unbatched(value):
    """The matrix a batch matmul's B broadcasts to every batch (a Linear's weight on a batch of
    sequences: torch-mlir's broadcast generic, or linalg.broadcast), or None. Also through a
    collapse of the broadcast's leading dims into the batch: torch-mlir's Linear on a 4-D input
    (the pointwise layers of a channels-last convnet, ConvNeXt's, broadcast 1 x 56 times)."""
    from iree.compiler import ir

    owner = value.owner
    if not isinstance(owner, ir.Block) and owner.name == "tensor.collapse_shape":
        rank = ir.RankedTensorType(owner.operands[0].type).rank
        if _groups_of(owner)[-2:] != [[rank - 2], [rank - 1]]:  # the matrix dims kept
            return None
        owner = owner.operands[0].owner
    if isinstance(owner, ir.Block) or len(owner.operands) != 2:
        return None
    source = owner.operands[0]
    if ir.RankedTensorType(source.type).rank != 2:
        return None
    rank = ir.RankedTensorType(owner.results[0].type).rank
    if owner.name == "linalg.broadcast":
        return source if _array_ints(owner.attributes["dimensions"]) == list(range(rank - 2)) else None
    if owner.name != "linalg.generic":
        return None
    body = list(owner.regions[0].blocks[0].operations)
    copies = (len(body) == 1 and body[0].operands[0] == owner.regions[0].blocks[0].arguments[0])
    dims = [f"d{i}" for i in range(rank)]
    broadcast = [f"({', '.join(dims[-2:])})", f"({', '.join(dims)})"]
    return source if copies and _map_results(owner) == broadcast else None


def _static_slice(value) -> tuple[Any, list[int], list[int], list[int]] | None:
    """(source, offsets, sizes, strides) of a tensor.extract_slice of static ones, or None."""
    from iree.compiler import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "tensor.extract_slice" or len(
            owner.operands) != 1:
        return None
    return (owner.operands[0], *(list(ir.DenseI64ArrayAttr(owner.attributes[f"static_{a}"]))
                                 for a in ("offsets", "sizes", "strides")))


def _taps_packed(b, n1: int, n0: int):
    """B (K x N) as conv1d_taps joins a 1-D conv's taps (each tap's strided slice of one
    C x W input, tap-major along K), packed into (n1, K, n0, 1) tiles by one op reading the
    input in place, zero-padded past its end for the last tile's padding columns: where IREE
    copies every slice into the joined B and packs that again (a speech encoder's 256 x 1599
    copies, 0.71 ms, and their pack, 0.45, of its 10.9 ms of dispatches, profiled; with this
    op instead, its call about 7% faster). None where B is not that."""
    from iree.compiler import ir
    from iree.compiler.dialects import tensor

    owner = b.owner
    if isinstance(owner, ir.Block) or owner.name != "tensor.collapse_shape":
        return None
    concat = owner.operands[0].owner
    if isinstance(concat, ir.Block) or concat.name != "tensor.concat":
        return None
    found = [_static_slice(piece) for piece in concat.operands]
    slices = [s for s in found if s is not None]
    if len(slices) != len(found) or any(s[0] != slices[0][0] for s in slices):
        return None
    source = ir.RankedTensorType(slices[0][0].type).shape
    along, (_, _, sizes, strides) = _concat_dim(concat), slices[0]
    wide = [d for d, size in enumerate(sizes) if size != 1 and d != along]
    groups = [list(range(along + 1)), list(range(along + 1, len(source)))]
    if len(wide) != 1 or wide[0] < along or _groups_of(owner) != groups:
        return None
    w = wide[0]
    offsets = [s[1][w] for s in slices]
    step = offsets[1] - offsets[0] if len(offsets) > 1 else 0
    if (any(s[2] != sizes or s[3] != strides or any(o for d, o in enumerate(s[1]) if d != w)
            for s in slices)
            or offsets != [offsets[0] + j * step for j in range(len(offsets))]
            or any(size != 1 for d, size in enumerate(source) if d not in (along, w))
            or sizes[along] != source[along] or strides[along] != 1):
        return None
    channels, stride, taps = source[along], strides[w], len(slices)
    matrix = _reshaped(slices[0][0], [channels, source[w]], groups)
    reach = offsets[0] + (taps - 1) * step + stride * (n1 * n0 - 1) + 1
    matrix = _zero_padded(matrix, [channels, max(reach, source[w])])
    d = [ir.AffineDimExpr.get(i) for i in range(4)]  # column tile, tap, channel, column
    read = ir.AffineMap.get(4, 0, [d[2], d[0] * (n0 * stride) + d[3] * stride + d[1] * step
                                   + offsets[0]])
    element = ir.RankedTensorType(b.type).element_type
    tiles = _generic([matrix], [read, ir.AffineMap.get_identity(4)],
                     tensor.EmptyOp([n1, taps, channels, n0], element).result, 0,
                     lambda args, _: args[0]).result
    depth = taps * channels
    return _reshaped(_reshaped(tiles, [n1, depth, n0], [[0], [1, 2], [3]]), [n1, depth, n0, 1],
                     [[0], [1], [2, 3]])


def _packed_rows(op, swapped: bool = False) -> tuple[int, int]:
    """The rows and columns of a matmul's register tiles (`swapped`: B's columns are the rows,
    A's rows the columns), a batch matmul's batches rows of A."""
    from iree.compiler import ir

    shapes = [ir.RankedTensorType(v.type).shape for v in op.operands]
    batches = shapes[0][0] if op.name == "linalg.batch_matmul" else 1
    m, n = shapes[2][-2:]
    return (n, batches * m) if swapped else (batches * m, n)


def _packed_takes(tiles: Callable[[int], tuple[int, int, int]], swapped: bool = False):
    """A check of an op: a static f32 matmul, or batch matmul of one batch or of one B for
    every batch (its batches are then rows), in a layout of _MATMUL_MAPS, of at least
    PACKED_MIN_ROW_TILES rows of its tile (`tiles`: rows -> tile), a whole column tile and a
    reduction of SHALLOW_K."""
    def check(op) -> bool:

        if op.name not in _MATMUL_MAPS or len(op.operands) != 3:
            return False
        types = _static_types(op)
        if types is None:
            return False
        batches = types[0].shape[0] if op.name == "linalg.batch_matmul" else 1
        if batches > 1 and _unbatched(op.operands[1]) is None:
            return False
        a_map, b_maps = _MATMUL_MAPS[op.name]
        maps = _map_results(op)
        rows, columns = _packed_rows(op, swapped)
        tile = tiles(rows)
        return (maps[0] == a_map and maps[1] in b_maps and not _shallow(op)
                and rows >= PACKED_MIN_ROW_TILES * tile[0] and columns >= tile[1])
    return check


def _features_major(value):
    """`value` (positions... x features) as the features x positions matrix it transposes,
    where the ops computing it from a transpose [1, 0] (a swapped packed matmul's product) are
    reshapes of the positions and elementwise ops of per-feature operands (an FFN's bias and
    GELU): those ops again over (features, positions), their result that matrix. None where
    `value` is not so computed. IREE folds the transpose into the unpack instead, and runs the
    ops and the next pack position-major, transposing twice (a ConvNeXt block's, Zen 3)."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg, tensor

    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    rank = ir.RankedTensorType(value.type).rank
    if owner.name == "linalg.transpose":
        return (owner.operands[0] if rank == 2
                and _array_ints(owner.attributes["permutation"]) == [1, 0] else None)
    if owner.name in RESHAPES:
        source = owner.operands[0]
        kept = _groups_of(owner)[-1] == [max(rank, ir.RankedTensorType(source.type).rank) - 1]
        return _features_major(source) if kept else None
    if owner.name != "linalg.generic" or len(owner.results) != 1:
        return None
    block = owner.regions[0].blocks[0]
    inputs = list(owner.operands)[:-1]
    maps = _map_results(owner)
    whole = f"({', '.join(f'd{i}' for i in range(rank))})"
    if (maps[-1] != whole or any(str(i) != "#linalg.iterator_type<parallel>"
                                 for i in ir.ArrayAttr(owner.attributes["iterator_types"]))
            or list(block.arguments[-1].uses)
            # a loop's index is another loop's there; a nested op's operands are not remapped
            or any(o.name == "linalg.index" or len(o.regions) for o in block.operations)
            or any(m not in (whole, f"(d{rank - 1})", "()") for m in maps[:-1])):
        return None
    streams = [i for i, m in enumerate(maps[:-1]) if m == whole]
    if len(streams) != 1:
        return None
    matrix = _features_major(inputs[streams[0]])
    if matrix is None:
        return None
    features, positions = ir.RankedTensorType(matrix.type).shape
    d = [ir.AffineDimExpr.get(0), ir.AffineDimExpr.get(1)]
    read = {whole: ir.AffineMap.get_identity(2), f"(d{rank - 1})": ir.AffineMap.get(2, 0, [d[0]]),
            "()": ir.AffineMap.get(2, 0, [])}
    element = ir.RankedTensorType(value.type).element_type
    generic = linalg.GenericOp(
        [ir.RankedTensorType.get([features, positions], element)],
        [matrix if i in streams else v for i, v in enumerate(inputs)],
        [tensor.EmptyOp([features, positions], element).result],
        ir.ArrayAttr.get([ir.AffineMapAttr.get(read[m]) for m in maps]),
        ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<parallel>")] * 2))
    body = generic.regions[0].blocks.append(*[a.type for a in block.arguments])
    copied = list(zip(block.arguments, body.arguments))
    with ir.InsertionPoint(body):
        for op in block.operations:
            copy = op.clone()
            for i, operand in enumerate(copy.operands):
                copy.operands[i] = next((new for old, new in copied if old == operand), operand)
            copied += list(zip(op.results, copy.results))
    return generic.result


def _packed(op, tile: tuple[int, int, int], swapped: bool = False) -> list:
    """A matmul as IREE's data tiling writes one, with our register tile: A, B (NxK or KxN)
    and the accumulator packed into `tile`'s (M0, N0, K0) tiles, zero-padded; a linalg.mmt4d of
    them; the result unpacked. A batch matmul's batches are rows of A, its B the one matrix
    they share. IREE packs a B computed from globals and constants alone (a weight) once, at
    load; a B passed in, every call, as data tiling does. `swapped`: the product transposed,
    C^T = B^T A^T, B's columns (a Linear's output features) the tile's M0 rows and A's rows
    (the positions) its N0 columns, C^T unpacked and transposed back."""
    from iree.compiler import ir
    from iree.compiler.dialects import arith, linalg, tensor

    a, b, init = op.operands
    shape = ir.RankedTensorType(init.type).shape
    transposed = _MATMUL_MAPS[op.name][1][_map_results(op)[1]]
    # An accumulator other than a fill (a conv's bias broadcast over its output) is added after
    # the unpack, where it fuses: packed, IREE hoists the pack of a broadcast parameter into an
    # initializer it vectorizes whole (a 64x400 bias: one 4800-lane vector, 23 s of LLVM)
    fill = (init.owner.operands[0] if not isinstance(init.owner, ir.Block)
            and init.owner.name == "linalg.fill" else None)
    if op.name == "linalg.batch_matmul":
        rows = [[0, 1], [2]]
        a, init = (_reshaped(v, [shape[0] * shape[1], ir.RankedTensorType(v.type).shape[2]], rows)
                   for v in (a, init))
        b = _unbatched(b) or _reshaped(b, ir.RankedTensorType(b.type).shape[1:], rows)
    m0, n0, k0 = tile
    m, k = ir.RankedTensorType(a.type).shape
    n = shape[-1]
    rows, columns = (n, m) if swapped else (m, n)
    r1, c1, k1 = -(-rows // m0), -(-columns // n0), -(-k // k0)
    f32 = ir.F32Type.get()
    zero = arith.constant(f32, 0.0)

    def pack(value, outer: list[int], inner: list[int], positions: list[int],
             permutation: list[int] | None = None):
        dest = tensor.EmptyOp([*outer, *inner], f32).result
        return linalg.pack(value, dest, positions, inner, padding_value=zero,
                           outer_dims_perm=permutation)

    def lhs(value):
        """`value` (rows x K) packed as the mmt4d's LHS."""
        if k0 == 1 and k % n0 == 0:
            # the same M0x1 tiles, packed as M0 x N0 blocks read along K: an A computed by the
            # elementwise ops after another packed matmul (an FFN's GELU) then shares that one's
            # N0-wide inner tile, and IREE vectorizes their fused unpack, ops and pack N0 wide
            # where it took M0x1 vectors (BERT's GELU dispatch, Zen 3: 4.5 -> 1.7 ms)
            blocks = pack(value, [r1, k // n0], [n0, m0], [1, 0])
            return _reshaped(_reshaped(blocks, [r1, k, m0], [[0], [1, 2], [3]]),
                             [r1, k, m0, 1], [[0], [1], [2, 3]])
        return pack(value, [r1, k1], [m0, k0], [0, 1])

    taps = None if transposed or k0 != 1 else _taps_packed(b, *((r1, m0) if swapped else (c1, n0)))
    if swapped:
        packed_a = (lhs(b) if transposed else taps if taps is not None
                    else pack(b, [r1, k1], [m0, k0], [1, 0], [1, 0]))
        matrix = _features_major(a)
        packed_b = (pack(a, [c1, k1], [n0, k0], [0, 1]) if matrix is None
                    else pack(matrix, [c1, k1], [n0, k0], [1, 0], [1, 0]))
    else:
        packed_a = lhs(a)
        packed_b = (pack(b, [c1, k1], [n0, k0], [0, 1]) if transposed
                    else taps if taps is not None
                    else pack(b, [c1, k1], [n0, k0], [1, 0], [1, 0]))
    accumulator = (_zeros([rows, columns], f32) if fill is None else
                   linalg.fill(fill, outs=[tensor.EmptyOp([rows, columns], f32).result]))
    product = linalg.mmt4d(packed_a, packed_b, outs=[
        pack(accumulator, [r1, c1], [m0, n0], [0, 1])])
    result = linalg.unpack(product, tensor.EmptyOp([rows, columns], f32).result, [0, 1],
                           [m0, n0])
    if swapped:
        result = _permuted(result, [1, 0])
    if fill is None:
        identity = ir.AffineMap.get_identity(2)
        result = _generic([result], [identity, identity], init, 0,
                          lambda args, total: arith.addf(args[0], total)).result
    return [_reshaped(result, shape, [[0, 1], [2]]) if len(shape) == 3 else result]


# ops without side effects, erased where nothing reads them
_PURE_DIALECTS = ("linalg.", "tensor.", "arith.", "math.")


def _erase_unread(module) -> None:
    """The pure ops of `module` whose results nothing reads erased, last first (what they read
    may then be unread too): the elementwise ops _features_major wrote again, features-major."""
    for op in reversed([o.operation for o in modules.walk(module.operation)]):
        if (op.name.startswith(_PURE_DIALECTS) and op.parent.name in ("func.func", "util.func")
                and op.results and not any(list(r.uses) for r in op.results)):
            op.erase()


def packed_matmuls(text: str, cpu: CpuTarget, swapped: bool = False) -> tuple[str, int]:
    if cpu_tiles.register_tile(cpu, DataType.f32, DataType.f32) is None:
        return text, 0

    def tiles(rows: int) -> tuple[int, int, int]:
        tile = cpu_tiles.register_tile(cpu, DataType.f32, DataType.f32, rows)
        assert tile is not None  # the CPU has one (above), whatever the rows
        return tile

    return _rewrite(text, _packed_takes(tiles, swapped),
                    lambda op: _packed(op, tiles(_packed_rows(op, swapped)[0]), swapped),
                    after=_erase_unread if swapped else None)


def packed_matmuls_swapped(text: str, cpu: CpuTarget) -> tuple[str, int]:
    return packed_matmuls(text, cpu, swapped=True)


REWRITES = (
    # first: the rewrites after it take the convs it writes (winograd, conv1d_taps,
    # conv3d_as_conv2d), and packed_matmuls its matmuls
    Rewrite("conv_transpose_phases", "transposed convolutions (PyTorch's ConvTranspose1d, 2d, "
            "3d: UNet decoders, GAN generators, vocoders) as a conv over the input per output "
            "phase, of that phase's taps (one stacked matmul where the kernel is the stride), "
            "the phases interleaved: torch-mlir's lowering convolves the input spread stride "
            "apart in zeros, stride^2 times the work in 2-D", conv_transpose_phases),
    Rewrite("depthwise_taps", "depthwise convolutions as sums of their kernel taps: one "
            "elementwise op that vectorizes along the width, where IREE runs PyTorch's NCHW "
            "depthwise convolution as scalar code", depthwise_taps,
            # IREE folds a transpose of the taps' op's result (ConvNeXt's permute to channels-
            # last before its LayerNorm) into it: the op then vectorizes along the channels, its
            # 49 tap reads strided (a ConvNeXt block's call under data tiling 17.2-20.8 ms;
            # 6.1-6.2 with this flag)
            flags=(KEEP_TRANSPOSES,)),
    Rewrite("grouped_taps", "grouped convolutions of unit width stride and wide rows as one "
            "op summing each kernel tap's contraction over its channels, read in place, where "
            "IREE runs PyTorch's NCHW grouped convolution as scalar code", grouped_taps,
            targeted=True),
    Rewrite("grouped_im2col", "the other grouped convolutions (strided along the width, or "
            "of narrow rows) as im2col per group and one batched contraction, where IREE runs "
            "PyTorch's NCHW grouped convolution as scalar code", grouped_im2col),
    # before winograd, which takes the 2-D convs it writes (joined: conv3d_as_conv2d+winograd),
    # and before conv3d_im2col, which then takes the convs it leaves (1x1 across the image)
    Rewrite("conv3d_as_conv2d", "3-D convolutions (PyTorch's Conv3d: video, volumes) as one "
            "channels-last 2-D convolution over their depth taps, each output depth a batch: "
            "IREE runs the NCDHW op as scalar code, im2col copies the input once per tap (27 "
            "for 3x3x3), this once per depth tap, and Winograd takes the 2-D conv (one 1x1 across "
            "the image is left to conv3d_im2col's matmul)",
            conv3d_as_conv2d),
    Rewrite("winograd", "3x3 stride-1 convolutions as Winograd F(6,3) (IREE's filter "
            "transform, a parameter's computed once at load; the input and output transforms "
            "as sums of vectors along the channels; the bias kept): 64 products per 6x6 output "
            "tile where direct convolution takes 324",
            winograd,
            # against IREE's default, whose NCHW convs are scalar code, its gain drowned:
            # ResNet b1 1.03x [1.02, 1.05] there, where under channels-last it took the
            # tuned call from 1.81 to 1.25 ms (Zen 4)
            under=("channels_last",)),
    Rewrite("causal_blocks", "causal attention in blocks of queries, each against the keys "
            "up to its last query: IREE computes every query against every key, and the "
            "causal mask then gives the later keys no weight", causal_blocks,
            # the tuned transformers decompose their attention; measured there too
            under=("decompose_attention",)),
    Rewrite("cache_attention", "a decode step's attention over its KV cache joined with the "
            "step's keys and values, written out over each piece where it lies: IREE copies "
            "the joined K and V every call, and its data tiling packs them again; the other "
            "matmuls keep data tiling", cache_attention,
            # the hint that keeps its contractions out of data tiling acts under data tiling
            under=("data_tiling_early",)),
    Rewrite("conv1d_taps", "1-D convolutions (PyTorch's Conv1d) as their taps' slices joined "
            "and one contraction, as grouped_im2col writes a grouped conv: IREE runs the 1-D op "
            "as is, and its im2col flag leaves it alone; a conv over raw samples (a reduction "
            "shorter than a vector) is kept out of data tiling", conv1d_taps),
    Rewrite("conv3d_im2col", "3-D convolutions (PyTorch's Conv3d: video, volumes) as their "
            "taps' slices joined and one contraction: IREE runs the NCDHW op as scalar code, "
            "and its im2col flag takes 2-D convolutions only", conv3d_im2col),
    # before packed_matmuls: joined, its matmul is packed
    Rewrite("pointwise_matmuls", "1x1 convolutions of one image (a bottleneck's, an inverted "
            "residual's) as the filter times the image's channels by positions, NCHW as it "
            "lies: a matmul packed_matmuls packs, where IREE's im2col and data tiling run its "
            "8x8 microkernel", pointwise_matmuls),
    # before packed_matmuls: joined, the patches' matmul is packed too
    Rewrite("patch_matmuls", "patch convolutions (stride = kernel: a vision transformer's "
            "patch embedding) as a matmul of the patches by the filter's rows, a Linear layer's "
            "kind: IREE runs PyTorch's NCHW conv as scalar code, and under im2col with data "
            "tiling at 67-79% of the ceiling", patch_matmuls, under=("im2col_data_tiling",)),
    Rewrite("widened_half_matmuls", "bf16 and f16 matmuls summed in f32 (a model exported in "
            "bfloat16 or half) as f32 matmuls of their operands widened first, a parameter's "
            "weight once, at load: on CPUs without bf16 or f16 arithmetic IREE converts both "
            "operands inside the matmul's loop, and its data tiling of bf16 falls to scalar "
            "code", widened_half_matmuls,
            # its f32 matmuls run IREE's f32 microkernel under data tiling, or packed_matmuls'
            # mmt4d (joined after it)
            under=("data_tiling_early",)),
    Rewrite("packed_matmuls", "matmuls (Linear layers) packed into a register tile wider "
            "than IREE's data tiling takes, their mmt4d generated (AVX-512 12x32, or 8x32 "
            "where that pads the rows less: IREE's 16x16 microkernel loads 17 vectors for 16 "
            "FMAs a step; AVX2 6x16; Neon 12x8); a parameter's weight packed once, at load",
            packed_matmuls,
            # IREE's default lowers every f32 mmt4d to its microkernel, which takes other
            # tiles in scalar code (BERT layer: 620 ms a call)
            flags=(NO_UKERNELS,), targeted=True,
            # against IREE's data tiling (whose matmuls it does differently), and beside
            # im2col: a ViT stem's patch conv, scalar under IREE's default, hid the gain of
            # its two Linear layers (1.03x [1.03, 1.03]), where under im2col and data tiling
            # the rewritten model ran 1.16x [1.06, 1.26] faster than the model's own source;
            # and beside a decomposed attention: a Swin block's, whole under IREE's default
            # (37 ms a call), hid its two matmuls at 47-52% of the ceiling (0.99x), where the
            # tuned block decomposes it and runs 5.7 ms
            under=("data_tiling_early", "im2col_data_tiling", "decompose_attention")),
    Rewrite("packed_matmuls_swapped", "matmuls packed as packed_matmuls packs them, their "
            "product transposed (C^T = W X^T: the weight's rows the register tile's, the "
            "positions its columns), and the elementwise ops between two of them (an FFN's "
            "bias and GELU) run features-major: each row of N0 positions unpacked and packed "
            "again whole, where packed_matmuls transposes each M0 x N0 tile, and a "
            "channels-first model's own transposes cancel (a ConvNeXt block's two Linears, "
            "Zen 3: its call 7.0-8.3 -> 5.4-7.2 ms)", packed_matmuls_swapped,
            flags=(NO_UKERNELS,), targeted=True, instead_of="packed_matmuls",
            under=("data_tiling_early", "im2col_data_tiling", "decompose_attention")),
    Rewrite("nearest_upsample", "nearest-neighbour upsampling by whole factors (PyTorch's "
            "interpolate, Upsample: diffusion UNets, YOLO, FPN) as a broadcast of each element "
            "to its block: torch-mlir's lowering gathers each output with tensor.extract, which "
            "IREE runs as scalar code", nearest_upsample),
    Rewrite("rational_erf", "erf (PyTorch's exact GELU) as one rational function of the "
            "clamped input (Eigen's and XLA's f32 erf, within 4.4e-7): IREE's approximation "
            "picks each coefficient of three pieces with a select, 18 blends and 2 divisions a "
            "vector", rational_erf),
    Rewrite("narrow_int_matmuls", "integer matmuls of i8 tensors sign-extended (PyTorch's "
            "`x.to(torch.int32) @ w.to(torch.int32)`, as CPU PyTorch takes no int8 matmul) as "
            "the i8 x i8 -> i32 matmul, widened after where its result is i64 (exact: the "
            "depth is checked to keep the sums in i32): torch-mlir multiplies the widened "
            "copies in i64, a type IREE has no microkernel for", narrow_int_matmuls),
    Rewrite("global_pool", "global pooling (PyTorch's adaptive pooling to 1x1) reading its "
            "input in place: torch-mlir's lowering gathers each element from a padded copy, "
            "which IREE runs as scalar code", global_pool),
)
