"""Source rewrites (iree.rewrites): which ops a rewrite takes and how it writes them (no
compiler runs), that the rewritten ops compute the convolutions' numbers (IREE runs them,
numpy is the reference) and are vector code where the named op is not (cross-compiled), and
the tuner's phase that adopts a rewrite only when it verifies and is faster, and ships it."""
import dataclasses
import os
import re
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers import (AVX2, AVX512, DATA_DIR, NEON, QUICK_MODEL, QUICK_TUNING as QUICK, curated,
                     one_line_error, run_script)

DEPTHWISE_MODEL = DATA_DIR / "depthwise_block.mlir"


OPS = {"nchw": "depthwise_conv_2d_nchw_chw", "nhwc": "depthwise_conv_2d_nhwc_hwc",
       "grouped": "conv_2d_ngchw_gfchw", "fchw": "conv_2d_nchw_fchw", "hwcf": "conv_2d_nhwc_hwcf"}


def module(ops: list[tuple[str, str, str, str, str, tuple, tuple]]) -> str:
    """A function of one argument per operand of each convolution (name, kind of OPS, input,
    filter and output types, strides, dilations), returning their results."""
    args, body, results = [], "", []
    for name, kind, x, k, out, strides, dilations in ops:
        args += [f"%{name}_x: {x}", f"%{name}_k: {k}", f"%{name}_o: {out}"]
        body += (f"  %{name} = linalg.{OPS[kind]} {{dilations = dense<[{dilations[0]}, "
                 f"{dilations[1]}]> : vector<2xi64>, strides = dense<[{strides[0]}, "
                 f"{strides[1]}]> : vector<2xi64>}} ins(%{name}_x, %{name}_k : {x}, {k}) "
                 f"outs(%{name}_o : {out}) -> {out}\n")
        results.append((f"%{name}", out))
    return (f"func.func @main({', '.join(args)}) -> ({', '.join(t for _, t in results)}) {{\n"
            f"{body}  return {', '.join(v for v, _ in results)} : "
            f"{', '.join(t for _, t in results)}\n}}\n")


def host_cpu(tools):
    """This machine's CPU as IREE resolves it: what a targeted rewrite writes for here."""
    from iree_dispatch_profiler.core.library import Target
    from iree_dispatch_profiler.iree.target import resolve_target

    return resolve_target(tools, Target(cpu="host")).resolved_cpu()


def rewritten(name: str, text: str, cpu) -> tuple[str, int]:
    """`text` rewritten by the registry's rewrite `name` (for `cpu`, where it is targeted)."""
    from iree_dispatch_profiler.iree import rewrites

    (chosen,) = [r for r in rewrites.REWRITES if r.name == name]
    return chosen.run(text, cpu)


STRIDED = ("strided", "nchw", "tensor<2x16x13x13xf32>", "tensor<16x3x3xf32>",
           "tensor<2x16x5x5xf32>", (2, 2), (2, 2))
GROUPED = ("grouped", "grouped", "tensor<2x4x6x13x13xf32>", "tensor<4x5x6x3x3xf32>",
           "tensor<2x4x5x5x5xf32>", (2, 2), (2, 2))
# ResNeXt's kind: unit strides (here dilated) and rows of 17, grouped_taps' and not
# grouped_im2col's; and the same of narrower rows, grouped_im2col's
GROUPED_UNIT = ("unit", "grouped", "tensor<2x4x6x21x21xf32>", "tensor<4x5x6x3x3xf32>",
                "tensor<2x4x5x17x17xf32>", (1, 1), (2, 2))
# of one image and 8 filters a group: its op has no images loop, and blocks 4 filters
GROUPED_ONE = ("one", "grouped", "tensor<1x4x6x21x21xf32>", "tensor<4x8x6x3x3xf32>",
               "tensor<1x4x8x19x19xf32>", (1, 1), (1, 1))
GROUPED_NARROW = ("narrow", "grouped", "tensor<2x4x6x13x13xf32>", "tensor<4x5x6x3x3xf32>",
                  "tensor<2x4x5x9x9xf32>", (1, 1), (2, 2))
OTHERS = [("nhwc", "nhwc", "tensor<1x10x10x8xf32>", "tensor<3x3x8xf32>", "tensor<1x8x8x8xf32>",
           (1, 1), (1, 1)),
          ("dynamic", "nchw", "tensor<?x8x10x10xf32>", "tensor<8x3x3xf32>",
           "tensor<?x8x8x8xf32>", (1, 1), (1, 1)),
          ("ints", "nchw", "tensor<1x8x10x10xi32>", "tensor<8x3x3xi32>", "tensor<1x8x8x8xi32>",
           (1, 1), (1, 1))]


def test_depthwise_taps_takes_static_float_nchw_depthwise_convs_only():
    """An NCHW depthwise conv (strided, dilated, batch 2) becomes one elementwise generic over
    its 9 taps: each a strided slice of the input at the tap's dilated offset, times the
    kernel's channel vector for that tap. Channels-last (IREE vectorizes it), dynamic shapes,
    integers and grouped convs are left as they are; a module with none is returned unchanged."""
    from iree_dispatch_profiler.iree import rewrites

    text, count = rewrites.depthwise_taps(module([STRIDED, GROUPED, *OTHERS]))
    assert count == 1
    assert text.count("linalg.depthwise_conv_2d_nchw_chw") == 2  # the dynamic and i32 ones
    assert text.count("linalg.depthwise_conv_2d_nhwc_hwc") == 1
    assert text.count("linalg.conv_2d_ngchw_gfchw") == 1
    assert text.count("linalg.generic") == 1
    # tap (1, 2) at dilation 2: rows from 2, columns from 4, every second one
    assert "[0, 0, 2, 4] [2, 16, 5, 5] [1, 1, 2, 2]" in text
    assert "[0, 1, 2] [16, 1, 1] [1, 1, 1] : tensor<16x3x3xf32> to tensor<16xf32>" in text
    assert text.count("arith.mulf") == 9 and text.count("arith.addf") == 9
    untouched = module(OTHERS)
    assert rewrites.depthwise_taps(untouched) == (untouched, 0)


def test_grouped_im2col_joins_the_taps_per_group_and_reorders_the_filter_to_match(tmp_path):
    """A grouped conv's 9 tap slices are joined along its channels, tap-major (4 groups of 6
    channels: 54 deep), the filter is reordered GxFx(KH KW C) to match, and one contraction
    over that depth, filters by output positions, replaces the conv; the depthwise and other
    convs are not its."""
    from iree_dispatch_profiler.iree import rewrites, tunable

    text, count = rewrites.grouped_im2col(module([GROUPED, GROUPED_UNIT, STRIDED, *OTHERS]))
    assert count == 1 and text.count("linalg.conv_2d_ngchw_gfchw") == 1  # the unit-stride one
    assert rewrites.grouped_im2col(module([GROUPED_NARROW]))[1] == 1
    assert text.count("linalg.depthwise_conv_2d_nchw_chw") == 3
    assert "[0, 0, 0, 2, 4] [2, 4, 6, 5, 5] [1, 1, 1, 2, 2]" in text
    assert "tensor.concat dim(2)" in text and "-> tensor<2x4x54x5x5xf32>" in text
    # the filter first: IREE's M is then the filters and its N, which it vectorizes, the
    # output's contiguous positions (the other way round, ResNeXt's ran at 10% of the ceiling)
    assert re.search(r"ins\(%\S+, %\S+ : tensor<4x5x54xf32>, tensor<2x4x54x5x5xf32>\)", text)
    path = tmp_path / "grouped.mlir"
    path.write_text(text)
    contraction = next(op for op in tunable.find(path) if op.kind == tunable.CONTRACTION)
    # N: the images and their 5x5 positions (the filter indexes neither)
    assert (contraction.size("m"), contraction.size("n"), contraction.size("k")) == (5, 50, 54)
    assert "permutation = [0, 1, 3, 4, 2]" in text
    assert "tensor<4x5x3x3x6xf32> into tensor<4x5x54xf32>" in text
    assert '"parallel", "parallel", "parallel", "parallel", "parallel", "reduction"' in text


def test_grouped_taps_sums_each_taps_contraction_reading_the_input_in_place(tmp_path):
    """A grouped conv of unit width stride becomes one generic: per tap, the filter's tap
    (GxFxC) times the input's slice at the tap's (dilated) offset, contracted over the channels;
    the 9 products are summed, then added to the accumulator. No im2col copy. Of unit height
    stride, the input's rows (21 wide) are padded to 32 and flattened, each tap's slice one
    run of the 17 output rows' 32 columns. The tuner sees a sum of 9 contractions of one shape
    (groups as batch, filters M, positions N, channels K), its FLOPs all 9; the width-strided
    conv, and the one whose output rows are narrower than a 512-bit vector of floats, are left
    to grouped_im2col; one strided along the height keeps its rows."""
    from iree_dispatch_profiler.iree import rewrites, tunable

    text, count = rewrites.grouped_taps(module([GROUPED_UNIT, GROUPED, GROUPED_NARROW, STRIDED,
                                                *OTHERS]), AVX2)
    assert count == 1 and text.count("linalg.conv_2d_ngchw_gfchw") == 2
    # its config: a group's 5 filters by 4 vectors of the 544 positions, a filter by a vector
    assert ("distribution = [1, 1, 5, 32, 0], vector_common_parallel = [1, 1, 1, 8, 0], "
            "vector_reduction = [0, 0, 0, 0, 1]") in text
    assert "tensor.concat" not in text
    assert "tensor<2x4x6x22x32xf32> into tensor<2x4x6x704xf32>" in text  # a row more, padded
    # tap (1, 2) at dilation 2: 2 rows of 32 and 4 columns in
    assert "[0, 0, 0, 68] [2, 4, 6, 544] [1, 1, 1, 1]" in text
    assert ("[0, 0, 0, 1, 2] [4, 5, 6, 1, 1] [1, 1, 1, 1, 1] : tensor<4x5x6x3x3xf32> to "
            "tensor<4x5x6xf32>") in text
    assert "[0, 0, 0, 0, 0] [2, 4, 5, 17, 17] [1, 1, 1, 1, 1] : tensor<2x4x5x17x32xf32>" in text
    assert text.count("arith.mulf") == 9 and text.count("arith.addf") == 9
    assert re.search(r"arith.addf %out, %\S+ : f32", text)
    path = tmp_path / "taps.mlir"
    path.write_text(text)
    (summed,) = [op for op in tunable.find(path) if op.kind == tunable.SUMMED]
    assert [summed.size(d) for d in ("batch", "m", "n", "k")] == [4, 5, 2 * 17 * 32, 6]
    assert summed.products == 9 and summed.flops == 2 * 4 * 5 * 1088 * 6 * 9
    # strided along the height: the slices keep their rows
    tall = ("tall", "grouped", "tensor<2x4x6x21x21xf32>", "tensor<4x5x6x3x3xf32>",
            "tensor<2x4x5x10x17xf32>", (2, 1), (1, 2))
    text, count = rewrites.grouped_taps(module([tall]), AVX2)
    assert count == 1 and "[0, 0, 0, 1, 4] [2, 4, 6, 10, 17] [1, 1, 1, 2, 1]" in text


def test_a_generic_is_a_sum_of_contractions_only_when_its_body_is_one():
    """The summed kind is recognised from the body: with one product subtracted, or with a
    product of one input by itself (its partner unused), the op is no tunable kind at all."""
    from iree.compiler import ir

    from iree_dispatch_profiler.iree import modules, rewrites, tunable

    text, _ = rewrites.grouped_taps(module([GROUPED_UNIT]), AVX2)
    subtracted = text.replace("arith.addf", "arith.subf", 1)  # the first two products'
    squared = re.sub(r"arith.mulf (%\S+), %\S+ :", r"arith.mulf \1, \1 :", text, count=1)
    assert subtracted != text and squared != text
    kinds = {}
    for name, source in (("taps", text), ("subtracted", subtracted), ("squared", squared)):
        with ir.Context() as context:
            parsed = modules.parse(source, name, context)
            kinds[name] = [tunable._kind(op) for op in modules.walk(parsed.operation)
                           if op.operation.name == "linalg.generic"]
    assert kinds == {"taps": [tunable.SUMMED], "subtracted": [""], "squared": [""]}


# PyTorch's 3x3 convolution with its bias as the accumulator, and one channels-last
WINOGRAD = ("wino", "fchw", "tensor<1x16x14x14xf32>", "tensor<24x16x3x3xf32>",
            "tensor<1x24x12x12xf32>", (1, 1), (1, 1))
WINOGRAD_NHWC = ("winolast", "hwcf", "tensor<2x10x10x16xf32>", "tensor<3x3x16x16xf32>",
                 "tensor<2x8x8x16xf32>", (1, 1), (1, 1))
# batch 2, channels and filters no multiple of a vector, 9x13 outputs: 2x3 tiles, the last
# ones partial
WINOGRAD_ODD = ("winodd", "fchw", "tensor<2x20x11x15xf32>", "tensor<24x20x3x3xf32>",
                "tensor<2x24x9x13xf32>", (1, 1), (1, 1))


def test_winograd_takes_3x3_stride_1_f32_convs_and_adds_their_accumulator_after():
    """Winograd F(6,3) replaces the 3x3 stride-1 f32 convs of either layout; each now starts
    from zeros and its old accumulator is added after (IREE's pass drops it). IREE's filter
    transform stays; its input and output transforms are channels-last weighted sums, four a
    conv (rows 6 apart, columns 6 apart, and back), with the NCHW image transposed to
    channels-last and back. Strided, 1x1 and f16 convs, and those of fewer than 16 channels
    or filters (an image's first conv), are left as they are."""
    from iree_dispatch_profiler.iree import rewrites

    strided = ("s2", "fchw", "tensor<1x16x15x15xf32>", "tensor<16x16x3x3xf32>",
               "tensor<1x16x7x7xf32>", (2, 2), (1, 1))
    pointwise = ("pw", "fchw", "tensor<1x16x14x14xf32>", "tensor<16x16x1x1xf32>",
                 "tensor<1x16x14x14xf32>", (1, 1), (1, 1))
    half = ("half", "fchw", "tensor<1x16x14x14xf16>", "tensor<16x16x3x3xf16>",
            "tensor<1x16x12x12xf16>", (1, 1), (1, 1))
    rgb = ("rgb", "fchw", "tensor<1x3x14x14xf32>", "tensor<16x3x3x3xf32>",
           "tensor<1x16x12x12xf32>", (1, 1), (1, 1))
    few = ("few", "hwcf", "tensor<1x10x10x16xf32>", "tensor<3x3x16x8xf32>",
           "tensor<1x8x8x8xf32>", (1, 1), (1, 1))
    others = [strided, pointwise, half, rgb, few]
    text, count = rewrites.winograd(module([WINOGRAD, WINOGRAD_NHWC, *others]))
    assert count == 2
    assert text.count("linalg.conv_2d_nchw_fchw") == 4 and text.count("linalg.conv_2d_nhwc_hwcf") == 1
    assert text.count("iree_linalg_ext.winograd.filter_transform") == 2
    assert "input_transform" not in text and "output_transform" not in text
    assert text.count("linalg.batch_matmul") == 2
    assert text.count("linalg.generic") == 2 * 5  # 4 transforms and the accumulator, a conv
    assert text.count("linalg.transpose") == 2  # the NCHW conv's, in and out
    assert "[1, 6, 1, 1] : tensor<1x14x14x16xf32> to tensor<1x2x14x16xf32>" in text  # rows
    assert "[1, 1, 1, 6, 1] : tensor<8x1x2x14x16xf32> to tensor<8x1x2x2x16xf32>" in text
    # the NHWC conv's image of 10x10 made whole 6x6 tiles with zeros
    assert "high[0, 4, 4, 0]" in text and "tensor<2x10x10x16xf32> to tensor<2x14x14x16xf32>" in text
    untouched = module(others)
    assert rewrites.winograd(untouched) == (untouched, 0)


def attention(rows: int = 256, compare: str = "sge, %q_i, %k_i", kept: str = "%zero",
              masked: str = "%ninf", mask_from: str = "generic") -> str:
    """A function of Q, K, V (2 heads of `rows` x 16) into an attention as iree-turbine
    exports PyTorch's causal SDPA: its mask a generic over (batch, head, query, key) that
    selects on `compare` of the indices (kept if true, masked if not), collapsed to the heads
    (mask_from "argument": the mask is the function's fourth argument)."""
    t = f"tensor<2x{rows}x16xf32>"
    m = f"tensor<2x{rows}x{rows}xf32>"
    maps = ", ".join(f"affine_map<(d0, d1, d2, d3, d4) -> ({r})>" for r in
                     ("d0, d1, d3", "d0, d4, d3", "d0, d4, d2", "", "d0, d1, d4", "d0, d1, d2"))
    mask = (f"""  %e4 = tensor.empty() : tensor<1x2x{rows}x{rows}xf32>
  %mask4 = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      outs(%e4 : tensor<1x2x{rows}x{rows}xf32>) {{
  ^bb0(%out: f32):
    %q_i = linalg.index 2 : index
    %k_i = linalg.index 3 : index
    %c = arith.cmpi {compare} : index
    %s = arith.select %c, {kept}, {masked} : f32
    linalg.yield %s : f32
  }} -> tensor<1x2x{rows}x{rows}xf32>
  %mask = tensor.collapse_shape %mask4 [[0, 1], [2], [3]] : tensor<1x2x{rows}x{rows}xf32> into {m}
""" if mask_from == "generic" else "")
    argument = f", %mask: {m}" if mask_from == "argument" else ""
    return f"""func.func @main(%q: {t}, %k: {t}, %v: {t}{argument}) -> {t} {{
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %lowest = arith.constant -3.40282347E+38 : f32
  %one = arith.constant -1.0 : f32
  %scale = arith.constant 0.25 : f32
{mask}  %o = tensor.empty() : {t}
  %r = iree_linalg_ext.attention <{{indexing_maps = [{maps}]}}>
      ins(%q, %k, %v, %scale, %mask : {t}, {t}, {t}, f32, {m}) outs(%o : {t}) {{
  ^bb0(%score: f32):
    iree_linalg_ext.yield %score : f32
  }} -> {t}
  return %r : {t}
}}
"""


def test_causal_blocks_takes_attention_under_a_causal_mask_only():
    """An attention whose mask gives each key after its query no weight (-inf, or the float
    minimum; the condition either way round) becomes blocks of queries, each against the keys
    up to its last query; a mask that keeps a later key (or is written transposed), an
    argument's mask, or too few queries for two blocks are left as they are."""
    from iree_dispatch_profiler.iree import rewrites

    for causal in (attention(), attention(compare="sle, %k_i, %q_i"),
                   attention(compare="slt, %q_i, %k_i", kept="%ninf", masked="%zero"),
                   attention(masked="%lowest"), attention(compare="sgt, %q_i, %k_i")):
        text, count = rewrites.causal_blocks(causal)
        assert count == 1
        assert text.count("iree_linalg_ext.attention") == 2
        # the first block's 128 queries against the first 128 keys, the second's against all
        assert "tensor<2x128x16xf32>, f32, tensor<2x128x128xf32>" in text
        assert "tensor<2x256x16xf32>, f32, tensor<2x128x256xf32>" in text
        assert "tensor.concat dim(1)" in text
    for other in (attention(compare="sle, %q_i, %k_i"), attention(compare="sge, %k_i, %q_i"),
                  attention(masked="%one"), attention(mask_from="argument"),
                  attention(compare="sge, %q_i, %q_i"), attention(rows=192),
                  # the generic's indices are its dims; written transposed, the mask is too
                  attention().replace("-> (d0, d1, d2, d3)>", "-> (d0, d1, d3, d2)>")):
        assert rewrites.causal_blocks(other) == (other, 0)


def filter_global(name: str, value: str, conv=WINOGRAD) -> str:
    """A conv's module (WINOGRAD's unless said) with its filter the global `name` of initial
    `value` (a parameter, or constants) instead of an argument."""
    conv_name, _, _, k, _, _, _ = conv
    return (f"util.global private @{name} = {value} : {k}\n"
            + module([conv]).replace(f", %{conv_name}_k: {k}", "").replace(
                "{\n", f"{{\n  %{conv_name}_k = util.global.load @{name} : {k}\n", 1))


def test_a_conv3d_parameters_winograd_filter_transform_is_computed_once_at_load():
    """conv3d_as_conv2d reorders a Conv3d's filter (a transpose and a reshape) before the 2-D
    conv that Winograd takes: the transform of that reordered parameter is hoisted too."""
    from iree_dispatch_profiler.iree import rewrites

    text, shapes = conv3d(1, 8, (6, 10, 10), 16, 3, (1, 1, 1), (1, 1, 1))
    k = f"tensor<{'x'.join(map(str, shapes[1]))}xf32>"
    text = (f'util.global private @weights.k = #flow.parameter.named<"model"::"k"> : {k}\n'
            + text.replace(f", %k: {k}", "").replace(
                "{\n", f"{{\n  %k = util.global.load @weights.k : {k}\n", 1))
    rewritten, count = rewrites.conv3d_as_conv2d(text)
    hoisted, transformed = rewrites.winograd(rewritten)
    assert count == transformed == 1
    initializer = hoisted[hoisted.index("util.initializer"):hoisted.index("func.func")]
    assert "linalg.transpose" in initializer and "winograd.filter_transform" in initializer
    assert "filter_transform" not in hoisted[hoisted.index("func.func"):]


