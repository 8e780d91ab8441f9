"""IREE's module flags that change a model's speed and not its results: the curated list a model
tuning searches before it tunes dispatches (the spec is then tuned under the flags it will ship
with), each with why it is in the list, and the record of that search (X_flags.csv)."""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from iree_dispatch_profiler.core.library import (DECOMPOSE_ATTENTION, EARLY_DATA_TILING, INNER_TILED,
                                                 KEEP_TRANSPOSES, PREPROCESSING_PIPELINE,
                                                 UKERNELS)
from iree_dispatch_profiler.iree.tunable import ATTENTION, CONTRACTION, CONVOLUTION, DEPTHWISE

DATA_TILING = "--iree-opt-data-tiling --iree-llvmcpu-enable-ukernels=all"
# Encodings materialized before dispatches form: the packed matmuls are linalg.mmt4d when specs
# apply, so a spec tiles them (late materialization sets their config inside codegen and drops a
# spec's: seen in 3.13).
DATA_TILING_EARLY = " ".join((*EARLY_DATA_TILING, UKERNELS))
EARLY_MATERIALIZATION = EARLY_DATA_TILING[1]
DATA_TILING_FLAGS = (EARLY_DATA_TILING[0], "--iree-opt-data-tiling")  # global-opt's, its alias
IM2COL = "--iree-global-opt-use-im2col-for-convs"
# The option is a list: each value adds an op family to the default {matmul, scaled_matmul}
# (a comma-separated value is refused in 3.13).
CONV_DATA_TILING = ("--iree-dispatch-creation-experimental-set-data-tiling-ops=matmul "
                    "--iree-dispatch-creation-experimental-set-data-tiling-ops=convolution")


@dataclass(frozen=True)
class FlagSet:
    name: str
    flags: str  # as typed on iree-compile's command line
    why: str
    needs: tuple[str, ...] = ()  # root op kinds of which the model must have one (() for any)
    # the group of sets this one is chosen in place of where their speedups' intervals
    # overlap: it leaves the spec more to tune
    stands_for: str = ""
    # sets of one group are alternatives, never joined (default: its own name)
    group: str = ""
    # other groups whose work this set does too (im2col with data tiling: joined with a data
    # tiling set, it would pack twice)
    also: tuple[str, ...] = ()

    @property
    def args(self) -> list[str]:
        return shlex.split(self.flags)

    @property
    def groups(self) -> set[str]:
        return {self.group or self.name, *self.also}


PACKING = "data tiling"  # the group of the data tiling variants
# IREE's data tiling: a curated set, and every model verdict's other yardstick
DATA_TILING_SET = FlagSet("data_tiling", DATA_TILING,
                          "packs matmul operands into the target's register tiles and calls "
                          "IREE's microkernels: its fastest path for large matmuls",
                          (CONTRACTION,), group=PACKING)

CURATED = (
    DATA_TILING_SET,
    FlagSet("data_tiling_early", DATA_TILING_EARLY,
            "data tiling with its packed matmuls formed before dispatches: the mmt4d ops are "
            "then tunable by the spec, and models whose attention fails under late data tiling "
            "compile", (CONTRACTION,), stands_for=PACKING, group=PACKING),
    FlagSet("inner_tiled", f"{' '.join(EARLY_DATA_TILING)} {INNER_TILED}",
            "packed matmuls lowered to iree_codegen.inner_tiled instead of mmt4d + ukernel "
            "(3.13; reported 1.14x at 4096^3 f32 on Zen 4, iree-org/iree#24515)", (CONTRACTION,),
            group=PACKING),
    FlagSet("data_tiling_codegen", "--iree-opt-data-tiling",
            "the same packing with the inner kernel generated instead of a microkernel: for "
            "types and ISAs the microkernels do not cover", (CONTRACTION,), group=PACKING),
    FlagSet("conv_data_tiling", f"{DATA_TILING} {CONV_DATA_TILING}",
            "data tiling for convolutions too (experimental in 3.13): packed filters and "
            "microkernels", (CONVOLUTION,), group=PACKING),
    # A depthwise convolution's 1x1 neighbours reach the dispatches as matmul-like generics,
    # which im2col makes named matmuls (MobileNet block: 1.07x [1.06, 1.09] on its dispatches).
    FlagSet("im2col", IM2COL,
            "convolutions as im2col + matmul: the matmul paths and tile configs, also for the "
            "batch-1 convolutions whose conv configs IREE drops and the 1x1 ones beside a "
            "depthwise convolution", (CONVOLUTION, DEPTHWISE), group="im2col"),
    FlagSet("im2col_data_tiling", f"{IM2COL} {DATA_TILING_EARLY}",
            "im2col, then the matmuls it makes data-tiled, early: their packed matmuls stay "
            "tunable by the spec", (CONVOLUTION, DEPTHWISE), group="im2col", also=(PACKING,)),
    FlagSet("channels_last",
            f"{PREPROCESSING_PIPELINE}builtin.module(util.func("
            "iree-preprocessing-convert-conv-to-channels-last))",
            "PyTorch's NCHW convolutions turned NHWC before dispatch formation: channels "
            "contiguous, for the vector loops of depthwise convolutions too",
            (CONVOLUTION, DEPTHWISE)),
    FlagSet("conv_transposes", "--iree-global-opt-propagate-transposes-through-conv",
            "transposes around convolutions (NCHW models) propagated through them and folded",
            (CONVOLUTION, DEPTHWISE)),
    FlagSet("propagate_transposes", "--iree-opt-aggressively-propagate-transposes",
            "transposes (a Linear's weight, attention heads) folded into the ops that read them, "
            "even where that makes a named op generic: fewer transpose dispatches", (CONTRACTION,)),
    # A matmul reading B as N x K (a Linear's weight, the transpose folded in) vectorizes its
    # reduction: Swin's QKV projection, 3136x288x96, 1.69-1.83 ms a call on a 2-core Zen 3,
    # 1.21-1.30 with the weight transposed at load (the model's dispatches 4.76-5.40 -> 4.06-4.43)
    FlagSet("kept_transposes", KEEP_TRANSPOSES,
            "transposes kept their own ops: a Linear's weight transposed once, at load, so its "
            "matmul reads it K x N, an outer product of whole vectors, where IREE folds the "
            "transpose in and reduces along K", (CONTRACTION,), group="propagate_transposes"),
    # IREE's attention codegen reached 7-26% of the compute ceiling in bench_model's
    # transformers (AVX2 EPYC); decomposed, the encoder block ran 4.6x over IREE's default
    # untuned, and 7.5x joined with data_tiling_early, whole call.
    FlagSet("decompose_attention", DECOMPOSE_ATTENTION,
            "attention decomposed before dispatches form into Q K^T, softmax and P V: two "
            "matmul dispatches the matmul paths and tile configs serve, instead of IREE's "
            "attention codegen", (ATTENTION,)),
    FlagSet("aggressive_fusion", "--iree-dispatch-creation-enable-aggressive-fusion",
            "fuses producers and consumers IREE keeps apart by default: fewer dispatches and "
            "less memory traffic"),
    FlagSet("horizontal_fusion", "--iree-dispatch-creation-enable-fuse-horizontal-contractions",
            "contractions sharing an operand (Q, K and V projections) in one dispatch",
            (CONTRACTION,)),
    # iree-compile's default optimization level keeps a float reduction's order: a layernorm's
    # row sums were scalar adds (256x512 on Zen 4: 158 us, reassociated 91 us).
    FlagSet("reassociate_reductions", "--iree-llvmcpu-reassociate-fp-reductions=true",
            "float reductions (layernorm, softmax, pooling) reassociated, so their vector lanes "
            "add in parallel instead of one element after another; results change in the last "
            "bits, as at IREE's -O2"),
    FlagSet("O3", "--iree-opt-level=O3", "IREE's highest optimization level"),
)


