"""The one registry of tuned kinds: for each kind of op iree.tunable finds (contraction,
convolution, depthwise convolution, attention, data tiling's packed matmul), how the tuner
configures it: IREE's CPU pipeline, the loop classes the tile knobs size, its reductions, its
register blocks and their legality, how a spec entry matches it, and what makes one of its ops
untunable. A new tunable kind is its recognition in iree/tunable.py and one entry in KINDS
(tests/test_tuner_parts.py checks that nothing else names a kind)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from iree_dispatch_profiler.core.library import CpuTarget, DataType, UserError
from iree_dispatch_profiler.iree import tunable
from iree_dispatch_profiler.iree.tunable import TunableOp
from iree_dispatch_profiler.ops import cpu_tiles

ONLINE_ATTENTION = "iree_linalg_ext.online_attention"


def element(name: str) -> DataType:
    try:
        return DataType.parse(name)
    except UserError:
        raise UserError(f"element type {name} is not tunable on llvm-cpu "
                        f"(known: {', '.join(d.short for d in DataType)})") from None


@dataclass(frozen=True)
class TunedKind:
    name: str  # as iree.tunable names it
    pipeline: str  # IREE's llvm-cpu pipeline of its configs
    tiled: tuple[str, str, str]  # the loop classes tile_m, tile_n and tile_k size
    reductions: tuple[str, ...]  # its reduction loop classes
    # the tile of a reduction loop other than tile_k's (conv filter loops one at a time, so that
    # IREE decomposes to 1-D convs; attention's k1 whole, as in IREE's own config)
    other_reduction_tile: int
    peel: tuple[int, ...]  # the peel knob's values when the user lists none
    cache_tiled: bool  # large ops get the generator's cache-blocked tiles
    # register blocks (vm, vn) for rows x cols x red, and whether (vm, vn, vk) is legal
    vector_pairs: Callable[[CpuTarget, TunableOp, int, int, int, DataType], list[tuple[int, int]]]
    legal: Callable[[CpuTarget, TunableOp, int, int, int, DataType], bool]
    accumulator: Callable[[TunableOp], DataType]
    not_tunable: Callable[[TunableOp], str] = lambda op: ""  # kind-specific rules
    # what a spec entry matches: this op name instead of the op's own (None: its own), and
    # the types of its first N operands (None: all)
    matched_op: str | None = None
    matched_operands: int | None = None
    # the tile knobs' values when the user lists none: distribution tiles of tiled[0] and
    # tiled[1], reduction tiles of tiled[2]
    distribution_sizes: tuple[int, ...] = cpu_tiles.DISTRIBUTION_SIZES
    reduction_tiles: tuple[int, ...] = (4, 8, 16, 32, 64)
    # loop classes taken whole by the innermost tile level (a packed op's inner tile): the
    # parallel ones by the vector level, the others by the reduction level
    whole: tuple[str, ...] = ()
    # tiled loop classes an op may lack (a decode step's attention has one query: no m)
    optional: tuple[str, ...] = ()
    # the pipeline of an op, where the kind's depends on its layout (None: `pipeline`)
    pipeline_for: Callable[[TunableOp], str] | None = None

    def pipeline_of(self, op: TunableOp) -> str:
        return self.pipeline_for(op) if self.pipeline_for else self.pipeline


def _accumulator(op: TunableOp) -> DataType:
    return element(op.accumulator_element)


def _matmul_pairs(cpu, op, rows, cols, red, accumulator) -> list[tuple[int, int]]:
    return list(dict.fromkeys((vm, vn) for vm, vn, _ in cpu_tiles.matmul_vector_tiles(
        cpu, max(rows, 1), max(cols, 1), max(red, 1), accumulator)))


def _matmul_legal(cpu, op, vm, vn, vk, accumulator) -> bool:
    return cpu_tiles.is_legal_vector_tile(cpu, (vm, vn, vk), accumulator)


def _convolution_rules(op: TunableOp) -> str:
    if op.positions("depth"):
        return "a grouped convolution (its channels in groups) is not tuned"
    if len(op.positions("output_channel")) > 1:
        return "a data-tiled convolution (its channels packed and tiled by data tiling)"
    return _batch_one(op)


def _batch_one(op: TunableOp) -> str:
    if len(op.positions("output_image")) == 2 and op.size("batch") == 1:
        # Its unit batch is folded away and put back by InsertBatchDimForBatchlessConvPass after
        # configs are attached; the rebuilt op has none (seen in IREE 3.13, depthwise too).
        return "IREE drops any config on a batch-1 2-D convolution"
    return ""


def _depthwise_pairs(cpu, op, rows, cols, red, accumulator) -> list[tuple[int, int]]:
    """Register blocks along the output width, the channels, or both: which is contiguous
    depends on the layout (NCHW: width; NHWC: channels)."""
    lanes = cpu_tiles.lanes(cpu, accumulator)
    blocks = ((lanes, 1), (2 * lanes, 1), (4 * lanes, 1), (1, lanes), (1, 2 * lanes), (2, lanes),
              (4, lanes), (lanes, 2), (lanes, 4))
    return [(vm, vn) for vm, vn in blocks if vm <= cpu_tiles.pow2_ceil(rows)
            and vn <= cpu_tiles.pow2_ceil(cols)]


def _depthwise_pipeline(op: TunableOp) -> str:
    """IREE's own choice (3.13): with the channels innermost (NHWC) it decomposes the conv into
    1-D depthwise convs; with the image innermost (NCHW, as PyTorch exports) it double-tiles."""
    channels_last = op.positions("depth")[-1] > op.positions("output_image")[-1]
    return "ConvTileAndDecomposeExpert" if channels_last else "DoubleTilingExpert"


def _attention_pairs(cpu, op, rows, cols, red, accumulator) -> list[tuple[int, int]]:
    """The register blocks the generator uses for this target."""
    return list(dict.fromkeys((vm, vn) for vm, vn, _ in cpu_tiles.attention_vector_tiles(
        cpu, rows, cols, op.size("k1"), red)))


def _attention_legal(cpu, op, vm, vn, vk, accumulator) -> bool:
    return cpu_tiles.is_legal_attention_tile(cpu, op.size("k1"), vm, vn, vk)


def _no_unit_loop(op: TunableOp) -> str:
    if 1 in op.loops:
        # IREE folds the unit loop away and drops a config attached to the op with it (seen
        # on grouped_taps' batch-1 op in IREE 3.13); inside a model a spec configures the
        # folded op in its dispatch
        return "IREE drops a config attached to it with a unit loop (tune it with --model)"
    return ""


def _summed_pairs(cpu, op, rows, cols, red, accumulator) -> list[tuple[int, int]]:
    """Register blocks of one or two vectors along N (a narrower N: one vector of its width),
    as many rows as the registers hold: each reduction step loads a vector of every product's
    B operand besides the block."""
    lanes = cpu_tiles.lanes(cpu, accumulator)
    widths = (lanes, 2 * lanes) if cols >= lanes else (cpu_tiles.pow2_ceil(cols),)
    return [(vm, vn) for vn in widths for vm in (1, 2, 4, 8)
            if vm <= cpu_tiles.pow2_ceil(rows) and vn <= cpu_tiles.pow2_ceil(cols)
            and vm * max(1, vn // lanes) <= cpu_tiles.vector_registers(cpu) // 2]


def _one_block(cpu, op, rows, cols, red, accumulator) -> list[tuple[int, int]]:
    """A packed op's register block is its inner tile, taken whole: one outer tile at a time."""
    return [(1, 1)]