def test_winograd_computes_a_parameters_filter_transform_once_at_load():
    """A filter read from a global (a parameter) is transformed in an initializer into a global
    of its own, which the function reads; a filter passed as an argument is transformed in the
    function, as it must be."""
    from iree_dispatch_profiler.iree import rewrites

    hoisted, count = rewrites.winograd(filter_global(
        "weights.conv1", '#flow.parameter.named<"model"::"k">'))
    assert count == 1
    initializer = hoisted[hoisted.index("util.initializer"):hoisted.index("func.func")]
    assert "iree_linalg_ext.winograd.filter_transform" in initializer
    assert "util.global.store" in initializer and "@weights.conv1$winograd" in initializer
    function = hoisted[hoisted.index("func.func"):]
    assert "filter_transform" not in function
    assert "util.global.load immutable @weights.conv1$winograd" in function
    argument, _ = rewrites.winograd(module([WINOGRAD]))
    assert "util.initializer" not in argument and "filter_transform" in argument


def test_a_model_with_several_kinds_is_measured_with_each_rewrite_and_all_of_them():
    from iree_dispatch_profiler.tuning.model import rewrite_search

    found = rewrite_search.candidates(module([STRIDED, GROUPED, GROUPED_UNIT]), AVX512)
    every = "depthwise_taps+grouped_taps+grouped_im2col"
    # each alone, all of them, and all but each one
    assert {name: count for name, (_, _, count) in found.items()} == {
        "depthwise_taps": 1, "grouped_taps": 1, "grouped_im2col": 1, every: 3,
        "grouped_taps+grouped_im2col": 2, "depthwise_taps+grouped_im2col": 2,
        "depthwise_taps+grouped_taps": 2}
    assert list(rewrite_search.candidates(module([STRIDED, GROUPED]), AVX512)) == [
        "depthwise_taps", "grouped_im2col", "depthwise_taps+grouped_im2col"]  # two: no more
    both = found[every][1]
    assert "linalg.conv" not in both and "linalg.depthwise" not in both
    assert rewrite_search.candidates(module(OTHERS), AVX512) == {}
    only = rewrite_search.candidates(module([STRIDED, GROUPED, GROUPED_UNIT]), AVX512,
                                     ("grouped_taps",))  # --rewrites grouped_taps
    assert list(only) == ["grouped_taps"]
    assert rewrite_search.candidates(module([STRIDED]), AVX512, ()) == {}  # --rewrites none


def test_a_rewrite_under_flags_is_adopted_only_below_iree_defaults_time():
    """Winograd is measured under channels-last too, against the model's own source under it.
    It is adopted there when it beats that and IREE's default timed in the same session
    (ResNet: 36 ms default, own source under channels-last 1.7 ms, rewritten 1.2 ms); not when
    it beats the own source only because channels-last slows the model past IREE's default (a
    batch-1 conv block: default 0.23 ms, own source under channels-last 11 ms, rewritten
    0.29 ms), nor when it is below IREE's default's median only in another session (a loaded
    machine). Rows against IREE's default alone need only beat it, and the model's own source
    under each set, each as a share of the default beside it; the fastest eligible row is
    chosen."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning.model import rewrite_search

    assert rewrite_search.under("winograd") == ["channels_last"]
    assert rewrite_search.under("depthwise_taps+winograd") == ["channels_last"]
    assert rewrite_search.under("causal_blocks") == ["decompose_attention"]
    assert rewrite_search.under("packed_matmuls") == ["data_tiling_early", "decompose_attention",
                                                      "im2col_data_tiling"]
    assert rewrite_search.under("packed_matmuls_swapped") == rewrite_search.under(
        "packed_matmuls")
    assert rewrite_search.under("patch_matmuls") == ["im2col_data_tiling"]
    assert rewrite_search.under("cache_attention") == ["data_tiling_early"]
    assert rewrite_search.under("widened_half_matmuls") == ["data_tiling_early"]
    assert all(r.under == () for r in rewrites.REWRITES
               if r.name not in ("winograd", "causal_blocks", "packed_matmuls", "patch_matmuls",
                                 "packed_matmuls_swapped", "cache_attention",
                                 "widened_half_matmuls"))

    def row(under: str, ms: float, default_ms: float, speedup: float, low: float) -> dict:
        return {"name": "winograd", "under": under, "status": "ok", "median_ms": ms,
                "default_ms": default_ms, "speedup": speedup, "speedup_ci_low": low,
                "speedup_ci_high": speedup + 0.1, "chosen": "no"}

    def chosen(rows: list[dict]) -> list[str]:
        rewrite_search.mark_chosen(rows)
        return [r["chosen"] for r in rows]
    assert chosen([row("", 34.0, 36.0, 1.06, 1.04),
                   row("channels_last", 1.2, 36.0, 1.39, 1.34)]) == ["no", "yes"]
    assert chosen([row("", 0.29, 0.23, 0.8, 0.75),
                   row("channels_last", 0.29, 0.23, 38.0, 37.0)]) == ["no", "no"]
    # the first session's default (0.232 ms) is above the second's rewrite (0.22 ms); the
    # default timed beside the rewrite (0.21 ms) is not
    assert chosen([row("", 0.29, 0.232, 0.8, 0.75),
                   row("channels_last", 0.22, 0.21, 38.0, 37.0)]) == ["no", "no"]
    assert chosen([row("", 0.29, 0.232, 0.8, 0.75),  # within the minimum effect: not adopted
                   row("channels_last", 0.22, 0.225, 38.0, 37.0)]) == ["no", "no"]
    assert chosen([row("", 0.29, 0.232, 0.8, 0.75),
                   row("channels_last", 0.20, 0.225, 38.0, 37.0)]) == ["no", "yes"]
    assert chosen([row("", 1.0, 2.0, 2.0, 1.8),
                   row("channels_last", 1.5, 2.0, 3.0, 2.5)]) == ["yes", "no"]
    # the model's own source under the set (0.277 x 0.96 = 0.266 ms, 0.604 of the default
    # beside it) beats the rewrite alone (0.625 of its default) by more than the minimum
    # effect: neither is adopted; within it (BERT's packed matmuls: 0.60 against 0.637), the
    # rewrite is
    assert chosen([row("", 0.277, 0.443, 1.60, 1.59),
                   row("data_tiling_early", 0.277, 0.440, 0.96, 0.95)]) == ["no", "no"]
    assert chosen([row("", 0.272, 0.443, 1.63, 1.61),
                   row("data_tiling_early", 0.277, 0.440, 0.96, 0.95)]) == ["yes", "no"]


def agreements(tools, tmp_path: Path, arrays, sources: dict[str, str], wanted: np.ndarray) -> dict:
    """Each source (name -> text) compiled and run by IREE on `arrays` (saved as .npy), its
    output against `wanted`: name -> Agreement."""
    from iree_dispatch_profiler.iree.launchers import run_module
    from iree_dispatch_profiler.measure.verification import agreement

    inputs = saved(tmp_path, arrays)
    results = {}
    for name, source in sources.items():
        output = tmp_path / f"{name}.npy"
        ran = run_module(tools, build(tools, source, tmp_path / name), "main", "local-task",
                         inputs, [output], 300)
        assert ran.ok, ran.reason
        results[name] = agreement(np.load(output), wanted.astype(np.float32))
    return results


def build(tools, text: str, path: Path, cpu: str = "host", triple: str = "",
          flags: tuple[str, ...] = ()) -> Path:
    """`text` written to `path`.mlir and compiled for `cpu` as the toolkit compiles: its vmfb."""
    from iree_dispatch_profiler.core.library import Target
    from iree_dispatch_profiler.iree.launchers import compile_command
    from iree_dispatch_profiler.iree.process import run
    from iree_dispatch_profiler.iree.target import resolve_target

    source, vmfb = path.with_suffix(".mlir"), path.with_suffix(".vmfb")
    source.write_text(text)
    target = resolve_target(tools, Target(cpu=cpu, target_triple=triple))
    result = run(compile_command(tools, target, source, vmfb, list(flags)), 300)
    assert result.ok, result.failure("iree-compile", 300)
    return vmfb


def packed_types(tools, text: str, folder, flags, cpu: str = "host", triple: str = "") -> set[str]:
    """The f32 tensor types IREE's data tiling packs in `text` compiled for `cpu` with `flags`,
    read at flow (where the packs are ops of their own)."""
    flow = build(tools, text, folder, cpu, triple, flags=(*flags, "--compile-to=flow"))
    return set(re.findall(r"linalg\.pack .*: (tensor<[0-9x]+xf32>)", flow.read_text()))


def saved(tmp_path: Path, arrays, stem: str = "in") -> list[str]:
    """`arrays` saved as .npy files under `tmp_path`: their --input arguments, in order."""
    inputs = []
    for i, array in enumerate(arrays):
        np.save(tmp_path / f"{stem}{i}.npy", array)
        inputs.append(f"@{tmp_path / f'{stem}{i}.npy'}")
    return inputs


def reference(kind: str, x, k, init, strides, dilations):
    """numpy's NCHW depthwise, grouped or dense convolution (or a channels-last dense one),
    tap by tap, into `init`."""
    if kind == "hwcf":  # as NCHW with an FCHW filter, and back
        out = reference("fchw", x.transpose(0, 3, 1, 2), k.transpose(3, 2, 0, 1),
                        init.transpose(0, 3, 1, 2), strides, dilations)
        return out.transpose(0, 2, 3, 1)
    out = init.astype(np.float64).copy()
    oh, ow = out.shape[-2:]
    for kh in range(k.shape[-2]):
        for kw in range(k.shape[-1]):
            rows = slice(kh * dilations[0], kh * dilations[0] + strides[0] * (oh - 1) + 1, strides[0])
            cols = slice(kw * dilations[1], kw * dilations[1] + strides[1] * (ow - 1) + 1, strides[1])
            window = x[..., rows, cols].astype(np.float64)
            if kind == "nchw":
                out += window * k[None, :, kh, kw, None, None]
            elif kind == "fchw":
                out += np.einsum("nchw,fc->nfhw", window, k[..., kh, kw])
            else:  # n g c h w, g f c -> n g f h w
                out += np.einsum("ngchw,gfc->ngfhw", window, k[..., kh, kw])
    return out


# a patch embedding: 4x4 patches of 2 images (stride = kernel), 3 channels into 32
PATCH = ("patch", "fchw", "tensor<2x3x32x32xf32>", "tensor<32x3x4x4xf32>",
         "tensor<2x32x8x8xf32>", (4, 4), (1, 1))
# 16 channels into 16 filters over 4x4 positions: its matmul's operands are both 16x16
POINTWISE = ("pw", "fchw", "tensor<1x16x4x4xf32>", "tensor<16x16x1x1xf32>",
             "tensor<1x16x4x4xf32>", (1, 1), (1, 1))
# what each rewrite's output becomes to show that the numeric check can fail (a pattern and its
# replacement, once): a product subtracted, or (a matmul has no add to flip) the patches'
# columns transposed, or the pointwise matmul's operands swapped
CORRUPTED = {"patch_matmuls": (r"permutation = \[0, 2, 4, 1, 3, 5\]",
                               "permutation = [0, 2, 4, 1, 5, 3]"),
             "pointwise_matmuls": (r"linalg.matmul ins\((%\S+), (%\S+) :",
                                   r"linalg.matmul ins(\2, \1 :")}


def test_pointwise_matmuls_takes_1x1_convs_of_one_image_as_they_lie():
    """A 1x1 conv of stride 1 over one image becomes the filter (F x C) times the image's
    channels by its positions (C x HW), into the accumulator as filters by positions: reshapes
    of NCHW as it lies, no transpose. Strided, two images', 3x3, f16 and channels-last convs
    are left alone. Joined with packed_matmuls, the matmul is packed."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning.model import rewrite_search

    others = [("strided", "fchw", "tensor<1x8x8x8xf32>", "tensor<16x8x1x1xf32>",
               "tensor<1x16x4x4xf32>", (2, 2), (1, 1)),
              ("two", "fchw", "tensor<2x8x8x8xf32>", "tensor<16x8x1x1xf32>",
               "tensor<2x16x8x8xf32>", (1, 1), (1, 1)),
              ("wide", "fchw", "tensor<1x8x10x10xf32>", "tensor<16x8x3x3xf32>",
               "tensor<1x16x8x8xf32>", (1, 1), (1, 1)),
              ("half", "fchw", "tensor<1x8x8x8xf16>", "tensor<16x8x1x1xf16>",
               "tensor<1x16x8x8xf16>", (1, 1), (1, 1)),
              ("last", "hwcf", "tensor<1x8x8x8xf32>", "tensor<1x1x8x16xf32>",
               "tensor<1x8x8x16xf32>", (1, 1), (1, 1))]
    wide = ("expand", "fchw", "tensor<1x24x8x8xf32>", "tensor<96x24x1x1xf32>",
            "tensor<1x96x8x8xf32>", (1, 1), (1, 1))
    text, count = rewrites.pointwise_matmuls(module([wide, *others]))
    assert count == 1 and text.count("linalg.conv_2d_nchw_fchw") == 4
    assert "linalg.transpose" not in text
    assert "tensor<96x24x1x1xf32> into tensor<96x24xf32>" in text
    assert re.search(r"linalg.matmul ins\(%\S+, %\S+ : tensor<96x24xf32>, tensor<24x64xf32>\) "
                     r"outs\(%\S+ : tensor<96x64xf32>\)", text)
    untouched = module(others)
    assert rewrites.pointwise_matmuls(untouched) == (untouched, 0)
    joined = rewrite_search.candidates(module([wide]), AVX2)
    assert list(joined) == ["pointwise_matmuls", "pointwise_matmuls+packed_matmuls",
                            "pointwise_matmuls+packed_matmuls_swapped"]
    assert "linalg.mmt4d" in joined["pointwise_matmuls+packed_matmuls"][1]
    assert "linalg.mmt4d" in joined["pointwise_matmuls+packed_matmuls_swapped"][1]


def test_patch_matmuls_takes_whole_patch_convs_only():
    """A conv whose stride is its kernel, over whole patches, becomes the patches as rows
    (2 images x 8 x 8 positions) by their 3 x 4 x 4 values, times the filter as 32 rows of 48
    (a Linear's weight: NxK), into the accumulator transposed to positions by filters, and back.
    Overlapping, dilated, 1x1, ragged (a row of the input left over), f16 and channels-last
    convs are left alone. Joined with packed_matmuls, the patches' matmul is packed too."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning.model import rewrite_search

    others = [("overlap", "fchw", "tensor<1x3x32x32xf32>", "tensor<8x3x4x4xf32>",
               "tensor<1x8x15x15xf32>", (2, 2), (1, 1)),
              ("dilated", "fchw", "tensor<1x3x32x32xf32>", "tensor<8x3x2x2xf32>",
               "tensor<1x8x15x15xf32>", (2, 2), (2, 2)),
              ("pointwise", "fchw", "tensor<1x3x8x8xf32>", "tensor<8x3x1x1xf32>",
               "tensor<1x8x8x8xf32>", (1, 1), (1, 1)),
              ("ragged", "fchw", "tensor<1x3x33x32xf32>", "tensor<8x3x4x4xf32>",
               "tensor<1x8x8x8xf32>", (4, 4), (1, 1)),
              ("half", "fchw", "tensor<1x3x32x32xf16>", "tensor<8x3x4x4xf16>",
               "tensor<1x8x8x8xf16>", (4, 4), (1, 1)),
              ("last", "hwcf", "tensor<1x32x32x3xf32>", "tensor<4x4x3x8xf32>",
               "tensor<1x8x8x8xf32>", (4, 4), (1, 1))]
    text, count = rewrites.patch_matmuls(module([PATCH, *others]))
    assert count == 1 and text.count("linalg.conv_2d_nchw_fchw") == 5
    assert "permutation = [0, 2, 4, 1, 3, 5]" in text and "into tensor<128x48xf32>" in text
    assert "tensor<32x3x4x4xf32> into tensor<32x48xf32>" in text
    assert re.search(r"linalg.matmul indexing_maps = \[#map\d*, #map\d*, #map\d*\] "
                     r"ins\(%\S+, %\S+ : tensor<128x48xf32>, tensor<32x48xf32>\) "
                     r"outs\(%\S+ : tensor<128x32xf32>\)", text)
    assert "permutation = [0, 3, 1, 2]" in text  # back to NCHW
    untouched = module(others)
    assert rewrites.patch_matmuls(untouched) == (untouched, 0)
    joined = rewrite_search.candidates(module([PATCH]), AVX512)
    # swapped, the 32 filters are the rows: four whole 8-row tiles
    assert list(joined) == ["patch_matmuls", "patch_matmuls+packed_matmuls",
                            "patch_matmuls+packed_matmuls_swapped"]
    assert "linalg.mmt4d" in joined["patch_matmuls+packed_matmuls"][1]
    assert rewrite_search.under("patch_matmuls+packed_matmuls") == [
        "data_tiling_early", "decompose_attention", "im2col_data_tiling"]


# f16 operands into an f32 result: the named op widens them, and so must the rewrite
WIDENED = ("widened", "nchw", "tensor<1x8x10x10xf16>", "tensor<8x3x3xf16>", "tensor<1x8x8x8xf32>",
           (1, 1), (1, 1))


@pytest.mark.iree
@pytest.mark.parametrize("conv, rewrite", [(STRIDED, "depthwise_taps"), (GROUPED, "grouped_im2col"),
                                           (GROUPED_UNIT, "grouped_taps"),
                                           (GROUPED_ONE, "grouped_taps"),
                                           (WIDENED, "depthwise_taps"), (WINOGRAD, "winograd"),
                                           (WINOGRAD_NHWC, "winograd"), (WINOGRAD_ODD, "winograd"),
                                           (PATCH, "patch_matmuls"),
                                           (POINTWISE, "pointwise_matmuls")])
def test_the_rewritten_conv_computes_numpys_numbers(tools, tmp_path, conv, rewrite):
    """The rewritten conv (strided, dilated, batch 2; grouped_taps' of one image too, with its
    config; or f16 operands into f32; or Winograd's, into a random accumulator; or a patch
    embedding's or a 1x1 conv's matmul), compiled for this machine and run by IREE, gives
    numpy's convolution; with one product (Winograd: the accumulator) subtracted instead of
    added, the patches' columns transposed or the matmul's operands swapped, it does not (the
    comparison can fail)."""
    from iree.compiler import ir

    from iree_dispatch_profiler.iree.launchers import run_module
    from iree_dispatch_profiler.measure.verification import agreement

    text, count = rewritten(rewrite, module([conv]), host_cpu(tools))
    assert count == 1
    rng = np.random.default_rng(0)
    with ir.Context():
        shapes = [ir.RankedTensorType(ir.Type.parse(t)).shape for t in conv[2:5]]
    arrays = [rng.standard_normal(s).astype(np.float16 if t.endswith("xf16>") else np.float32)
              for s, t in zip(shapes, conv[2:5])]
    wanted = reference(conv[1], *arrays, conv[5], conv[6])
    inputs = saved(tmp_path, arrays)
    results = {}
    right, wrong = CORRUPTED.get(rewrite, ("arith.addf", "arith.subf"))
    assert re.search(right, text)
    builds = [("rewritten", text, ()), ("wrong", re.sub(right, wrong, text, count=1), ())]
    if rewrite == "winograd":  # why the rewrite adds the accumulator itself: IREE drops it
        builds.append(("pass_alone", module([conv]), (
            "--iree-preprocessing-pass-pipeline=builtin.module(util.func("
            "iree-linalg-ext-convert-conv2d-to-winograd{replace-all-convs=true}))",)))
    for name, source, flags in builds:
        output = tmp_path / f"{name}.npy"
        ran = run_module(tools, build(tools, source, tmp_path / name, flags=flags), "main",
                         "local-task", inputs, [output], 300)
        assert ran.ok, ran.reason
        results[name] = agreement(np.load(output), wanted.astype(np.float32))
    assert results["rewritten"].ok, results["rewritten"].detail
    assert not results["wrong"].ok
    assert "pass_alone" not in results or not results["pass_alone"].ok


def depthwise_transposed() -> str:
    """ConvNeXt's kind: a function of a 7x7 depthwise conv (1x16x22x22 -> 1x16x16x16) whose
    result is transposed to channels-last."""
    conv = ("dw", "nchw", "tensor<1x16x22x22xf32>", "tensor<16x7x7xf32>",
            "tensor<1x16x16x16xf32>", (1, 1), (1, 1))
    last = "tensor<1x16x16x16xf32>"
    return module([conv]).replace(f"  return %dw : {conv[4]}", (
        f"  %e = tensor.empty() : {last}\n"
        f"  %t = linalg.transpose ins(%dw : {conv[4]}) outs(%e : {last}) "
        f"permutation = [0, 2, 3, 1]\n  return %t : {last}"))


@pytest.mark.iree
def test_depthwise_taps_keep_their_layout_where_a_transpose_reads_them(tools, tmp_path):
    """ConvNeXt's kind: a 7x7 depthwise conv whose result is transposed to channels-last.
    Compiled with depthwise_taps' flags, the taps' op reads its 49 slices in place, along its
    innermost loop (the width), and gives numpy's numbers transposed; under IREE's default
    flags the transpose is folded into its reads (the channels innermost: the check can
    fail)."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module
    from iree_dispatch_profiler.measure.verification import agreement

    rewritten, count = rewrites.depthwise_taps(depthwise_transposed())
    assert count == 1
    flags = next(r.flags for r in rewrites.REWRITES if r.name == "depthwise_taps")
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32)
              for s in ((1, 16, 22, 22), (16, 7, 7), (1, 16, 16, 16))]
    wanted = reference("nchw", *arrays, (1, 1), (1, 1)).transpose(0, 2, 3, 1)
    maps = {}
    for name, build_flags in (("kept", flags), ("folded", ())):
        dump = tmp_path / f"{name}_sources"
        vmfb = build(tools, rewritten, tmp_path / name,
                     flags=(*build_flags, f"--iree-hal-dump-executable-sources-to={dump}"))
        taps = [line for p in dump.glob("*.mlir") for line in p.read_text().splitlines()
                if "linalg.generic" in line and line.count("affine_map") > 90]
        assert len(taps) == 1, f"no one op of the 49 taps under {name}"
        # the first tap's slice: read along the op's innermost loop (the width) or permuted
        maps[name] = re.search(r"affine_map<\(([^)]*)\) -> \(([^)]*)\)>", taps[0]).groups()
        output = tmp_path / f"{name}.npy"
        ran = run_module(tools, vmfb, "main", "local-task",
                         saved(tmp_path, arrays, stem=name), [output], 300)
        assert ran.ok, ran.reason
        found = agreement(np.load(output), wanted.astype(np.float32))
        assert found.ok, found.detail
    kept_loops, kept_read = maps["kept"]
    assert kept_read == kept_loops, maps
    assert maps["folded"][1] != maps["folded"][0], maps


