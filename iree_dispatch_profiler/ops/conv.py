"""2-D convolution: the operation, its MLIR, its im2col + BLAS reference, its tuning space and
its generator options."""
from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass

import numpy as np

from iree_dispatch_profiler.core import values
from iree_dispatch_profiler.core.library import (DEFAULT_CONFIGURATION, DataType, Device, Target,
                                                 TensorDescription, TuningConfiguration, UserError)
from iree_dispatch_profiler.ops import cpu_tiles, cuda_tiles, problems
from iree_dispatch_profiler.ops.mlir_text import attribute_dictionary, function, tensor_type
from iree_dispatch_profiler.ops.problems import ConvShape

LAYOUTS = ("nhwc_hwcf", "nchw_fchw")


@dataclass(frozen=True)
class Conv2dOperation(ConvShape):
    """out = conv(input, filter): a shape with its element types and layout."""

    input_type: DataType = DataType.f32
    output_type: DataType = DataType.f32
    layout: str = "nhwc_hwcf"
    kind = "conv2d"

    def __post_init__(self):
        if self.oh < 1 or self.ow < 1:
            raise UserError(f"{self.name}: the filter does not fit the padded input")

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
        return {"op_kind": self.kind, "m": m, "n": n, "k": k, "batch_count": 1,
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

    @property
    def accumulator(self) -> DataType:
        return self.output_type

    def accumulation_scale(self, image: np.ndarray, filters: np.ndarray) -> np.ndarray:
        """sqrt(K * sum_k (x_k w_k)^2) per output element, K = C*KH*KW (as for a matmul)."""
        return np.sqrt(self.reduction_length * self.compute(
            np.square(image.astype(np.float64)), np.square(filters.astype(np.float64))))

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
        if config.source_compilation_info:
            attributes.append("compilation_info = #compilation")
        attributes += [f"dilations = dense<[{self.dilation[0]}, {self.dilation[1]}]> : tensor<2xi64>",
                       f"strides = dense<[{self.stride[0]}, {self.stride[1]}]> : tensor<2xi64>"]
        body += (f"  %zero = arith.constant {out_t.zero} : {out_t.mlir}\n"
                 f"  %init = tensor.empty() : {out_type}\n"
                 f"  %acc = linalg.fill ins(%zero : {out_t.mlir}) outs(%init : {out_type}) -> {out_type}\n"
                 f"  %result = linalg.conv_2d_{self.layout}{attribute_dictionary(attributes)}\n"
                 f"      ins({source}, %filter : {in_type}, {filter_type}) outs(%acc : {out_type}) -> {out_type}\n")
        return function(config, function_name,
                        f"%input: {tensor_type(in_shape, in_t)}, %filter: {filter_type}", out_type,
                        body)

    def to_json(self) -> dict:
        return {"kind": self.kind, "n": self.n, "h": self.h, "w": self.w, "c": self.c,
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
    return cpu_tiles.configuration(f"tile_config_{t.doh}x{t.dow}x{t.df}_{t.vw}x{t.vf}x{t.vc}",
                                   *tiles, "ConvTileAndDecomposeExpert")


# CUDA: TileAndFuse on the implicit GEMM (IREE's igemm path, NHWC only), loops (n, oh, ow, f, K).
CUDA_CONV_TILES = [  # (oh, ow, f) workgroup tile, subgroups per (oh, f), K tile in MMA steps
    (8, 16, 32, 2, 2, 4), (4, 16, 64, 1, 4, 2), (8, 16, 64, 2, 4, 4), (2, 32, 32, 1, 2, 4),
    (4, 16, 128, 2, 4, 2),
]
CUDA_CONV_STAGES = 2


def cuda_conv_configuration(op: Conv2dOperation, arch: str, oh: int, ow: int, f: int, sg_oh: int,
                            sg_f: int, k_steps: int) -> TuningConfiguration | None:
    mma = cuda_tiles.NV_MMA.get((op.input_type, op.output_type))
    if mma is None or not op.nhwc or op.oh % oh or op.ow % ow or op.f % f:
        return None
    k_tile = k_steps * mma.k
    if op.c % k_tile or ow % mma.m or f % (sg_f * mma.n) or oh % sg_oh:
        return None
    threads = (oh // sg_oh) * (ow // mma.m) * (f // (sg_f * mma.n)) * cuda_tiles.SUBGROUP
    smem = (oh * ow * k_tile + k_tile * f) * op.input_type.bytes * CUDA_CONV_STAGES
    if threads > cuda_tiles.MAX_THREADS or smem > cuda_tiles.shared_memory_limit(arch):
        return None
    lowering = cuda_tiles.lowering_config(workgroup=[1, oh, ow, f, 0], reduction=[0, 0, 0, 0, k_steps],
                                          subgroup=[1, sg_oh, 1, sg_f, 0], mma=mma)
    translation = cuda_tiles.translation_info(
        threads, f"prefetch_num_stages = {CUDA_CONV_STAGES}, use_igemm_convolution = true")
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
                    for t in cpu_tiles.conv_tiles(target.resolved_cpu(), op, op.input_type,
                                                  op.output_type)]
    elif target.device is Device.CUDA:
        candidates = [cuda_conv_configuration(op, target.cuda_arch, *t) for t in CUDA_CONV_TILES]
        configs += [c for c in candidates if c is not None]
    return configs


# ---------------------------------------------------------------------------------------------
# The generator's part: options and operations (ops.registry).
OPERATION = Conv2dOperation
# Predefined problems, (n, h, w, c, f, kh, kw, stride, padding): a 3x3 conv, a strided padded
# one and a small version of the SDXL UNet's hottest conv.
PREDEFINED_SHAPES = [(2, 18, 18, 32, 64, 3, 3, 1, 0), (2, 33, 33, 16, 32, 3, 3, 2, 1),
                     (2, 18, 18, 64, 64, 3, 3, 1, 0)]


def add_options(parser: argparse.ArgumentParser) -> None:
    sizes = values.parse_sizes
    group = parser.add_argument_group("conv2d")
    for name, text in (("input-n", "batch"), ("input-h", "input height"), ("input-w", "input width"),
                       ("input-c", "input channels"), ("filter-h", "filter height"),
                       ("filter-w", "filter width"), ("filter-f", "output channels")):
        group.add_argument(f"--{name}", type=sizes, default=None, metavar="SIZES", help=text)
    group.add_argument("--stride", type=sizes, default=[1], metavar="SIZES", help="(default: 1)")
    group.add_argument("--padding", type=values.parse_sizes_or_zero, default=[0], metavar="SIZES",
                       help="zero padding on each side (default: 0)")
    group.add_argument("--dilation", type=sizes, default=[1], metavar="SIZES", help="(default: 1)")
    group.add_argument("--conv-layouts", type=values.choices(LAYOUTS, "conv layout"),
                       default=list(LAYOUTS),
                       metavar="LAYOUT,...", help="nhwc_hwcf, nchw_fchw (default: both)")


def _problems(args: argparse.Namespace) -> list[ConvShape]:
    if args.problems_file is not None:
        return problems.conv_problems(args.problems_file,
                                      problems.parse_column_map(args.problems_file_columns))
    given = [args.input_n, args.input_h, args.input_w, args.input_c, args.filter_f,
             args.filter_h, args.filter_w]
    if all(v is None for v in given):
        return [ConvShape(n, h, w, c, f, kh, kw, (s, s), (p, p))
                for n, h, w, c, f, kh, kw, s, p in PREDEFINED_SHAPES]
    if any(v is None for v in given):
        raise UserError("--input-n, --input-h, --input-w, --input-c, --filter-h, --filter-w and "
                        "--filter-f go together")
    return [ConvShape(*shape, (s, s), (p, p), (d, d))
            for shape in itertools.product(*given)
            for s in args.stride for p in args.padding for d in args.dilation]


def operations(args: argparse.Namespace, kind: str,
               data_types: list[tuple[TensorDescription, ...]]) -> list[Conv2dOperation]:
    """The convolutions the generator's options ask for, in each (input, output) type pair of
    `data_types` (layout letters play no part)."""
    types = list(dict.fromkeys((a.dtype, c.dtype) for a, b, c in data_types if a.dtype == b.dtype))
    return [Conv2dOperation(**vars(p), input_type=input_type, output_type=output_type,
                            layout=layout)
            for p in _problems(args) for input_type, output_type in types
            for layout in args.conv_layouts]