KINDS: dict[str, TunedKind] = {kind.name: kind for kind in (
    TunedKind(tunable.CONTRACTION, "DoubleTilingExpert", ("m", "n", "k"), ("k",), 1, (0, 1),
              True, _matmul_pairs, _matmul_legal, _accumulator),
    TunedKind(tunable.CONVOLUTION, "ConvTileAndDecomposeExpert",
              ("output_image", "output_channel", "input_channel"),
              ("filter_loop", "input_channel"), 1, (0, 1), False, _matmul_pairs, _matmul_legal,
              _accumulator, _convolution_rules),
    # A depthwise convolution as IREE configures one: its pipeline by layout, the filter's rows
    # one at a time, its columns one at a time or whole.
    TunedKind(tunable.DEPTHWISE, "ConvTileAndDecomposeExpert",
              ("output_image", "depth", "filter_loop"), ("filter_loop",), 1, (0, 1), False,
              _depthwise_pairs, _matmul_legal, _accumulator, _batch_one,
              distribution_sizes=(8, 16, 32, 64, 128), reduction_tiles=(1, 3, 5, 7),
              pipeline_for=_depthwise_pipeline),
    # An attention is matched as the online_attention IREE makes of it before configs apply,
    # by its query, key and value (its results differ in that form).
    TunedKind(tunable.ATTENTION, "LinalgExtTileAndVectorize", ("m", "n", "k2"), ("k1", "k2"), 0,
              (0,), False, _attention_pairs, _attention_legal,
              lambda op: cpu_tiles.ATTENTION_ACCUMULATOR, matched_op=ONLINE_ATTENTION,
              matched_operands=3, optional=("m",)),
    # A sum of contractions (a grouped conv's taps) one reduction step at a time: a step of
    # two or more holds a vector of every product's operands at once (ResNeXt's 9 taps at
    # vector_reduction 2: 3.45 ms, at 1: 0.32 ms, Zen 4).
    TunedKind(tunable.SUMMED, "DoubleTilingExpert", ("m", "n", "k"), ("k",), 1, (0, 1), False,
              _summed_pairs, _matmul_legal, _accumulator, _no_unit_loop,
              distribution_sizes=(8, 16, 32, 64, 128, 256), reduction_tiles=(1,)),
    # Data tiling's packed matmul, configured by a spec only where encodings are materialized
    # before dispatches form (flags.DATA_TILING_EARLY): tile_m and tile_n count the outer tiles
    # a workgroup takes, as IREE's own config of it does; K one outer tile at a time.
    TunedKind(tunable.MMT4D, "Mmt4dTilingExpert", ("m", "n", "k"), ("k", "k0"), 0, (0,), False,
              _one_block, lambda *_: True, _accumulator,
              distribution_sizes=(1, 2, 4, 8, 16, 32, 64), reduction_tiles=(1,),
              whole=("m0", "n0", "k0")),
)}
assert set(KINDS) == set(tunable.KINDS), "every kind iree.tunable finds is tuned here"