@pytest.mark.iree
def test_winograds_filter_transform_computed_at_load_gives_numpys_numbers(tools, tmp_path):
    """With the filter a global's value, the rewritten module (its filter transformed in an
    initializer) gives numpy's convolution; with that initializer's transform dropped (the
    global then holds zeros), it does not."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module
    from iree_dispatch_profiler.measure.verification import agreement

    conv = WINOGRAD
    _, kind, x_type, k_type, out_type, strides, dilations = conv
    shapes = [tuple(int(d) for d in t[len("tensor<"):].split("x")[:-1])
              for t in (x_type, k_type, out_type)]
    rng = np.random.default_rng(1)
    x, k, init = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    rewritten, count = rewrites.winograd(filter_global(
        "k", f'dense<"0x{k.tobytes().hex().upper()}">', conv))
    assert count == 1 and "util.initializer" in rewritten
    transformed = f"8x8x{shapes[0][1]}x{shapes[1][0]}xf32"
    wanted = reference(kind, x, k, init, strides, dilations).astype(np.float32)
    inputs = saved(tmp_path, [x, init])
    transform = re.search(r"  %\S+ = iree_linalg_ext.winograd.filter_transform.*\n", rewritten)
    assert transform
    stored = re.search(r"util.global.store (%\S+),", rewritten)
    empty = re.search(rf"(%\S+) = tensor.empty\(\) : tensor<{transformed}>", rewritten)
    assert stored and empty
    # the initializer stores the transform's empty output instead of the transform
    dropped = rewritten.replace(transform.group(0), "").replace(
        f"util.global.store {stored.group(1)},", f"util.global.store {empty.group(1)},")
    results = {}
    for label, source in (("hoisted", rewritten), ("dropped", dropped)):
        output = tmp_path / f"{label}.npy"
        ran = run_module(tools, build(tools, source, tmp_path / label), "main", "local-task",
                         inputs, [output], 300)
        assert ran.ok, ran.reason
        results[label] = agreement(np.load(output), wanted)
    assert results["hoisted"].ok, results["hoisted"].detail
    assert not results["dropped"].ok


@pytest.mark.iree
def test_a_depthwise_model_is_tuned_on_its_rewritten_source_which_the_answer_ships(tmp_path):
    """autotune.py --model on an NCHW depthwise block: the rewrite verifies, is faster than
    IREE's default (IREE's depthwise is scalar code) and is adopted; the flags are measured
    against it, the answer's compile script compiles the rewritten source, and IREE's data
    tiling beside it is of the model itself. A rerun reads the record back."""
    output = tmp_path / "dw.csv"
    args = ["autotune.py", "--input", DEPTHWISE_MODEL, "--model", "--output", output,
            "--n-trial", "1", "--top", "1", "--tuner", "random", "--flags=--iree-opt-level=O2",
            *QUICK]
    result = run_script(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    record = pd.read_csv(tmp_path / "dw_rewrites.csv", keep_default_na=False)
    assert list(record["name"]) == ["depthwise_taps"] and list(record["status"]) == ["ok"]
    assert record["speedup_ci_low"][0] > 1 and record["chosen"][0] == "yes"
    source = tmp_path / "dw_source.mlir"
    assert "depthwise_conv" not in source.read_text()
    assert "against IREE's default on the rewritten source" in result.stdout
    assert "Source: rewritten by depthwise_taps (dw_source.mlir)" in result.stdout
    script = (tmp_path / "dw_compile.sh").read_text()
    assert str(source) in script
    # the answer's whole call timed under SCHED_BATCH, with local-task's workers unpinned and
    # on local-sync too (iree-benchmark-module takes each: a way it refused has no line); the
    # run command uses the faster, where one was
    runtime = [line for line in result.stdout.splitlines() if line.startswith("Runtime: ")]
    unpinned = f"--task_topology_group_count={len(os.sched_getaffinity(0))}"
    assert len(runtime) == 3 and "under SCHED_BATCH" in runtime[0], runtime
    assert f"with {unpinned}" in runtime[1] and "on local-sync" in runtime[2]
    assert ("run it with `chrt --batch 0`" in runtime[0]) == ("_=2147483647 chrt --batch 0 "
                                                             "iree-run-module" in script)
    # run as timed: with the heap kept, whose settings come first on the run line
    assert "#   MALLOC_MMAP_THRESHOLD_=2147483647 MALLOC_TRIM_THRESHOLD_=2147483647 " in script
    assert (f"run it with `{unpinned}`" in runtime[1]) == (f"{unpinned} --input" in script)
    assert ("run it with `--device=local-sync`" in runtime[2]) == ("--device=local-sync" in script)
    # the script compiles the answer, and its run line runs it with the workers unpinned
    from iree_dispatch_profiler.iree.tools import IreeTools
    from iree_dispatch_profiler.tuning.model import final

    # (iree-run-module refuses a flag it does not know, where iree-benchmark-module ignores it)
    tools = IreeTools.locate()
    commands = [shlex.split(line.lstrip("# ")) for line in script.splitlines()
                if "iree-compile" in line or "iree-run-module" in line]
    built = subprocess.run([str(tools.compile), *commands[0][1:]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    run = commands[-1][commands[-1].index("iree-run-module") + 1:]
    ran = subprocess.run([str(tools.run_module), "--device=local-task",
                          *(a for a in run if not a.startswith(("--device=", "--task_"))),
                          *final.unpinned_workers()], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    data_tiling = (tmp_path / "dw_work" / "model_data_tiling.compile.log").read_text()
    assert "--iree-opt-data-tiling" in data_tiling and source.name not in data_tiling
    again = run_script(*args)
    assert again.returncode == 0 and f"Rewrites from {tmp_path / 'dw_rewrites.csv'}" in again.stdout


@pytest.mark.iree
def test_a_grouped_models_taps_are_tuned_inside_the_model(tmp_path, tools):
    """autotune.py --model on a ResNeXt-style block exported from PyTorch (a 3x3 conv of 4
    groups between 1x1 convs), rewritten by grouped_taps: its sum of contractions is a target
    tuned inside the model, and each trial's spec replaces the config the rewrite put on the op
    (IREE's dumped config is the trial's: a trial whose config was not applied is a failed
    one). The rewrite is applied here, not left to the model search. --dispatches picks the
    target: its 15 us against the 1x1 convs' 10 us is no ranking a loaded machine keeps (a CI
    run tuned a 1x1 conv instead), a rerun naming another takes that one, and a pattern that
    finds only an untunable copy is an error."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.process import run
    from iree_dispatch_profiler.ops import cpu_tiles

    source = tmp_path / "grouped_taps.mlir"  # rewritten where the model search rewrites: lowered
    lowered = run([str(tools.compile), str(DATA_DIR / "grouped_block_torch.mlir"),
                   "--compile-to=input", "-o", str(source)], timeout=120)
    assert lowered.ok, lowered.stderr
    cpu = host_cpu(tools)
    text, count = rewrites.grouped_taps(source.read_text(), cpu)
    assert count == 1
    source.write_text(text)
    output = tmp_path / "g.csv"
    common = ["autotune.py", "--input", source, "--model", "--rewrites", "none", "--output",
              output, "--flags=--iree-opt-level=O2", *QUICK_MODEL]
    one_line_error(run_script(*common, "--list", "--dispatches", "memcpy"),
                   "--dispatches=memcpy selects no tunable dispatch of the model's 6: "
                   "main$async_dispatch_2_slow_memcpy not tunable")
    result = run_script(*common, "--dispatches", "_reduction_", "--n-trial", "3", "--tuner", "random")
    assert result.returncode == 0, result.stdout + result.stderr
    # 16 rows of 16, padded to 32 columns (grouped_taps' flattened rows)
    tuned = re.findall(r"^target (\d+): (.*) in \S+_reduction_", result.stdout, re.M)
    assert len(tuned) == 1 and tuned[0][1].startswith("linalg.generic batch=4 m=8 n=512 k=8 ")
    # the 1x1 convs are not (the one target's line may come twice: a CI run printed it so)
    assert set(re.findall(r"^target (\d+):", result.stdout, re.M)) == {tuned[0][0]}
    trials = pd.read_csv(output)
    trials = trials[trials["op"] == int(tuned[0][0])]
    assert len(trials) == 3 and (trials["status"] == "ok").all()
    # the trials of another config than the rewrite's own (8 filters by 8 vectors, 4 by a
    # vector) replaced it
    lanes = cpu_tiles.lanes(cpu, cpu_tiles.DataType.parse("f32"))
    own = (trials[["tile_m", "tile_n", "vector_m", "vector_n"]] == [8, 8 * lanes, 4, lanes]).all(axis=1)
    assert (~own).sum() >= 2 and (trials["config_applied"] == "yes").all()
    # a rerun naming another dispatch tunes that one: the ranking it resumes from chooses again
    again = run_script(*common, "--dispatches", "matmul_like_32x256x32", "--n-trial", "1",
                       "--tuner", "random")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Dispatch ranking from" in again.stdout
    assert re.findall(r"^target \d+: .* in (\S+):", again.stdout, re.M) == [
        "main$async_dispatch_5_matmul_like_32x256x32_f32"]


@pytest.mark.iree
def test_a_rewrite_whose_outputs_differ_is_a_row_and_not_adopted(tmp_path, monkeypatch):
    """A rewrite that changes the numbers (one tap subtracted) fails the verification against
    IREE's default: recorded with its reason, and the model's own source stays. The right one
    is then adopted, and a flag set measured on the rewritten source does not take the place
    of IREE's data tiling of the model (same set name, different module). The flag the right
    one needs (here ukernels off, as packed_matmuls's) comes last on every build of the
    rewritten source, overriding the set's, on none of the model's own, and in the answer.
    Run in-process from the tuner's own phases, with the wrong rewrite in the registry first."""
    from iree_dispatch_profiler.cli import autotune
    from iree_dispatch_profiler.core.library import NO_UKERNELS, UKERNELS
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning import model
    from iree_dispatch_profiler.tuning.model import final, flag_search, rewrite_search, verdict

    def wrong(text):
        rewritten, count = rewrites.depthwise_taps(text)
        return rewritten.replace("arith.addf", "arith.subf", 1), count

    real = rewrites.REWRITES
    monkeypatch.setattr(rewrites, "REWRITES", (rewrites.Rewrite("wrong_taps", "a test", wrong),))
    args = autotune.parser().parse_args([
        "--input", str(DEPTHWISE_MODEL), "--model", "--output", str(tmp_path / "dw.csv"), *QUICK_MODEL])
    s = autotune.settings(args)
    tuner, cpu = model.start(s, autotune.prepare(args, s))
    given = s.input
    roots = model.baseline(tuner)
    assert rewrite_search.search_rewrites(tuner, roots, cpu) is roots
    record = pd.read_csv(tmp_path / "dw_rewrites.csv", keep_default_na=False)
    assert list(record["status"]) == ["wrong-result"] and list(record["chosen"]) == ["no"]
    assert "outputs differ from IREE's default" in record["reason"][0]
    assert s.input == given and not tuner.rewrite and tuner.default is tuner.iree_default
    assert not (tmp_path / "dw_source.mlir").exists()

    # the right one, needing a flag (as packed_matmuls needs ukernels off) that must then
    # override a flag set's
    (taps,) = [r for r in real if r.name == "depthwise_taps"]
    monkeypatch.setattr(rewrites, "REWRITES", (dataclasses.replace(taps, flags=(NO_UKERNELS,)),))
    (tmp_path / "dw_rewrites.csv").unlink()
    assert rewrite_search.search_rewrites(tuner, roots, cpu) is not roots
    assert s.input == tmp_path / "dw_source.mlir" and tuner.default.name == "default"
    assert tuner.source_flags == [NO_UKERNELS]
    data_tiling = curated("data_tiling")
    _, built = flag_search.measure_round(tuner, [data_tiling])
    own = tuner.data_tiling_build()
    assert built["data_tiling"][0].vmfb != own.vmfb
    log = tmp_path / "dw_work"
    rewritten = (log / "source_data_tiling.compile.log").read_text().splitlines()[0]
    assert "dw_source" in rewritten
    assert rewritten.index(UKERNELS) < rewritten.index(NO_UKERNELS)  # the last one holds
    mine = (log / "model_data_tiling.compile.log").read_text().splitlines()[0]
    assert "dw_source" not in mine and NO_UKERNELS not in mine
    # and the answer ships the rewrite's flags, after the flag set's
    answer = final.ModelResult(None, data_tiling, [], None, None, None, None, None, {}, {}, {},
                               source="depthwise_taps", source_flags=[NO_UKERNELS])
    assert verdict.answer_flags(answer) == [*data_tiling.args, NO_UKERNELS]
    assert verdict.source_lines(answer) == [
        f"Source: rewritten by depthwise_taps: the answer compiles it, with `{NO_UKERNELS}`"]


# a small conv of each kind a rewrite takes, as the named op PyTorch's export makes
NAMED = {"depthwise_taps": ("dw", "nchw", "tensor<1x32x18x18xf32>", "tensor<32x3x3xf32>",
                            "tensor<1x32x16x16xf32>", (1, 1), (1, 1)),
         "grouped_im2col": ("gc", "grouped", "tensor<1x8x8x33x33xf32>", "tensor<8x8x8x3x3xf32>",
                            "tensor<1x8x8x16x16xf32>", (2, 2), (1, 1)),
         # of one image: IREE folds a unit loop, and a config on it with it, where the rewrite
         # writes the op without one
         "grouped_taps": ("gt", "grouped", "tensor<1x8x8x18x18xf32>", "tensor<8x8x8x3x3xf32>",
                          "tensor<1x8x8x16x16xf32>", (1, 1), (1, 1))}


@pytest.mark.iree
@pytest.mark.parametrize("rewrite", list(NAMED))
@pytest.mark.parametrize("cpu, triple, vector", [
    ("haswell", "x86_64-unknown-linux-gnu", "ymm"),
    ("skylake-avx512", "x86_64-unknown-linux-gnu", "zmm"),
    ("neoverse-n1", "aarch64-unknown-linux-gnu", r"\.4s")])
def test_the_rewritten_conv_is_vector_code_on_every_simd_family(tools, tmp_path, cpu, triple,
                                                                vector, rewrite):
    """Why the rewrites exist, on each SIMD family, cross-compiled: IREE's code for the named
    NCHW depthwise or grouped conv multiplies one float at a time, the rewritten conv's whole
    vectors (the assembly IREE dumps). grouped_taps' op of one image keeps the config the
    rewrite gives it for the family (IREE's own is scalar code on x86)."""
    named = module([NAMED[rewrite]])
    vector_multiplies = {}
    for name, text in (("named", named), ("rewritten", rewritten(rewrite, named,
                                                                  FAMILIES[cpu][0])[0])):
        dump = tmp_path / f"{name}_dump"
        build(tools, text, tmp_path / name, cpu, triple,
              (f"--iree-hal-dump-executable-intermediates-to={dump}",
               f"--iree-hal-dump-executable-benchmarks-to={dump}"))
        if rewrite == "grouped_taps" and name == "rewritten":  # 8 filters by 8 vectors
            lanes = 8 if cpu == "haswell" else 16 if cpu == "skylake-avx512" else 4
            assert (f"distribution = [1, 8, {8 * lanes}, 0], vector_common_parallel = "
                    f"[1, 4, {lanes}, 0]") in "".join(p.read_text() for p in dump.glob("*.mlir"))
        assembly = "\n".join(p.read_text() for p in dump.glob("*.s"))
        lines = [line for line in assembly.splitlines()
                 if re.search(r"\b(v?mul[ps]s|vfmadd\w*[ps]s|fmul|fmla)\b", line)]
        assert lines, f"no float multiply in {name}'s assembly for {cpu}"
        vector_multiplies[name] = [line for line in lines if re.search(vector, line)]
    assert vector_multiplies["rewritten"] and not vector_multiplies["named"]


# each SIMD family's CPU, and packed_matmuls's register tile (M0, N0) on it for the 64, 128 and
# 256 rows of these tests' matmuls (AVX-512's 12-row tile would pad them: it takes 8 rows)
FAMILIES = {"haswell": (AVX2, (6, 16)), "skylake-avx512": (AVX512, (8, 32)),
            "neoverse-n1": (NEON, (12, 8))}


