"""A user's MLIR module as the tools see it: its public functions and their tensor signatures."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import ml_dtypes
import numpy as np

from iree_dispatch_profiler.core.library import UserError

# MLIR element type -> numpy dtype (bf16 through ml_dtypes)
ELEMENT_TYPES = {
    "f64": np.dtype(np.float64), "f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16), "i64": np.dtype(np.int64), "i32": np.dtype(np.int32),
    "i16": np.dtype(np.int16), "i8": np.dtype(np.int8), "i1": np.dtype(np.bool_),
}
FUNCTION_OPS = ("func.func", "util.func")


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int | None, ...]  # None: a dynamic dimension
    element_type: str

    @property
    def dtype(self) -> np.dtype:
        return ELEMENT_TYPES[self.element_type]

    @property
    def static(self) -> bool:
        return None not in self.shape

    def __str__(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"{dims}x{self.element_type}" if dims else self.element_type

    def matches(self, array: np.ndarray) -> bool:
        return (array.dtype == self.dtype and len(array.shape) == len(self.shape)
                and all(d is None or d == a for d, a in zip(self.shape, array.shape)))


@dataclass(frozen=True)
class Signature:
    name: str
    arguments: tuple[TensorType, ...]
    results: tuple[TensorType, ...]


def walk(operation):
    """Every op nested in `operation`, in IR order."""
    for region in operation.regions:
        for block in region.blocks:
            for op in block.operations:
                yield op
                yield from walk(op)


BYTECODE_MAGIC = b"ML\xefR"
SUFFIXES = (".mlir", ".mlirbc")  # MLIR text, MLIR bytecode


def parse(text: str | bytes, origin: str, context):
    """An ir.Module from MLIR text or bytecode, or a one-line UserError naming `origin` and the
    first diagnostic."""
    from iree.compiler import ir

    context.allow_unregistered_dialects = True
    try:
        return ir.Module.parse(text, context)
    except ir.MLIRError as error:
        first = str(error).splitlines()[1:2] or [str(error)]
        raise UserError(f"{origin} is not a valid MLIR module: {first[0].strip()}") from None


def read(path: Path) -> str | bytes:
    """A module file's MLIR text, or its bytes when it is MLIR bytecode (.mlirbc)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    if data.startswith(BYTECODE_MAGIC):
        return data
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise UserError(f"{path} is neither MLIR text nor MLIR bytecode") from None


def text_of(path: Path) -> str:
    """A module file's MLIR text, printed from its bytecode when it is MLIR bytecode."""
    data = read(path)
    if isinstance(data, str):
        return data
    from iree.compiler import ir

    with ir.Context() as context:
        return str(parse(data, str(path), context))


def as_text(path: Path, folder: Path) -> Path:
    """`path` if it holds MLIR text; for MLIR bytecode, its text written to `folder` (the
    tools that edit a module's text read that)."""
    if isinstance(read(path), str):
        return path
    folder.mkdir(parents=True, exist_ok=True)
    converted = folder / f"{path.stem}.mlir"
    converted.write_text(text_of(path))
    return converted


