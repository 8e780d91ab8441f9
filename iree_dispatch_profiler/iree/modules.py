"""A user's MLIR module as the tools see it: its public functions and their tensor signatures."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def parse(text: str, origin: str, context):
    """An ir.Module, or a one-line UserError naming `origin` and the first diagnostic."""
    from iree.compiler import ir

    context.allow_unregistered_dialects = True
    try:
        return ir.Module.parse(text, context)
    except ir.MLIRError as error:
        first = str(error).splitlines()[1:2] or [str(error)]
        raise UserError(f"{origin} is not a valid MLIR module: {first[0].strip()}") from None


def signatures(path: Path) -> list[Signature]:
    """Public functions of the module in `path`; arguments and results must be tensors of the
    types in ELEMENT_TYPES (what numpy inputs can feed). A module past IREE's input phase
    (`--compile-to=input`, as autotune.py --model lowers torch, StableHLO and TOSA) passes
    !hal.buffer_view: its tensor types are those of its hal.tensor.import/export ops."""
    from iree.compiler import ir

    try:
        text = path.read_text()
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    with ir.Context() as context:
        module = parse(text, str(path), context)
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
            found.append(Signature(name, tuple(_tensor(t, name) for t in inputs),
                                   tuple(_tensor(t, name) for t in results)))
    return found


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


def find_function(path: Path, name: str | None, shown: str = "") -> Signature:
    """The function `name`, or the module's only public function (`shown`: how errors name
    the module)."""
    found = signatures(path)
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


def random_inputs(signature: Signature, seed: int) -> list[np.ndarray]:
    """numpy.random.rand cast to each argument's type (integers: uniform in [-4, 4], which
    rand's [0, 1) would turn into zeros)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for argument in signature.arguments:
        if not argument.static:
            raise UserError(f"argument {argument} of {signature.name} has a dynamic shape: give "
                            "--inputs instead of --random-inputs")
        if np.issubdtype(argument.dtype, np.integer):
            arrays.append(rng.integers(-4, 5, size=argument.shape).astype(argument.dtype))
        elif argument.dtype == np.bool_:
            arrays.append(rng.random(argument.shape) < 0.5)
        else:
            arrays.append(rng.random(argument.shape).astype(argument.dtype))
    return arrays


def load_inputs(paths: list[Path], signature: Signature) -> list[np.ndarray]:
    """`.npy` inputs, checked against the function's arguments."""
    if len(paths) != len(signature.arguments):
        raise UserError(f"{signature.name} takes {len(signature.arguments)} inputs, "
                        f"--inputs gives {len(paths)}")
    arrays = []
    for i, (path, argument) in enumerate(zip(paths, signature.arguments)):
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise UserError(f"cannot read input {path}: {error}") from None
        if array.dtype.kind == "V" and array.dtype.itemsize == 2 and argument.element_type == "bf16":
            array = array.view(ml_dtypes.bfloat16)  # .npy stores bf16 as 2 raw bytes
        if not argument.matches(array):
            raise UserError(f"input {i} ({path}) is {'x'.join(map(str, array.shape))}x"
                            f"{array.dtype.name}; {signature.name} expects {argument}")
        arrays.append(array)
    return arrays


def read_outputs(paths: list[Path], signature: Signature) -> list[np.ndarray]:
    """The raw result files iree-run-module wrote (`--output=@x.bin`), as arrays; ValueError if
    one has an unexpected size."""
    return [np.fromfile(path, dtype=result.dtype).reshape(
        [s if s is not None else -1 for s in result.shape])
        for path, result in zip(paths, signature.results)]
