"""compare.py with the real tools: a real difference is found in its direction, identical variants are not told
apart, a numerics change is caught, and bad input is one line."""
import json

import numpy as np
import pandas as pd
import pytest

from helpers import run_script

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools

MATMUL = """func.func @main(%a: tensor<512x512xf32>, %b: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<512x512xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<512x512xf32>) -> tensor<512x512xf32>
  %c = linalg.matmul ins(%a, %b : tensor<512x512xf32>, tensor<512x512xf32>)
                     outs(%init : tensor<512x512xf32>) -> tensor<512x512xf32>
  return %c : tensor<512x512xf32>
}
"""
# The same matmul with scalar tiles (1x1 registers, k one at a time): several times slower
# than IREE's default on any CPU, busy or quiet, so the difference tested is one load cannot
# erase (data tiling's win, 1.1-1.4x depending on the CPU, can shrink into the noise).
SCALAR = MATMUL.replace("%c = linalg.matmul ins", """%c = linalg.matmul {compilation_info =
    #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<
      distribution = [32, 32, 0], vector_common_parallel = [1, 1, 0],
      vector_reduction = [0, 0, 1]>, translation_info = #iree_codegen.translation_info<
      pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>} ins""")
DATA_TILING = "--iree-opt-data-tiling --iree-llvmcpu-enable-ukernels=all"
BF16 = ("--iree-global-opt-demote-contraction-inputs-type=bf16 "
        "--iree-global-opt-demote-contraction-inputs-operations=all")


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    """One run, five variants: the baseline, itself again, data tiling, a bf16 demotion and
    the module with scalar tiles."""
    folder = tmp_path_factory.mktemp("compare")
    (folder / "mm.mlir").write_text(MATMUL)
    (folder / "scalar.mlir").write_text(SCALAR)
    result = run_script("compare.py", "--calibration=off", "--input", folder / "mm.mlir", "--variant", "base=",
                        "--variant", "same=", "--variant", f"dt={DATA_TILING}",
                        "--variant", f"bf16={BF16}", "--variant", f"scalar={folder / 'scalar.mlir'}",
                        "--random-inputs", "7",
                        "--output", folder / "results.json", "--time-budget", "15")
    report = json.loads((folder / "results.json").read_text())
    return folder, result, report


def verdict(report, variant):
    return next(c for c in report["comparisons"] if c["variant"] == variant)


@pytest.mark.serial  # the comparison fixture's session is judged
def test_a_real_difference_is_resolved_in_its_direction(comparison):
    _, result, report = comparison
    scalar = verdict(report, "scalar")
    assert scalar["significant"] and scalar["ci_high"] < 1, result.stdout
    assert "scalar slower than base by" in result.stdout


@pytest.mark.serial  # the comparison fixture's session is judged
def test_identical_variants_show_no_significant_difference(comparison):
    _, result, report = comparison
    same = verdict(report, "same")
    assert not same["significant"], result.stdout
    assert "same vs base: no significant difference" in result.stdout


@pytest.mark.serial  # the comparison fixture's session is judged
def test_bf16_demotion_is_caught_by_the_agreement_check(comparison):
    _, result, report = comparison
    checks = {a["variant"]: a for a in report["agreement"]}
    assert checks["same"]["ok"] and checks["same"]["max_abs"] == 0
    assert checks["dt"]["ok"]
    assert not checks["bf16"]["ok"] and checks["bf16"]["mismatches"] > 0
    assert result.returncode == 1  # outputs disagree beyond tolerance


@pytest.mark.serial  # the comparison fixture's session is judged
def test_results_files_and_saved_random_inputs(comparison):
    folder, result, report = comparison
    assert [v["name"] for v in report["variants"]] == ["base", "same", "dt", "bf16", "scalar"]
    for v in report["variants"]:
        assert v["ci_low_ms"] <= v["median_ms"] <= v["ci_high_ms"]
    rows = pd.read_csv(folder / "results.csv")
    assert list(rows["name"]) == ["base", "same", "dt", "bf16", "scalar"]
    inputs = [folder / "results_input0.npy", folder / "results_input1.npy"]
    assert all(p.is_file() for p in inputs) and str(inputs[0]) in result.stdout
    assert np.load(inputs[0]).dtype == np.float32