@pytest.mark.iree
def test_winograd_of_a_padded_conv_compiles_under_channels_last(tools, tmp_path):
    """PyTorch's 3x3 conv of padding 1 (a tensor.pad of zeros into the conv) after a 1x1
    conv, its 10x10 image made 2x2 whole tiles (14x14) with more zeros, rewritten and compiled
    under the channels_last flag set, gives numpy's numbers: IREE 3.13 folded the zeros as an
    earlier version wrote them (an insert_slice of the transposed pad into zeros) into an
    invalid insert_slice, and ResNet's rewritten stage failed to compile."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module
    from iree_dispatch_profiler.measure.verification import agreement

    x_type, padded = "tensor<1x16x10x10xf32>", "tensor<1x16x12x12xf32>"
    k_type, out_type = "tensor<24x16x3x3xf32>", "tensor<1x24x10x10xf32>"
    w_type = "tensor<16x16x1x1xf32>"
    text, count = rewrites.winograd(
        f"func.func @main(%x: {x_type}, %w1: {w_type}, %k: {k_type}, %o: {out_type}) -> "
        f"{out_type} {{\n"
        f"  %zero = arith.constant 0.0 : f32\n"
        f"  %e = tensor.empty() : {x_type}\n"
        f"  %z = linalg.fill ins(%zero : f32) outs(%e : {x_type}) -> {x_type}\n"
        f"  %y = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : vector<2xi64>, "
        f"strides = dense<1> : vector<2xi64>}} ins(%x, %w1 : {x_type}, {w_type}) "
        f"outs(%z : {x_type}) -> {x_type}\n"
        f"  %p = tensor.pad %y low[0, 0, 1, 1] high[0, 0, 1, 1] {{\n"
        f"  ^bb0(%i: index, %j: index, %h: index, %w: index):\n"
        f"    tensor.yield %zero : f32\n"
        f"  }} : {x_type} to {padded}\n"
        f"  %c = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : vector<2xi64>, "
        f"strides = dense<1> : vector<2xi64>}} ins(%p, %k : {padded}, {k_type}) "
        f"outs(%o : {out_type}) -> {out_type}\n"
        f"  return %c : {out_type}\n}}\n")
    assert count == 1
    channels_last = curated("channels_last")
    rng = np.random.default_rng(2)
    x, w, k, init = (rng.standard_normal(s).astype(np.float32)
                     for s in ((1, 16, 10, 10), (16, 16, 1, 1), (24, 16, 3, 3), (1, 24, 10, 10)))
    y = np.einsum("nchw,fc->nfhw", x, w[:, :, 0, 0])
    wanted = reference("fchw", np.pad(y, ((0, 0), (0, 0), (1, 1), (1, 1))), k, init, (1, 1),
                       (1, 1)).astype(np.float32)
    inputs = saved(tmp_path, [x, w, k, init])
    vmfb = build(tools, text, tmp_path / "padded", flags=tuple(channels_last.args))
    output = tmp_path / "out.npy"
    ran = run_module(tools, vmfb, "main", "local-task", inputs, [output], 300)
    assert ran.ok, ran.reason
    result = agreement(np.load(output), wanted)
    assert result.ok, result.detail


# channels enough for the transforms' vectors on every family
WINOGRAD_WIDE = ("wide", "fchw", "tensor<1x128x14x14xf32>", "tensor<16x128x3x3xf32>",
                 "tensor<1x16x12x12xf32>", (1, 1), (1, 1))


def rewritten_module(rewrite: str, cpu: str) -> tuple[str, list[str]]:
    """A module `rewrite` took for `cpu` (of FAMILIES), and the flags the tuner ships it with:
    Winograd's conv of 128 channels, its filter a parameter transformed in an initializer;
    a decode step's attention written out over its cache, with a Linear data-tiled; the causal
    attention in blocks, decomposed and data-tiled (4 blocks of 64 rows failed to compile so
    on this host); a 1-D conv's taps, and packed; a global pool, with float reductions reassociated; a Linear's matmul packed; an FFN's pair packed swapped
    into the family's register tile, with ukernels off; a patch embedding's matmul; a 3-D
    conv's taps joined; a transposed conv's phases."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning.flags import CURATED, joined
    from iree_dispatch_profiler.tuning.model.rewrite_search import flags_of

    if rewrite == "packed_matmuls":
        target, (m0, n0) = FAMILIES[cpu]
        text, count = rewrites.packed_matmuls(linears(64, 96, 256, PARAMETER, ("kxn",)), target)
        assert count == 1 and f"inner_tiles = [{m0}, {n0}]" in text
        return text, flags_of(rewrite)

    if rewrite == "packed_matmuls_swapped":  # an FFN's pair, its GELU features-major
        target, (m0, n0) = FAMILIES[cpu]
        text, count = rewrites.packed_matmuls_swapped(ffn(64, 96, 256), target)
        assert count == 2 and f"inner_tiles = [{m0}, {n0}]" in text
        return text, flags_of(rewrite)
    if rewrite == "conv1d_taps+packed_matmuls":  # a speech encoder's strided conv: its
        target, _ = FAMILIES[cpu]  # taps read into the family's tiles in place
        text, _ = rewrites.conv1d_taps(conv1d(
            "tensor<1x16x261xf32>", "tensor<64x16x3xf32>", "tensor<1x64x130xf32>", 2, 1))
        text, count = rewrites.packed_matmuls(text, target)
        assert count == 1 and "tensor.pad" in text
        return text, flags_of(rewrite)
    if rewrite == "patch_matmuls":  # IREE's own matmul, without packed_matmuls
        text, count = rewrites.patch_matmuls(module([PATCH]))
        assert count == 1
        return text, []
    if rewrite == "winograd":
        text, count = rewrites.winograd(filter_global(
            "weights.conv1", '#flow.parameter.named<"model"::"k">', WINOGRAD_WIDE))
        assert count == 1 and "util.initializer" in text
        return text, []
    if rewrite == "conv1d_taps":  # wide enough for a 512-bit vector of outputs
        text, count = rewrites.conv1d_taps(conv1d(
            "tensor<1x16x130xf32>", "tensor<64x16x3xf32>", "tensor<1x64x128xf32>", 1, 1))
        assert count == 1
        return text, []
    if rewrite == "conv3d_im2col":
        text, count = rewrites.conv3d_im2col(conv3d(1, 8, (8, 18, 18), 16, 3, (1, 1, 1),
                                                    (1, 1, 1))[0])
        assert count == 1
        return text, []
    if rewrite == "conv3d_as_conv2d":  # and then Winograd, as the rewrite search joins them
        text, count = rewrites.conv3d_as_conv2d(conv3d(1, 8, (8, 18, 18), 16, 3, (1, 1, 1),
                                                       (1, 1, 1))[0])
        text, transformed = rewrites.winograd(text)
        assert count == transformed == 1
        return text, []
    if rewrite == "conv_transpose_phases":  # a UNet's upsampling: a matmul
        text, count = rewrites.conv_transpose_phases(
            conv_transpose(1, 32, (8, 8), 16, (2, 2), (2, 2))[0])
        assert count == 1
        return text, []
    if rewrite == "depthwise_taps":  # ConvNeXt's, under the flag it ships with
        text, count = rewrites.depthwise_taps(depthwise_transposed())
        assert count == 1
        return text, list(next(r.flags for r in rewrites.REWRITES if r.name == rewrite))
    if rewrite == "conv_transpose_phases_convs":  # a GAN's 4x4 of stride 2: a conv a phase
        # under IREE's default flags: conv_data_tiling, a DCGAN's on a Zen 4, left them
        # scalar on neoverse-n1 (channels_last too)
        text, count = rewrites.conv_transpose_phases(  # each phase's rows 16 wide
            conv_transpose(1, 32, (16, 16), 16, (4, 4), (2, 2), (1, 1))[0])
        assert count == 1
        return text, []
    if rewrite == "global_pool":  # a sum: whole vectors add only with reductions reassociated
        text, count = rewrites.global_pool(adaptive_pool(h=16, w=16))
        assert count == 1
        return text, curated("reassociate_reductions").args
    if rewrite == "cache_attention":  # a decode step's, its Linear data-tiled
        text, count = rewrites.cache_attention(cached_attention(cache=256, linear=True))
        assert count == 1
        return text, curated("data_tiling_early").args
    text, count = rewrites.causal_blocks(attention())
    assert count == 1
    (tuned,) = joined("decompose_attention", ["data_tiling_early"], list(CURATED))
    return text, tuned.args


@pytest.mark.iree
@pytest.mark.parametrize("rewrite", ["winograd", "causal_blocks", "conv1d_taps", "global_pool",
                                     "packed_matmuls", "patch_matmuls", "cache_attention",
                                     "conv3d_im2col", "conv3d_as_conv2d",
                                     "conv_transpose_phases", "conv_transpose_phases_convs",
                                     "depthwise_taps", "conv1d_taps+packed_matmuls",
                                     "packed_matmuls_swapped"])
@pytest.mark.parametrize("cpu, triple, vector", [
    ("haswell", "x86_64-unknown-linux-gnu", "ymm"),
    ("skylake-avx512", "x86_64-unknown-linux-gnu", "zmm"),
    ("neoverse-n1", "aarch64-unknown-linux-gnu", r"\.4s")])
def test_rewritten_modules_compile_to_vector_code_on_every_simd_family(tools, tmp_path, cpu,
                                                                        triple, vector, rewrite):
    """A rewritten module (under the flags it ships with), cross-compiled for each SIMD family:
    it compiles, and its code multiplies (a pool: adds) whole vectors of the family's width (the
    assembly IREE dumps; an NCHW conv's, at least 256 bits on AVX-512), not only on the
    machine the tests run on."""
    text, flags = rewritten_module(rewrite, cpu)
    if rewrite == "conv_transpose_phases_convs":  # IREE tiles an NCHW conv's row 8 wide
        vector = vector.replace("zmm", "[yz]mm")
    dump = tmp_path / "dump"
    build(tools, text, tmp_path / rewrite, cpu, triple,
          (*flags, f"--iree-hal-dump-executable-intermediates-to={dump}"))
    assembly = "\n".join(p.read_text() for p in dump.glob("*.s"))
    arithmetic = (r"\b(v?add[ps]s|fadd)\b" if rewrite == "global_pool"
                  else r"\b(v?mul[ps]s|vfmadd\w*[ps]s|fmul|fmla)\b")
    found = [line for line in assembly.splitlines()
             if re.search(arithmetic, line) and re.search(vector, line)]
    assert found, f"no {vector} arithmetic in the {rewrite} module's assembly for {cpu}"


