"""IREE tuning specs (`iree-compile --iree-codegen-tuning-spec-path=spec.mlir`): a transform
module whose entry point attaches a compilation_info to every op a matcher accepts. Each tuned op
gets a matcher on its operation name and the exact types of all its operands, so two matmuls of
other shapes are left alone. The form follows IREE's
compiler/src/iree/compiler/Codegen/LLVMCPU/test/tuning_spec_matmul.mlir."""
from __future__ import annotations

from iree_dispatch_profiler.core.library import TuningConfiguration
from iree_dispatch_profiler.iree.tunable import TunableOp

APPLY = """  transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly},
                                            %config: !transform.any_param {transform.readonly}) {
    transform.annotate %op "compilation_info" = %config : !transform.any_op, !transform.any_param
    transform.yield
  }
"""


def _matcher(name: str, op: TunableOp, config: TuningConfiguration) -> str:
    lines = [f"  transform.named_sequence @{name}(%op: !transform.any_op {{transform.readonly}})",
             "      -> (!transform.any_op, !transform.any_param) {",
             f'    transform.match.operation_name %op ["{op.name}"] : !transform.any_op']
    for position, operand_type in enumerate(op.operand_types):
        lines += [f"    %operand{position} = transform.get_operand %op[{position}] "
                  ": (!transform.any_op) -> !transform.any_value",
                  f"    transform.iree.match.cast_compatible_type %operand{position} = "
                  f"{operand_type} : !transform.any_value"]
    info = config.compilation_info.replace("\n", "\n      ")
    lines += [f"    %config = transform.param.constant {info} -> !transform.any_param",
              "    transform.yield %op, %config : !transform.any_op, !transform.any_param", "  }"]
    return "\n".join(lines) + "\n"


def spec(tuned: list[tuple[TunableOp, TuningConfiguration]]) -> str:
    """The spec text for (op, config) pairs; ops of identical name and types must share a config."""
    matchers = [(f"match_op{op.index}_{op.name.split('.')[-1]}", op, config) for op, config in tuned]
    body = "".join(_matcher(name, op, config) for name, op, config in matchers)
    actions = ",\n".join(f"        @{name} -> @apply_op_config" for name, _, _ in matchers)
    entry = ("  transform.named_sequence @__kernel_config(%variant: !transform.any_op "
             "{transform.consumed}) -> !transform.any_op\n"
             "      attributes { iree_codegen.tuning_spec_entrypoint } {\n"
             "    %result = transform.foreach_match in %variant\n"
             f"{actions}\n"
             "      : (!transform.any_op) -> !transform.any_op\n"
             "    transform.yield %result : !transform.any_op\n  }\n")
    return ("module @autotune_spec attributes { transform.with_named_sequence, "
            "iree_codegen.tuning_spec_with_default_entrypoint } {\n" + APPLY + body + entry + "}\n")
