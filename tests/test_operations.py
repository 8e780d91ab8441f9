"""Every operation kind and data type through the real tools on small, odd shapes."""
import json

import numpy as np
import pandas as pd
import pytest

from helpers import FAST, run_script
from iree_dispatch_profiler.ops.conv import LAYOUTS, Conv2dOperation
from iree_dispatch_profiler.core.library import DataType
from iree_dispatch_profiler.sweep.manifest import Manifest


def default_and_first_tile(gen) -> str:
    """--dispatches selecting each operation's default and its first tile config (names differ
    from CPU to CPU, so they are read from the manifest)."""
    names = []
    for collection in Manifest.load(gen).collections:
        configs = [c.name for c in collection.configurations]
        tiles = [c for c in configs if c.startswith("tile_config_")]
        chosen = [c for c in configs if c.startswith("default")] + tiles[:1]
        names += [f"^{collection.operation.name}_{c}$" for c in chosen]
    return "--dispatches=" + ",".join(names)


@pytest.fixture(scope="session")
def breadth(tmp_path_factory):
    gen = tmp_path_factory.mktemp("breadth")
    calls = [
        # matmul family with an odd M, a batch of 2, both epilogues, every data type
        ["--operation-kind=matmul,batch_matmul,fused_matmul", "--problem-m=67", "--problem-n=64",
         "--problem-k=64", "--problem-b=2"],
        ["--operation-kind=split_k_matmul", "--problem-m=64", "--problem-n=64",
         "--problem-k=8192", "--split-k-slices=4"],
        # strided, padded conv of every data type (too small for tile configs) and one that
        # gets them (the types are the first conv's: one is enough here)
        ["--operation-kind=conv2d", "--input-n=2", "--input-h=12", "--input-w=13", "--input-c=8",
         "--filter-h=3", "--filter-w=3", "--filter-f=16", "--stride=2", "--padding=1"],
        ["--operation-kind=conv2d", "--input-n=2", "--input-h=10", "--input-w=10", "--input-c=8",
         "--filter-h=3", "--filter-w=3", "--filter-f=16", "--data-types=f32"],
        # batch 1: IREE folds the unit dimension and drops the requested config
        ["--operation-kind=conv2d", "--input-n=1", "--input-h=10", "--input-w=10", "--input-c=8",
         "--filter-h=3", "--filter-w=3", "--filter-f=16", "--data-types=f32"],
    ]
    for call in calls:
        result = run_script("generator.py", "--generated-dir", gen, *call)
        assert result.returncode == 0, result.stderr
    selected = default_and_first_tile(gen)
    compiled = run_script("compile.py", "--generated-dir", gen, selected)
    assert compiled.returncode == 0, compiled.stdout[-2000:]
    csv = gen / "data.csv"
    profiled = run_script("profiler.py", "--generated-dir", gen, "--output", csv, selected,
                          "--providers=iree,numpy", "--plot", gen / "plots", *FAST)
    return gen, profiled, pd.read_csv(csv)


@pytest.mark.iree
def test_every_kind_and_data_type_verifies(breadth):
    _, profiled, data = breadth
    assert profiled.returncode == 0, profiled.stdout[-3000:]
    assert (data["Verification"] == "SUCCESS").all()
    iree = data[data["Provider"] == "IREE Codegen"]
    assert (iree["Runtime(ms)"] > 0).all()
    assert set(iree["op_kind"]) == {"matmul", "batch_matmul", "split_k_matmul", "conv2d", "fused_matmul"}
    for kind in ("matmul", "batch_matmul", "split_k_matmul"):
        types = set(iree[iree["op_kind"] == kind]["result"] + iree[iree["op_kind"] == kind]["lhs"])
        assert types == {"f32tf32t", "f16tf16t", "f32tf16t", "bf16tbf16t", "f32tbf16t", "i32ti8t"}, kind
    convs = set(iree[iree["op_kind"] == "conv2d"]["Operation"])
    assert "conv2d_2x12x13x8_3x3x16_s2_p1_d1_i8_i32_nchw_fchw" in convs
    assert "fused_matmul_67x64x64_bf16t_bf16t_f32t_bias_gelu" in set(iree["Operation"])
    assert "fused_matmul_67x64x64_i8t_i8t_i32t_bias_relu" in set(iree["Operation"])