@pytest.mark.iree
def test_causal_blocks_compute_numpys_causal_attention(tools, tmp_path):
    """The causal attention in 4 blocks of queries (512 rows), compiled and run by IREE, gives
    numpy's softmax(Q K^T scale + causal mask) V; with the mask's condition reversed (the
    earlier keys masked instead), it does not."""
    from iree_dispatch_profiler.iree import rewrites

    text, count = rewrites.causal_blocks(attention(rows=512))
    assert count == 1 and text.count("iree_linalg_ext.attention") == 4
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 512, 16)).astype(np.float32) for _ in range(3))
    scores = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k) * 0.25
    scores[:, np.triu_indices(512, 1)[0], np.triu_indices(512, 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    wanted = np.einsum("bqk,bkd->bqd", weights / weights.sum(-1, keepdims=True), v)
    results = agreements(tools, tmp_path, (q, k, v), {
        "blocks": text, "reversed": text.replace("arith.cmpi sge", "arith.cmpi sle")}, wanted)
    assert results["blocks"].ok, results["blocks"].detail
    assert not results["reversed"].ok


def cached_attention(queries: int = 1, cache: int = 40, values: tuple[int, int] | None = None,
                     linear: bool = False, masked: bool = False, heads: int = 2,
                     dim: int = 16, groups: int = 1) -> str:
    """A decode step's attention as iree-turbine exports one: K the cache (1 x heads x `cache`
    x dim) joined with the step's one key, V the `values` pieces (the same unless given)
    joined along the keys, each collapsed to the heads; `queries` queries. With `linear`, the
    output goes on through a batch matmul by a weight argument (a Linear); with `masked`, the
    attention adds a float mask argument (heads x queries x keys) to its scores; with
    `groups`, the cache holds heads / groups KV heads, each repeated for `groups` query heads
    (repeat_interleave: a copy into 1 x KV heads x groups x keys x dim, collapsed)."""
    kv_heads = heads // groups

    def piece(n: int) -> str:
        return f"tensor<1x{kv_heads}x{n}x{dim}xf32>"

    def join(name: str, first: int, second: int) -> str:
        keys = first + second
        whole = f"1x{kv_heads}x{keys}x{dim}"
        text = (f"  %{name}4 = tensor.concat dim(2) %{name}c, %{name}n : ({piece(first)}, "
                f"{piece(second)}) -> tensor<{whole}xf32>\n")
        if groups > 1:
            wide = f"tensor<1x{kv_heads}x{groups}x{keys}x{dim}xf32>"
            text += (f"""  %{name}e = tensor.empty() : {wide}
  %{name}5 = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>,
      affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}}
      ins(%{name}4 : tensor<{whole}xf32>) outs(%{name}e : {wide}) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> {wide}
  %{name}6 = tensor.collapse_shape %{name}5 [[0], [1, 2], [3], [4]] : {wide} into tensor<1x{heads}x{keys}x{dim}xf32>
""")
            whole, joined = f"1x{heads}x{keys}x{dim}", f"%{name}6"
        else:
            joined = f"%{name}4"
        return text + (f"  %{name} = tensor.collapse_shape {joined} [[0, 1], [2], [3]] : "
                       f"tensor<{whole}xf32> into tensor<{heads}x{keys}x{dim}xf32>\n")
    values = values or (cache, 1)
    q = f"tensor<{heads}x{queries}x{dim}xf32>"
    kt = f"tensor<{heads}x{cache + 1}x{dim}xf32>"
    m = f"tensor<{heads}x{queries}x{cache + 1}xf32>"
    maps = ", ".join(f"affine_map<(d0, d1, d2, d3, d4) -> ({r})>" for r in
                     ("d0, d1, d3", "d0, d4, d3", "d0, d4, d2", "",
                      *(["d0, d1, d4"] if masked else []), "d0, d1, d2"))
    out = f"tensor<{heads}x{queries}x32xf32>" if linear else q
    tail = (f"""  %e = tensor.empty() : {out}
  %zero = arith.constant 0.0 : f32
  %z = linalg.fill ins(%zero : f32) outs(%e : {out}) -> {out}
  %y = linalg.batch_matmul ins(%r, %w : {q}, tensor<{heads}x{dim}x32xf32>) outs(%z : {out}) -> {out}
  return %y : {out}""" if linear else f"  return %r : {q}")
    weight = (f", %w: tensor<{heads}x{dim}x32xf32>" if linear else "") + (
        f", %m: {m}" if masked else "")
    mask, mask_type = (", %m", f", {m}") if masked else ("", "")
    return f"""func.func @main(%q: {q}, %kc: {piece(cache)}, %kn: {piece(1)}, %vc: {piece(values[0])}, %vn: {piece(values[1])}{weight}) -> {out} {{
  %scale = arith.constant 0.25 : f32
{join("k", cache, 1)}{join("v", *values)}  %o = tensor.empty() : {q}
  %r = iree_linalg_ext.attention <{{indexing_maps = [{maps}]}}>
      ins(%q, %k, %v, %scale{mask} : {q}, {kt}, {kt}, f32{mask_type}) outs(%o : {q}) {{
  ^bb0(%score: f32):
    iree_linalg_ext.yield %score : f32
  }} -> {q}
{tail}
}}
"""


def test_cache_attention_takes_attention_over_keys_joined_from_pieces_only():
    """An attention of few queries whose K and V are each joined from pieces of the same sizes
    along the keys becomes its softmax written out over the pieces, and the model's matmuls
    are marked for data tiling (with a mask too); more queries than CACHE_MAX_QUERIES, or K
    and V joined from pieces of other sizes, are left as they are, as is a causal attention
    over keys not joined."""
    from iree_dispatch_profiler.iree import rewrites

    for queries, linear, masked in ((1, False, False), (rewrites.CACHE_MAX_QUERIES, False, False),
                                    (1, True, False), (2, False, True)):
        taken = cached_attention(queries, linear=linear, masked=masked)
        text, count = rewrites.cache_attention(taken)
        assert count == 1 and "iree_linalg_ext.attention" not in text
        # each piece's scores read the piece itself: 40 keys, then 1
        assert f"tensor<2x{queries}x40xf32>" in text and f"tensor<2x{queries}x1xf32>" in text
        assert text.count(rewrites.DATA_TILING_HINT) == taken.count("linalg.batch_matmul")
    # grouped KV heads: the loops run over 2 KV heads x 4 query heads each, the cache read in
    # place (not repeated: no copy of 40 keys into the groups)
    text, count = rewrites.cache_attention(cached_attention(heads=8, groups=4))
    assert count == 1 and "tensor<1x2x4x1x40xf32>" in text
    assert "tensor<1x2x4x40x16xf32>" not in text  # (the source's own repeat: 41 keys)
    for other in (cached_attention(queries=rewrites.CACHE_MAX_QUERIES + 1),
                  cached_attention(values=(39, 2)), attention()):
        assert rewrites.cache_attention(other) == (other, 0)


@pytest.mark.iree
@pytest.mark.parametrize("heads, groups", [(2, 1), (8, 4)])
def test_cache_attention_computes_numpys_attention_over_the_joined_keys(tools, tmp_path, heads,
                                                                         groups):
    """The attention written out over the cache and the step's key (each KV head shared by
    `groups` query heads), compiled and run by IREE, gives numpy's softmax(Q K^T scale + mask)
    V over all 41 keys (the mask hiding the first ten, and the step's own key for the first
    query); with its last division a product instead, or the mask's columns of each piece
    taken from the start, it does not."""
    from iree_dispatch_profiler.iree import rewrites

    text, count = rewrites.cache_attention(cached_attention(queries=3, masked=True, heads=heads,
                                                            groups=groups))
    assert count == 1
    rng = np.random.default_rng(3)
    q = rng.standard_normal((heads, 3, 16)).astype(np.float32)
    kc, kn, vc, vn = (rng.standard_normal((1, heads // groups, n, 16)).astype(np.float32)
                      for n in (40, 1, 40, 1))
    mask = np.zeros((heads, 3, 41), np.float32)
    mask[:, :, :10] = mask[:, 0, 40] = -np.inf
    k, v = (np.repeat(np.concatenate(pair, axis=2)[0], groups, axis=0).astype(np.float64)
            for pair in ((kc, kn), (vc, vn)))
    scores = np.einsum("hqd,hkd->hqk", q, k) * 0.25 + mask
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    wanted = np.einsum("hqk,hkd->hqd", weights / weights.sum(-1, keepdims=True), v)
    columns = re.search(r"\[0, 0(, 0)*, 40\] \[[0-9, ]*1\]", text)
    assert columns is not None
    results = agreements(tools, tmp_path, (q, kc, kn, vc, vn, mask), {
        "written": text, "multiplied": text.replace("arith.divf", "arith.mulf"),
        "from_start": text.replace(columns.group(0), columns.group(0).replace("40]", "0]"))},
        wanted)
    assert results["written"].ok, results["written"].detail
    assert not results["multiplied"].ok and not results["from_start"].ok


@pytest.mark.iree
def test_cache_attention_keeps_the_cache_out_of_data_tiling_and_the_linear_in(tools, tmp_path):
    """Under data tiling and the attention decomposed (the flags a decode step was tuned to),
    the model's own attention packs the joined K and V (41 keys) every call; rewritten,
    nothing of the keys is packed, and the Linear's weight still is."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning.flags import CURATED, joined

    (tuned,) = joined("decompose_attention", ["data_tiling_early"], list(CURATED))
    source = cached_attention(linear=True)
    text, count = rewrites.cache_attention(source)
    assert count == 1
    packed = {name: packed_types(tools, module_text, tmp_path / name, tuned.args)
              for name, module_text in (("own", source), ("rewritten", text))}
    assert "tensor<2x16x32xf32>" in packed["own"] & packed["rewritten"]  # the weight
    assert any("x41x" in t for t in packed["own"])
    assert not any("x41x" in t or "x40x" in t for t in packed["rewritten"]), packed["rewritten"]


def adaptive_pool(n: int = 2, c: int = 8, h: int = 5, w: int = 7, bound: int | None = None,
                  low: int = 0, combine: str = "arith.addf") -> str:
    """PyTorch's adaptive_avg_pool2d to 1x1 (or adaptive max pool: `combine` arith.maximumf,
    no division) as torch-mlir lowers it: a padded copy of the input, and a generic over the
    window (an empty i1 tensor) that gathers each element with tensor.extract under guards
    against the input's extent (`bound`: another one), counting the window beside."""
    bound = (h, w) if bound is None else (bound, bound)
    padded = f"tensor<{n}x{c}x{h + 1 + low}x{w + 1 + low}xf32>"
    index0 = "%i0 = linalg.index 0 : index" if n > 1 else "%i0 = arith.constant 0 : index"
    average = combine == "arith.addf"
    out = f"tensor<{n}x{c}x1x1xf32>"
    divided = f"""
  %mean = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d2, d3)>,
      affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins(%pool#1 : tensor<1x1xf32>) outs(%pool#0 : {out}) {{
  ^bb0(%in: f32, %o: f32):
    %d = arith.divf %o, %in : f32
    linalg.yield %d : f32
  }} -> {out}
  return %mean : {out}""" if average else f"\n  return %pool#0 : {out}"
    start = "0.0" if average else "-3.40282347E+38"
    return f"""func.func @main(%x: tensor<{n}x{c}x{h}x{w}xf32>) -> {out} {{
  %zero = arith.constant 0.0 : f32
  %start = arith.constant {start} : f32
  %count = arith.constant {float(h * w)} : f32
  %hb = arith.constant {bound[0]} : index
  %wb = arith.constant {bound[1]} : index
  %padded = tensor.pad %x low[0, 0, {low}, {low}] high[0, 0, 1, 1] {{
  ^bb0(%a: index, %b: index, %e: index, %f: index):
    tensor.yield %zero : f32
  }} : tensor<{n}x{c}x{h}x{w}xf32> to {padded}
  %window = tensor.empty() : tensor<{h}x{w}xi1>
  %e0 = tensor.empty() : {out}
  %init = linalg.fill ins(%start : f32) outs(%e0 : {out}) -> {out}
  %e1 = tensor.empty() : tensor<1x1xf32>
  %pool:2 = linalg.generic {{indexing_maps = [
      affine_map<(d0, d1, d2, d3, d4, d5) -> (d4, d5)>,
      affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>,
      affine_map<(d0, d1, d2, d3, d4, d5) -> (d2, d3)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}}
      ins(%window : tensor<{h}x{w}xi1>) outs(%init, %e1 : {out}, tensor<1x1xf32>) {{
  ^bb0(%in: i1, %o: f32, %k: f32):
    {index0}
    %i1 = linalg.index 1 : index
    %i4 = linalg.index 4 : index
    %i5 = linalg.index 5 : index
    %v = tensor.extract %padded[%i0, %i1, %i4, %i5] : {padded}
    %ch = arith.cmpi ult, %i4, %hb : index
    %s0 = arith.select %ch, %v, %zero : f32
    %cw = arith.cmpi ult, %i5, %wb : index
    %s1 = arith.select %cw, %s0, %zero : f32
    %t = {combine} %s1, %o : f32
    linalg.yield %t, %count : f32, f32
  }} -> ({out}, tensor<1x1xf32>){divided}
}}
"""


def test_global_pool_takes_torch_mlirs_global_pooling_only():
    """The adaptive pool to 1x1 (average or max, batch 1 or 2) is rewritten to read its input
    in place, with no gather left; a guard that masks part of the window, a pad before the
    input, a window that is not the whole input, a second result that is not a constant
    count, or loops other than torch-mlir's leave it alone."""
    from iree_dispatch_profiler.iree import rewrites

    for text in (adaptive_pool(), adaptive_pool(n=1), adaptive_pool(combine="arith.maximumf")):
        rewritten, count = rewrites.global_pool(text)
        assert count == 1 and "tensor.extract" not in rewritten
        assert "affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4, d5)>" in rewritten
    for text in (adaptive_pool(bound=4), adaptive_pool(low=1),
                 adaptive_pool().replace("tensor<5x7xi1>", "tensor<5x6xi1>"),
                 adaptive_pool().replace("linalg.yield %t, %count", "linalg.yield %t, %k"),
                 adaptive_pool().replace("linalg.yield %t, %count",
                                         "%c = arith.constant 1.0 : f32\n    linalg.yield %t, %c"),
                 adaptive_pool(w=5).replace("-> (d4, d5)>", "-> (d5, d4)>")):
        assert rewrites.global_pool(text) == (text, 0)


@pytest.mark.iree
@pytest.mark.parametrize("combine", ["arith.addf", "arith.maximumf"])
def test_the_rewritten_global_pool_computes_numpys_numbers(tools, tmp_path, combine):
    """IREE runs the rewritten pool to numpy's mean (max) over each channel's plane; with its
    combine turned around (a difference, a min), it does not."""
    from iree_dispatch_profiler.iree import rewrites

    x = np.random.default_rng(0).standard_normal((2, 8, 5, 7)).astype(np.float32)
    wanted = (x.mean if combine == "arith.addf" else x.max)(axis=(2, 3), keepdims=True)
    text, count = rewrites.global_pool(adaptive_pool(combine=combine))
    assert count == 1
    wrong = text.replace(combine, {"arith.addf": "arith.subf",
                                   "arith.maximumf": "arith.minimumf"}[combine])
    results = agreements(tools, tmp_path, (x,), {"rewritten": text, "wrong": wrong}, wanted)
    assert results["rewritten"].ok, results["rewritten"].detail
    assert not results["wrong"].ok


@pytest.mark.iree
def test_a_classifiers_adaptive_pool_is_rewritten_and_computes_the_models_numbers(tools, tmp_path):
    """A CNN classifier exported from PyTorch (tests/data/classifier_torch.mlir: batch norm,
    max pool, hardswish, adaptive average pool to 1x1, Linear, softmax), lowered as the tuner
    lowers it: global_pool takes its pool, the gather is gone, and IREE runs the rewritten
    module to the model's own outputs."""
    from iree_dispatch_profiler.core.library import Target
    from iree_dispatch_profiler.iree import modules, rewrites
    from iree_dispatch_profiler.iree.launchers import lower, run_module
    from iree_dispatch_profiler.iree.target import resolve_target
    from iree_dispatch_profiler.measure.verification import agreement

    target = resolve_target(tools, Target(cpu="host"))
    path = lower(tools, target, DATA_DIR / "classifier_torch.mlir", tmp_path, 300)
    lowered = path.read_text()
    assert "tensor.extract" in lowered
    text, count = rewrites.global_pool(lowered)
    assert count == 1 and "tensor.extract" not in text
    rng = np.random.default_rng(0)
    (signature,) = [s for s in modules.signatures(path) if s.name == "main"]
    inputs = []
    for i, shape in enumerate(t.shape for t in signature.arguments):
        array = rng.uniform(0.5, 1.5, shape).astype(np.float32)  # variances stay positive
        np.save(tmp_path / f"in{i}.npy", array)
        inputs.append(f"@{tmp_path / f'in{i}.npy'}")
    outputs = {}
    for name, source in (("model", lowered), ("rewritten", text)):
        outputs[name] = tmp_path / f"{name}.npy"
        ran = run_module(tools, build(tools, source, tmp_path / name), "main", "local-task",
                         inputs, [outputs[name]], 300)
        assert ran.ok, ran.reason
    check = agreement(np.load(outputs["rewritten"]), np.load(outputs["model"]))
    assert check.ok, check.detail


@pytest.mark.iree
def test_the_global_pools_of_1d_and_3d_conv_nets_are_rewritten_to_numpys_means(tools, tmp_path):
    """PyTorch's adaptive_avg_pool1d and adaptive_avg_pool3d to 1 (tests/data/
    adaptive_pools_torch.mlir), which torch-mlir lowers to the 2-D pool's gather over 1 and 3
    window loops: both are read in place, the gathers gone, and IREE runs them to numpy's
    means; with the window read in another order they are not rewritten."""
    from iree_dispatch_profiler.core.library import Target
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import lower, run_module
    from iree_dispatch_profiler.iree.target import resolve_target
    from iree_dispatch_profiler.measure.verification import agreement

    target = resolve_target(tools, Target(cpu="host"))
    lowered = lower(tools, target, DATA_DIR / "adaptive_pools_torch.mlir", tmp_path, 300).read_text()
    assert lowered.count("tensor.extract") == 2
    text, count = rewrites.global_pool(lowered)
    assert count == 2 and "tensor.extract" not in text
    swapped = lowered.replace("-> (d5, d6, d7)>", "-> (d5, d7, d6)>")
    assert swapped != lowered and rewrites.global_pool(swapped)[1] == 1
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32)
              for shape in ((2, 16, 100), (1, 16, 8, 10, 12))]
    outputs = [tmp_path / f"out{i}.npy" for i in range(2)]
    ran = run_module(tools, build(tools, text, tmp_path / "pools"), "main", "local-task",
                     saved(tmp_path, arrays), outputs, 300)
    assert ran.ok, ran.reason
    for output, array in zip(outputs, arrays):
        wanted = array.mean(axis=tuple(range(2, array.ndim)), keepdims=True)
        check = agreement(np.load(output), wanted)
        assert check.ok, check.detail


def conv3d(n: int, c: int, size: tuple[int, int, int], f: int, kernel: int | tuple,
           strides: tuple[int, int, int], dilations: tuple[int, int, int]) -> tuple[str, tuple]:
    """A function of PyTorch's Conv3d as torch-mlir lowers it (NCDHW, FCDHW) into the given
    accumulator (a cubic kernel, or KD x KH x KW), and its three operands' shapes."""
    window = (kernel,) * 3 if isinstance(kernel, int) else kernel
    out = [(s - d * (k - 1) - 1) // t + 1
           for s, k, t, d in zip(size, window, strides, dilations)]
    shapes = ((n, c, *size), (f, c, *window), (n, f, *out))
    x, k, o = (f"tensor<{'x'.join(map(str, shape))}xf32>" for shape in shapes)
    window = ", ".join(f"{a} = dense<[{', '.join(map(str, v))}]> : vector<3xi64>"
                       for a, v in (("dilations", dilations), ("strides", strides)))
    return (f"func.func @main(%x: {x}, %k: {k}, %o: {o}) -> {o} {{\n"
            f"  %r = linalg.conv_3d_ncdhw_fcdhw {{{window}}} ins(%x, %k : {x}, {k}) "
            f"outs(%o : {o}) -> {o}\n  return %r : {o}\n}}\n"), shapes


def test_conv3d_rewrites_take_static_float_ncdhw_convs_of_few_taps():
    """im2col, batch 1: one matmul of the filter's rows by the joined taps; a larger batch: one
    batched contraction. As a 2-D conv: one channels-last conv whose batch is the output's
    depths and whose channels are the depth taps'. A dynamic or integer conv, or one of more
    than MAX_TAPS taps, is left alone by both."""
    from iree_dispatch_profiler.iree import rewrites

    text, shapes = conv3d(1, 4, (6, 8, 8), 8, 3, (1, 1, 1), (1, 1, 1))
    rewritten, count = rewrites.conv3d_im2col(text)
    assert count == 1 and "conv_3d" not in rewritten and "linalg.matmul" in rewritten
    assert "tensor<1x108x4x6x6xf32>" in rewritten  # 27 taps x 4 channels at each position
    rewritten, count = rewrites.conv3d_im2col(conv3d(2, 4, (6, 8, 8), 8, 3, (1, 1, 1),
                                                     (1, 1, 1))[0])
    assert count == 1 and "linalg.matmul" not in rewritten and "linalg.generic" in rewritten
    rewritten, count = rewrites.conv3d_as_conv2d(conv3d(2, 4, (6, 8, 8), 8, 3, (1, 1, 1),
                                                        (1, 1, 1))[0])
    assert count == 1 and "conv_3d" not in rewritten
    # 2 x 4 output depths, 3 depth taps x 4 channels each, into 3x3 x 12 x 8 filters
    assert ("linalg.conv_2d_nhwc_hwcf" in rewritten and "tensor<8x8x8x12xf32>" in rewritten
            and "tensor<3x3x12x8xf32>" in rewritten)
    for left in (text.replace("tensor<1x4x6x8x8xf32>", "tensor<?x4x6x8x8xf32>"),
                 text.replace("f32", "i32"),
                 conv3d(1, 2, (8, 8, 8), 4, 5, (1, 1, 1), (1, 1, 1))[0]):  # 125 taps
        for rewrite in (rewrites.conv3d_im2col, rewrites.conv3d_as_conv2d):
            assert rewrite(left) == (left, 0)
    # a temporal conv, 1x1 across the image: a matmul for conv3d_im2col, not a 1x1 2-D conv
    temporal = conv3d(1, 4, (6, 8, 8), 8, (3, 1, 1), (1, 1, 1), (1, 1, 1))[0]
    assert rewrites.conv3d_as_conv2d(temporal) == (temporal, 0)
    assert rewrites.conv3d_im2col(temporal)[1] == 1


# rewrite, its filter reordering and that reordering turned around, channels, filters, strides,
# dilations: the 2-D conv strided and dilated in its own way; Winograd where it takes the conv
CONV3D_REWRITES = [
    ("conv3d_im2col", "[0, 2, 3, 4, 1]", "[0, 4, 3, 2, 1]", 3, 5, (2, 1, 1), (1, 2, 1)),
    ("conv3d_as_conv2d", "[3, 4, 2, 1, 0]", "[4, 3, 2, 1, 0]", 3, 5, (2, 1, 2), (1, 2, 1)),
    ("conv3d_as_conv2d+winograd", "[3, 4, 2, 1, 0]", "[4, 3, 2, 1, 0]", 6, 16, (1, 1, 1),
     (1, 1, 1))]


@pytest.mark.iree
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("rewrite, order, turned, c, f, strides, dilations", CONV3D_REWRITES,
                         ids=[r[0] for r in CONV3D_REWRITES])
def test_the_rewritten_conv3d_computes_numpys_numbers(tools, tmp_path, n, rewrite, order,
                                                       turned, c, f, strides, dilations):
    """Into a non-zero accumulator, IREE runs the rewritten conv to numpy's sum over the taps;
    with the filter's taps read in another order (its transpose turned around), it does not."""
    from iree_dispatch_profiler.iree import rewrites

    text, shapes = conv3d(n, c, (7, 9, 8), f, 3, strides, dilations)
    rewritten, count = text, 0
    for name in rewrite.split("+"):
        rewritten, done = getattr(rewrites, name)(rewritten)
        count += done
    assert count == len(rewrite.split("+"))
    wrong = rewritten.replace(f"permutation = {order}", f"permutation = {turned}")
    assert wrong != rewritten
    rng = np.random.default_rng(0)
    x, k, init = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    wanted = init.astype(np.float64)
    out = shapes[2][2:]
    for kd, kh, kw in np.ndindex(3, 3, 3):
        window = x[:, :, kd * dilations[0]:, kh * dilations[1]:, kw * dilations[2]:][
            :, :, :out[0] * strides[0]:strides[0], :out[1] * strides[1]:strides[1],
            :out[2] * strides[2]:strides[2]]
        wanted += np.einsum("ncdhw,fc->nfdhw", window, k[:, :, kd, kh, kw])
    results = agreements(tools, tmp_path, (x, k, init), {"rewritten": rewritten, "wrong": wrong},
                         wanted)
    assert results["rewritten"].ok, results["rewritten"].detail
    assert not results["wrong"].ok


CONV_OPS = {1: "conv_1d_ncw_fcw", 2: "conv_2d_nchw_fchw", 3: "conv_3d_ncdhw_fcdhw"}


def conv_transpose(n: int, c: int, size: tuple[int, ...], f: int, kernel: tuple[int, ...],
                   stride: tuple[int, ...], padding: tuple[int, ...] | None = None,
                   extra: tuple[int, ...] | None = None, dilation: tuple[int, ...] | None = None,
                   fill: str = "0.0") -> tuple[str, tuple, list[int]]:
    """A function of PyTorch's ConvTranspose1d, 2d or 3d (by len(size)) as torch-mlir lowers
    it (the input inserted `stride` apart into zeros of `fill`, then a stride-1 channels-first
    conv with its filter as given: torch-mlir's is the weight flipped), its operands' shapes
    and the input's offsets in the zeros. `extra` is PyTorch's output_padding."""
    dims = len(size)
    padding, extra, dilation = (v or (default,) * dims for v, default in
                                ((padding, 0), (extra, 0), (dilation, 1)))
    offsets = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
    stuffed = [(s - 1) * t + 1 + 2 * o + e for s, t, o, e in zip(size, stride, offsets, extra)]
    out = [z - d * (k - 1) for z, d, k in zip(stuffed, dilation, kernel)]
    shapes = ((n, c, *size), (f, c, *kernel), (n, f, *out))
    x, k, o, z = (f"tensor<{'x'.join(map(str, shape))}xf32>"
                  for shape in (*shapes, (n, c, *stuffed)))

    def listed(values) -> str:
        return ", ".join(map(str, values))
    return (f"func.func @main(%x: {x}, %k: {k}, %o: {o}) -> {o} {{\n"
            f"  %zero = arith.constant {fill} : f32\n  %e = tensor.empty() : {z}\n"
            f"  %z = linalg.fill ins(%zero : f32) outs(%e : {z}) -> {z}\n"
            f"  %s = tensor.insert_slice %x into %z[0, 0, {listed(offsets)}] [{listed(shapes[0])}]"
            f" [1, 1, {listed(stride)}] : {x} into {z}\n"
            f"  %r = linalg.{CONV_OPS[dims]} {{dilations = dense<[{listed(dilation)}]> : "
            f"vector<{dims}xi64>, strides = dense<1> : vector<{dims}xi64>}} ins(%s, %k : {z}, {k}) "
            f"outs(%o : {o}) -> {o}\n  return %r : {o}\n}}\n"), shapes, offsets


def test_conv_transpose_phases_takes_torch_mlirs_transposed_convs_only():
    """A UNet's upsampling (2x2, stride 2) becomes one matmul of the 4 phases' stacked filters
    (4 x 16 rows of 8 channels) by the input's positions; a GAN's 4x4 stride-2 (padding 1), 4
    convs of each phase's own 2x2 taps over the input, joined, as at batch 2; a vocoder's 1-D
    kernel 8 of stride 4, 4 1-D convs of 2 taps (which conv1d_taps then takes). A conv over an
    input inserted into ones, or with unit strides (a plain padded conv), or a conv strided
    itself, is left alone."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning.model import rewrite_search

    text, count = rewrites.conv_transpose_phases(conv_transpose(1, 8, (5, 6), 16, (2, 2), (2, 2))[0])
    assert count == 1 and "conv_2d" not in text and "tensor.insert_slice %x" not in text
    assert re.search(r"linalg.matmul ins\(%\S+, %\S+ : tensor<64x8xf32>, tensor<8x30xf32>\)",
                     text)
    assert "permutation = [0, 3, 4, 1, 5, 2]" in text  # the phases interleaved
    for n in (1, 2):
        text, count = rewrites.conv_transpose_phases(
            conv_transpose(n, 8, (5, 6), 16, (4, 4), (2, 2), (1, 1))[0])
        assert count == 1 and len(re.findall(
            rf"linalg.conv_2d_nchw_fchw .* ins\(%\S+, %\S+ : tensor<{n}x8x6x7xf32>, "
            rf"tensor<16x8x2x2xf32>\) outs\(%\S+ : tensor<{n}x16x5x6xf32>\)", text)) == 4
        assert f"-> tensor<{n}x64x5x6xf32>" in text  # joined
    vocoder = conv_transpose(1, 8, (50,), 16, (8,), (4,), (2,))[0]
    text, count = rewrites.conv_transpose_phases(vocoder)
    assert count == 1 and len(re.findall(r"linalg.conv_1d_ncw_fcw .* ins\(%\S+, %\S+ : "
                                         r"tensor<1x8x51xf32>, tensor<16x8x2xf32>\)", text)) == 4
    joined = rewrite_search.candidates(vocoder, AVX512)  # first in the list: conv1d_taps after
    assert any(name.startswith("conv_transpose_phases+conv1d_taps") for name in joined), joined
    ones = conv_transpose(1, 8, (5, 6), 16, (2, 2), (2, 2), fill="1.0")[0]
    unit = conv_transpose(1, 8, (5, 6), 16, (3, 3), (1, 1), (1, 1))[0]
    strided = unit.replace("strides = dense<1>", "strides = dense<2>").replace(
        "tensor<1x16x5x6xf32>", "tensor<1x16x3x3xf32>")
    for left in (ones, unit, strided):
        assert rewrites.conv_transpose_phases(left) == (left, 0)


# batch, input size, kernel, stride, padding, output_padding, dilation: a UNet's upsampling (a
# matmul at batch 1, a batched contraction at 2), a GAN's 4x4 stride 2, odd ones (stride 3 with
# output padding: outputs past the last phase's; unequal strides; a dilation), a vocoder's 1-D
# (kernel 8, stride 4) and a 3-D UNet's upsampling
CONV_TRANSPOSES = [(1, (5, 7), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                   (2, (5, 7), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
                   (2, (5, 7), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1)),
                   (1, (5, 7), (5, 3), (3, 2), (2, 1), (2, 1), (1, 2)),
                   (1, (13,), (8,), (4,), (2,), (0,), (1,)),
                   (2, (3, 4, 5), (2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0), (1, 1, 1))]


@pytest.mark.iree
@pytest.mark.parametrize("n, size, kernel, stride, padding, extra, dilation", CONV_TRANSPOSES)
def test_the_rewritten_conv_transpose_computes_numpys_numbers(tools, tmp_path, n, size, kernel,
                                                              stride, padding, extra, dilation):
    """Into a random accumulator, IREE runs the rewritten transposed conv to numpy's
    convolution over the zero-stuffed input; with the first two taps stacked each at the
    other's phase (the matmul), or the first two phases' convs joined the other way round, it
    does not."""
    from iree_dispatch_profiler.iree import rewrites

    text, shapes, offsets = conv_transpose(n, 6, size, 4, kernel, stride, padding, extra,
                                           dilation)
    rewritten, count = rewrites.conv_transpose_phases(text)
    assert count == 1
    concat = re.search(r"tensor.concat dim\(1\) (%[\w#]+), (%[\w#]+),", rewritten)
    if concat:
        first, second = concat.groups()
        wrong = rewritten.replace(concat.group(0), concat.group(0).replace(
            f"{first}, {second},", f"{second}, {first},"))
    else:
        first, second = re.findall(r"tensor.insert_slice (%\S+) into .* : tensor<4x6xf32> into",
                                   rewritten)[:2]  # taps of 4 filters x 6 channels
        wrong = re.sub(rf"insert_slice ({first}|{second}) into", lambda m: "insert_slice "
                       f"{second if m.group(1) == first else first} into", rewritten)
    assert wrong != rewritten
    rng = np.random.default_rng(0)
    x, k, init = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    out = shapes[2][2:]
    stuffed = np.zeros((n, 6, *(o + d * (t - 1) for o, d, t in zip(out, dilation, kernel))))
    spread = tuple(slice(o, o + s * (i - 1) + 1, s) for o, s, i in zip(offsets, stride, size))
    stuffed[(slice(None), slice(None), *spread)] = x
    wanted = init.astype(np.float64)
    for tap in np.ndindex(*kernel):
        window = stuffed[(slice(None), slice(None),
                          *(slice(t * d, t * d + o) for t, d, o in zip(tap, dilation, out)))]
        wanted += np.einsum("nc...,fc->nf...", window, k[(slice(None), slice(None), *tap)])
    results = agreements(tools, tmp_path, (x, k, init), {"rewritten": rewritten, "wrong": wrong},
                         wanted)
    assert results["rewritten"].ok, results["rewritten"].detail
    assert not results["wrong"].ok


def nearest(shape: tuple[int, ...], out: tuple[int, ...], divisors: tuple[float, ...],
            read_from: tuple[int, ...] | None = None) -> str:
    """A function of PyTorch's nearest-neighbour upsampling as torch-mlir lowers it: a generic
    of no inputs gathering each output from the source with tensor.extract at index
    min(max(floor(i / divisor), 0), size - 1) of each scaled dim's loop i (of `read_from`'s
    loop where given)."""
    x, o = (f"tensor<{'x'.join(map(str, t))}xf32>" for t in (shape, out))
    rank = len(shape)
    loops = ", ".join(f"d{i}" for i in range(rank))
    body, indices = "", []
    for dim in range(rank):
        body += f"    %i{dim} = linalg.index {dim} : index\n"
    for dim in range(rank):
        if dim < rank - len(divisors):
            indices.append(f"%i{dim}")
            continue
        loop = dim if read_from is None else read_from[dim]
        body += (f"    %a{dim} = arith.index_cast %i{loop} : index to i64\n"
                 f"    %b{dim} = arith.sitofp %a{dim} : i64 to f32\n"
                 f"    %c{dim} = arith.divf %b{dim}, %s{dim} : f32\n"
                 f"    %d{dim} = math.floor %c{dim} : f32\n"
                 f"    %e{dim} = arith.maximumf %d{dim}, %zero : f32\n"
                 f"    %f{dim} = arith.minimumf %e{dim}, %m{dim} : f32\n"
                 f"    %g{dim} = arith.fptosi %f{dim} : f32 to i64\n"
                 f"    %h{dim} = arith.index_cast %g{dim} : i64 to index\n")
        indices.append(f"%h{dim}")
    constants = "".join(f"  %s{rank - len(divisors) + i} = arith.constant {d} : f32\n"
                        f"  %m{rank - len(divisors) + i} = arith.constant "
                        f"{float(shape[rank - len(divisors) + i] - 1)} : f32\n"
                        for i, d in enumerate(divisors))
    parallel = ", ".join(['"parallel"'] * rank)
    return (f"func.func @main(%x: {x}) -> {o} {{\n  %zero = arith.constant 0.0 : f32\n"
            f"{constants}  %empty = tensor.empty() : {o}\n"
            f"  %r = linalg.generic {{indexing_maps = [affine_map<({loops}) -> ({loops})>], "
            f"iterator_types = [{parallel}]}} outs(%empty : {o}) {{\n"
            f"  ^bb0(%out: f32):\n{body}"
            f"    %v = tensor.extract %x[{', '.join(indices)}] : {x}\n"
            f"    linalg.yield %v : f32\n  }} -> {o}\n  return %r : {o}\n}}\n")


def test_nearest_upsample_takes_gathers_by_whole_factors_only():
    """PyTorch's nearest upsampling by 3 and 2 becomes a broadcast into 2x3x4x3x5x2 and a
    reshape, with no gather left, as does a 1-D one by 4; by 1.5 (6 rows from 4), or with the
    rows' index computed from the columns' loop, or from both, it is left alone."""
    from iree_dispatch_profiler.iree import rewrites

    text, count = rewrites.nearest_upsample(nearest((2, 3, 4, 5), (2, 3, 12, 10), (3.0, 2.0)))
    assert count == 1 and "tensor.extract" not in text
    assert "tensor<2x3x4x3x5x2xf32> into tensor<2x3x12x10xf32>" in text
    assert rewrites.nearest_upsample(nearest((1, 4, 10), (1, 4, 40), (4.0,)))[1] == 1
    mixed = nearest((1, 3, 4, 4), (1, 3, 8, 8), (2.0, 2.0)).replace(  # rows' index of (h + w)
        "%a2 = arith.index_cast %i2", "%j2 = arith.addi %i2, %i3 : index\n"
        "    %a2 = arith.index_cast %j2")
    for left in (nearest((1, 3, 4, 4), (1, 3, 6, 8), (1.5, 2.0)),
                 nearest((1, 3, 4, 4), (1, 3, 8, 8), (2.0, 2.0), read_from=(0, 1, 3, 3)), mixed):
        assert rewrites.nearest_upsample(left) == (left, 0)


@pytest.mark.iree
def test_the_rewritten_nearest_upsample_computes_numpys_numbers(tools, tmp_path):
    """IREE runs the rewritten upsampling to numpy's repeat along each scaled dim; with the
    broadcast reading the source's rows and columns swapped, it does not."""
    from iree_dispatch_profiler.iree import rewrites

    rewritten, count = rewrites.nearest_upsample(nearest((2, 3, 4, 4), (2, 3, 8, 12),
                                                         (2.0, 3.0)))
    right = "-> (d0, d1, d2, d4)>"
    wrong = rewritten.replace(right, "-> (d0, d1, d4, d2)>")
    assert count == 1 and right in rewritten
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    results = agreements(tools, tmp_path, (x,), {"rewritten": rewritten, "wrong": wrong},
                         x.repeat(2, axis=2).repeat(3, axis=3))
    assert results["rewritten"].ok, results["rewritten"].detail
    assert not results["wrong"].ok


