"""MLIR text pieces every operation's emitter shares."""
from __future__ import annotations

from iree_dispatch_profiler.core.library import DataType, TuningConfiguration


def tensor_type(shape: tuple[int, ...], dtype: DataType) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype.mlir}>"


def attribute_dictionary(attributes: list[str]) -> str:
    return f" {{{', '.join(attributes)}}}" if attributes else ""


def prologue(config: TuningConfiguration) -> str:
    """The `#compilation` alias the root op refers to, when the configuration has one."""
    return f"#compilation = {config.compilation_info}\n\n" if config.compilation_info else ""
