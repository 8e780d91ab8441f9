"""The auto-tuner's search space for one op: tile points derived from the op's shape and the
target (the validity rules of cpu_tiles, shared with the generator), narrowed by the user's
lists, plus compile-flag points. An attached config disables data tiling, so IREE's default with
data tiling and ukernels is a point of its own, not a product with the tiles."""
from __future__ import annotations

import itertools
import math
from typing import Any
from dataclasses import dataclass, field

from iree_dispatch_profiler.core.library import CpuTarget, DataType, TuningConfiguration
from iree_dispatch_profiler.iree import tunable
from iree_dispatch_profiler.iree.tunable import TunableOp
from iree_dispatch_profiler.ops import cpu_tiles, mlir_text
from iree_dispatch_profiler.tuning import flags as module_flags
from iree_dispatch_profiler.tuning import kinds
from iree_dispatch_profiler.tuning.spec import Matcher

# Knobs of a tile point. On llvm-cpu tile_m/tile_n are the distribution tiles of the op's M and
# N loops (output image and channels for a conv; queries and the value head dim for attention),
# spread from the innermost loop out (kinds.spread), tile_k its reduction tile (keys for attention);
# vector_m/vector_n the register block, derived from the target unless the user lists them;
# peel (0/1) IREE's loop peeling, which it enables itself for shapes the tiles do not divide:
# without it the remainders run masked, 3x slower on 500x300x700 (Zen 3);
# cache_m/cache_n/cache_k the cache levels of a large contraction (cpu_tiles.matmul_cache_tiles;
# 0: none), where tile_k is the register tile's K step;
# data_tiling (0: off, 1: on, 2: on with ukernels) makes a point of a large f32 matmul a data-tiled
# config (cpu_tiles.mmt4d_tiles): tile_m/tile_n its workgroup's rows and columns, vector_m,
# vector_n and tile_k IREE's inner tile for the target.
TILE_KNOBS = ("tile_m", "tile_n", "tile_k", "vector_m", "vector_n", "peel", "cache_m", "cache_n",
              "cache_k", "data_tiling")
DATA_TILED_UKERNELS = 2
DEFAULT_FLAG_POINTS = {"data_tiling": module_flags.DATA_TILING}
# An attention is its two matmuls under these (standalone 4x128x64x128x64 f32: 33.9x [31.0,
# 40.5] over IREE's default config, whole call; its best tile config in a model, 17-20x).
ATTENTION_FLAG_POINTS = {
    "decompose_attention": module_flags.DECOMPOSE_ATTENTION,
    "decompose_attention_data_tiling": module_flags.together(module_flags.DECOMPOSE_ATTENTION,
                                                             module_flags.DATA_TILING_EARLY)}


def default_flag_points(op: TunableOp) -> dict[str, str]:
    """The flag points a single op's search has beside its tile configs when --flags is not
    given: data tiling, or for an attention its decomposition (late data tiling fails on it)."""
    return ATTENTION_FLAG_POINTS if op.kind == tunable.ATTENTION else DEFAULT_FLAG_POINTS


