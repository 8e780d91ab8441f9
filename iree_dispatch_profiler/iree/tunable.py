"""The tunable ops of a user's module, found on the IR with IREE's Python bindings (never by
text): contractions (matmul with any indexing maps, batch_matmul, contraction-like
linalg.generic), convolutions, attention (iree_linalg_ext.attention, and the online_attention
IREE turns it into before codegen) and data tiling's packed matmuls (linalg.mmt4d,
linalg.batch_mmt4d), with their loop bounds and types. And the module again with
a compilation_info attached to chosen ops."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from iree_dispatch_profiler.iree import modules

CONTRACTION_DIMS = ("batch", "m", "n", "k")
CONVOLUTION_DIMS = ("batch", "output_image", "output_channel", "filter_loop", "input_channel",
                    "depth")
# softmax(Q K^T * scale) V: Q is batch x m x k1, K batch x k2 x k1, V batch x k2 x n.
ATTENTION_DIMS = ("batch", "m", "k1", "k2", "n")
ATTENTION_OPS = ("iree_linalg_ext.attention", "iree_linalg_ext.online_attention")
# Data tiling's packed matmuls: m, n and k are the outer tile loops, m0, n0 and k0 the inner tile
# (the target's register block, fixed by the packed layout).
MMT4D_DIMS = ("batch", "m", "n", "k", "m0", "n0", "k0")
MMT4D_OPS = ("linalg.mmt4d", "linalg.batch_mmt4d")
# The kinds of tunable op, as TunableOp.kind names them (tuning/kinds.py: how each is tuned).
# A depthwise convolution is a convolution whose channels are `depth` loops (in the input,
# filter and output alike) and that has no input channel to reduce.
CONTRACTION, CONVOLUTION, ATTENTION, MMT4D = "contraction", "convolution", "attention", "mmt4d"
DEPTHWISE = "depthwise convolution"
# A sum of contractions of one shape in one generic (a grouped conv's taps, rewrites.py):
# classed as its contractions are, its products counted in its FLOPs.
SUMMED = "summed contractions"
KINDS = (CONTRACTION, CONVOLUTION, DEPTHWISE, ATTENTION, MMT4D, SUMMED)


@dataclass(frozen=True)
class TunableOp:
    index: int  # position among the module's tunable ops in IR order: what --op names
    function: str  # the function it is in: what verification and timing run
    name: str  # linalg.matmul, linalg.generic, ...
    kind: str  # one of KINDS
    loops: tuple[int, ...]  # static bounds, in the op's iteration-domain order; () if unknown
    dims: tuple[tuple[str, tuple[int, ...]], ...]  # dimension class -> loop positions
    operand_types: tuple[str, ...]  # MLIR types of the inputs then the init, as printed
    input_element: str
    accumulator_element: str
    products: int = 1  # products per iteration: a sum of products' pairs (_summed_products)

    def positions(self, dim: str) -> tuple[int, ...]:
        return dict(self.dims).get(dim, ())

    def size(self, dim: str) -> int:
        return math.prod(self.loops[i] for i in self.positions(dim))

    @property
    def shape(self) -> str:
        """`b=4 m=64 n=96 k=32`, or the conv's classes; '?' where a bound is not static."""
        if not self.loops:
            return "dynamic shape"
        short = {"output_image": "out", "output_channel": "f", "filter_loop": "filter",
                 "input_channel": "c"}
        parts = []
        for dim, positions in self.dims:
            if positions:
                sizes = "x".join(str(self.loops[i]) for i in positions)
                parts.append(f"{short.get(dim, dim)}={sizes}")
        return " ".join(parts)

    @property
    def types(self) -> str:
        return f"{self.input_element} -> {self.accumulator_element}"

    @property
    def flops(self) -> int | None:
        """Multiplies and adds one call does (padding a packed matmul carries included); None
        where a bound is not static. An attention does two products, Q K^T and P V: its
        softmax is not counted."""
        if not self.loops:
            return None
        if self.kind == ATTENTION:
            return 2 * self.size("batch") * self.size("m") * self.size("k2") * (
                self.size("k1") + self.size("n"))
        return 2 * math.prod(self.loops) * self.products


def _functions(module) -> Iterator[tuple[str, object]]:
    from iree.compiler import ir

    for op in module.body.operations:
        if op.operation.name in ("func.func", "util.func"):
            yield ir.StringAttr(op.operation.attributes["sym_name"]).value, op


