"""Vocabulary shared by every module: data types, layouts, targets, configurations.

Knows nothing of files, processes or command lines. Operation kinds are not listed here: the
one list is ops.registry, where each kind names the module of its family.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np


class UserError(Exception):
    """A problem the user caused (bad option, missing folder); printed as one line, exit 2."""


class DataType(enum.Enum):
    # value: (short name used in operation names, MLIR element type, numpy dtype, bits)
    f32 = ("f32", "f32", np.dtype(np.float32), 32)
    f16 = ("f16", "f16", np.dtype(np.float16), 16)
    bf16 = ("bf16", "bf16", np.dtype(ml_dtypes.bfloat16), 16)
    i8 = ("i8", "i8", np.dtype(np.int8), 8)
    i32 = ("i32", "i32", np.dtype(np.int32), 32)

    @property
    def short(self) -> str:
        return self.value[0]

    @property
    def mlir(self) -> str:
        return self.value[1]

    @property
    def numpy(self) -> np.dtype:
        return self.value[2]

    @property
    def bits(self) -> int:
        return self.value[3]

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def is_float(self) -> bool:
        return self.mlir.startswith(("f", "bf"))

    @property
    def eps(self) -> float:
        """Machine epsilon (0 for integers: integer results must be exact)."""
        return float(ml_dtypes.finfo(self.numpy).eps) if self.is_float else 0.0

    @property
    def zero(self) -> str:
        """The MLIR literal for zero of this type."""
        return "0.0" if self.is_float else "0"

    @classmethod
    def parse(cls, text: str) -> "DataType":
        for dtype in cls:
            if dtype.short == text:
                return dtype
        raise UserError(f"unknown data type '{text}' (known: {', '.join(d.short for d in cls)})")


class Layout(enum.Enum):
    """Storage order of a 2-D operand, with the letters of the old profiler's names."""

    RowMajor = "t"
    ColumnMajor = "n"


@dataclass(frozen=True)
class TensorDescription:
    dtype: DataType
    layout: Layout = Layout.RowMajor

    @property
    def name(self) -> str:
        """`f16t`: element type then layout letter, as in `matmul_..._f16t_f16t_f16t`."""
        return f"{self.dtype.short}{self.layout.value}"

    @classmethod
    def parse(cls, text: str) -> "TensorDescription":
        for layout in Layout:
            if text.endswith(layout.value):
                return cls(DataType.parse(text[:-1]), layout)
        raise UserError(f"tensor '{text}' must end in a layout letter t (row-major) or n (column-major)")


class Device(enum.Enum):
    """Compiler backend; value is the name users type after --device."""

    LLVMCPU = "llvm-cpu"
    CUDA = "cuda"
    ROCM = "rocm"
    VULKAN = "vulkan"


# IREE's CPU devices: a pool of worker threads, or the calling thread alone
LOCAL_TASK, LOCAL_SYNC = "local-task", "local-sync"
# The IREE runtime driver that runs each backend's executables by default.
DEFAULT_RUNTIME_DEVICE = {
    Device.LLVMCPU: LOCAL_TASK,
    Device.CUDA: "cuda",
    Device.ROCM: "hip",
    Device.VULKAN: "vulkan",
}
RUNTIME_DEVICES = {
    Device.LLVMCPU: (LOCAL_TASK, LOCAL_SYNC),
    Device.CUDA: ("cuda",),
    Device.ROCM: ("hip",),
    Device.VULKAN: ("vulkan",),
}


# The Target field that holds each device's architecture.
ARCH_FIELD = {Device.LLVMCPU: "cpu", Device.CUDA: "cuda_arch", Device.ROCM: "rocm_arch",
              Device.VULKAN: "vulkan_target"}

# Features that change the vector code of our dispatches: a machine lacking one of these cannot
# run code built for a CPU that has it. (Others, such as x86 `rtm`, never appear in a matmul.)
SIMD_FEATURE_PREFIXES = ("sse", "ssse3", "avx", "fma", "f16c", "amx", "xop", "neon", "sve", "sme",
                         "fullfp16", "fp16fml", "dotprod", "i8mm", "bf16", "f32mm", "f64mm")