def conv1d(x: str, k: str, out: str, stride: int, dilation: int,
           op: str = "conv_1d_ncw_fcw") -> str:
    """A function of a 1-D convolution (PyTorch's Conv1d as torch-mlir lowers it) into the
    given accumulator."""
    return (f"func.func @main(%x: {x}, %k: {k}, %o: {out}) -> {out} {{\n"
            f"  %r = linalg.{op} {{dilations = dense<{dilation}> : vector<1xi64>, "
            f"strides = dense<{stride}> : vector<1xi64>}} ins(%x, %k : {x}, {k}) "
            f"outs(%o : {out}) -> {out}\n  return %r : {out}\n}}\n")


CONV1D = ("tensor<2x6x20xf32>", "tensor<5x6x3xf32>", "tensor<2x5x8xf32>", 2, 2)


def test_conv1d_taps_takes_static_float_channels_first_1d_convs_only():
    from iree_dispatch_profiler.iree import rewrites

    text, count = rewrites.conv1d_taps(conv1d(*CONV1D))
    assert count == 1 and "conv_1d" not in text and "tensor.concat" in text
    for other in (conv1d("tensor<2x20x6xf32>", "tensor<3x6x5xf32>", "tensor<2x8x5xf32>", 2, 2,
                         "conv_1d_nwc_wcf"),
                  conv1d("tensor<?x6x20xf32>", "tensor<5x6x3xf32>", "tensor<?x5x8xf32>", 2, 2),
                  conv1d("tensor<2x6x20xi32>", "tensor<5x6x3xi32>", "tensor<2x5x8xi32>", 2, 2)):
        assert rewrites.conv1d_taps(other) == (other, 0)


def test_a_window_copy_with_a_norm_fused_in_is_no_tunable_op(tmp_path):
    """A copy through a strided window's map with a per-channel scale and shift (a norm IREE
    fused into a gather of a conv's taps, inside a dispatch): MLIR's convolution check passes
    it, but it has no convolution's dims (this crashed the tuner on a speech encoder); it is
    no tunable op."""
    from iree_dispatch_profiler.iree import tunable

    maps = ", ".join(f"affine_map<(d0, d1, d2) -> ({r})>"
                     for r in ("d1, d2 * 2 + d0", "d1", "d1", "d0, d1, d2"))
    (tmp_path / "gather.mlir").write_text(f"""
func.func @main(%x: tensor<4x9xf32>, %s: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<3x4x4xf32> {{
  %e = tensor.empty() : tensor<3x4x4xf32>
  %r = linalg.generic {{indexing_maps = [{maps}], iterator_types = ["parallel", "parallel",
      "parallel"]}} ins(%x, %s, %b : tensor<4x9xf32>, tensor<4xf32>, tensor<4xf32>)
      outs(%e : tensor<3x4x4xf32>) {{
  ^bb0(%in: f32, %scale: f32, %shift: f32, %out: f32):
    %p = arith.mulf %in, %scale : f32
    %q = arith.addf %p, %shift : f32
    linalg.yield %q : f32
  }} -> tensor<3x4x4xf32>
  return %r : tensor<3x4x4xf32>
}}
""")
    assert tunable.find(tmp_path / "gather.mlir") == []


@pytest.mark.iree
@pytest.mark.parametrize("batch", [2, 1])
def test_the_rewritten_conv1d_computes_numpys_numbers(tools, tmp_path, batch):
    """Strided, dilated, batch 2 (a generic over the batch) and 1 (a named matmul), into a
    random accumulator: IREE runs the rewritten conv to numpy's; with a tap's slice starting
    one position late, it does not."""
    from iree_dispatch_profiler.iree import rewrites

    rng = np.random.default_rng(0)
    x, k, init = (rng.standard_normal(s).astype(np.float32)
                  for s in ((batch, 6, 20), (5, 6, 3), (batch, 5, 8)))
    stride, dilation = CONV1D[3:]
    wanted = init.astype(np.float64) + sum(
        np.einsum("ncw,fc->nfw", x[:, :, t * dilation::stride][:, :, :8].astype(np.float64),
                  k[:, :, t]) for t in range(3))
    types = [t.replace("tensor<2x", f"tensor<{batch}x") for t in CONV1D[:3]]
    text, count = rewrites.conv1d_taps(conv1d(*types, *CONV1D[3:]))
    assert count == 1 and ("linalg.matmul" in text) == (batch == 1)
    wrong = re.sub(r"tensor\.extract_slice (%\w+)\[0, 0, 0, 0, 2\]",
                   r"tensor.extract_slice \1[0, 0, 0, 0, 3]", text, count=1)
    assert wrong != text
    results = agreements(tools, tmp_path, (x, k, init), {"rewritten": text, "wrong": wrong},
                         wanted)
    assert results["rewritten"].ok, results["rewritten"].detail
    assert not results["wrong"].ok


def audio_front_end() -> str:
    """Two Conv1d of a speech model's front end, batch 1: 1 channel of raw samples by 10 taps
    (a reduction of 10), then 8 channels by 3 taps (24)."""
    x, k1, o1, k2, o2 = ("tensor<1x1x400xf32>", "tensor<8x1x10xf32>", "tensor<1x8x79xf32>",
                         "tensor<8x8x3xf32>", "tensor<1x8x39xf32>")
    conv = ("linalg.conv_1d_ncw_fcw {{dilations = dense<1> : vector<1xi64>, strides = "
            "dense<{}> : vector<1xi64>}}")
    return (f"func.func @main(%x: {x}, %k1: {k1}, %o1: {o1}, %k2: {k2}, %o2: {o2}) -> {o2} {{\n"
            f"  %a = {conv.format(5)} ins(%x, %k1 : {x}, {k1}) outs(%o1 : {o1}) -> {o1}\n"
            f"  %b = {conv.format(2)} ins(%a, %k2 : {o1}, {k2}) outs(%o2 : {o2}) -> {o2}\n"
            f"  return %b : {o2}\n}}\n")


@pytest.mark.iree
@pytest.mark.parametrize("cpu,triple", [("host", ""), ("haswell", "x86_64-unknown-linux-gnu"),
                                        ("neoverse-n1", "aarch64-unknown-linux-gnu")])
def test_conv1d_taps_keeps_a_shallow_reduction_out_of_data_tiling(tools, tmp_path, cpu, triple):
    """Under data tiling (early, as the tuner's flag set), IREE packs both convs' operands as
    the model comes; rewritten, the second conv's (a reduction of 24) and not the first's (of
    10): the hint on the deep one only. Without the hint, both are packed. On every SIMD
    family (cross-compiled: AVX2, NEON)."""
    from iree_dispatch_profiler.iree import rewrites

    text, count = rewrites.conv1d_taps(audio_front_end())
    assert count == 2 and text.count(rewrites.DATA_TILING_HINT) == 1
    unhinted = text.replace(f"{{{rewrites.DATA_TILING_HINT}}}", "")
    assert rewrites.DATA_TILING_HINT not in unhinted
    packed = {name: packed_types(tools, module_text, tmp_path / name,
                                 curated("data_tiling_early").args, cpu, triple)
              for name, module_text in (("rewritten", text), ("unhinted", unhinted))}
    # the taps' slices joined: the deep conv's 24 x 39, the shallow one's 10 x 79
    assert "tensor<24x39xf32>" in packed["rewritten"] & packed["unhinted"], packed
    assert "tensor<10x79xf32>" in packed["unhinted"] - packed["rewritten"], packed


def batch_matmul(layout: str, batches: int, m: int, k: int, n: int, t: str, dtype: str) -> list[str]:
    """The lines of `linears`' batch matmul layouts: its activation argument (batches*M rows)
    expanded to batches of M rows, times the transposed weight for each batch (`batched`: a
    batch of one; `broadcast`: torch-mlir's broadcast generic, as a Linear on a batch of
    sequences exports; `broadcast4d`: the same on a 4-D input, collapsed; `unshared`: a B argument of its own per batch), collapsed back."""
    rows, bt = batches * m, f"tensor<{batches}x{k}x{n}{t}"
    lines = [f"  %{layout}_xb = tensor.expand_shape %{layout}_x [[0, 1], [2]] output_shape "
             f"[{batches}, {m}, {k}] : tensor<{rows}x{k}{t} into tensor<{batches}x{m}x{k}{t}",
             f"  %{layout}_e = tensor.empty() : tensor<{batches}x{m}x{n}{t}",
             f"  %{layout}_acc = linalg.fill ins(%zero : {dtype}) outs(%{layout}_e : "
             f"tensor<{batches}x{m}x{n}{t}) -> tensor<{batches}x{m}x{n}{t}"]
    if layout == "batched":
        lines.append(f"  %{layout}_b = tensor.expand_shape %wt [[0, 1], [2]] output_shape "
                     f"[1, {k}, {n}] : tensor<{k}x{n}{t} into {bt}")
    elif layout in ("broadcast", "broadcast4d"):
        # broadcast4d: a Linear on a 4-D input, the weight broadcast 1 x batches and collapsed
        lead = [batches] if layout == "broadcast" else [1, batches]
        rank = len(lead) + 2
        dims = ", ".join(f"d{i}" for i in range(rank))
        matrix = ", ".join(f"d{i}" for i in range(rank - 2, rank))
        parallel = ", ".join(['"parallel"'] * rank)
        wide = f"tensor<{'x'.join(map(str, lead))}x{k}x{n}{t}"
        target = f"%{layout}_b" if layout == "broadcast" else f"%{layout}_wide"
        lines += [f"  %{layout}_be = tensor.empty() : {wide}",
                  f"  {target} = linalg.generic {{indexing_maps = [affine_map<({dims}) -> "
                  f"({matrix})>, affine_map<({dims}) -> ({dims})>], "
                  f"iterator_types = [{parallel}]}} "
                  f"ins(%wt : tensor<{k}x{n}{t}) outs(%{layout}_be : {wide}) {{\n"
                  f"  ^bb0(%in: {dtype}, %out: {dtype}):\n    linalg.yield %in : {dtype}\n  }} -> {wide}"]
        if layout == "broadcast4d":
            lines.append(f"  %{layout}_b = tensor.collapse_shape {target} [[0, 1], [2], [3]] : "
                         f"{wide} into {bt}")
    lines += [f"  %{layout}_p = linalg.batch_matmul ins(%{layout}_xb, %{layout}_b : "
              f"tensor<{batches}x{m}x{k}{t}, {bt}) outs(%{layout}_acc : "
              f"tensor<{batches}x{m}x{n}{t}) -> tensor<{batches}x{m}x{n}{t}",
              f"  %{layout} = tensor.collapse_shape %{layout}_p [[0, 1], [2]] : "
              f"tensor<{batches}x{m}x{n}{t} into tensor<{rows}x{n}{t}"]
    return lines


BATCHES = {"batched": 1, "broadcast": 2, "broadcast4d": 2, "unshared": 2}  # batch_matmul's layouts


def linears(m: int, k: int, n: int, weight: str,
            layouts: tuple[str, ...] = ("kxn", "nxk", "batched", "broadcast"),
            dtype: str = "f32") -> str:
    """A function of one activation argument per layout, each times the weight `weight` (the
    initial value of a global of NxK, as a Linear holds it) into a zero accumulator: as the
    transposed weight (KxN), as the weight itself under transposed maps (NxK), in a batch
    matmul (BATCHES: M rows a batch, the argument and the result of all batches' rows); and
    a matmul of two arguments (a weight passed in)."""
    t = f"x{dtype}>"
    body = [f"  %w = util.global.load @weight : tensor<{n}x{k}{t}",
            f"  %we = tensor.empty() : tensor<{k}x{n}{t}",
            f"  %wt = linalg.transpose ins(%w : tensor<{n}x{k}{t}) outs(%we : tensor<{k}x{n}{t}) "
            "permutation = [1, 0]",
            f"  %zero = arith.constant 0.0 : {dtype}",
            f"  %e = tensor.empty() : tensor<{m}x{n}{t}",
            f"  %acc = linalg.fill ins(%zero : {dtype}) outs(%e : tensor<{m}x{n}{t}) -> tensor<{m}x{n}{t}"]
    ops = {
        "kxn": f"linalg.matmul ins(%kxn_x, %wt : tensor<{m}x{k}{t}, tensor<{k}x{n}{t}) "
               f"outs(%acc : tensor<{m}x{n}{t}) -> tensor<{m}x{n}{t}",
        "nxk": "linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, "
               "affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>] "
               f"ins(%nxk_x, %w : tensor<{m}x{k}{t}, tensor<{n}x{k}{t}) "
               f"outs(%acc : tensor<{m}x{n}{t}) -> tensor<{m}x{n}{t}",
        "activations": f"linalg.matmul ins(%activations_x, %activations_b : tensor<{m}x{k}{t}, "
                       f"tensor<{k}x{n}{t}) outs(%acc : tensor<{m}x{n}{t}) -> tensor<{m}x{n}{t}",
    }
    args, results = [], []
    for layout in layouts:
        rows = BATCHES.get(layout, 1) * m
        args.append(f"%{layout}_x: tensor<{rows}x{k}{t}")
        if layout in BATCHES:
            if layout == "unshared":
                args.append(f"%unshared_b: tensor<{BATCHES[layout]}x{k}x{n}{t}")
            body += batch_matmul(layout, BATCHES[layout], m, k, n, t, dtype)
        else:
            if layout == "activations":
                args.append(f"%activations_b: tensor<{k}x{n}{t}")
            body.append(f"  %{layout} = {ops[layout]}")
        results.append((f"%{layout}", f"tensor<{rows}x{n}{t}"))
    types = ", ".join(r for _, r in results)
    return (f"util.global private @weight = {weight} : tensor<{n}x{k}{t}\n"
            f"func.func @main({', '.join(args)}) -> ({types}) {{\n" + "\n".join(body)
            + f"\n  return {', '.join(v for v, _ in results)} : {types}\n}}\n")


PARAMETER = '#flow.parameter.named<"model"::"w">'


@pytest.mark.iree
@pytest.mark.parametrize("cpu,triple", [("host", ""),
                                        ("skylake-avx512", "x86_64-unknown-linux-gnu"),
                                        ("neoverse-n1", "aarch64-unknown-linux-gnu")])
def test_kept_transposes_transposes_a_linears_weight_at_load_and_the_matmul_reads_it_k_by_n(
        tools, tmp_path, cpu, triple):
    """torch-mlir's Linear: a parameter's N x K weight transposed, then a matmul. IREE folds the
    transpose into the matmul, which reads the parameter N x K; under the flag set
    kept_transposes the transpose runs in an initializer (at load) and the call's matmul reads
    its K x N result. On every SIMD family (cross-compiled: AVX-512, NEON)."""
    text = linears(64, 96, 256, PARAMETER, ("kxn",))
    reads = {}
    for name, flags in (("default", []), ("kept", curated("kept_transposes").args)):
        flow = build(tools, text, tmp_path / name, cpu, triple,
                     flags=(*flags, "--compile-to=flow"))
        call = re.search(r"flow\.dispatch @main_dispatch_\d+::@\w*matmul\w*\(([^)]*)\)",
                         flow.read_text())
        assert call, flow.read_text()
        reads[name] = call.group(1)
    assert "parameter_model_w_tensor_256x96xf32" in reads["default"], reads
    assert "hoisted_tensor_96x256xf32" in reads["kept"], reads