def _candidates(module) -> Iterator[tuple[str, object, str]]:
    """(function, op, kind) for every contraction, convolution and attention, in IR order."""
    for function, func in _functions(module):
        for op in modules.walk(func.operation):
            kind = _kind(op)
            if kind:
                yield function, op, kind


def _shape(value):
    """The value's ShapedType, or None for a scalar (attention's scale)."""
    from iree.compiler import ir

    return ir.ShapedType(value.type) if isinstance(value.type, ir.ShapedType) else None


def _loop_bounds(op, partial: bool = False) -> tuple:
    """Static loop bounds, read from the operand dimension each loop indexes directly; ()
    where one is dynamic, or with `partial` None for it."""
    from iree.compiler import ir
    from iree.compiler.dialects import linalg

    shapes = [_shape(value) for value in op.operands]
    dynamic = any(s is not None and not s.has_static_shape for s in shapes)
    if dynamic and not partial:
        return ()
    if "indexing_maps" in op.operation.attributes:
        maps_attribute = ir.ArrayAttr(op.operation.attributes["indexing_maps"])
    elif op.operation.name.startswith("linalg."):  # a named op's maps are implied by its name
        maps_attribute = linalg.get_indexing_maps(op)
    else:
        return ()
    maps = [ir.AffineMapAttr(m).value for m in maps_attribute]
    bounds: dict[int, int] = {}
    for affine_map, shape in zip(maps, shapes):
        if shape is None:
            continue
        for position, expr in enumerate(affine_map.results):
            if isinstance(expr, ir.AffineDimExpr):
                size = None if shape.is_dynamic_dim(position) else shape.shape[position]
                loop = ir.AffineDimExpr(expr).position
                if bounds.get(loop) is None:  # a static size wins over a dynamic one
                    bounds[loop] = size
    count = maps[0].n_dims if maps else 0
    if sorted(bounds) != list(range(count)):
        return ()
    return tuple(bounds[i] for i in range(count))


def _element(value) -> str:
    from iree.compiler import ir

    return str(ir.ShapedType(value.type).element_type)


def describe(op, index: int, function: str, kind: str) -> TunableOp:
    """A contraction, convolution or attention op as the tuner sees it."""
    from iree.compiler.dialects import linalg

    products = 1
    if kind == ATTENTION:
        dims = _attention_dims(op)
    elif kind == MMT4D:  # batch_mmt4d's first loop is its batch
        first = int(op.operation.name == MMT4D_OPS[1])
        dims = (("batch", tuple(range(first))),
                *((name, (first + i,)) for i, name in enumerate(MMT4D_DIMS[1:])))
    elif kind == SUMMED:
        dims, products = _summed_products(op)
    else:
        if kind == CONTRACTION:
            inferred, names = linalg.infer_contraction_dimensions(op), CONTRACTION_DIMS
        else:  # a convolution, depthwise or not
            inferred, names = linalg.infer_convolution_dimensions(op), CONVOLUTION_DIMS
        dims = tuple((n, tuple(int(i) for i in getattr(inferred, n))) for n in names)
    operands = op.operands
    return TunableOp(index, function, op.operation.name, kind, _loop_bounds(op), dims,
                     tuple(str(v.type) for v in operands), _element(operands[0]),
                     _element(operands[len(operands) - 1]), products)