def signatures(path: Path, source: Path | None = None) -> list[Signature]:
    """Public functions of the module in `path`; arguments and results must be tensors of the
    types in ELEMENT_TYPES (what numpy inputs can feed). A module past IREE's input phase
    (`--compile-to=input`, as autotune.py --model lowers torch, StableHLO and TOSA) passes
    !hal.buffer_view: its tensor types are those of its hal.tensor.import/export ops, and an
    argument the graph does not use (no import) has the type it had in `source`, the module
    before lowering."""
    from iree.compiler import ir

    declared = declared_arguments(source) if source is not None else {}
    with ir.Context() as context:
        module = parse(read(path), str(path), context)
        functions = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op
                     for op in module.body.operations if op.operation.name in FUNCTION_OPS}
        found = []
        for name, op in functions.items():
            attributes = op.operation.attributes
            if "sym_visibility" in attributes and str(attributes["sym_visibility"]) == '"private"':
                continue
            kind = ir.FunctionType(ir.TypeAttr(attributes["function_type"]).value)
            inputs, results = list(kind.inputs), list(kind.results)
            if any(str(t) == "!hal.fence" for t in inputs):
                continue  # the async twin of an ABI function: run through its sync wrapper
            if any(str(t) == "!hal.buffer_view" for t in [*inputs, *results]):
                # the sync wrapper of an async function takes the same buffer views
                body = functions.get(f"{name}$async", op)
                inputs, results = _abi_types(body)
                inputs = inputs[:len(kind.inputs)]
            given = declared.get(name, [])
            arguments = tuple(given[i] if str(t) == "!hal.buffer_view" and i < len(given)
                              and given[i] is not None else _tensor(t, name)
                              for i, t in enumerate(inputs))
            found.append(Signature(name, arguments, tuple(_tensor(t, name) for t in results)))
    return found


# torch's element types (`!torch.vtensor<[1,128],si64>`) as MLIR's
TORCH_ELEMENTS = {"si64": "i64", "si32": "i32", "si16": "i16", "si8": "i8", "i1": "i1",
                  "f64": "f64", "f32": "f32", "f16": "f16", "bf16": "bf16"}
TORCH_TENSOR = re.compile(r"!torch\.vtensor<\[([^\]]*)\],(\w+)>")


def declared_arguments(path: Path) -> dict[str, list[TensorType | None]]:
    """Each function's argument types as the module in `path` declares them (builtin tensors
    or torch's value tensors), None where a type is neither."""
    from iree.compiler import ir

    found: dict[str, list[TensorType | None]] = {}
    with ir.Context() as context:
        module = parse(read(path), str(path), context)
        for op in module.body.operations:
            if op.operation.name not in FUNCTION_OPS:
                continue
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            kind = ir.FunctionType(ir.TypeAttr(op.operation.attributes["function_type"]).value)
            found[name] = [_declared(t) for t in kind.inputs]
    return found


def _declared(kind) -> TensorType | None:
    from iree.compiler import ir

    if isinstance(kind, ir.RankedTensorType) and str(kind.element_type) in ELEMENT_TYPES:
        return _tensor(kind, "")
    match = TORCH_TENSOR.fullmatch(str(kind))
    if match and match.group(2) in TORCH_ELEMENTS:
        dims = [d.strip() for d in match.group(1).split(",") if d.strip()]
        return TensorType(tuple(None if d in ("?", "-1") else int(d) for d in dims),
                          TORCH_ELEMENTS[match.group(2)])
    return None


def _abi_types(function) -> tuple[list, list]:
    """Argument and result tensor types of an ABI function: what hal.tensor.import makes of
    each argument, and what hal.tensor.export turns into each returned value."""
    from iree.compiler import ir

    arguments = list(function.regions[0].blocks[0].arguments)
    inputs: list = [argument.type for argument in arguments]
    exported, returned = {}, []
    for op in walk(function.operation):
        name = op.operation.name
        if name == "hal.tensor.import":
            source = op.operands[0]
            if isinstance(source.owner, ir.Block) and source in arguments:
                inputs[ir.BlockArgument(source).arg_number] = op.results[0].type
        elif name == "hal.tensor.export":
            exported[op.results[0]] = op.operands[0].type
        elif name in ("util.return", "func.return") and op.operation.parent == function.operation:
            returned = list(op.operands)
    return inputs, [exported.get(value, value.type) for value in returned]


def _tensor(kind, function: str) -> TensorType:
    from iree.compiler import ir

    if not isinstance(kind, ir.RankedTensorType):  # the bindings give the concrete type
        raise UserError(f"function {function}: type {kind} is not a ranked tensor; "
                        "only tensor arguments and results are supported")
    tensor = kind
    element = str(tensor.element_type)
    if element not in ELEMENT_TYPES:
        raise UserError(f"function {function}: element type {element} is not supported "
                        f"({', '.join(ELEMENT_TYPES)})")
    shape = tuple(None if tensor.is_dynamic_dim(i) else tensor.get_dim_size(i)
                  for i in range(tensor.rank))
    return TensorType(shape, element)