@dataclass(frozen=True)
class Point:
    tile_m: int = 0
    tile_n: int = 0
    tile_k: int = 0
    vector_m: int = 0
    vector_n: int = 0
    peel: int = 0
    cache_m: int = 0
    cache_n: int = 0
    cache_k: int = 0
    data_tiling: int = 0
    flags_name: str = ""  # a flag point: no compilation_info, extra flags for the whole module
    flags: str = ""

    @property
    def is_flags(self) -> bool:
        return bool(self.flags_name)

    @property
    def name(self) -> str:
        if self.is_flags:
            return f"flags_{self.flags_name}"
        if self.data_tiling:
            return self.mmt4d_tile.name(self.data_tiling == DATA_TILED_UKERNELS)
        return cpu_tiles.tile_config_name(self.tile_m, self.tile_n, self.vector_m, self.vector_n,
                                          self.tile_k, self.cache_m, self.cache_n,
                                          self.cache_k, bool(self.peel))

    @property
    def mmt4d_tile(self) -> cpu_tiles.Mmt4dTile:
        return cpu_tiles.Mmt4dTile(self.tile_m // self.vector_m, self.tile_n // self.vector_n,
                                   self.vector_m, self.vector_n, self.tile_k)

    @classmethod
    def of(cls, knobs: dict) -> "Point":
        """The tile point of these knob values (a stored configuration's; missing ones 0)."""
        values: dict[str, Any] = {k: int(knobs.get(k, 0) or 0) for k in TILE_KNOBS}
        return cls(**values)

    def knobs(self) -> dict:
        """A tile point's knob values (none for a flag point)."""
        return {} if self.is_flags else {k: getattr(self, k) for k in TILE_KNOBS}


@dataclass
class Space:
    op: TunableOp
    cpu: CpuTarget
    points: list[Point]
    near: list[Point] = field(default_factory=list)  # what won on nearby shapes (the store's)

    @property
    def tiles(self) -> list[Point]:
        return [p for p in self.points if not p.is_flags]

    @property
    def seeds(self) -> list[Point]:
        """Tile points tried first, like flag points: the winners of nearby shapes, then the
        best-ranked data-tiled config with and without ukernels (one family of a dozen points
        in hundreds, and on large GEMMs the fastest: a strategy learns of it at once)."""
        firsts: dict[int, Point] = {}
        for point in self.tiles:
            if point.data_tiling:
                firsts.setdefault(point.data_tiling, point)
        return list(dict.fromkeys([*self.near, *firsts.values()]))

    def nearest(self, knobs: dict) -> Point | None:
        """The tile point closest to another shape's knobs: the same where this space has it,
        else the one nearest in log2 of each tile (a knob on in one and off in the other
        counts one)."""
        def distance(point: Point) -> float:
            total = 0.0
            for knob in TILE_KNOBS:
                mine, theirs = getattr(point, knob), int(knobs.get(knob, 0) or 0)
                if knob in ("peel", "data_tiling") or not (mine > 0 and theirs > 0):
                    total += float(mine != theirs)
                else:
                    total += abs(math.log2(mine) - math.log2(theirs))
            return total
        return min(self.tiles, key=distance, default=None)

    def features(self, point: Point) -> list[float]:
        return features(self.op, point, self.cpu.l2_cache_bytes)


def features(op: TunableOp, point: Point, l2_cache_bytes: int) -> list[float]:
    """What a cost model learns from a tile point: tile logs, workgroups, cache fit."""
    rows, cols, red = kinds.tiled_sizes(op)
    all_rows, all_cols, _ = kinds.tiled_extents(op)
    workgroups = math.ceil(all_rows / point.tile_m) * math.ceil(all_cols / point.tile_n)
    footprint = (point.tile_m + point.tile_n) * red * kinds.element(op.input_element).bytes
    return [math.log2(point.tile_m), math.log2(point.tile_n), math.log2(point.tile_k),
            math.log2(point.vector_m), math.log2(point.vector_n), math.log2(workgroups),
            footprint / l2_cache_bytes,
            float(rows % point.tile_m == 0 and cols % point.tile_n == 0), float(point.peel),
            math.log2(point.cache_k) if point.cache_k else 0.0, float(point.data_tiling)]


