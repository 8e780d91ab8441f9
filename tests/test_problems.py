"""Shapes from the real workload files in workloads/."""
import json

import pytest

from helpers import ROOT, run_script
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.ops import problems

WORKLOADS = ROOT / "workloads"


def test_deepbench_gemm_rows_with_transposes():
    found = problems.matmul_problems(WORKLOADS / "deepbench_gemm.csv", {})
    assert problems.MatmulProblem(1760, 16, 1760) in found
    assert any(p.trans_a for p in found) and len(found) == len(set(found))


def test_mmperf_keeps_batches_and_skips_inactive_rows(tmp_path):
    found = problems.matmul_problems(WORKLOADS / "mmperf_sizes.csv", {})
    assert problems.MatmulProblem(18, 32, 96) in found and any(p.b > 0 for p in found)
    path = tmp_path / "sizes.csv"
    path.write_text("raw,b,m,n,k,active\n8x8x8,,8,8,8,1\n9x9x9,,9,9,9,0\n2x4x4x4,2,4,4,4,1\n")
    assert problems.matmul_problems(path, {}) == [problems.MatmulProblem(8, 8, 8),
                                                  problems.MatmulProblem(4, 4, 4, 2)]


def test_sdxl_conv_rows_read_with_their_torch_column_names():
    found = problems.conv_problems(WORKLOADS / "sdxl_unet_conv2d_shapes.csv", {})
    assert problems.ConvShape(2, 128, 128, 4, 320, 3, 3, (1, 1), (1, 1), (1, 1)) in found
    assert any(p.stride == (2, 2) for p in found)


def test_deepbench_conv_maps_k_to_output_channels():
    found = problems.conv_problems(WORKLOADS / "deepbench_conv.csv", {})
    first = found[0]
    assert (first.n, first.h, first.w, first.c, first.f, first.kh, first.kw) == (4, 161, 700, 1, 32, 5, 20)
    assert first.stride == (2, 2)


def test_column_map_and_missing_columns(tmp_path):
    path = tmp_path / "shapes.csv"
    path.write_text("rows,cols,depth\n8,16,32\n")
    with pytest.raises(UserError, match="lacks columns for m, n, k"):
        problems.matmul_problems(path, {})
    found = problems.matmul_problems(path, problems.parse_column_map("m=rows,n=cols,k=depth"))
    assert found == [problems.MatmulProblem(8, 16, 32)]


@pytest.mark.iree
def test_generator_reads_a_problems_file(tmp_path):
    result = run_script("generator.py", "--generated-dir", tmp_path, "--problems-file",
                        WORKLOADS / "sdxl_unet_mm_shapes.csv", "--data-types=f16t_f16t_f32t",
                        "--dispatches=_default$")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "generated" / "manifest.json").read_text())
    shapes = {(o["operation"]["m"], o["operation"]["n"], o["operation"]["k"]) for o in manifest["operations"]}
    assert (2048, 1280, 1280) in shapes and (2, 1280, 2816) in shapes


@pytest.mark.iree
@pytest.mark.parametrize("content,message", [
    ("m,n,k\n8,x,4\n", "is not a number"),
    ("m,n,k\n", "has no rows"),
    ("m,n,k\n8,0,4\n", "sizes must be positive"),
])
def test_bad_problems_files_are_user_errors(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    result = run_script("generator.py", "--generated-dir", tmp_path / "gen", "--problems-file", path)
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "gen").exists()


@pytest.mark.iree
def test_batch_matmul_takes_the_batched_rows_of_a_file(tmp_path):
    path = tmp_path / "sizes.csv"
    path.write_text("b,m,n,k\n,8,8,8\n3,4,4,4\n")
    result = run_script("generator.py", "--generated-dir", tmp_path, "--problems-file", path,
                        "--operation-kind=matmul,batch_matmul", "--data-types=f32",
                        "--dispatches=_default$")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "generated" / "manifest.json").read_text())
    names = {"_".join(str(o["operation"][k]) for k in ("kind", "batch", "m")) for o in manifest["operations"]}
    assert names == {"matmul_0_8", "batch_matmul_3_4"}