def test_a_variant_that_does_not_compile_is_reported_and_the_others_compared(tmp_path):
    """(The second input is given as a type: drawn at random there, the file beside it used.)"""
    (tmp_path / "mm.mlir").write_text(MATMUL)
    np.save(tmp_path / "a.npy", np.ones((512, 512), np.float32))
    result = run_script("compare.py", "--calibration=off", "--input", tmp_path / "mm.mlir", "--variant", "base=",
                        "--variant", "broken=--iree-no-such-flag",
                        "--variant", "again=", "--inputs", f"@{tmp_path}/a.npy,512x512xf32",
                        "--time-budget", "2", "--min-rounds", "3", "--work-dir", tmp_path / "work")
    assert result.returncode == 1, result.stderr
    assert "broken" in result.stdout and "FAILED" in result.stdout
    assert "again vs base" in result.stdout
    assert (f"argument 0 (512x512xf32) given: {tmp_path}/a.npy; argument 1 (512x512xf32) uniform "
            "in [0, 1)") in result.stdout
    assert np.load(tmp_path / "work" / "random_input1.npy").shape == (512, 512)


@pytest.mark.parametrize("extra, message", [
    (["--inputs", "@missing.npy,@missing.npy"], "missing.npy does not exist"),
    (["--function", "nope", "--random-inputs", "0"], "has no public function nope"),
    (["--inputs", "@small.npy,@small.npy"], "expects 512x512xf32"),
    (["--random-inputs", "0", "--inputs", "@small.npy"], "not both"),
    (["--inputs", "512x512xf32,4x4xf32"], "input 1 (4x4xf32): main expects 512x512xf32"),
    (["--inputs", "@small.npy,512x512xf32"], "small.npy) is 4x4xfloat32; main expects 512x512xf32"),
])
def test_user_errors_are_one_line(tmp_path, extra, message):
    (tmp_path / "mm.mlir").write_text(MATMUL)
    np.save(tmp_path / "small.npy", np.ones((4, 4), np.float32))
    result = run_script("compare.py", "--calibration=off", "--input", tmp_path / "mm.mlir", "--variant", "a=",
                        "--variant", "b=", "--work-dir", tmp_path / "work", *(e.replace("@", f"@{tmp_path}/") if e.startswith("@")
                                             else e for e in extra))
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_csv_mode_flags_regressions_beyond_noise(tmp_path):
    old = pd.DataFrame({"Dispatch": ["a", "b", "c"], "Runtime(ms)": [1.0, 1.0, 1.0],
                        "ci_low": [0.98, 0.9, 0.98], "ci_high": [1.02, 1.1, 1.02]})
    new = pd.DataFrame({"Dispatch": ["a", "b", "c"], "Runtime(ms)": [1.3, 1.05, 0.5],
                        "ci_low": [1.27, 0.95, 0.49], "ci_high": [1.33, 1.15, 0.51]})
    old.to_csv(tmp_path / "old.csv", index=False)
    new.to_csv(tmp_path / "new.csv", index=False)
    result = run_script("compare.py", "--csv", tmp_path / "old.csv", tmp_path / "new.csv",
                        "--output", tmp_path / "csv.json", "--work-dir", tmp_path / "work")
    assert result.returncode == 0, result.stderr
    flags = {c["dispatch"]: c["flag"] for c in json.loads((tmp_path / "csv.json").read_text())["comparisons"]}
    assert flags == {"a": "REGRESSION", "b": "", "c": "improved"}
    assert "1 regressions, 1 improvements" in result.stdout
    assert (tmp_path / "csv.png").stat().st_size > 1000