def _attention_dims(op) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The loop classes of an attention, from the loops each of Q, K, V and the result index:
    its maps are Q, K, V, scale, [mask,] then the result (attention) or the result, max and sum
    (online_attention)."""
    from iree.compiler import ir

    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.operation.attributes["indexing_maps"])]
    out = maps[-1] if op.operation.name == ATTENTION_OPS[0] else maps[-3]
    q, k, v, o = ({ir.AffineDimExpr(e).position for e in m.results
                   if isinstance(e, ir.AffineDimExpr)} for m in (*maps[:3], out))
    classes = {"batch": q & k & v & o, "m": (q & o) - k, "k1": (q & k) - o - v,
               "k2": (k & v) - q, "n": (v & o) - q}
    return tuple((name, tuple(sorted(classes[name]))) for name in ATTENTION_DIMS)


def _summed_products(op) -> tuple[tuple[tuple[str, tuple[int, ...]], ...], int] | None:
    """(loop classes, products) of a generic that adds to its accumulator a sum of products,
    each of an A operand and a B operand (rewrites.grouped_taps: a filter tap times its input
    slice): a contraction per pair, all of one shape, classed as one of them (A x B into the
    result). None for any other op."""
    from iree.compiler import ir

    if op.operation.name != "linalg.generic" or len(op.results) != 1:
        return None
    maps = [ir.AffineMapAttr(m).value
            for m in ir.ArrayAttr(op.operation.attributes["indexing_maps"])]
    inputs = len(maps) - 1
    if inputs < 4 or inputs % 2 or len(set(maps[:inputs])) != 2:
        return None
    a_map, b_map = maps[0], next(m for m in maps[:inputs] if m != maps[0])
    if not all(isinstance(e, ir.AffineDimExpr) for m in (a_map, b_map, maps[-1])
               for e in m.results):
        return None
    a, b, c = ({ir.AffineDimExpr(e).position for e in m.results} for m in (a_map, b_map, maps[-1]))
    if any(((d in a) + (d in b) + (d in c)) < 2 for d in range(maps[-1].n_dims)):
        return None  # a loop of one operand alone: no contraction's
    block = op.operation.regions[0].blocks[0]
    out = block.arguments[inputs]

    def argument(value) -> int | None:  # the input a block argument (maybe widened) is
        if not isinstance(value, ir.BlockArgument) and value.owner.name == "arith.extf":
            value = value.owner.operands[0]
        if isinstance(value, ir.BlockArgument) and value.arg_number < inputs:
            return value.arg_number
        return None

    def leaves(value) -> list | None:  # the products an addf tree sums
        owner = None if isinstance(value, ir.BlockArgument) else value.owner
        if owner is not None and owner.name == "arith.addf":
            left, right = (leaves(v) for v in owner.operands)
            return None if left is None or right is None else left + right
        if owner is not None and owner.name == "arith.mulf":
            pair = [argument(v) for v in owner.operands]
            return None if None in pair else [pair]
        return None

    yielded = list(block.operations)[-1].operands[0]
    if isinstance(yielded, ir.BlockArgument) or yielded.owner.name != "arith.addf":
        return None
    first, second = yielded.owner.operands
    if second == out:
        first, second = second, first
    products = leaves(second) if first == out else None
    if products is None or len(products) * 2 != inputs:
        return None
    used = [i for pair in products for i in pair]
    if sorted(used) != list(range(inputs)) or any(
            {maps[i] for i in pair} != {a_map, b_map} for pair in products):
        return None
    classes = {"batch": a & b & c, "m": (a & c) - b, "n": (b & c) - a, "k": (a & b) - c}
    return (tuple((name, tuple(sorted(classes[name]))) for name in CONTRACTION_DIMS),
            len(products))


def _kind(op) -> str:
    from iree.compiler.dialects import linalg

    name = op.operation.name
    if name in ATTENTION_OPS:
        return ATTENTION
    if name in MMT4D_OPS:
        return MMT4D
    if not name.startswith("linalg."):
        return ""
    if linalg.isa_contraction_op(op):
        return CONTRACTION
    if _summed_products(op) is not None:
        return SUMMED
    if not linalg.isa_convolution_op(op):
        return ""
    dims = linalg.infer_convolution_dimensions(op)
    if dims is None:  # a copy through a window's map with a scale passes the check
        return ""
    return DEPTHWISE if list(dims.depth) and not list(dims.input_channel) else CONVOLUTION


def find(path: Path) -> list[TunableOp]:
    """Every tunable op of the module in `path`, in IR order."""
    from iree.compiler import ir

    with ir.Context() as context:
        module = modules.parse(modules.read(path), str(path), context)
        return [describe(op, index, function, kind)
                for index, (function, op, kind) in enumerate(_candidates(module))]


@dataclass(frozen=True)
class DispatchRoot:
    """The root op of one of a model's dispatches (IREE's --iree-codegen-add-tuner-attributes)."""

    dispatch: str  # the dispatch function, as --dispatch_statistics names it
    name: str  # the root op's name
    operand_types: tuple[str, ...]  # as printed: what a spec matcher compares
    op: TunableOp | None  # None: not a contraction, convolution or attention
    lowering_config: str  # the config IREE gave it ("" if none)
    work: int | None = None  # FLOPs of a root that is no TunableOp but whose work is known
    bounds: tuple[int | None, ...] = ()  # an op of dynamic shapes' loop bounds, None if dynamic

    @property
    def flops(self) -> int | None:
        return self.op.flops if self.op is not None else self.work

    @property
    def input_element(self) -> str:
        """The element type of its first input (`bf16`), "" where none is known."""
        if self.op is not None:
            return self.op.input_element
        if not self.operand_types:
            return ""
        inner = self.operand_types[0].partition("<")[2].split(",")[0].rstrip(">")
        return inner.split("x")[-1]


INNER_TILED = "iree_codegen.inner_tiled"  # data tiling's packed matmul under inner_tiled


def _inner_tiled_flops(op) -> int | None:
    """An inner_tiled matmul's FLOPs (padding included): its outer loops (read from the
    operands' leading dims by its maps) times one inner tile's products, M0 N0 K0: the square
    root of its A (M0 x K0), B (N0 x K0) and C (M0 x N0) tiles' sizes multiplied, whatever
    unit dims the layout adds. None where a bound is not static or the tiles are no matmul's."""
    from iree.compiler import ir

    outer = _loop_bounds(op)
    if not outer:
        return None
    maps = [ir.AffineMapAttr(m).value
            for m in ir.ArrayAttr(op.operation.attributes["indexing_maps"])]
    tiles = [math.prod(_shape(v).shape[len(m.results):]) for v, m in zip(op.operands, maps)]
    inner = round(math.prod(tiles) ** 0.5)
    if len(tiles) != 3 or inner * inner != math.prod(tiles):
        return None
    return 2 * math.prod(outer) * inner