def test_packed_matmuls_takes_static_f32_matmuls_of_whole_register_tiles():
    """A matmul (KxN, NxK; of a global's weight or of one passed in) or a batch matmul (of one
    batch, or of one B broadcast to every batch, its batches then rows of A; also a 4-D
    broadcast collapsed, torch-mlir's Linear on a 4-D input) is packed into the CPU's register
    tile (AVX-512 8x32 for these rows, AVX2 6x16, NEON 12x8): A, B and the accumulator
    packed, a linalg.mmt4d, the result unpacked. A batch matmul of a B per batch, one of too
    few rows for the tile (a decode step's), one of a reduction under SHALLOW_K, f16 ones, and
    any on a CPU without such a tile are left alone."""
    from iree_dispatch_profiler.core.library import CpuTarget
    from iree_dispatch_profiler.iree import rewrites

    weights = linears(64, 96, 256, PARAMETER, ("kxn", "nxk", "batched", "broadcast",
                                               "broadcast4d", "activations", "unshared"))
    for cpu, (m0, n0) in FAMILIES.values():
        text, count = rewrites.packed_matmuls(weights, cpu)
        assert count == 6 and text.count("linalg.mmt4d") == 6
        assert "linalg.matmul" not in text and text.count("linalg.batch_matmul") == 1
        m1, n1 = -(-64 // m0), -(-256 // n0)
        # A in M0x1 tiles, packed as M0 x N0 blocks read along K (96: whole blocks) and
        # reshaped: an A fused with the unpack of another packed matmul shares its inner tile
        assert text.count(f"inner_dims_pos = [1, 0] inner_tiles = [{n0}, {m0}] into %") == 6
        m1_batches = -(-128 // m0)  # 2 batches
        assert f"tensor<128x96xf32> -> tensor<{m1_batches}x{96 // n0}x{n0}x{m0}xf32>" in text
        assert f"tensor<{m1_batches}x96x{m0}xf32> into tensor<{m1_batches}x96x{m0}x1xf32>" in text
        odd, _ = rewrites.packed_matmuls(linears(64, 100, 256, PARAMETER, ("kxn",)), cpu)
        assert f"tensor<64x100xf32> -> tensor<{m1}x100x{m0}x1xf32>" in odd  # K not whole blocks
        assert text.count(f"-> tensor<{n1}x96x{n0}x1xf32>") == 6  # B, from every layout
        assert text.count("linalg.unpack") == 6 and f"tensor<{m1}x{n1}x{m0}x{n0}xf32>" in text
    # the same broadcast written as linalg.broadcast: the weight itself is packed
    broadcast = ("func.func @main(%x: tensor<2x64x96xf32>, %w: tensor<96x256xf32>, "
                 "%acc: tensor<2x64x256xf32>) -> tensor<2x64x256xf32> {\n"
                 "  %be = tensor.empty() : tensor<2x96x256xf32>\n"
                 "  %b = linalg.broadcast ins(%w : tensor<96x256xf32>) outs(%be : "
                 "tensor<2x96x256xf32>) dimensions = [0]\n"
                 "  %p = linalg.batch_matmul ins(%x, %b : tensor<2x64x96xf32>, tensor<2x96x256xf32>) "
                 "outs(%acc : tensor<2x64x256xf32>) -> tensor<2x64x256xf32>\n"
                 "  return %p : tensor<2x64x256xf32>\n}\n")
    text, count = rewrites.packed_matmuls(broadcast, AVX512)
    assert count == 1 and "tensor<96x256xf32> -> tensor<8x96x32x1xf32>" in text
    along_k = (broadcast.replace("%w: tensor<96x256xf32>", "%w: tensor<2x256xf32>")
               .replace("ins(%w : tensor<96x256xf32>)", "ins(%w : tensor<2x256xf32>)")
               .replace("dimensions = [0]", "dimensions = [1]"))  # a B per batch
    assert rewrites.packed_matmuls(along_k, AVX512) == (along_k, 0)
    # 24 rows are under 4 tiles of 12; two batches of them are not
    assert rewrites.packed_matmuls(linears(24, 96, 256, PARAMETER, ("kxn", "broadcast")),
                                   AVX512)[1] == 1
    short = linears(8, 96, 256, PARAMETER)  # 8 rows, 16 in two batches: under 4 tiles of 6
    assert rewrites.packed_matmuls(short, AVX512) == (short, 0)
    assert rewrites.packed_matmuls(short, AVX2) == (short, 0)
    # a reduction shorter than a vector (a conv over raw samples, conv1d_taps): left alone
    shallow = linears(64, 10, 256, PARAMETER, ("kxn",))
    assert rewrites.packed_matmuls(shallow, AVX512) == (shallow, 0)
    assert rewrites.packed_matmuls(linears(64, 16, 256, PARAMETER, ("kxn",)), AVX512)[1] == 1
    half = linears(64, 96, 256, PARAMETER, dtype="f16")
    assert rewrites.packed_matmuls(half, AVX512) == (half, 0)
    sse = CpuTarget("x86-64", "+sse2,+sse4.2", "", "x86_64", 16, 1 << 20)
    assert rewrites.packed_matmuls(weights, sse) == (weights, 0)


def test_packed_matmuls_swapped_transpose_the_product_and_keep_an_ffn_features_major():
    """packed_matmuls_swapped computes C^T = W X^T: the weight's columns packed as the register
    tile's M0 rows, the positions as its N0 columns. Between two such products, the ops of
    per-feature operands (an FFN's bias and erf) run again over (features, positions), the next
    pack reading that matrix N0 positions at a time, and the position-major ops are erased. An
    op of a per-position operand, or of its loops' indices, is left position-major (the next
    pack then transposes), and a matmul of fewer positions than a column tile is not swapped."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning.model import rewrite_search

    for cpu, (m0, n0) in FAMILIES.values():
        text, count = rewrites.packed_matmuls_swapped(ffn(64, 96, 256), cpu)
        assert count == 2 and text.count("linalg.mmt4d") == 2 and "linalg.matmul" not in text
        assert f"tensor<96x256xf32> -> tensor<{-(-256 // m0)}x96x{m0}x1xf32>" in text
        assert f"tensor<64x96xf32> -> tensor<{64 // n0}x96x{n0}x1xf32>" in text
        features_major = f"tensor<256x64xf32> -> tensor<{64 // n0}x256x{n0}x1xf32>"
        assert features_major in text
        assert text.count("math.erf") == 1 and "tensor<64x256xf32>" not in text
        by_features, _ = rewrites.packed_matmuls_swapped(ffn(64, 96, 256, "features"), cpu)
        assert features_major in by_features
        by_positions, _ = rewrites.packed_matmuls_swapped(ffn(64, 96, 256, "positions"), cpu)
        by_index, _ = rewrites.packed_matmuls_swapped(ffn(64, 96, 256).replace(
            "    %s0 = arith.addf %in, %bias : f32\n",
            "    %i = linalg.index 1 : index\n    %c = arith.index_cast %i : index to i32\n"
            "    %f = arith.sitofp %c : i32 to f32\n    %s0 = arith.addf %in, %f : f32\n"), cpu)
        for position_major in (by_positions, by_index):  # its position read: not moved
            assert features_major not in position_major
            assert f"tensor<64x256xf32> -> tensor<{64 // n0}x256x{n0}x1xf32>" in position_major
        assert rewrites.packed_matmuls_swapped(ffn(n0, 96, 256), cpu)[1] == 2
        assert rewrites.packed_matmuls_swapped(ffn(n0 - 1, 96, 256), cpu)[1] == 0
    # measured in packed_matmuls' place, alone and joined, never beside it
    assert list(rewrite_search.candidates(ffn(64, 96, 256), AVX2)) == [
        "packed_matmuls", "packed_matmuls_swapped", "rational_erf",
        "packed_matmuls+rational_erf", "packed_matmuls_swapped+rational_erf"]
    assert list(rewrite_search.candidates(ffn(64, 96, 256), AVX2, (
        "packed_matmuls_swapped", "rational_erf"))) == [
        "packed_matmuls_swapped", "rational_erf", "packed_matmuls_swapped+rational_erf"]


def dense(values: np.ndarray) -> str:
    """An f32 array as a dense attribute's value."""
    rows = ", ".join("[" + ", ".join(f"{v:.8e}" for v in row) + "]" for row in values)
    return f"dense<[{rows}]>"


@pytest.mark.iree
@pytest.mark.parametrize("k, swapped", [(96, False), (50, False), (96, True)])
def test_packed_matmuls_compute_numpys_products(tools, tmp_path, monkeypatch, k, swapped):
    """Rows and columns that are not whole tiles (50 x K, padded to the host's tile), in each
    layout (two batches of 50 rows sharing the weight too), compiled with the flag the rewrite
    ships (ukernels off) and run by IREE: numpy's product, with A packed from M0 x N0 blocks
    (K = 96, whole blocks on every family) and without (50), and swapped (C^T = W X^T, the
    weight's rows packed as A's). With the layouts' transposition taken the other way round
    (a square weight, so that it still compiles), they are not."""
    from iree_dispatch_profiler.core.library import NO_UKERNELS
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module
    from iree_dispatch_profiler.measure.verification import agreement

    cpu = host_cpu(tools)
    rng = np.random.default_rng(0)
    m, n = 50, k
    weight = rng.standard_normal((n, k)).astype(np.float32)
    layouts = ("kxn", "nxk", "batched", "broadcast", "broadcast4d")
    source = linears(m, k, n, dense(weight), layouts)
    text, count = rewrites.packed_matmuls(source, cpu, swapped)
    assert count == 5
    flipped = {op: (a, {b: not t for b, t in maps.items()})
               for op, (a, maps) in rewrites._MATMUL_MAPS.items()}
    monkeypatch.setattr(rewrites, "_MATMUL_MAPS", flipped)
    wrong, _ = rewrites.packed_matmuls(source, cpu, swapped)
    xs = [rng.standard_normal((BATCHES.get(layout, 1) * m, k)).astype(np.float32)
          for layout in layouts]
    inputs = saved(tmp_path, xs, "x")
    for name, module_text in (("rewritten", text), ("wrong", wrong)):
        outputs = [tmp_path / f"{name}_{i}.npy" for i in range(len(xs))]
        vmfb = build(tools, module_text, tmp_path / name, flags=(NO_UKERNELS,))
        ran = run_module(tools, vmfb, "main", "local-task", inputs, outputs, 300)
        assert ran.ok, ran.reason
        checks = [agreement(np.load(o), (x.astype(np.float64) @ weight.T).astype(np.float32))
                  for o, x in zip(outputs, xs)]
        if name == "rewritten":
            assert all(c.ok for c in checks), [c.detail for c in checks]
        else:
            assert not any(c.ok for c in checks)


def ffn(m: int, k: int, hidden: int, scale: str = "") -> str:
    """A Linear (K -> hidden), its bias and erf, a Linear back (a transformer's FFN) on m
    positions; `scale` ("features", "positions"): the activation also times a vector along
    that dimension."""
    t = "xf32>"
    scaled = {"features": "(j)", "positions": "(i)"}.get(scale)
    vector = f"tensor<{hidden if scale == 'features' else m}{t}"
    return (f"func.func @main(%x: tensor<{m}x{k}{t}, %w1: tensor<{k}x{hidden}{t}, "
            f"%w2: tensor<{hidden}x{k}{t}, %b: tensor<{hidden}{t}"
            + (f", %s: {vector}" if scaled else "") + f") -> tensor<{m}x{k}{t} {{\n"
            "  %zero = arith.constant 0.0 : f32\n"
            f"  %e1 = tensor.empty() : tensor<{m}x{hidden}{t}\n"
            f"  %a1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<{m}x{hidden}{t}) -> "
            f"tensor<{m}x{hidden}{t}\n"
            f"  %h = linalg.matmul ins(%x, %w1 : tensor<{m}x{k}{t}, tensor<{k}x{hidden}{t}) "
            f"outs(%a1 : tensor<{m}x{hidden}{t}) -> tensor<{m}x{hidden}{t}\n"
            "  %g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, "
            "affine_map<(i, j) -> (j)>, "
            + (f"affine_map<(i, j) -> {scaled}>, " if scaled else "")
            + "affine_map<(i, j) -> (i, j)>], iterator_types = [\"parallel\", \"parallel\"]} "
            f"ins(%h, %b{', %s' if scaled else ''} : tensor<{m}x{hidden}{t}, tensor<{hidden}{t}"
            + (f", {vector}" if scaled else "")
            + f") outs(%e1 : tensor<{m}x{hidden}{t}) {{\n"
            f"  ^bb0(%in: f32, %bias: f32, {'%by: f32, ' if scaled else ''}%out: f32):\n"
            "    %s0 = arith.addf %in, %bias : f32\n"
            + ("    %s1 = arith.mulf %s0, %by : f32\n" if scaled else "")
            + f"    %v = math.erf {'%s1' if scaled else '%s0'} : f32\n"
            "    linalg.yield %v : f32\n"
            f"  }} -> tensor<{m}x{hidden}{t}\n"
            f"  %e2 = tensor.empty() : tensor<{m}x{k}{t}\n"
            f"  %a2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<{m}x{k}{t}) -> tensor<{m}x{k}{t}\n"
            f"  %y = linalg.matmul ins(%g, %w2 : tensor<{m}x{hidden}{t}, tensor<{hidden}x{k}{t}) "
            f"outs(%a2 : tensor<{m}x{k}{t}) -> tensor<{m}x{k}{t}\n"
            f"  return %y : tensor<{m}x{k}{t}\n}}\n")


@pytest.mark.iree
@pytest.mark.parametrize("cpu, triple", [("haswell", "x86_64-unknown-linux-gnu"),
                                         ("skylake-avx512", "x86_64-unknown-linux-gnu"),
                                         ("neoverse-n1", "aarch64-unknown-linux-gnu")])
def test_an_ffns_activation_between_packed_matmuls_vectorizes_along_their_tile(tools, tmp_path,
                                                                                cpu, triple):
    """A Linear, its bias and GELU's erf, a Linear (a transformer's FFN), packed: IREE fuses
    the first product's unpack, the bias, the activation and the second's pack of A into one
    dispatch, and gives it M0 x N0 vectors, the tile both products share; from M0x1 tiles of
    A it took M0 x 1 (BERT's GELU dispatch on a Zen 3: 4.5 ms, 1.7 with M0 x N0). Without
    the bias, IREE moves the activation past the unpack whichever way A is packed."""
    from iree_dispatch_profiler.core.library import NO_UKERNELS
    from iree_dispatch_profiler.iree import rewrites

    target, (m0, n0) = FAMILIES[cpu]
    source = ffn(64, 96, 256)
    text, count = rewrites.packed_matmuls(source, target)
    assert count == 2
    dump = tmp_path / "dump"
    build(tools, text, tmp_path / "ffn", cpu, triple,
          (NO_UKERNELS, f"--iree-hal-dump-executable-files-to={dump}"))
    configured = [p.read_text() for p in dump.glob("configured_*.mlir")]
    (fused,) = [c for c in configured if "math.erf" in c and "linalg.pack" in c]
    assert "linalg.unpack" in fused
    assert f"vector_common_parallel = [{m0}, {n0}]" in fused, fused


@pytest.mark.iree
def test_an_ffn_packed_swapped_computes_numpys_values_features_major(tools, tmp_path):
    """An FFN (64 positions, 96 -> 64 -> 96) packed swapped, its bias and erf features-major,
    run by IREE: numpy's erf(x W1 + b) W2. With that op reading the bias along the positions
    instead (as many as the features, so that it still compiles), it is not."""
    from scipy.special import erf

    from iree_dispatch_profiler.iree import rewrites

    rng = np.random.default_rng(0)
    x, w1, w2, b = (rng.standard_normal(s).astype(np.float32)
                    for s in ((64, 96), (96, 64), (64, 96), (64,)))
    text, count = rewrites.packed_matmuls_swapped(ffn(64, 96, 64), host_cpu(tools))
    along_features = "affine_map<(d0, d1) -> (d0)>"
    assert count == 2 and text.count(along_features) == 1
    wrong = text.replace(along_features, "affine_map<(d0, d1) -> (d1)>")
    wanted = erf(x.astype(np.float64) @ w1 + b) @ w2
    results = agreements(tools, tmp_path, (x, w1, w2, b), {"swapped": text, "wrong": wrong},
                         wanted)
    assert results["swapped"].ok, results["swapped"].detail
    assert not results["wrong"].ok


@pytest.mark.iree
@pytest.mark.parametrize("swapped", [False, True])
def test_packed_matmuls_pack_a_1d_convs_taps_from_its_input_in_place(tools, tmp_path, swapped):
    """conv1d_taps' matmul (batch 1: 48 filters by 3 taps of 16 channels, stride 2, dilation
    2, 49 positions: not whole column tiles) packed: its B is no copy of the taps' slices
    packed again but one op reading the input, zero-padded past its end, into the tiles (the
    N0-wide ones, or swapped, the M0-wide ones of the product's rows); IREE runs it to numpy's
    conv. Reading the taps in reverse, it does not."""
    from iree_dispatch_profiler.core.library import DataType
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.ops import cpu_tiles

    cpu = host_cpu(tools)
    # the product's rows: its 48 filters, or swapped, its 49 positions
    m0, n0, _ = cpu_tiles.register_tile(cpu, DataType.f32, DataType.f32, 49 if swapped else 48)
    n0 = m0 if swapped else n0  # the positions' tile
    rng = np.random.default_rng(0)
    x, k = (rng.standard_normal(s).astype(np.float32) for s in ((1, 16, 101), (48, 16, 3)))
    init = np.zeros((1, 48, 49), np.float32)
    wanted = sum(np.einsum("ncw,fc->nfw", x[:, :, t * 2::2][:, :, :49].astype(np.float64),
                           k[:, :, t]) for t in range(3))
    text, _ = rewrites.conv1d_taps(conv1d(*(f"tensor<{'x'.join(map(str, a.shape))}xf32>"
                                            for a in (x, k, init)), 2, 2))
    text, count = rewrites.packed_matmuls(text, cpu, swapped)
    read = f"-> (d2, d0 * {2 * n0} + d3 * 2 + d1 * 2)>"
    assert count == 1 and read in text
    # the A and the accumulator packed; the B read in place, from the input padded to the
    # last tile's columns: 2 * (columns - 1) + 2 * 2 + 1
    assert text.count("linalg.pack") == 2 and "tensor.pad" in text
    assert f"tensor<16x{2 * (-(-49 // n0) * n0 - 1) + 5}xf32>" in text
    wrong = text.replace(read, f"-> (d2, d0 * {2 * n0} + d3 * 2 - d1 * 2 + 4)>")
    results = agreements(tools, tmp_path, (x, k, init), {"rewritten": text, "wrong": wrong},
                         wanted)
    assert results["rewritten"].ok, results["rewritten"].detail
    assert not results["wrong"].ok


def biased_linears(m: int, k: int, n: int, weight: str, bias: str) -> str:
    """Two matmuls of x by a global's weight, one accumulating into a global's bias broadcast
    over the rows (as torch lowers a convolution's bias), one into an accumulator passed in."""
    return (f"util.global private @w = {weight} : tensor<{n}x{k}xf32>\n"
            f"util.global private @b = {bias} : tensor<{n}xf32>\n"
            f"func.func @main(%x: tensor<{m}x{k}xf32>, %acc: tensor<{m}x{n}xf32>) -> "
            f"(tensor<{m}x{n}xf32>, tensor<{m}x{n}xf32>) {{\n"
            f"  %w = util.global.load @w : tensor<{n}x{k}xf32>\n"
            f"  %b = util.global.load @b : tensor<{n}xf32>\n"
            f"  %we = tensor.empty() : tensor<{k}x{n}xf32>\n"
            f"  %wt = linalg.transpose ins(%w : tensor<{n}x{k}xf32>) outs(%we : tensor<{k}x{n}xf32>) "
            "permutation = [1, 0]\n"
            f"  %e = tensor.empty() : tensor<{m}x{n}xf32>\n"
            f"  %bias = linalg.broadcast ins(%b : tensor<{n}xf32>) outs(%e : tensor<{m}x{n}xf32>) "
            "dimensions = [0]\n"
            f"  %p = linalg.matmul ins(%x, %wt : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) "
            f"outs(%bias : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>\n"
            f"  %q = linalg.matmul ins(%x, %wt : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) "
            f"outs(%acc : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>\n"
            f"  return %p, %q : tensor<{m}x{n}xf32>, tensor<{m}x{n}xf32>\n}}\n")


@pytest.mark.iree
def test_packed_matmuls_add_an_accumulator_other_than_zeros_after_the_unpack(tools, tmp_path):
    """A matmul into a bias broadcast or an accumulator passed in runs its mmt4d from zeros
    and adds the accumulator after the unpack: numpy's x @ W^T + acc, and no initializer packs
    a parameter's broadcast bias (IREE vectorized that pack whole, one 4800-lane vector for a
    64x400 bias, and took 23 s to compile it)."""
    from iree_dispatch_profiler.core.library import NO_UKERNELS, DataType
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module
    from iree_dispatch_profiler.measure.verification import agreement
    from iree_dispatch_profiler.ops import cpu_tiles

    cpu = host_cpu(tools)
    tile = cpu_tiles.register_tile(cpu, DataType.f32, DataType.f32, 64)  # the second's rows
    if tile is None:
        pytest.skip(f"{cpu.summary} has no register tile of packed_matmuls")
    m0, n0, _ = tile
    rng = np.random.default_rng(0)
    m, k, n = 50, 48, 40
    weight, bias = rng.standard_normal((n, k)), rng.standard_normal(n)
    values = "dense<[" + ", ".join(f"{v:.8e}" for v in bias) + "]>"
    text, count = rewrites.packed_matmuls(
        biased_linears(m, k, n, dense(weight), values), cpu)
    assert count == 2
    x, acc = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (m, n)))
    outputs = [tmp_path / f"out{i}.npy" for i in range(2)]
    vmfb = build(tools, text, tmp_path / "biased", flags=(NO_UKERNELS,))
    ran = run_module(tools, vmfb, "main", "local-task", saved(tmp_path, [x, acc]), outputs, 300)
    assert ran.ok, ran.reason
    product = x.astype(np.float64) @ weight.T
    for output, init in zip(outputs, (bias[None, :], acc)):
        check = agreement(np.load(output), (product + init).astype(np.float32))
        assert check.ok, check.detail
        assert not agreement(np.load(output), product.astype(np.float32)).ok

    text, _ = rewrites.packed_matmuls(biased_linears(
        64, 96, 256, PARAMETER, '#flow.parameter.named<"model"::"b">'), cpu)
    dump = tmp_path / "sources"
    build(tools, text, tmp_path / "parameters", flags=(
        NO_UKERNELS, f"--iree-hal-dump-executable-sources-to={dump}"))
    accumulator = f"-> tensor<{-(-64 // m0)}x{-(-256 // n0)}x{m0}x{n0}xf32>"
    packed_at_load = [p.name for p in dump.glob("*initializer*.mlir")
                      if re.search(rf"linalg\.pack .*{re.escape(accumulator)}", p.read_text())]
    assert not packed_at_load


@pytest.mark.iree
def test_packed_matmuls_pack_a_parameters_weight_once_at_load(tools, tmp_path):
    """The weight a parameter holds is packed in an initializer (IREE hoists the pack of a
    global), not in the function's dispatches, which pack their activations only."""
    from iree_dispatch_profiler.core.library import NO_UKERNELS, DataType
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.ops import cpu_tiles

    cpu = host_cpu(tools)
    tile = cpu_tiles.register_tile(cpu, DataType.f32, DataType.f32, 64)
    if tile is None:
        pytest.skip(f"{cpu.summary} has no register tile of packed_matmuls")
    m0, n0, _ = tile
    text, count = rewrites.packed_matmuls(linears(64, 96, 256, PARAMETER, ("kxn",)), cpu)
    assert count == 1
    dump = tmp_path / "sources"
    build(tools, text, tmp_path / "packed", flags=(
        NO_UKERNELS, f"--iree-hal-dump-executable-sources-to={dump}"))
    packed_weight = re.compile(rf"linalg\.pack .*-> tensor<{-(-256 // n0)}x96x{n0}x1xf32>")
    packs = {path.name: len(packed_weight.findall(path.read_text())) for path in dump.glob("*.mlir")}
    at_load = [name for name, found in packs.items() if found and "initializer" in name]
    per_call = [name for name, found in packs.items() if found and "initializer" not in name]
    assert at_load and not per_call, packs
    # in M0 x N0 blocks along K
    activations = re.compile(rf"linalg\.pack .*-> tensor<{-(-64 // m0)}x{96 // n0}x{n0}x{m0}xf32>")
    assert any(activations.search(p.read_text()) for p in dump.glob("*main*.mlir"))


