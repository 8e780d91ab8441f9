"""MLIR text pieces every operation's emitter shares, and the text of IREE tuning specs."""
from __future__ import annotations

from dataclasses import dataclass

from iree_dispatch_profiler.core.library import DataType, TuningConfiguration


def tensor_type(shape: tuple[int, ...], dtype: DataType) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype.mlir}>"


def attribute_dictionary(attributes: list[str]) -> str:
    return f" {{{', '.join(attributes)}}}" if attributes else ""


def prologue(config: TuningConfiguration) -> str:
    """The `#compilation` alias the root op refers to, when the configuration has one."""
    info = config.source_compilation_info
    return f"#compilation = {info}\n\n" if info else ""


def function(config: TuningConfiguration, name: str, arguments: str, result_type: str, body: str,
             result: str = "%result") -> str:
    """A dispatch's whole text: the prologue, then `func.func @name(arguments)` whose `body`
    computes `result`."""
    return (prologue(config) + f"func.func @{name}({arguments}) -> {result_type} {{\n{body}"
            + f"  return {result} : {result_type}\n}}\n")


# ---------------------------------------------------------------------------------------------
# Tuning specs (`iree-compile --iree-codegen-tuning-spec-path=spec.mlir`): a transform module whose
# entry point attaches a compilation_info to every op a matcher accepts. The form follows IREE's
# compiler/src/iree/compiler/Codegen/LLVMCPU/test/tuning_spec_matmul.mlir.
@dataclass(frozen=True)
class SpecEntry:
    """One matcher: ops of these names whose operands at these positions have these types
    (none: any operands) get `compilation_info`."""

    name: str
    op_names: tuple[str, ...]
    operand_types: tuple[tuple[int, str], ...]
    compilation_info: str


_APPLY = """  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
"""


def _matcher(entry: SpecEntry) -> str:
    names = ", ".join(f'"{n}"' for n in entry.op_names)
    lines = [f"  transform.named_sequence @{entry.name}(%op: !transform.any_op {{transform.readonly}})",
             "      -> (!transform.any_op, !transform.any_param) {",
             f"    transform.match.operation_name %op [{names}] : !transform.any_op"]
    for position, operand_type in entry.operand_types:
        lines += [f"    %operand{position} = transform.get_operand %op[{position}] "
                  ": (!transform.any_op) -> !transform.any_value",
                  f"    transform.iree.match.cast_compatible_type %operand{position} = "
                  f"{operand_type} : !transform.any_value"]
    info = entry.compilation_info.replace("\n", "\n      ")
    lines += [f"    %config = transform.param.constant {info} -> !transform.any_param",
              "    transform.yield %op, %config : !transform.any_op, !transform.any_param", "  }"]
    return "\n".join(lines) + "\n"


def tuning_spec(entries: list[SpecEntry]) -> str:
    body = "".join(_matcher(entry) for entry in entries)
    actions = ",\n".join(f"        @{entry.name} -> @apply_op_config" for entry in entries)
    entry = ("  transform.named_sequence @__kernel_config(%variant: !transform.any_op "
             "{transform.consumed}) -> !transform.any_op\n"
             "      attributes { iree_codegen.tuning_spec_entrypoint } {\n"
             "    %result = transform.foreach_match in %variant\n"
             f"{actions}\n"
             "      : (!transform.any_op) -> !transform.any_op\n"
             "    transform.yield %result : !transform.any_op\n  }\n")
    return ("module @autotune_spec attributes { transform.with_named_sequence, "
            "iree_codegen.tuning_spec_with_default_entrypoint } {\n" + _APPLY + body + entry + "}\n")


def spec_entry_name(op_name: str, index: int | None = None) -> str:
    """The one naming rule of spec entries: `match_op<N>_<op>` for the tuner's op N,
    `match_<op>` for the one op of a generated dispatch."""
    short = op_name.split(".")[-1]
    return f"match_{short}" if index is None else f"match_op{index}_{short}"


def configuration_spec(config: TuningConfiguration) -> str:
    """The spec that attaches `config` to its `spec_root` op, whatever its operands (a generated
    dispatch holds one such op)."""
    return tuning_spec([SpecEntry(spec_entry_name(config.spec_root), (config.spec_root,),
                                  (), config.compilation_info or "")])