def with_static_dims(text: str, function: str, shapes: Sequence[Sequence[int]]) -> str:
    """The lowered module with `function`'s arguments at the static `shapes`: past IREE's ABI,
    each size it reads of one (hal.buffer_view.dim) made a constant; where its arguments are
    tensors, each dynamic one cast to its static type and back. IREE folds them, and every
    dispatch of the model has static shapes, as at these inputs."""
    from iree.compiler import ir

    with ir.Context() as context:
        module = parse(text, function, context)
        index = ir.IndexType.get()
        for op in module.body.operations:  # functions are top-level ops
            if (op.operation.name not in ("util.func", "func.func") or ir.StringAttr(
                    op.operation.attributes["sym_name"]).value not in (function, f"{function}$async")):
                continue
            block = op.regions[0].blocks[0]
            arguments = list(block.arguments)
            for dim in [d for d in walk(op.operation) if d.operation.name == "hal.buffer_view.dim"]:
                source = dim.operands[0]
                if source not in arguments:
                    continue
                axis = ir.IntegerAttr(dim.operation.attributes["index"]).value
                size = shapes[ir.BlockArgument(source).arg_number][axis]
                with ir.InsertionPoint(dim.operation), ir.Location.unknown():
                    constant = ir.Operation.create(
                        "arith.constant", results=[index],
                        attributes={"value": ir.IntegerAttr.get(index, size)})
                dim.results[0].replace_all_uses_with(constant.results[0])
                dim.operation.erase()
            for argument, shape in zip(arguments, shapes):
                kind = argument.type
                if not isinstance(kind, ir.RankedTensorType) or kind.has_static_shape:
                    continue
                with ir.InsertionPoint.at_block_begin(block), ir.Location.unknown():
                    static = ir.RankedTensorType.get(list(shape), kind.element_type,
                                                     kind.encoding)
                    there = ir.Operation.create("tensor.cast", results=[static],
                                                operands=[argument])
                    back = ir.Operation.create("tensor.cast", results=[kind],
                                               operands=[there.results[0]])
                argument.replace_all_uses_except(back.results[0], there)
        return str(module)


def find_function(path: Path, name: str | None, shown: str = "",
                  source: Path | None = None) -> Signature:
    """The function `name`, or the module's only public function (`shown`: how errors name
    the module; `source`: the module before lowering, see signatures)."""
    found = signatures(path, source)
    path = shown or path
    names = [s.name for s in found]
    if name is None:
        if len(found) != 1:
            raise UserError(f"{path} has {len(found)} public functions "
                            f"({', '.join(names) or 'none'}); choose one with --function")
        return found[0]
    for signature in found:
        if signature.name == name:
            return signature
    raise UserError(f"{path} has no public function {name} (it has: {', '.join(names) or 'none'})")


# A global that IREE reads from a parameter archive: #flow.parameter.named<"scope"::"key">
# (scope optional) and its tensor type; the lowered module keeps every one of them.
PARAMETER = re.compile(r'#flow\.parameter\.named<(?:"([^"]*)"::)?"([^"]*)">(?:\s*:\s*tensor<([^>]*)>)?')


def parameters(path: Path) -> list[tuple[str, str, str]]:
    """The parameters a module reads: (scope, "" without one; key; its tensor type, as
    `1024x512xf32`)."""
    return PARAMETER.findall(text_of(path))


def parameter_scopes(path: Path) -> dict[str, list[str]]:
    """The parameter archives' scopes a module reads: scope -> its keys."""
    scopes: dict[str, list[str]] = {}
    for scope, key, _ in parameters(path):
        scopes.setdefault(scope, []).append(key)
    return scopes