def build(op: TunableOp, cpu: CpuTarget, lists: dict[str, list], flag_points: dict[str, str],
          data_tiled: bool = False) -> Space:
    """Every valid point. `lists` narrows knobs (TILE_KNOBS, values the user gave). With
    `data_tiled`, a large f32 matmul gets data-tiled points too (flags for the whole module and a
    spec for its mmt4d: the single-op tuner's)."""
    kind = kinds.of(op)
    rows, cols, red = kinds.tiled_sizes(op)
    all_rows, all_cols, _ = kinds.tiled_extents(op)  # what distribution tiles spread over
    accumulator = kind.accumulator(op)
    if "vector_m" in lists or "vector_n" in lists:
        width = cpu_tiles.lanes(cpu, accumulator)
        pairs = list(itertools.product(lists.get("vector_m", [1, 2, 4, 8, 16]),
                                       lists.get("vector_n", [width, 2 * width])))
    else:
        pairs = kind.vector_pairs(cpu, op, rows, cols, red, accumulator)
    pow2_ceil = cpu_tiles.pow2_ceil
    # a loop smaller than every size (a decode step's one row) is taken whole
    tile_m = lists.get("tile_m", [s for s in kind.distribution_sizes if s <= pow2_ceil(all_rows)]
                       or [pow2_ceil(all_rows)])
    # a one-row op (a matrix-vector product) is memory-bound: a workgroup per core streams its
    # share of the matrix, a K step at a time (an LSTM's 1x256x1024 step: 2 workgroups of 512
    # columns in 128-wide blocks one K step deep ran the model 1.28x [1.18, 1.34] faster than
    # data tiling tuned, 4 of 256 1.24x [0.91, 1.42]; IREE's 16 of 64, 16 K steps deep, 3.0x
    # slower than it, Zen 4)
    one_row = all_rows == 1
    sizes = kind.distribution_sizes + ((512, 1024, 2048, 4096) if one_row else ())
    tile_n = lists.get("tile_n", [s for s in sizes if s <= pow2_ceil(all_cols)]
                       or [pow2_ceil(all_cols)])
    tile_k = lists.get("tile_k", [s for s in ((1,) if one_row else ()) + kind.reduction_tiles
                                  if s <= red])
    peel = lists.get("peel", list(kind.peel))
    points = []
    for dm, dn, vk, (vm, vn), pl in itertools.product(tile_m, tile_n, tile_k, pairs, peel):
        if pl and 0 in peel and not cpu_tiles.leaves_remainder(rows, cols, red, dm, dn, vk):
            continue  # peeling is a no-op where every tile divides its loop
        if (dm % vm == 0 and dn % vn == 0 and vm <= pow2_ceil(rows) and vn <= pow2_ceil(cols)
                and vk <= red and kind.legal(cpu, op, vm, vn, vk, accumulator)):
            points.append(Point(dm, dn, vk, vm, vn, pl))
    if kind.cache_tiled and cpu_tiles.is_large(rows, cols, red):
        points += _cache_points(cpu, rows, cols, red, kinds.element(op.input_element), accumulator)
    if data_tiled and is_plain_matmul(op):
        points += _data_tiled_points(cpu, rows, cols, red, kinds.element(op.input_element))
    # a knob left unlisted keeps all; listing a cache knob without 0 keeps only cache-blocked points
    points = [p for p in dict.fromkeys(points)
              if all(getattr(p, k) in lists.get(k, [getattr(p, k)]) for k in TILE_KNOBS)]
    points += [Point(flags_name=name, flags=flags) for name, flags in flag_points.items()]
    return Space(op, cpu, points)


def _cache_points(cpu: CpuTarget, rows: int, cols: int, red: int, input_type: DataType,
                  accumulator: DataType) -> list[Point]:
    """The generator's cache-blocked tiles of a large contraction (peeled where they leave a
    remainder), as points."""
    return [Point(t.dm, t.dn, t.vk, t.vm, t.vn, int(t.peel), t.cm, t.cn, t.ck)
            for t in cpu_tiles.matmul_cache_tiles(cpu, rows, cols, red, input_type, accumulator, count=None)]


def is_plain_matmul(op: TunableOp) -> bool:
    """One M, N and K loop and no batch: what data tiling makes one linalg.mmt4d of."""
    return (op.kind == tunable.CONTRACTION and not op.positions("batch")
            and all(len(op.positions(d)) == 1 for d in ("m", "n", "k")))