# On x86-64 every AVX machine has these; leaving them out keeps summaries short.
_IMPLIED_X86 = ("sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "sse4a")


def llvmcpu_flags(triple: str, cpu: str, features: str) -> list[str]:
    flags = [f"--iree-llvmcpu-target-triple={triple}"] if triple else []
    flags.append(f"--iree-llvmcpu-target-cpu={cpu}")
    return flags + ([f"--iree-llvmcpu-target-cpu-features={features}"] if features else [])


@dataclass(frozen=True)
class CpuTarget:
    """An llvm-cpu target as IREE resolved it (`host` made concrete): what tuning spaces are
    derived from and what compiled code needs to run."""

    name: str  # the CPU, e.g. znver3 (IREE's own resolution of `host`)
    features: str  # IREE's resolved feature string, `+on,-off,...`
    triple: str  # --iree-llvmcpu-target-triple as given; "" = this machine's architecture
    arch: str  # from the resolved triple: x86_64, aarch64, ...
    native_vector_bytes: int  # IREE's native_vector_size: 32 for AVX2, 64 for AVX-512, 16 for NEON
    l2_cache_bytes: int  # per core; sizes distribution and cache tiles
    l3_cache_bytes: int = 0  # a core's share; 0: unknown (the CPU rules assume a typical one)

    @property
    def enabled_features(self) -> list[str]:
        """Features on, each once. IREE's resolved string lists the CPU's defaults and then the
        host's (`+mwaitx,...,-mwaitx`): as in LLVM, the last mention wins."""
        state = {}
        for feature in self.features.split(","):
            if feature[:1] in "+-" and len(feature) > 1:
                state[feature[1:]] = feature[0] == "+"
        return [name for name, on in state.items() if on]

    @property
    def simd_features(self) -> list[str]:
        return sorted({f for f in self.enabled_features if f.startswith(SIMD_FEATURE_PREFIXES)})

    @property
    def summary(self) -> str:
        """`znver3, x86_64, 32-byte vectors (avx avx2 f16c fma)`."""
        shown = [f for f in self.simd_features if f not in _IMPLIED_X86]
        return (f"{self.name or 'generic'}, {self.arch}, {self.native_vector_bytes}-byte vectors"
                f" ({' '.join(shown) or 'no SIMD extensions'})")

    def cannot_run_on(self, host: "CpuTarget") -> str | None:
        """Why code built for this target cannot run on `host`, or None if it can."""
        if self.arch != host.arch:
            return f"it is {self.arch} code and this machine is {host.arch}"
        missing = sorted(set(self.simd_features) - set(host.simd_features))
        if missing:
            return f"this machine ({host.name}) lacks {', '.join(missing)}"
        return None

    def compiler_flags(self) -> list[str]:
        return llvmcpu_flags(self.triple, self.name or "generic", self.features)

    def to_json(self) -> dict:
        return dict(vars(self))

    @classmethod
    def from_json(cls, data: dict) -> "CpuTarget":
        return cls(**data)


@dataclass(frozen=True)
class Target:
    """What the dispatches are compiled for. Architecture fields only matter for their device.

    For llvm-cpu, `cpu`/`cpu_features`/`target_triple` are what was asked for and `cpu_target`
    is IREE's resolution of them (set by the generator; compiles use it, never `host`)."""

    device: Device = Device.LLVMCPU
    cpu: str = "host"
    cuda_arch: str = "sm_80"
    rocm_arch: str = "gfx942"
    vulkan_target: str = "ampere"
    cpu_features: str = ""
    target_triple: str = ""
    cpu_target: CpuTarget | None = None

    @property
    def arch(self) -> str:
        if self.device is Device.LLVMCPU and self.cpu_target is not None:
            return self.cpu_target.name or "generic"
        return getattr(self, ARCH_FIELD[self.device])

    @property
    def name(self) -> str:
        return f"{self.device.value}:{self.arch}"

    def resolved_cpu(self) -> CpuTarget:
        if self.cpu_target is None:
            raise ValueError("llvm-cpu target not resolved (target.resolve_cpu_target)")
        return self.cpu_target

    def requested_cpu_flags(self) -> list[str]:
        """The llvm-cpu flags as asked, before resolution."""
        return llvmcpu_flags(self.target_triple, self.cpu, self.cpu_features)

    def compiler_flags(self) -> list[str]:
        if self.device is Device.LLVMCPU:
            cpu = self.cpu_target.compiler_flags() if self.cpu_target else self.requested_cpu_flags()
            return ["--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", *cpu]
        if self.device is Device.CUDA:
            return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.cuda_arch}"]
        if self.device is Device.ROCM:
            return ["--iree-hal-target-device=hip", f"--iree-rocm-target={self.rocm_arch}"]
        return ["--iree-hal-target-device=vulkan", f"--iree-vulkan-target={self.vulkan_target}"]

    def to_json(self) -> dict:
        data = {"device": self.device.value, "arch": getattr(self, ARCH_FIELD[self.device])}
        if self.device is Device.LLVMCPU:
            data.update(cpu_features=self.cpu_features, target_triple=self.target_triple,
                        cpu_target=self.cpu_target.to_json() if self.cpu_target else None)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Target":
        device = Device(data["device"])
        target = cls(device=device, **{ARCH_FIELD[device]: data["arch"]})
        if device is Device.LLVMCPU:
            cpu_target = data.get("cpu_target")
            target = replace(target, cpu_features=data.get("cpu_features", ""),
                             target_triple=data.get("target_triple", ""),
                             cpu_target=CpuTarget.from_json(cpu_target) if cpu_target else None)
        return target