def missing_parameters(path: Path, run_flags: list[str]) -> str:
    """What a module reads from parameter archives that no --parameters flag gives: '' when
    nothing is missing, else a line that names the scopes and keys and the flag to add."""
    given = {flag.removeprefix("--parameters=").rpartition("=")[0] for flag in run_flags
             if flag.startswith("--parameters=")}
    missing = {scope: keys for scope, keys in parameter_scopes(path).items() if scope not in given}
    return "; ".join(
        f"it reads {len(keys)} parameter(s) of scope {scope!r} ({', '.join(keys[:3])}"
        f"{', ...' if len(keys) > 3 else ''}): give --parameters "
        f"{scope + '=' if scope else ''}FILE.irpa" for scope, keys in missing.items())


# Ops whose result holds the same elements as their first operand (an index tensor reshaped
# or sliced on its way to the op that reads the table).
SAME_ELEMENTS = {"tensor.expand_shape", "tensor.collapse_shape", "tensor.cast", "tensor.reshape",
                 "tensor.extract_slice", "flow.tensor.reshape", "hal.tensor.barrier",
                 "util.optimization_barrier"}
# Scalar ops an index passes through on its way to tensor.extract.
INDEX_CASTS = {"arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui",
               "arith.trunci"}


def index_bounds(path: Path, function: str) -> dict[int, int]:
    """Integer arguments of `function` whose elements index a tensor (token ids into an
    embedding table, gather indices, the positions a KV cache is written at): argument number
    -> the size of the smallest dimension they index. Found on the IR: the argument (or its
    hal.tensor.import), through reshapes, slices and concatenations, into a linalg op's body,
    through index casts, into `tensor.extract`; or into a scatter's indices."""
    from iree.compiler import ir

    with ir.Context() as context:
        module = parse(read(path), str(path), context)
        functions = {ir.StringAttr(op.operation.attributes["sym_name"]).value: op
                     for op in module.body.operations if op.operation.name in FUNCTION_OPS}
        body = functions.get(f"{function}$async", functions.get(function))
        if body is None or not body.regions[0].blocks:
            return {}
        arguments = list(body.regions[0].blocks[0].arguments)
        starts = {i: [argument] for i, argument in enumerate(arguments)}
        for op in walk(body.operation):
            if op.operation.name == "hal.tensor.import":
                source = op.operands[0]
                if isinstance(source.owner, ir.Block) and source in arguments:
                    starts[ir.BlockArgument(source).arg_number].append(op.results[0])
        bounds = {}
        for number, values in starts.items():
            found = [b for value in values for b in _indexed_sizes(value)]
            if found:
                bounds[number] = min(found)
    return bounds


def _indexed_sizes(tensor) -> list[int]:
    """Sizes of the dimensions the elements of `tensor` index."""
    from iree.compiler import ir

    # Each value with the column of its last dimension its elements sit in, where a concat
    # built a scatter's index vectors (column c indexes the dimension_map[c] dimension).
    sizes, work, seen = [], [(tensor, None)], set()
    while work:
        value, column = work.pop()
        if (value, column) in seen:
            continue
        seen.add((value, column))
        for use in value.uses:
            owner = use.owner.operation
            name = owner.name
            if name in SAME_ELEMENTS and use.operand_number == 0:
                work.append((owner.results[0], column))
            elif name == "tensor.concat":
                work.append((owner.results[0], _concat_column(owner, use.operand_number)))
            elif name == "iree_linalg_ext.scatter" and use.operand_number == 1:
                sizes += _scattered_sizes(owner, column)
            elif name.startswith("linalg.") and owner.regions and owner.regions[0].blocks:
                block = owner.regions[0].blocks[0]  # a tensor into a linalg op: its elements
                if use.operand_number < len(block.arguments):
                    work.append((block.arguments[use.operand_number], None))
            elif name == "linalg.yield":  # copied or broadcast out: the op's result
                work.append((owner.parent.results[use.operand_number], None))
            elif name in INDEX_CASTS:
                work.append((owner.results[0], None))
            elif name == "tensor.extract" and use.operand_number >= 1:
                table = ir.RankedTensorType(owner.operands[0].type)
                dimension = use.operand_number - 1
                if not table.is_dynamic_dim(dimension):
                    sizes.append(table.get_dim_size(dimension))
    return sizes