def dispatch_roots(folder: Path, function: str,
                   configs: Path | None = None) -> dict[str, DispatchRoot]:
    """Root ops of the executable benchmarks IREE dumped to `folder`
    (--iree-hal-dump-executable-benchmarks-to), by dispatch; `function` is the model's. IREE
    marks roots only where it chose the config itself (--iree-codegen-add-tuner-attributes);
    where a spec gave it, the configured contraction, convolution or attention is the root.
    IREE dumps no benchmark of a dispatch whose shapes are dynamic: the roots of those
    executables come from their configured modules in `configs`
    (--iree-hal-dump-executable-configurations-to)."""
    from iree.compiler import ir
    from iree.compiler.dialects import iree_codegen

    paths = sorted(folder.glob("*.mlir"))
    if configs is not None:  # configured_module_X.mlir; its benchmarks module_X_<target>_benchmark
        benchmarked = [p.name for p in paths]
        paths += [p for p in sorted(configs.glob("configured_*.mlir")) if not any(
            b.startswith(p.stem.removeprefix("configured_") + "_") for b in benchmarked)]
    roots = {}
    with ir.Context() as context:
        for path in paths:
            module = modules.parse(path.read_text(), str(path), context)
            for func in modules.walk(module.operation):
                if func.operation.name != "func.func" or "_dispatch_" not in str(
                        func.operation.attributes["sym_name"]):
                    continue
                ops = list(modules.walk(func.operation))
                marked = [op for op in ops if "root_op" in op.operation.attributes]
                configured = [op for op in ops if _kind(op) and (
                    "lowering_config" in op.operation.attributes
                    or "compilation_info" in op.operation.attributes)]
                if not marked and not configured:
                    continue
                op = (marked or configured)[-1]
                dispatch = ir.StringAttr(func.operation.attributes["sym_name"]).value
                kind = _kind(op)
                attributes = op.operation.attributes
                config = ""
                if "compilation_info" in attributes:
                    info = iree_codegen.CompilationInfoAttr(attributes["compilation_info"])
                    config = str(info.lowering_config)
                elif "lowering_config" in attributes:
                    config = str(attributes["lowering_config"])
                described = describe(op, -1, function, kind) if kind else None
                roots[dispatch] = DispatchRoot(
                    dispatch, op.operation.name, tuple(str(v.type) for v in op.operands),
                    described, config,
                    _inner_tiled_flops(op) if op.operation.name == INNER_TILED else None,
                    _loop_bounds(op, partial=True) if described and not described.loops else ())
    return roots


def with_configs(path: Path, configs: dict[int, str]) -> str:
    """The module's text with `compilation_info = configs[i]` on tunable op i (IR order, as
    `find` numbers them)."""
    from iree.compiler import ir

    with ir.Context() as context:
        module = modules.parse(path.read_text(), str(path), context)
        for index, (_, op, _) in enumerate(_candidates(module)):
            if index in configs:
                op.operation.attributes["compilation_info"] = ir.Attribute.parse(configs[index])
        return str(module)