@dataclass(frozen=True)
class TuningConfiguration:
    """How a dispatch is compiled; never what it computes.

    `lowering_config` and `translation_info` make up the `compilation_info` attached to the root
    op (and are what IREE's dumped configuration is checked against). `flags` are extra
    iree-compile flags (the data-tiling variants carry flags). `spec_root` names the op a
    tuning spec attaches the compilation_info to when the source's root cannot carry it (after
    data tiling, the `linalg.mmt4d` IREE makes of a matmul); empty: the root carries it.
    `packing` (M0, N0, K0): the source itself packs the operands into these inner tiles, and its
    root is the `linalg.mmt4d` of them: a register tile IREE's encoding resolver does not pick.
    The packs and the unpack are dispatches of the same call, timed with the mmt4d.
    """

    name: str
    lowering_config: str | None = None
    translation_info: str | None = None
    flags: tuple[str, ...] = field(default_factory=tuple)
    spec_root: str = ""
    packing: tuple[int, ...] = ()

    @property
    def source_compilation_info(self) -> str | None:
        """What the source's root op carries: the compilation_info unless a spec attaches it."""
        return None if self.spec_root else self.compilation_info

    @property
    def compilation_info(self) -> str | None:
        if self.lowering_config is None:
            return None
        return (f"#iree_codegen.compilation_info<\n    lowering_config = {self.lowering_config},\n"
                f"    translation_info = {self.translation_info}>")

    def to_json(self) -> dict:
        return {"name": self.name, "lowering_config": self.lowering_config,
                "translation_info": self.translation_info, "flags": list(self.flags),
                "spec_root": self.spec_root,
                **({"packing": list(self.packing)} if self.packing else {})}  # older JSON unchanged

    @classmethod
    def from_json(cls, data: dict) -> "TuningConfiguration":
        return cls(data["name"], data["lowering_config"], data["translation_info"],
                   tuple(data["flags"]), data.get("spec_root", ""), tuple(data.get("packing", ())))


DEFAULT_CONFIGURATION = TuningConfiguration("default")
UKERNELS = "--iree-llvmcpu-enable-ukernels=all"
NO_UKERNELS = "--iree-llvmcpu-enable-ukernels=none"
# Data tiling packs operands into cache-friendly tiles and uses IREE's mmt4d microkernels. An
# attached compilation_info disables it, so it is a flag variant of IREE's own heuristic.
DATA_TILING_CONFIGURATION = TuningConfiguration(
    "default_data_tiling", flags=("--iree-opt-data-tiling", UKERNELS))
# Data tiling with encoded matmuls lowered to iree_codegen.inner_tiled instead of mmt4d (3.13;
# plain matmuls only: batch matmuls fail to lower).
INNER_TILED = "--iree-llvmcpu-enable-inner-tiled"
INNER_TILED_CONFIGURATION = TuningConfiguration(
    "default_inner_tiled", flags=("--iree-opt-data-tiling", INNER_TILED))
# Transposes kept as ops of their own: IREE folds none into the op that reads its result (a
# Linear's weight is then transposed once, at load, and its matmul reads it K x N, not N x K).
KEEP_TRANSPOSES = "--iree-global-opt-propagate-transposes=false"
PREPROCESSING_PIPELINE = "--iree-preprocessing-pass-pipeline="
# Attention decomposed before dispatches form into Q K^T, a softmax and P V: matmul dispatches
# instead of IREE's attention codegen (tuning/flags.py: what that gained).
DECOMPOSE_ATTENTION = (f"{PREPROCESSING_PIPELINE}builtin.module(util.func("
                       "iree-linalg-ext-convert-attention-to-online-attention,"
                       "iree-linalg-ext-decompose-attention))")
DECOMPOSED_CONFIGURATION = TuningConfiguration("default_decomposed", flags=(DECOMPOSE_ATTENTION,))
# Data tiling that turns a matmul into linalg.mmt4d before dispatches form, so that a tuning spec
# can configure the mmt4d (later materialization makes it inside codegen, after specs apply, and
# drops any config). Measured on 4096^3 f32: the same time as --iree-opt-data-tiling untuned.
EARLY_DATA_TILING = ("--iree-global-opt-data-tiling", "--iree-global-opt-enable-early-materialization")