def _concat_column(concat, operand: int) -> int | None:
    """The column of the result's last dimension that a one-wide `operand` of a concat along
    that dimension becomes; None otherwise."""
    from iree.compiler import ir

    types = [ir.RankedTensorType(o.type) for o in concat.operands]
    last = types[operand].rank - 1
    if ir.IntegerAttr(concat.attributes["dim"]).value != last or \
            types[operand].get_dim_size(last) != 1:
        return None
    return sum(t.get_dim_size(last) for t in types[:operand])


def _scattered_sizes(scatter, column: int | None) -> list[int]:
    """The sizes of the dimensions of a scatter's destination its index vectors' `column`
    indexes (every mapped dimension when the column is not known)."""
    from iree.compiler import ir

    destination = ir.RankedTensorType(scatter.operands[2].type)
    mapped = list(ir.DenseI64ArrayAttr(scatter.attributes["dimension_map"]))
    dimensions = mapped if column is None or column >= len(mapped) else [mapped[column]]
    return [destination.get_dim_size(d) for d in dimensions if not destination.is_dynamic_dim(d)]


@dataclass(frozen=True)
class Inputs:
    """What a function is run on: `.npy` files and how they were made."""

    paths: tuple[Path, ...]
    about: str

    @property
    def flags(self) -> list[str]:
        return [f"@{p}" for p in self.paths]


def require_static(signature: Signature) -> None:
    """Random inputs need each argument's size: a dynamic one is the user's to give."""
    for argument in signature.arguments:
        if not argument.static:
            raise UserError(f"argument {argument} of {signature.name} has a dynamic shape: give "
                            "--inputs, one item per argument: a .npy file (@a.npy) or a type to "
                            "draw at random at (8x256xf32)")


# An --inputs item: a .npy file, or a static type to draw seeded random values at
InputItem = Path | TensorType
TYPE_ITEM = re.compile(r"((?:\d+x)*)([a-z]+\d+)")


def parse_input_item(text: str) -> InputItem:
    """`@a.npy` or `a.npy` (the @ as in IREE's tools is optional), or a type such as
    `8x256xf32` (`f32` for a 0-d argument); ValueError for an empty name or an unknown element
    type."""
    text = text.strip()
    if match := TYPE_ITEM.fullmatch(text):
        dims, element = match.groups()
        if element not in ELEMENT_TYPES:
            raise ValueError(f"unknown element type {element} (known: {', '.join(ELEMENT_TYPES)})")
        return TensorType(tuple(int(d) for d in dims.split("x") if d), element)
    path = Path(text.removeprefix("@"))
    if str(path) in ("", "."):
        raise ValueError("empty file name")
    return path


def given_files(items: list[InputItem] | None) -> dict[int, Path]:
    """--inputs' files by argument position (the other items are types, drawn at)."""
    return {i: item for i, item in enumerate(items or []) if isinstance(item, Path)}


def all_files(items: list[InputItem] | None) -> list[Path] | None:
    """--inputs' items where each is a file (nothing is drawn), else None."""
    files = given_files(items)
    return list(files.values()) if items is not None and len(files) == len(items) else None


def concrete(signature: Signature, items: list[InputItem] | None) -> Signature:
    """The signature at the shapes --inputs gives (each file's array's, each type's), each
    checked to fit its argument; without --inputs, the signature itself."""
    if items is None:
        return signature
    if len(items) != len(signature.arguments):
        raise UserError(f"{signature.name} takes {len(signature.arguments)} inputs, "
                        f"--inputs gives {len(items)}")
    arguments = []
    for i, (item, argument) in enumerate(zip(items, signature.arguments)):
        if isinstance(item, TensorType):
            if (item.element_type != argument.element_type or len(item.shape) != len(argument.shape)
                    or any(d is not None and d != g for d, g in zip(argument.shape, item.shape))):
                raise UserError(f"input {i} ({item}): {signature.name} expects {argument}")
            arguments.append(item)
        else:
            array = load_input(item, i, argument, signature.name)
            arguments.append(TensorType(array.shape, argument.element_type))
    return Signature(signature.name, tuple(arguments), signature.results)