def data_tiling(flags: list[str]) -> bool:
    """Whether `flags` data-tile matmuls (early or late)."""
    return any(f in DATA_TILING_FLAGS for f in flags)


def late_data_tiling(flags: list[str]) -> bool:
    """Whether `flags` data-tile matmuls with encodings materialized inside codegen, after
    specs apply: the packed matmuls it makes take no spec (a source's own mmt4d, as
    rewrites.packed_matmuls writes, does without data tiling)."""
    return data_tiling(flags) and EARLY_MATERIALIZATION not in flags


def relevant(sets: tuple[FlagSet, ...] | list[FlagSet], kinds: set[str] | None) -> list[FlagSet]:
    """The sets that can matter for a model whose dispatch roots are of `kinds` (None: not
    known, every set)."""
    return [f for f in sets if kinds is None or not f.needs or set(f.needs) & kinds]


def joined(name: str, faster: list[str], sets: list[FlagSet]) -> list[FlagSet]:
    """The set `name` (a set of `sets`, or sets joined: `a+b`) joined with the first set of
    `faster` (names, fastest first) of each group it has none of: what the later rounds of a
    flag search measure."""
    by_name = {f.name: f for f in sets}
    base = by_name[name]
    taken = set().union(*(by_name[p].groups if p in by_name else {p}
                          for p in {name, *name.split("+")}))
    others: list[FlagSet] = []
    for other in (by_name[n] for n in faster if n in by_name):
        if not other.groups & taken:
            others.append(other)
            taken |= other.groups
    return [FlagSet(f"{base.name}+{other.name}", together(base.flags, other.flags),
                    f"{base.name} and {other.name} together: {other.name} may be faster "
                    f"under {base.name}")
            for other in others]


def together(first: str, second: str) -> str:
    """Two flag strings on one command line. iree-compile keeps only the last of two
    preprocessing pipelines, so theirs become one that runs the first's passes, then the
    second's."""
    flag = PREPROCESSING_PIPELINE  # shorter lines below
    args = [*shlex.split(first), *shlex.split(second)]
    pipelines = [a[len(flag):] for a in args if a.startswith(flag)]
    if len(pipelines) < 2:
        return shlex.join(args)
    prefix = "builtin.module(util.func("
    if not all(p.startswith(prefix) and p.endswith("))") for p in pipelines):
        raise ValueError(f"cannot join preprocessing pipelines {pipelines}: not all of the "
                         f"form {prefix}...))")
    passes = ",".join(p[len(prefix):-2] for p in pipelines)
    rest = [a for a in args if not a.startswith(flag)]
    return shlex.join([*rest, f"{flag}{prefix}{passes}))"])


def given(flag_points: dict[str, str]) -> list[FlagSet]:
    """The user's --flags values as flag sets, tried in place of the curated list."""
    return [FlagSet(name, flags, "given with --flags") for name, flags in flag_points.items()]


# X_flags.csv (records.write_table): a row per flag set, written once the sets are measured;
# `chosen` marks the one the spec is tuned under (none: IREE's default flags).
COLUMNS = ["name", "flags", "status", "reason", "max_abs_err", "median_ms", "ci_low_ms",
           "ci_high_ms", "speedup", "speedup_ci_low", "speedup_ci_high", "chosen", "why"]