@pytest.mark.iree
def test_a_sources_own_packed_matmul_is_tuned_inside_the_model_without_data_tiling(tools, tmp_path):
    """The mmt4d packed_matmuls writes is the source's own, configured before specs apply
    even where no flag data-tiles (unlike the packed matmuls of late data tiling): it is a
    target, and its tuned config applies to its dispatch."""
    from iree_dispatch_profiler.core.library import NO_UKERNELS
    from iree_dispatch_profiler.iree import rewrites

    cpu = host_cpu(tools)
    rng = np.random.default_rng(0)
    text, count = rewrites.packed_matmuls(
        linears(128, 96, 256, dense(rng.standard_normal((256, 96))), ("kxn",)), cpu)
    if not count:
        pytest.skip(f"{cpu.summary} has no register tile of packed_matmuls")
    source = tmp_path / "packed.mlir"
    source.write_text(text)
    output = tmp_path / "p.csv"
    result = run_script("autotune.py", "--input", source, "--model", "--output", output,
                        "--top", "1", "--n-trial", "1", "--tuner", "random",
                        f"--base-flags={NO_UKERNELS}", "--rewrites=none", *QUICK_MODEL)
    assert result.returncode == 0, result.stdout + result.stderr
    ranking = pd.read_csv(tmp_path / "p_dispatches.csv", keep_default_na=False)
    (packed,) = ranking[ranking["root"] == "linalg.mmt4d"].to_dict("records")
    assert packed["not_tunable"] == "" and packed["target"] != ""
    trials = pd.read_csv(output)
    assert len(trials) == 1 and trials["config_applied"][0] == "yes", trials.to_dict("records")


# PyTorch's exact GELU, as torch-mlir lowers it: an elementwise op whose body calls math.erf
GELU = """func.func @main(%x: tensor<4096xf32>) -> tensor<4096xf32> {
  %e = tensor.empty() : tensor<4096xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
      iterator_types = ["parallel"]} ins(%x : tensor<4096xf32>) outs(%e : tensor<4096xf32>) {
  ^bb0(%in: f32, %out: f32):
    %root2 = arith.constant 1.41421354 : f32
    %half = arith.constant 5.000000e-01 : f32
    %one = arith.constant 1.000000e+00 : f32
    %s = arith.divf %in, %root2 : f32
    %erf = math.erf %s : f32
    %a = arith.addf %erf, %one : f32
    %h = arith.mulf %a, %half : f32
    %y = arith.mulf %in, %h : f32
    linalg.yield %y : f32
  } -> tensor<4096xf32>
  return %g : tensor<4096xf32>
}
"""


@pytest.mark.iree
def test_rational_erf_gives_gelu_within_its_bound_and_a_wrong_coefficient_does_not(
        tools, tmp_path, monkeypatch):
    """rational_erf replaces the f32 erf of a GELU (and nothing twice); compiled and run by
    IREE over [-6, 6] (past its clamp too), the GELU is float64's within 1e-6 + 1e-6 |x|
    (its erf's bound, 4.4e-7, halved by GELU, times x, and float32 rounding); with one
    coefficient 0.1% off it is not."""
    from scipy.special import erf

    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module

    text, count = rewritten("rational_erf", GELU, None)
    assert count == 1 and "math.erf" not in text and text.count("math.fma") == 10
    assert rewrites.rational_erf(text) == (text, 0)
    x = np.linspace(-6, 6, 4096, dtype=np.float32)
    x64 = x.astype(np.float64)
    wanted = x64 * 0.5 * (1 + erf(x64 / np.sqrt(2)))
    numerator = list(rewrites.ERF_NUMERATOR)
    numerator[2] *= 1.001
    monkeypatch.setattr(rewrites, "ERF_NUMERATOR", tuple(numerator))
    wrong, _ = rewrites.rational_erf(GELU)
    errors = {}
    for name, source in (("rewritten", text), ("wrong", wrong), ("iree", GELU)):
        output = tmp_path / f"{name}.npy"
        ran = run_module(tools, build(tools, source, tmp_path / name), "main", "local-task",
                         saved(tmp_path, [x]), [output], 300)
        assert ran.ok, ran.reason
        errors[name] = np.max(np.abs(np.load(output) - wanted) - 1e-6 * np.abs(x64))
    assert errors["rewritten"] < 1e-6 and errors["iree"] < 1e-6, errors
    assert errors["wrong"] > 1e-6, errors
    # other SIMD families: its multiply-adds are the target's vector FMAs, no libm call
    for cpu, triple, fma in (("skylake-avx512", "x86_64-unknown-linux-gnu", "vfmadd"),
                             ("neoverse-n1", "aarch64-unknown-linux-gnu", "fmla")):
        files = tmp_path / f"{cpu}_files"
        build(tools, text, tmp_path / cpu, cpu, triple,
              flags=(f"--iree-hal-dump-executable-files-to={files}",))
        assembly = "".join(path.read_text() for path in files.glob("*.s"))
        assert fma in assembly and not re.search(r"\b(callq?|bl)\s+fmaf", assembly), cpu


def int_matmul(m: int = 8, k: int = 64, n: int = 16, source: str = "i8", wide: str = "i32",
               out: str = "i64", extend: str = "arith.extsi", zero: int = 0,
               batch: int = 0, shared: bool = False) -> str:
    """torch-mlir's `x.to(torch.int32) @ w.to(torch.int32)`: each operand widened by a
    generic, a matmul (a batch matmul with `batch`; with `shared`, of a KxN B widened and then
    broadcast to every batch, a Linear's weight) from zeros into `out`."""
    lead = f"{batch}x" if batch else ""
    a, b, c = (f"{lead}{m}x{k}", f"{lead}{k}x{n}", f"{lead}{m}x{n}")
    op = "linalg.batch_matmul" if batch else "linalg.matmul"

    def widened(name: str, shape: str) -> str:
        dims = ", ".join(f"d{i}" for i in range(shape.count("x") + 1))
        return f"""
  %{name}_empty = tensor.empty() : tensor<{shape}x{wide}>
  %{name}_w = linalg.generic {{indexing_maps = [affine_map<({dims}) -> ({dims})>,
      affine_map<({dims}) -> ({dims})>], iterator_types = [{', '.join(['"parallel"'] * (shape.count("x") + 1))}]}}
      ins(%{name} : tensor<{shape}x{source}>) outs(%{name}_empty : tensor<{shape}x{wide}>) {{
  ^bb0(%in: {source}, %o: {wide}):
    %e = {extend} %in : {source} to {wide}
    linalg.yield %e : {wide}
  }} -> tensor<{shape}x{wide}>"""
    if not shared:
        return f"""func.func @main(%a: tensor<{a}x{source}>, %b: tensor<{b}x{source}>) -> tensor<{c}x{out}> {{
  {widened("a", a)}
  {widened("b", b)}""" + int_product(a, b, c, wide, out, op, zero)
    return f"""func.func @main(%a: tensor<{a}x{source}>, %m: tensor<{k}x{n}x{source}>) -> tensor<{c}x{out}> {{
  {widened("a", a)}
  {widened("m", f"{k}x{n}")}
  %b_empty = tensor.empty() : tensor<{b}x{wide}>
  %b_w = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>,
      affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%m_w : tensor<{k}x{n}x{wide}>) outs(%b_empty : tensor<{b}x{wide}>) {{
  ^bb0(%in: {wide}, %o: {wide}):
    linalg.yield %in : {wide}
  }} -> tensor<{b}x{wide}>""" + int_product(a, b, c, wide, out, op, zero)


def int_product(a: str, b: str, c: str, wide: str, out: str, op: str, zero: int) -> str:
    return f"""

  %zero = arith.constant {zero} : {out}
  %empty = tensor.empty() : tensor<{c}x{out}>
  %init = linalg.fill ins(%zero : {out}) outs(%empty : tensor<{c}x{out}>) -> tensor<{c}x{out}>
  %p = {op} ins(%a_w, %b_w : tensor<{a}x{wide}>, tensor<{b}x{wide}>) outs(%init : tensor<{c}x{out}>) -> tensor<{c}x{out}>
  return %p : tensor<{c}x{out}>
}}
"""


def test_narrow_int_matmuls_takes_sign_extended_i8_products_summed_exactly_only():
    """An i8 matmul widened to i32 or i64 (torch-mlir's i64 sums of int32 tensors), and a batch
    matmul (also of a weight broadcast to every batch), become i8 x i8 -> i32 (widened after into i64); zero-extended or i16 operands, an
    accumulator not from zeros, and i64 sums over a depth whose i32 sums could overflow are
    left alone."""
    from iree_dispatch_profiler.iree import rewrites

    for text, out in ((int_matmul(), "i64"), (int_matmul(wide="i64"), "i64"),
                      (int_matmul(out="i32"), "i32"), (int_matmul(batch=3), "i64"),
                      (int_matmul(batch=3, shared=True), "i64")):
        rewritten, count = rewrites.narrow_int_matmuls(text)
        assert count == 1, text
        assert re.search(r"matmul ins\(%arg0, %[a-z0-9]+ : tensor<[0-9x]+xi8>, tensor<[0-9x]+xi8>\) "
                         r"outs\(%[0-9]+ : tensor<[0-9x]+xi32>\)", rewritten), rewritten
        assert (f"arith.extsi %in : i32 to {out}" in rewritten) == (out == "i64")
    deep = rewrites.NARROW_MAX_DEPTH + 1
    for text in (int_matmul(extend="arith.extui"), int_matmul(source="i16"),
                 int_matmul(zero=1), int_matmul(m=1, k=deep, n=1),
                 int_matmul(m=1, k=deep, n=1, wide="i64")):
        assert rewrites.narrow_int_matmuls(text) == (text, 0)
    assert rewrites.narrow_int_matmuls(int_matmul(m=1, k=deep - 1, n=1))[1] == 1
    assert rewrites.narrow_int_matmuls(int_matmul(m=1, k=deep, n=1, out="i32"))[1] == 1


@pytest.mark.iree
def test_narrow_int_matmuls_give_numpys_integer_products_and_unsigned_ones_do_not(tools, tmp_path):
    """IREE runs the rewritten matmul (and batch matmuls) to numpy's exact i64 products of i8
    values across the whole range; with the i32 sums widened as unsigned (the slip a wrong
    rewrite could make), they differ."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module

    rng = np.random.default_rng(0)
    for batch, shared in ((0, False), (2, False), (2, True)):
        lead = (batch,) if batch and not shared else ()
        a = rng.integers(-128, 128, size=(*((batch,) if batch else ()), 8, 64), dtype=np.int8)
        b = rng.integers(-128, 128, size=(*lead, 64, 16), dtype=np.int8)
        wanted = a.astype(np.int64) @ b.astype(np.int64)
        text, count = rewrites.narrow_int_matmuls(int_matmul(batch=batch, shared=shared))
        assert count == 1
        wrong = text.replace("arith.extsi %in : i32 to i64", "arith.extui %in : i32 to i64")
        assert wrong != text
        for name, source in (("rewritten", text), ("wrong", wrong)):
            stem = f"{name}{batch}{shared}"
            output = tmp_path / f"{stem}.npy"
            ran = run_module(tools, build(tools, source, tmp_path / stem), "main",
                             "local-task", saved(tmp_path, [a, b], f"in{stem}_"), [output], 300)
            assert ran.ok, ran.reason
            got = np.load(output)
            assert got.dtype == np.int64
            assert np.array_equal(got, wanted) == (name == "rewritten"), name


@pytest.mark.iree
@pytest.mark.parametrize("cpu, triple, product", [
    ("haswell", "x86_64-unknown-linux-gnu", r"\bvpmaddwd\b.*%ymm"),
    ("skylake-avx512", "x86_64-unknown-linux-gnu", r"\b(vpmaddwd|vpdpbusd|vpdpwssd)\b.*%zmm"),
    ("neoverse-n1", "aarch64-unknown-linux-gnu", r"\bsdot\s+v\d+\.4s")])
def test_narrow_int_matmuls_compile_to_integer_vector_products_on_every_simd_family(
        tools, tmp_path, cpu, triple, product):
    """The rewritten i8 matmul, cross-compiled under data tiling (the flags its answers took)
    for each SIMD family: its code multiplies and adds whole vectors of i8 or i16 lanes into
    i32 (AVX2 ymm, AVX-512 zmm, Neon's dot product into i32 lanes), not only on the test
    machine. The module as exported (i64 sums) is checked to have none of these: on neoverse-n1
    its products are smlal into i64 lanes, on haswell there is no vpmaddwd."""
    from iree_dispatch_profiler.iree import rewrites

    exported = int_matmul(m=64, k=256, n=64)
    text, count = rewrites.narrow_int_matmuls(exported)
    assert count == 1
    for name, source in (("narrow", text), ("exported", exported)):
        dump = tmp_path / f"{name}_dump"
        build(tools, source, tmp_path / name, cpu, triple,
              (*curated("data_tiling").args, f"--iree-hal-dump-executable-intermediates-to={dump}"))
        assembly = "\n".join(p.read_text() for p in dump.glob("*.s"))
        assert bool(re.search(product, assembly)) == (name == "narrow"), (name, cpu)


def half_matmul(a: str = "bf16", b: str = "bf16", out: str = "f32", batch: int = 0,
                start: float = 0.0, m: int = 16, k: int = 64, n: int = 32) -> str:
    """torch-mlir's matmul of a model exported in bfloat16 or half: the operands as they are,
    summed from `start` into `out`."""
    lead = f"{batch}x" if batch else ""
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    return f"""func.func @main(%a: tensor<{lead}{m}x{k}x{a}>, %b: tensor<{lead}{k}x{n}x{b}>) -> tensor<{lead}{m}x{n}x{out}> {{
  %start = arith.constant {start} : {out}
  %empty = tensor.empty() : tensor<{lead}{m}x{n}x{out}>
  %init = linalg.fill ins(%start : {out}) outs(%empty : tensor<{lead}{m}x{n}x{out}>) -> tensor<{lead}{m}x{n}x{out}>
  %p = {op} ins(%a, %b : tensor<{lead}{m}x{k}x{a}>, tensor<{lead}{k}x{n}x{b}>) outs(%init : tensor<{lead}{m}x{n}x{out}>) -> tensor<{lead}{m}x{n}x{out}>
  return %p : tensor<{lead}{m}x{n}x{out}>
}}
"""


def test_widened_half_matmuls_take_bf16_and_f16_products_summed_in_f32_only():
    """bf16 and f16 matmuls and batch matmuls into f32 get f32 operands, each widened behind a
    barrier (IREE would fold the widening back into the matmul); an f32 matmul, a half one into
    half, and one of an f32 operand are left alone."""
    from iree_dispatch_profiler.iree import rewrites

    for text in (half_matmul(), half_matmul("f16", "f16"), half_matmul(batch=2)):
        rewritten, count = rewrites.widened_half_matmuls(text)
        assert count == 1, text
        assert rewritten.count("util.optimization_barrier") == 2
        assert re.search(r"matmul ins\(%[0-9]+, %[0-9]+ : tensor<[0-9x]+xf32>, tensor<[0-9x]+xf32>\) "
                         r"outs\(%[0-9]+ : tensor<[0-9x]+xf32>\)", rewritten), rewritten
    for text in (half_matmul("f32", "f32"), half_matmul(out="bf16"), half_matmul("f32", "bf16")):
        assert rewrites.widened_half_matmuls(text) == (text, 0)
    # a parameter's weight is widened once, at load, into a global of its own; the
    # activation still behind a barrier
    rewritten, count = rewrites.widened_half_matmuls(half_linear())
    assert count == 1 and rewritten.count("util.optimization_barrier") == 1
    function = rewritten[rewritten.index("func.func"):]
    assert "util.initializer" in rewritten and "util.global.store" in rewritten
    assert "util.global.load immutable @w$f32" in function and "@w :" not in function


def half_linear(m: int = 16, k: int = 64, n: int = 32) -> str:
    """half_matmul in f16 of a Linear layer's weight in place of %b, as torch-mlir writes it:
    a parameter of N x K, transposed."""
    weight, transposed = f"tensor<{n}x{k}xf16>", f"tensor<{k}x{n}xf16>"
    load = (f"  %w = util.global.load @w : {weight}\n"
            f"  %we = tensor.empty() : {transposed}\n"
            f"  %b = linalg.transpose ins(%w : {weight}) outs(%we : {transposed}) "
            "permutation = [1, 0]\n")
    return (f"util.global private @w = {PARAMETER} : {weight}\n"
            + half_matmul("f16", "f16", m=m, k=k, n=n).replace(f", %b: {transposed}", "")
            .replace("{\n", "{\n" + load, 1))


@pytest.mark.iree
@pytest.mark.parametrize("cpu", [AVX2, AVX512, NEON], ids=lambda c: c.name)
def test_a_linears_half_weight_is_widened_at_load_alone_and_packed(tools, tmp_path, cpu):
    """A Linear's 1024x1024 f16 weight, widened (4 MiB more, past IREE's 1 MiB limit on what it
    hoists), is widened in an initializer: the call reads it in f32 and never the parameter,
    alone (under IREE's default, which would fold a widening in the call back into an f16
    matmul) and joined with packed_matmuls (which packs it at load; the mmt4d reads that).
    The model as exported reads the parameter in the call. Cross-compiled for each SIMD
    family's register tile (AVX2, AVX-512, Neon), whatever the host."""
    from iree_dispatch_profiler.iree import rewrites

    by_name = {r.name: r for r in rewrites.REWRITES}
    exported = half_linear(64, 1024, 1024)
    widened, count = by_name["widened_half_matmuls"].run(exported, cpu)
    joined, packed = by_name["packed_matmuls"].run(widened, cpu)
    assert count == packed == 1
    calls = {}
    for name, text in (("exported", exported), ("widened", widened), ("joined", joined)):
        flow = build(tools, text, tmp_path / name, cpu.name, cpu.triple or "x86_64-unknown-linux-gnu",
                     (*by_name["packed_matmuls"].flags, "--compile-to=flow")).read_text()
        calls[name] = dict(re.findall(r"flow\.dispatch @main_[\w$]+::@(\w+)\(([^)]*)\)", flow))
    assert "parameter_model_w" in " ".join(calls["exported"].values()), calls
    for name, pattern in (("widened", "matmul"), ("joined", "mmt4d")):
        assert "parameter_model_w" not in " ".join(calls[name].values()), calls[name]
        product = next(v for k, v in calls[name].items() if pattern in k)
        assert re.search(r"hoisted_tensor_\w*xf32|w\$f32", product), calls[name]


@pytest.mark.iree
def test_widened_half_matmuls_give_numpys_f32_sums_of_the_half_products(tools, tmp_path):
    """IREE runs the rewritten bf16 matmul (summed from 0.5, as an accumulator may start) to
    numpy's f32 products of the bf16 values; with the start dropped (the slip a rewrite into
    zeros would make), the comparison tells it."""
    import ml_dtypes
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.iree.launchers import run_module

    rng = np.random.default_rng(0)
    a = rng.uniform(-4, 4, (16, 64)).astype(ml_dtypes.bfloat16)
    b = rng.uniform(-4, 4, (64, 32)).astype(ml_dtypes.bfloat16)
    wanted = a.astype(np.float64) @ b.astype(np.float64) + 0.5
    text, count = rewrites.widened_half_matmuls(half_matmul(start=0.5))
    assert count == 1
    wrong = text.replace("arith.constant 5.000000e-01 : f32", "arith.constant 0.000000e+00 : f32")
    assert wrong != text
    for name, source in (("rewritten", text), ("wrong", wrong)):
        output = tmp_path / f"{name}.npy"
        ran = run_module(tools, build(tools, source, tmp_path / name), "main", "local-task",
                         saved(tmp_path, [a, b], f"in_{name}_"), [output], 300)
        assert ran.ok, ran.reason
        got = np.load(output)
        assert got.dtype == np.float32
        error = np.abs(got - wanted) / (np.abs(wanted) + np.sqrt(np.mean(wanted ** 2)))
        assert (error.max() < 1e-6) == (name == "rewritten"), (name, error.max())


@pytest.mark.iree
@pytest.mark.parametrize("cpu, triple, product", [
    ("haswell", "x86_64-unknown-linux-gnu", r"\bvfmadd\w*ps\b.*%ymm"),
    ("skylake-avx512", "x86_64-unknown-linux-gnu", r"\bvfmadd\w*ps\b.*%zmm"),
    ("neoverse-n1", "aarch64-unknown-linux-gnu", r"\bfmla\s+v\d+\.4s")])
def test_widened_half_matmuls_compile_to_f32_vector_fmas_on_every_simd_family(
        tools, tmp_path, cpu, triple, product):
    """The rewritten bf16 matmul, cross-compiled under early data tiling (the set it is
    measured under) for each SIMD family, none with bf16 arithmetic: its code multiplies and
    adds whole f32 vectors (AVX2 ymm, AVX-512 zmm, Neon 4 lanes), not only on the test
    machine. The module as exported is checked to have none of these on x86 (its data-tiled
    bf16 tiles run as scalar code: 286 ms a call for bench_model's bf16 MLP, Zen 3)."""
    from iree_dispatch_profiler.iree import rewrites

    exported = half_matmul(m=64, k=256, n=64)
    text, count = rewrites.widened_half_matmuls(exported)
    assert count == 1
    for name, source in (("widened", text), ("exported", exported)):
        dump = tmp_path / f"{name}_dump"
        build(tools, source, tmp_path / name, cpu, triple,
              (*curated("data_tiling_early").args, f"--iree-hal-dump-executable-intermediates-to={dump}"))
        assembly = "\n".join(p.read_text() for p in dump.glob("*.s"))
        # as exported, x86's bf16 tiles are scalar code; Neon's are converted and fmla'd
        wanted = name == "widened" or cpu == "neoverse-n1"
        assert bool(re.search(product, assembly)) == wanted, (name, cpu)