def masks(signature: Signature, bounds: dict[int, int]) -> set[int]:
    """Integer or boolean arguments shaped as one that indexes (the ids) and not indexing
    themselves: the attention mask a tokenizer gives beside the ids. Drawn as ones, an
    unpadded batch: BERT's export adds (1 - mask) x the float minimum to its scores, and a
    mask of 4 makes that +inf; or as zeros (MASK_VALUES)."""
    shapes = {signature.arguments[i].shape for i in bounds}
    return {i for i, a in enumerate(signature.arguments) if i not in bounds and a.shape in shapes
            and (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_)}


# How random_inputs draws an argument (draws)
MASK, DISTINCT, INDEX, COIN, SMALL, UNIT = ("mask", "distinct", "index", "coin", "small",
                                            "unit")
# A mask's unpadded batch under each convention, in the order to try them: a tokenizer's
# attention mask (1: a token to attend to), then PyTorch's key_padding_mask (True: a padded key,
# ignored), where all ones masks every key and the softmax gives NaN
MASK_VALUES = {1: "all ones: shaped as the ids, an attention mask (1: attend)",
               0: "all zeros: shaped as the ids, a padding mask (True: padded, as PyTorch's "
                  "key_padding_mask)"}


def draws(signature: Signature, bounds: dict[int, int]) -> list[str]:
    """How each argument is drawn: an attention mask as ones (masks); an index in [0, bound)
    (index_bounds), distinct where its elements fit, as a scatter's indices must be (positions
    written twice leave the result to the order of the writes); a boolean at random; other
    integers uniform in [-4, 4] (which rand's [0, 1) would turn into zeros); floats in [0, 1)."""
    ones = masks(signature, bounds)
    kinds = []
    for i, argument in enumerate(signature.arguments):
        if i in ones:
            kinds.append(MASK)
        elif i in bounds:
            kinds.append(DISTINCT if int(np.prod(argument.shape)) <= bounds[i] else INDEX)
        elif argument.dtype == np.bool_:
            kinds.append(COIN)
        else:
            kinds.append(SMALL if np.issubdtype(argument.dtype, np.integer) else UNIT)
    return kinds


def unbounded_integers(signature: Signature, bounds: dict[int, int]) -> list[int]:
    """Integer arguments random_inputs draws in [-4, 4]: neither indexing nor a mask."""
    return [i for i, kind in enumerate(draws(signature, bounds)) if kind == SMALL]


def random_inputs(signature: Signature, seed: int, bounds: dict[int, int] | None = None,
                  mask: int = 1) -> list[np.ndarray]:
    """Each argument drawn as `draws` says, cast to its type; a mask all `mask`."""
    bounds = bounds or {}
    rng = np.random.default_rng(seed)
    require_static(signature)
    arrays = []
    for i, (argument, kind) in enumerate(zip(signature.arguments, draws(signature, bounds))):
        if kind == MASK:
            drawn = np.full(argument.shape, mask)
        elif kind == DISTINCT:
            drawn = rng.choice(bounds[i], size=argument.shape, replace=False)
        elif kind == INDEX:
            drawn = rng.integers(0, bounds[i], size=argument.shape)
        elif kind == COIN:
            drawn = rng.random(argument.shape) < 0.5
        elif kind == SMALL:
            drawn = rng.integers(-4, 5, size=argument.shape)
        else:
            drawn = rng.random(argument.shape)
        arrays.append(drawn.astype(argument.dtype))
    return arrays