@pytest.mark.iree
def test_split_k_rows_report_their_mode_and_slices(breadth):
    data = breadth[2]
    split = data[(data["op_kind"] == "split_k_matmul") & (data["Provider"] == "IREE Codegen")]
    assert len(split) == 6 and (split["split_k_mode"] == "parallel").all()
    assert (split["split_k_slices"].astype(int) == 4).all()
    assert split["compile flags"].str.contains("--iree-dispatch-creation-split-matmul-reduction=4").all()


@pytest.mark.iree
def test_tile_configs_apply_except_on_batch_1_convolutions(breadth):
    data = breadth[2]
    tiled = data[data["Configuration"].str.startswith("tile_config_")]
    batch_one = tiled["Operation"].str.startswith("conv2d_1x")
    assert len(tiled[batch_one]) == 2 and (tiled[batch_one]["Config applied"] == "no").all()
    assert len(tiled[~batch_one]) > 20 and (tiled[~batch_one]["Config applied"] == "yes").all()


@pytest.mark.iree
def test_numpy_provider_rows_sit_beside_iree_rows(breadth):
    _, profiled, data = breadth
    numpy = data[data["Provider"] == "numpy"]
    assert set(numpy["Operation"]) == set(data[data["Provider"] == "IREE Codegen"]["Operation"])
    assert (numpy["Configuration"] == "numpy").all() and (numpy["GFLOPs"] > 0).all()
    assert "best IREE / numpy" in profiled.stdout


@pytest.mark.iree
def test_plots_are_written(breadth):
    plots = breadth[0] / "plots"
    assert (plots / "roofline.png").stat().st_size > 10_000
    assert (plots / "matmul_67x64x64_f32t_f32t_f32t.png").stat().st_size > 10_000


@pytest.mark.parametrize("layout", LAYOUTS)
def test_conv_reference_matches_direct_loops(layout):
    op = Conv2dOperation(2, 9, 7, 3, 4, 3, 2, (2, 1), (1, 2), (1, 2), layout=layout)
    rng = np.random.default_rng(0)
    (x_shape, _), (w_shape, _) = op.inputs
    x, w = rng.integers(-2, 3, x_shape), rng.integers(-2, 3, w_shape)
    if layout == "nchw_fchw":
        x_nhwc, w_hwcf = x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)
    else:
        x_nhwc, w_hwcf = x, w
    padded = np.pad(x_nhwc, ((0, 0), (1, 1), (2, 2), (0, 0)))
    expected = np.zeros((op.n, op.oh, op.ow, op.f))
    for i in range(op.oh):
        for j in range(op.ow):
            for a in range(op.kh):
                for b in range(op.kw):
                    expected[:, i, j, :] += padded[:, 2 * i + a, j + 2 * b, :] @ w_hwcf[a, b]
    if layout == "nchw_fchw":
        expected = expected.transpose(0, 3, 1, 2)
    assert np.array_equal(op.reference(x, w), expected)


def test_conv_names_follow_the_scheme():
    op = Conv2dOperation(2, 34, 34, 1280, 1280, 3, 3, input_type=DataType.f16, output_type=DataType.f16)
    assert op.name == "conv2d_2x34x34x1280_3x3x1280_s1_p0_d1_f16_nhwc_hwcf"
    assert op.gemm_shape == (2 * 32 * 32, 1280, 1280 * 9)


@pytest.mark.iree
def test_cuda_configs_of_every_kind_compile_for_f16_and_bf16(tmp_path):
    result = run_script("generator.py", "--generated-dir", tmp_path, "--device=cuda",
                        "--operation-kind=conv2d,batch_matmul,fused_matmul",
                        "--data-types=f16t_f16t_f32t,bf16t_bf16t_f32t", "--problem-m=128",
                        "--problem-n=128", "--problem-k=64", "--problem-b=2", "--epilogues=bias_relu",
                        "--input-n=2", "--input-h=34", "--input-w=34", "--input-c=64",
                        "--filter-h=3", "--filter-w=3", "--filter-f=64", "--conv-layouts=nhwc_hwcf",
                        "--dispatches=_default$,tile_config_128x128_32x5,tile_config_8x16x64_64x2")
    assert result.returncode == 0, result.stderr
    compiled = run_script("compile.py", "--generated-dir", tmp_path)
    assert compiled.returncode == 0, compiled.stdout
    records = [json.loads(p.read_text()) for p in tmp_path.glob("generated/linalg/*/*/*.compile.json")]
    tiled = [r for r in records if "_tensorcore_mmasync" in r["dispatch"]]
    kinds = {r["dispatch"].split("_")[0] for r in tiled}
    assert kinds == {"conv2d", "batch", "fused"} and len(tiled) == 6
    assert all(r["config_applied"] == "yes" for r in tiled)