def test_dispatch_mode_compares_configurations_of_a_generated_operation(tmp_path):
    assert run_script("generator.py", "--generated-dir", tmp_path, "--problem-m=96",
                      "--problem-n=64", "--problem-k=80", "--data-types=f32t_f32t_f32t").returncode == 0
    assert run_script("compile.py", "--generated-dir", tmp_path,
                      "--dispatches=_default$,_default_data_tiling$").returncode == 0
    result = run_script("compare.py", "--calibration=off", "--dispatch", "matmul_96x64x80_f32t_f32t_f32t_default",
                        "--generated-dir", tmp_path, "--time-budget", "2", "--min-rounds", "3",
                        "--output", tmp_path / "dispatch.json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "dispatch.json").read_text())
    assert report["baseline"] == "default"
    assert [c["variant"] for c in report["comparisons"]] == ["default_data_tiling"]
    assert {(a["baseline"], a["variant"]) for a in report["agreement"]} == {
        ("default", "default_data_tiling"), ("reference", "default"),
        ("reference", "default_data_tiling")}
    assert all(a["ok"] for a in report["agreement"])


def bytecode(text: str, path):
    from iree.compiler import ir
    with ir.Context():
        module = ir.Module.parse(text)
        with open(path, "wb") as stream:
            module.operation.write_bytecode(stream)
    return path


def test_mlir_bytecode_is_read_like_text(tmp_path):
    """A module saved as MLIR bytecode (.mlirbc), as exporters write it, is compared and
    listed for tuning like its text."""
    module = bytecode(MATMUL, tmp_path / "mm.mlirbc")
    result = run_script("compare.py", "--calibration=off", "--input", module, "--variant", "base=", "--variant", "same=",
                        "--random-inputs", "3", "--output", tmp_path / "r.json", "--time-budget", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "agreement same vs base, output 0" in result.stdout and result.stdout.rstrip().endswith("r.csv")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for model in ([], ["--model"]):
        listed = run_script("autotune.py", "--input", module, "--list", *model,
                            env={"TMPDIR": str(scratch)})
        assert listed.returncode == 0, listed.stderr
        if not model:
            assert f"1 tunable ops in {module}" in listed.stdout and "linalg.matmul" in listed.stdout
        assert not list(scratch.iterdir()), "a listing leaves its scratch files behind"


def test_a_torch_model_with_token_ids_and_parameters_is_compared(tmp_path):
    """A model as iree-turbine exports it (torch dialect, token ids, weights in a parameter
    archive) is read past IREE's input phase: its signature, and token ids within the
    embedding table (out-of-range ids would fail the gather, not compare)."""
    result = run_script("compare.py", "--calibration=off", "--input", "tests/data/tiny_lm_torch.mlir",
                        "--parameters", "model=tests/data/tiny_lm_torch.irpa",
                        "--variant", "base=", "--variant", "dt=--iree-opt-data-tiling",
                        "--random-inputs", "0", "--output", tmp_path / "r.json", "--time-budget", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "argument 0 (1x32xi64) distinct in [0, 96): it indexes a dimension of 96" in result.stdout
    assert "agreement dt vs base, output 0" in result.stdout
    ids = np.load(tmp_path / "r_input0.npy")
    assert ids.dtype == np.int64 and 0 <= ids.min() and ids.max() < 96


def test_a_baseline_that_gives_nan_is_said_to_check_nothing(tmp_path):
    """nn.MultiheadAttention's padding mask drawn all ones masks every key: every variant gives
    NaN, NaN agrees with NaN, and the run says the agreement checks nothing there."""
    result = run_script("compare.py", "--calibration=off", "--input", "tests/data/padded_ids_torch.mlir",
                        "--variant", "base=", "--variant", "same=", "--random-inputs", "0",
                        "--time-budget", "1")
    assert "argument 1 (1x8xi1) all ones" in result.stdout, result.stdout + result.stderr
    assert ("the baseline base gives NaN/inf on these inputs (output 0 has 128 NaN/inf of 128 "
            "elements): agreement with it checks nothing there") in result.stdout
    finite = run_script("compare.py", "--calibration=off", "--input", "tests/data/tiny_lm_torch.mlir",
                        "--parameters", "model=tests/data/tiny_lm_torch.irpa", "--variant", "base=",
                        "--variant", "same=", "--random-inputs", "0", "--time-budget", "1")
    assert finite.returncode == 0 and "agreement same vs base" in finite.stdout, finite.stderr
    assert "checks nothing" not in finite.stdout