def describe_random(signature: Signature, seed: int, bounds: dict[int, int],
                    mask: int = 1, files: dict[int, Path] | None = None) -> str:
    """How random_inputs made the inputs, in words (those in `files` given as files)."""
    files = files or {}
    words = {MASK: MASK_VALUES[mask], COIN: "random true/false",
             SMALL: "uniform in [-4, 4]", UNIT: "uniform in [0, 1)"}
    parts = []
    for i, (argument, kind) in enumerate(zip(signature.arguments, draws(signature, bounds))):
        if i in files:
            parts.append(f"argument {i} ({argument}) given: {files[i]}")
        elif kind in (DISTINCT, INDEX):
            repeats = " distinct" if kind == DISTINCT else ""
            parts.append(f"argument {i} ({argument}){repeats} in [0, {bounds[i]}): it "
                         f"indexes a dimension of {bounds[i]}")
        else:
            parts.append(f"argument {i} ({argument}) {words[kind]}")
    return f"seeded random inputs (seed {seed}): " + ("; ".join(parts) or "no arguments")


def draw_inputs(signature: Signature, seed: int, bounds: dict[int, int], folder: Path, stem: str,
                mask: int = 1, files: dict[int, Path] | None = None) -> Inputs:
    """random_inputs saved as .npy (`folder/<stem>_input<i>.npy`), said as describe_random; the
    arguments in `files` (given_files of the --inputs that made `signature` concrete) use
    those files instead."""
    files = files or {}
    drawn = random_inputs(signature, seed, bounds, mask)
    made = save_inputs(drawn, folder, stem, describe_random(signature, seed, bounds, mask, files))
    return Inputs(tuple(files.get(i, p) for i, p in enumerate(made.paths)), made.about)


def save_inputs(arrays: list[np.ndarray], folder: Path, stem: str, about: str) -> Inputs:
    folder.mkdir(parents=True, exist_ok=True)
    paths = tuple(folder / f"{stem}_input{i}.npy" for i in range(len(arrays)))
    for array, path in zip(arrays, paths):
        np.save(path, array)
    return Inputs(paths, about)


def given_inputs(paths: list[Path], signature: Signature) -> Inputs:
    """--inputs of files only, each checked to exist and to fit its argument."""
    concrete(signature, list(paths))
    return Inputs(tuple(paths), "given with --inputs: " + " ".join(map(str, paths)))


def load_input(path: Path, i: int, argument: TensorType, function: str) -> np.ndarray:
    """Input `i` from a `.npy` file, checked against its argument."""
    if not path.is_file():
        raise UserError(f"input file {path} does not exist")
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read input {path}: {error}") from None
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and argument.element_type == "bf16":
        array = array.view(ml_dtypes.bfloat16)  # .npy stores bf16 as 2 raw bytes
    if not argument.matches(array):
        raise UserError(f"input {i} ({path}) is {'x'.join(map(str, array.shape))}x"
                        f"{array.dtype.name}; {function} expects {argument}")
    return array


def output_paths(folder: Path, stem: str, signature: Signature) -> list[Path]:
    """Where iree-run-module writes each result (`--output=@path`): raw bytes (.bin), whose
    shape the signature gives but for one dynamic size; a result of more dynamic sizes as .npy,
    which holds its shape (IREE writes no bf16 .npy: one stays .bin and cannot be read)."""
    shaped = [r.shape.count(None) > 1 and r.element_type != "bf16" for r in signature.results]
    return [folder / f"{stem}{i}.{'npy' if npy else 'bin'}" for i, npy in enumerate(shaped)]


def read_outputs(paths: list[Path], signature: Signature) -> list[np.ndarray]:
    """The result files iree-run-module wrote (output_paths), as arrays; ValueError if one has
    an unexpected size."""
    arrays = []
    for path, result in zip(paths, signature.results):
        if path.suffix == ".npy":
            array = np.load(path, allow_pickle=False)
            if not result.matches(array):
                raise ValueError(f"{path}: {array.shape} {array.dtype}, not {result}")
        else:
            array = np.fromfile(path, dtype=result.dtype).reshape(
                [s if s is not None else -1 for s in result.shape])
        arrays.append(array)
    return arrays
