"""2-D convolution: the operation, its MLIR, its im2col + BLAS reference and its tuning space."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import cpu_tiles
from library import (DEFAULT_CONFIGURATION, DataType, Device, OperationKind, Target,
                     TuningConfiguration, UserError)
from matmul import (CUDA_MAX_THREADS, CUDA_SHARED_MEMORY, CUDA_SUBGROUP, NV_MMA,
                    attribute_dictionary, prologue, tensor_type)

LAYOUTS = ("nhwc_hwcf", "nchw_fchw")


@dataclass(frozen=True)
class ConvShape:
    """The problem: batch n, input h x w x c, filter kh x kw, f output channels, and
    (height, width) pairs of stride, zero padding and dilation."""

    n: int
    h: int
    w: int
    c: int
    f: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)


@dataclass(frozen=True)
class Conv2dOperation(ConvShape):
    """out = conv(input, filter): a shape with its element types and layout."""

    input_type: DataType = DataType.f32
    output_type: DataType = DataType.f32
    layout: str = "nhwc_hwcf"
    kind = OperationKind.Conv2d

    def __post_init__(self):
        if self.oh < 1 or self.ow < 1:
            raise UserError(f"{self.name}: the filter does not fit the padded input")

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.padding[0] - self.dilation[0] * (self.kh - 1) - 1) // self.stride[0] + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.padding[1] - self.dilation[1] * (self.kw - 1) - 1) // self.stride[1] + 1

    @property
    def name(self) -> str:
        def pair(values):
            return str(values[0]) if values[0] == values[1] else f"{values[0]}x{values[1]}"
        types = self.input_type.short
        if self.output_type != self.input_type:
            types += f"_{self.output_type.short}"
        return (f"conv2d_{self.n}x{self.h}x{self.w}x{self.c}_{self.kh}x{self.kw}x{self.f}"
                f"_s{pair(self.stride)}_p{pair(self.padding)}_d{pair(self.dilation)}"
                f"_{types}_{self.layout}")

    @property
    def gemm_shape(self) -> tuple[int, int, int]:
        """The implicit GEMM: M = N*OH*OW, N = F, K = C*KH*KW."""
        return self.n * self.oh * self.ow, self.f, self.c * self.kh * self.kw

    @property
    def flops(self) -> int:
        m, n, k = self.gemm_shape
        return 2 * m * n * k

    @property
    def bytes(self) -> int:
        return ((self.n * self.h * self.w * self.c + self.kh * self.kw * self.c * self.f)
                * self.input_type.bytes + self.n * self.oh * self.ow * self.f * self.output_type.bytes)

    @property
    def reduction_length(self) -> int:
        return self.gemm_shape[2]

    @property
    def compile_flags(self) -> tuple[str, ...]:
        return ()

    @property
    def nhwc(self) -> bool:
        return self.layout == "nhwc_hwcf"

    @property
    def inputs(self) -> list[tuple[tuple[int, ...], DataType]]:
        if self.nhwc:
            shapes = [(self.n, self.h, self.w, self.c), (self.kh, self.kw, self.c, self.f)]
        else:
            shapes = [(self.n, self.c, self.h, self.w), (self.f, self.c, self.kh, self.kw)]
        return [(shape, self.input_type) for shape in shapes]

    @property
    def output(self) -> tuple[tuple[int, ...], DataType]:
        shape = ((self.n, self.oh, self.ow, self.f) if self.nhwc else (self.n, self.f, self.oh, self.ow))
        return shape, self.output_type

    @property
    def arguments(self) -> str:
        m, n, k = self.gemm_shape
        return (f"--n={self.n} --h={self.h} --w={self.w} --c={self.c} --f={self.f} --kh={self.kh} "
                f"--kw={self.kw} --stride={self.stride} --padding={self.padding} "
                f"--dilation={self.dilation}\n--layout={self.layout} --input={self.input_type.short} "
                f"--output={self.output_type.short} --implicit_gemm={m}x{n}x{k}")

    def report_fields(self) -> dict:
        m, n, k = self.gemm_shape
        return {"op_kind": self.kind.value, "m": m, "n": n, "k": k, "batch_count": 1,
                "lhs": self.input_type.short, "rhs": self.input_type.short,
                "result": self.output_type.short, "split_k_mode": "N/A", "split_k_slices": "N/A"}

    def compute(self, image: np.ndarray, filters: np.ndarray, dtype=np.float64) -> np.ndarray:
        """im2col + one BLAS GEMM in `dtype` (float64: exact for our integer inputs)."""
        x = image.astype(dtype, copy=False)
        wgt = filters.astype(dtype, copy=False)
        if not self.nhwc:  # compute in NHWC/HWCF, convert back at the end
            x, wgt = x.transpose(0, 2, 3, 1), wgt.transpose(2, 3, 1, 0)
        (ph, pw), (sh, sw), (dh, dw) = self.padding, self.stride, self.dilation
        x = np.ascontiguousarray(np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0))))
        s_n, s_h, s_w, s_c = x.strides
        patches = np.lib.stride_tricks.as_strided(
            x, shape=(self.n, self.oh, self.ow, self.kh, self.kw, self.c),
            strides=(s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c), writeable=False)
        m, n, k = self.gemm_shape
        out = (patches.reshape(m, k) @ wgt.reshape(k, n)).reshape(self.n, self.oh, self.ow, self.f)
        return out if self.nhwc else out.transpose(0, 3, 1, 2)

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        return self.compute(*inputs)

    def emit_mlir(self, function_name: str, config: TuningConfiguration) -> str:
        (in_shape, in_t), (f_shape, _) = self.inputs
        in_type, filter_type = tensor_type(in_shape, in_t), tensor_type(f_shape, in_t)
        out_t = self.output_type
        out_type = tensor_type(*self.output)
        ph, pw = self.padding
        body = ""
        source = "%input"
        if ph or pw:
            low = [0, ph, pw, 0] if self.nhwc else [0, 0, ph, pw]
            padded = list(in_shape)
            for axis, amount in enumerate(low):
                padded[axis] += 2 * amount
            padded_type = tensor_type(tuple(padded), in_t)
            bounds = ", ".join(map(str, low))
            body += (f"  %pad_value = arith.constant {in_t.zero} : {in_t.mlir}\n"
                     f"  %padded = tensor.pad %input low[{bounds}] high[{bounds}] {{\n"
                     "  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):\n"
                     f"    tensor.yield %pad_value : {in_t.mlir}\n"
                     f"  }} : {in_type} to {padded_type}\n")
            source, in_type = "%padded", padded_type
        attributes = []
        if config.compilation_info:
            attributes.append("compilation_info = #compilation")
        attributes += [f"dilations = dense<[{self.dilation[0]}, {self.dilation[1]}]> : tensor<2xi64>",
                       f"strides = dense<[{self.stride[0]}, {self.stride[1]}]> : tensor<2xi64>"]
        body += (f"  %zero = arith.constant {out_t.zero} : {out_t.mlir}\n"
                 f"  %init = tensor.empty() : {out_type}\n"
                 f"  %acc = linalg.fill ins(%zero : {out_t.mlir}) outs(%init : {out_type}) -> {out_type}\n"
                 f"  %result = linalg.conv_2d_{self.layout}{attribute_dictionary(attributes)}\n"
                 f"      ins({source}, %filter : {in_type}, {filter_type}) outs(%acc : {out_type}) -> {out_type}\n")
        return (prologue(config)
                + f"func.func @{function_name}(%input: {tensor_type(in_shape, in_t)}, "
                  f"%filter: {filter_type}) -> {out_type} {{\n{body}"
                + f"  return %result : {out_type}\n}}\n")

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "n": self.n, "h": self.h, "w": self.w, "c": self.c,
                "f": self.f, "kh": self.kh, "kw": self.kw, "stride": list(self.stride),
                "padding": list(self.padding), "dilation": list(self.dilation),
                "input_type": self.input_type.short, "output_type": self.output_type.short,
                "layout": self.layout}

    @classmethod
    def from_json(cls, data: dict) -> "Conv2dOperation":
        return cls(data["n"], data["h"], data["w"], data["c"], data["f"], data["kh"], data["kw"],
                   tuple(data["stride"]), tuple(data["padding"]), tuple(data["dilation"]),
                   DataType.parse(data["input_type"]), DataType.parse(data["output_type"]),
                   data["layout"])


# ---------------------------------------------------------------------------------------------
# llvm-cpu: ConvTileAndDecomposeExpert over the 7 loops, which are
#   nhwc_hwcf: (n, oh, ow, f, kh, kw, c)     nchw_fchw: (n, f, oh, ow, c, kh, kw).
def cpu_conv_configuration(layout: str, tile: cpu_tiles.ConvTile) -> TuningConfiguration:
    t = tile
    if layout == "nhwc_hwcf":
        tiles = ([1, t.doh, t.dow, t.df, 0, 0, 0], [1, 1, t.vw, t.vf, 0, 0, 0], [0, 0, 0, 0, 1, 1, t.vc])
    else:
        tiles = ([1, t.df, t.doh, t.dow, 0, 0, 0], [1, t.vf, 1, t.vw, 0, 0, 0], [0, 0, 0, 0, t.vc, 1, 1])
    distribution, vector, reduction = (", ".join(map(str, t)) for t in tiles)
    lowering = (f"#iree_cpu.lowering_config<distribution = [{distribution}], "
                f"vector_common_parallel = [{vector}], vector_reduction = [{reduction}]>")
    translation = ("#iree_codegen.translation_info<pipeline = "
                   "#iree_cpu.pipeline<ConvTileAndDecomposeExpert>>")
    return TuningConfiguration(f"tile_config_{t.doh}x{t.dow}x{t.df}_{t.vw}x{t.vf}x{t.vc}",
                               lowering, translation)


# CUDA: TileAndFuse on the implicit GEMM (IREE's igemm path, NHWC only), loops (n, oh, ow, f, K).
CUDA_CONV_TILES = [  # (oh, ow, f) workgroup tile, subgroups per (oh, f), K tile in MMA steps
    (8, 16, 32, 2, 2, 4), (4, 16, 64, 1, 4, 2), (8, 16, 64, 2, 4, 4), (2, 32, 32, 1, 2, 4),
    (4, 16, 128, 2, 4, 2),
]
CUDA_CONV_STAGES = 2


def cuda_conv_configuration(op: Conv2dOperation, arch: str, oh: int, ow: int, f: int, sg_oh: int,
                            sg_f: int, k_steps: int) -> TuningConfiguration | None:
    mma = NV_MMA.get((op.input_type, op.output_type))
    if mma is None or not op.nhwc or op.oh % oh or op.ow % ow or op.f % f:
        return None
    k_tile = k_steps * mma.k
    if op.c % k_tile or ow % mma.m or f % (sg_f * mma.n) or oh % sg_oh:
        return None
    threads = (oh // sg_oh) * (ow // mma.m) * (f // (sg_f * mma.n)) * CUDA_SUBGROUP
    smem = (oh * ow * k_tile + k_tile * f) * op.input_type.bytes * CUDA_CONV_STAGES
    if threads > CUDA_MAX_THREADS or smem > CUDA_SHARED_MEMORY.get(arch, 101376):
        return None
    lowering = (f"#iree_gpu.lowering_config<{{mma_kind = #iree_gpu.mma_layout<{mma.name}>, "
                f"promote_operands = [0, 1], reduction = [0, 0, 0, 0, {k_steps}], "
                f"subgroup = [1, {sg_oh}, 1, {sg_f}, 0], workgroup = [1, {oh}, {ow}, {f}, 0]}}>")
    translation = ("#iree_codegen.translation_info<pipeline = #iree_gpu.pipeline<TileAndFuse> "
                   f"workgroup_size = [{threads}, 1, 1] subgroup_size = {CUDA_SUBGROUP}, "
                   "{gpu_pipeline_options = #iree_gpu.pipeline_options<"
                   f"prefetch_num_stages = {CUDA_CONV_STAGES}, use_igemm_convolution = true>}}>")
    return TuningConfiguration(f"tile_config_{oh}x{ow}x{f}_{k_tile}x{CUDA_CONV_STAGES}_tensorcore_mmasync",
                              lowering, translation)


def tuning_configurations(op: Conv2dOperation, target: Target) -> list[TuningConfiguration]:
    """IREE's default, plus tile configs where IREE keeps a conv: it rewrites a 1x1 conv as a
    matmul and drops conv configs (seen: all of them compiled to its own matmul config)."""
    configs = [DEFAULT_CONFIGURATION]
    if op.kh * op.kw == 1:
        return configs
    if target.device is Device.LLVMCPU:
        configs += [cpu_conv_configuration(op.layout, t)
                    for t in cpu_tiles.conv_tiles(target.resolved_cpu(), op)]
    elif target.device is Device.CUDA:
        candidates = [cuda_conv_configuration(op, target.cuda_arch, *t) for t in CUDA_CONV_TILES]
        configs += [c for c in candidates if c is not None]
    return configs


# The generator's predefined problems, (n, h, w, c, f, kh, kw, stride, padding): a 3x3 conv,
# a strided padded one and a small version of the SDXL UNet's hottest conv.
PREDEFINED_SHAPES = [(2, 18, 18, 32, 64, 3, 3, 1, 0), (2, 33, 33, 16, 32, 3, 3, 2, 1),
                     (2, 18, 18, 64, 64, 3, 3, 1, 0)]