def of(op: TunableOp) -> TunedKind:
    return KINDS[op.kind]


def not_tunable(op: TunableOp) -> str:
    """Why autotune.py cannot tune `op`, or '' if it can."""
    if not op.loops:
        return "its loop bounds are not static"
    kind = of(op)
    why = kind.not_tunable(op)
    if why:
        return why
    for dim in kind.tiled:
        if not op.positions(dim) and dim not in kind.optional:
            return f"it has no {dim} dimension"
    try:
        element(op.input_element), element(op.accumulator_element)
    except UserError as error:
        return str(error)
    return ""


def tiled_extents(op: TunableOp) -> tuple[int, int, int]:
    """The sizes of each class tile_m, tile_n and tile_k size, all its loops together (1 for a
    class the op lacks): what a distribution tile spreads over (spread)."""
    rows, cols, red = (math.prod(op.loops[i] for i in op.positions(d)) for d in of(op).tiled)
    return rows, cols, red


def spread(op: TunableOp, dim: str, tile: int) -> dict[int, int]:
    """A distribution tile over the loops of class `dim`, innermost first: the innermost takes
    it up to its own size (rounded up to a power of two), each loop further out what is left.
    A tile within the innermost loop leaves the others at 1; a larger one takes whole rows
    (ResNeXt's grouped conv, 28x28 outputs: 7 rows of 16 a workgroup ran its dispatch 1.2x
    faster than one row of 16, Zen 4)."""
    tiles = {}
    for loop in reversed(op.positions(dim)):
        tiles[loop] = min(tile, cpu_tiles.pow2_ceil(op.loops[loop]))
        tile = max(1, tile // tiles[loop])
    return tiles


def tiled_sizes(op: TunableOp) -> tuple[int, int, int]:
    """The sizes of the innermost loop of each class tile_m, tile_n and tile_k size (1 for a
    class the op lacks)."""
    rows, cols, red = (op.loops[op.positions(d)[-1]] if op.positions(d) else 1
                       for d in of(op).tiled)
    return rows, cols, red