def _data_tiled_points(cpu: CpuTarget, rows: int, cols: int, red: int, input_type: DataType,
                       ) -> list[Point]:
    """The generator's data-tiled configs of a large matmul, as points, without and with ukernels."""
    return [Point(t.dm1 * t.m0, t.dn1 * t.n0, t.k0, t.m0, t.n0, data_tiling=kind)
            for kind in (1, DATA_TILED_UKERNELS)
            for t in cpu_tiles.mmt4d_tiles(cpu, rows, cols, red, input_type, input_type, count=None)]


def spec_matchers(op: TunableOp, point: Point) -> dict[int, Matcher]:
    """What a spec for `point` matches instead of `op` itself: for a data-tiled point, the mmt4d
    that data tiling makes of it, by its types (operands padded to whole inner tiles)."""
    if not point.data_tiling:
        return {}
    tile, dtype = point.mmt4d_tile, kinds.element(op.input_element)
    m1, n1, k1 = (math.ceil(op.size(d) / inner)
                  for d, inner in (("m", tile.m0), ("n", tile.n0), ("k", tile.k0)))
    types = (mlir_text.tensor_type((m1, k1, tile.m0, tile.k0), dtype),
             mlir_text.tensor_type((n1, k1, tile.n0, tile.k0), dtype),
             mlir_text.tensor_type((m1, n1, tile.m0, tile.n0),
                                   kinds.element(op.accumulator_element)))
    return {op.index: Matcher((cpu_tiles.MMT4D_OP,), tuple(enumerate(types)))}


def configuration(op: TunableOp, point: Point) -> TuningConfiguration:
    """The llvm-cpu config of a tile point, one entry per loop of the op (of its mmt4d for a
    data-tiled point)."""
    if point.data_tiling:
        return cpu_tiles.mmt4d_configuration(point.mmt4d_tile, point.data_tiling == DATA_TILED_UKERNELS)
    kind = kinds.of(op)
    rows, cols, red = (op.positions(d) for d in kind.tiled)
    whole = {loop: dim for dim in kind.whole for loop in op.positions(dim)}
    distribution, vector, reduction, cache_parallel, cache_reduction = [], [], [], [], []
    spread = {**kinds.spread(op, kind.tiled[0], point.tile_m),
              **kinds.spread(op, kind.tiled[1], point.tile_n)}
    for loop in range(len(op.loops)):
        if loop in whole:  # a packed inner tile: the register block
            reducing = whole[loop] in kind.reductions
            distribution.append(0)
            vector.append(0 if reducing else op.loops[loop])
            reduction.append(op.loops[loop] if reducing else 0)
            cache_parallel.append(0)
            cache_reduction.append(0)
        elif loop in rows or loop in cols:
            inner = loop in (*rows[-1:], *cols[-1:])
            distribution.append(spread[loop])
            vector.append((point.vector_m if loop in rows else point.vector_n) if inner else 1)
            cache_parallel.append((point.cache_m if loop in rows else point.cache_n) if inner else 1)
            reduction.append(0)
            cache_reduction.append(0)
        elif any(loop in op.positions(d) for d in kind.reductions):
            distribution.append(0)
            vector.append(0)
            cache_parallel.append(0)
            reduction.append(point.tile_k if loop == red[-1] else kind.other_reduction_tile)
            cache_reduction.append(point.cache_k if loop == red[-1] else kind.other_reduction_tile)
        else:  # batch (and depth): one at a time
            distribution.append(1)
            vector.append(1)
            cache_parallel.append(1)
            reduction.append(0)
            cache_reduction.append(0)
    cache = {"cache_parallel": cache_parallel, "cache_reduction": cache_reduction} if point.cache_k else {}
    return cpu_tiles.configuration(point.name, distribution, vector, reduction,
                                   kind.pipeline_of(op), bool(point.peel), **cache)
