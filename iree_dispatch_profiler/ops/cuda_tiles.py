"""CUDA TileAndFuse configs: the MMA intrinsics, per-workgroup limits, and the one builder of
`#iree_gpu.lowering_config` / translation_info text that matmul and conv configs share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from iree_dispatch_profiler.core.library import DataType, Device, Target


@dataclass(frozen=True)
class MmaIntrinsic:
    name: str
    m: int
    n: int
    k: int


# (input type, accumulator type) -> the tensor-core MMA IREE emits for it.
NV_MMA = {
    (DataType.f16, DataType.f32): MmaIntrinsic("NV_MMA_SYNC_F32_16x8x16_F16", 16, 8, 16),
    (DataType.f16, DataType.f16): MmaIntrinsic("NV_MMA_SYNC_F16_16x8x16_F16", 16, 8, 16),
    (DataType.bf16, DataType.f32): MmaIntrinsic("NV_MMA_SYNC_F32_16x8x16_BF16", 16, 8, 16),
}
# NVIDIA's tensor cores add f16/bf16 products in blocks and round each block's sum toward zero,
# not to nearest (Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor
# cores", 2021: blocks of 4 products on V100 and T4, 8 on A100). Those roundings' errors share
# the partial sum's sign and add up rather than cancel: on an H100 every f16 x f16 -> f32
# configuration, IREE's default too, went 1.05x past the round-to-nearest tolerance at K = 4096.
TRUNCATING_BLOCK = 4  # the smallest block known: the most roundings, the largest allowance


def truncating_block(target: Target, operation) -> int:
    """Products per truncated rounding where the target's accumulator truncates, else 0."""
    inputs = operation.inputs
    mma_input = bool(inputs) and inputs[0][1] in (DataType.f16, DataType.bf16)
    return TRUNCATING_BLOCK if target.device is Device.CUDA and mma_input else 0


# Per-workgroup shared memory and thread limits, as IREE's own target description states them.
SHARED_MEMORY = {"sm_80": 166912, "sm_86": 166912, "sm_89": 101376}
MAX_THREADS = 1024
SUBGROUP = 32


def shared_memory_limit(arch: str) -> int:
    return SHARED_MEMORY.get(arch, 101376)


def shared_memory_bytes(wm: int, wn: int, kt: int, stages: int, element_bytes: int) -> int:
    # Both operands are promoted to shared memory and multi-buffered by the prefetcher.
    return (wm * kt + kt * wn) * element_bytes * max(stages, 1)


def _tiles(sizes: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, sizes)) + "]"


def lowering_config(workgroup: Sequence[int], reduction: Sequence[int],
                    subgroup: Sequence[int] | None = None, thread: Sequence[int] | None = None,
                    mma: MmaIntrinsic | None = None) -> str:
    """Tiles per loop at each level; both operands promoted to shared memory."""
    fields = [f"mma_kind = #iree_gpu.mma_layout<{mma.name}>"] if mma else []
    fields += ["promote_operands = [0, 1]", f"reduction = {_tiles(reduction)}"]
    if subgroup is not None:
        fields.append(f"subgroup = {_tiles(subgroup)}")
    if thread is not None:
        fields.append(f"thread = {_tiles(thread)}")
    fields.append(f"workgroup = {_tiles(workgroup)}")
    return f"#iree_gpu.lowering_config<{{{', '.join(fields)}}}>"


def translation_info(threads: int, pipeline_options: str = "") -> str:
    """The TileAndFuse pipeline with `threads` per workgroup (and its pipeline options)."""
    options = (f", {{gpu_pipeline_options = #iree_gpu.pipeline_options<{pipeline_options}>}}"
               if pipeline_options else "")
    return ("#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> "
            f"workgroup_size = [{threads}, 1, 1] subgroup_size = {SUBGROUP}{options}>")
