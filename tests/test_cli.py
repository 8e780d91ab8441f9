"""Bad input: one line naming the problem, exit 2, no traceback, nothing written."""
import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT, one_line_error, run_script

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools

GENERATOR_ERRORS = [
    (["--problem-m=abc", "--problem-n=8", "--problem-k=8"], "not an integer"),
    (["--problem-m=0", "--problem-n=8", "--problem-k=8"], "must be positive"),
    (["--problem-m=-4", "--problem-n=8", "--problem-k=8"], "must be positive"),
    (["--problem-m=64:32:8", "--problem-n=8", "--problem-k=8"], "is empty"),
    (["--problem-m=64:128:0", "--problem-n=8", "--problem-k=8"], "positive step"),
    (["--problem-m=64"], "go together"),
    (["--data-types=f64"], "unknown data type 'f64'"),
    (["--data-types=i8t_i8t_f16t"], "not supported on llvm-cpu"),
    (["--device=tpu"], "invalid choice"),
    (["--dispatches=matmul_("], "invalid regular expression"),
    (["--dispatches=conv2d_"], "selects none"),
    (["--runtime-device=cuda"], "cannot run llvm-cpu"),
    (["--operation-kind=gemm"], "unknown operation kind 'gemm'"),
    (["--operation-kind=fused_matmul", "--epilogues=bias_tanh"], "unknown epilogue"),
    (["--operation-kind=conv2d", "--conv-layouts=nhwc"], "unknown conv layout"),
    (["--operation-kind=conv2d", "--input-n=1"], "go together"),
    (["--operation-kind=conv2d", "--input-n=1", "--input-h=2", "--input-w=2", "--input-c=1",
      "--filter-h=3", "--filter-w=3", "--filter-f=1"], "does not fit the padded input"),
    (["--operation-kind=conv2d", "--padding=-1"], "must be >= 0"),
    (["--problems-file=/nonexistent.csv"], "cannot read --problems-file"),
    (["--problems-file=README.md"], "lacks columns"),
    (["--split-k-slices=0", "--operation-kind=split_k_matmul"], "must be positive"),
    (["--target-triple=x86_64-unknown-linux-gnu", "--cpu=skylake-avx51"],
     "did you mean skylake-avx512"),
    (["--target-triple=aarch64-unknown-linux-gnu", "--cpu=neoverse-n99"],
     "not a CPU LLVM knows for aarch64"),
    (["--target-triple=x86_64-unknown-linux-gnu", "--cpu=haswell", "--cpu-features=+avx9"],
     "+avx9 not known to LLVM"),
    (["--target-triple=foo-bar-baz"], "cannot target it"),
    (["--device=cuda", "--cpu=haswell"], "are llvm-cpu options"),
]


@pytest.mark.parametrize("args,message", GENERATOR_ERRORS)
def test_generator_rejects_bad_input(tmp_path, args, message):
    gen = tmp_path / "gen"
    result = run_script("generator.py", "--generated-dir", gen, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not gen.exists()


def test_missing_and_foreign_generated_dirs_are_refused(tmp_path):
    for script in ("compile.py", "profiler.py"):
        result = run_script(script, "--generated-dir", tmp_path / "nowhere")
        assert result.returncode == 2 and "run generator.py" in result.stderr
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "manifest.json").write_text('{"something": "else"}')
    result = run_script("compile.py", "--generated-dir", tmp_path)
    assert result.returncode == 2 and "not a manifest of this tool" in result.stderr
    result = run_script("generator.py", "--generated-dir", tmp_path / "x", "--device=cuda")
    other = run_script("generator.py", "--generated-dir", tmp_path / "x", "--device=llvm-cpu")
    assert result.returncode == 0 and other.returncode == 2 and "holds dispatches for cuda" in other.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    gen = tmp_path_factory.mktemp("tiny")
    result = run_script("generator.py", "--generated-dir", gen, "--problem-m=8", "--problem-n=8",
                        "--problem-k=8", "--data-types=f32")
    assert result.returncode == 0, result.stderr
    return gen


@pytest.mark.parametrize("script,args,message", [
    ("compile.py", ["--num-cpu=0"], "use a positive count"),
    ("compile.py", ["-j", "-2"], "use a positive count"),
    ("compile.py", ["--iree-compile-extra-flags='unterminated"], "--iree-compile-extra-flags"),
    ("compile.py", ["--iree-bin-dir=/nonexistent"], "cannot find iree-compile"),
    ("profiler.py", ["--verification-enabled=yes"], "expected true/false/1/0"),
    ("profiler.py", ["--profiling-enabled=2"], "expected true/false/1/0"),
    ("profiler.py", ["--benchmark-repetitions=0"], "must be positive"),
    ("profiler.py", ["--precision=1.5"], "must lie between 0 and 1"),
    ("profiler.py", ["--time-budget=-3"], "must be a positive number of seconds"),
    ("compare.py", ["--input=x.mlir", "--variant=a="], "two or more --variant"),
    ("compare.py", ["--variant=a b"], "is not NAME="),
    ("profiler.py", ["--tags=novalue"], "must be key:value"),
    ("profiler.py", ["--output=/proc/forbidden/data.csv"], "cannot write --output"),
    ("profiler.py", ["--resume"], "need --output"),
    ("profiler.py", ["--runtime-device=cuda"], "cannot run llvm-cpu"),
    ("profiler.py", ["--providers=cublas"], "unknown provider 'cublas'"),
])
def test_compile_and_profiler_reject_bad_input(tiny, script, args, message):
    result = run_script(script, "--generated-dir", tiny, *args)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not list(tiny.glob("generated/linalg/matmul/*/*.vmfb"))


@pytest.mark.parametrize("script", ["generator.py", "compile.py", "profiler.py"])
def test_help_documents_every_script(script):
    result = run_script(script, "--help")
    assert result.returncode == 0 and "--generated-dir" in result.stdout and "--dispatches" in result.stdout


def test_a_reader_that_leaves_early_does_not_end_the_run(tmp_path):
    """`generator.py | head -1`: the pipe closes after a line, and the dispatches are still all
    written, the run exiting 0 with no traceback (before: BrokenPipeError, nothing written)."""
    shape = ["--problem-m=64", "--problem-n=64", "--problem-k=64", "--data-types=f32"]
    run = subprocess.Popen([sys.executable, str(ROOT / "generator.py"), "--generated-dir",
                            str(tmp_path), *shape], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert run.stdout is not None and run.stdout.readline().startswith("[Generating]")
    run.stdout.close()
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 0 and "Traceback" not in stderr, stderr
    manifest = json.loads((tmp_path / "generated" / "manifest.json").read_text())
    (entry,) = manifest["operations"]
    written = {p.stem for p in tmp_path.glob("generated/linalg/matmul/*/*.mlir")}
    assert len(entry["configurations"]) > 4 and all(
        any(name.endswith(f"_{c['name']}") for name in written)
        for c in entry["configurations"]), written


def test_a_generated_dir_that_is_a_file_is_refused(tmp_path):
    taken = tmp_path / "afile"
    taken.write_text("not a folder")
    for folder in (taken, taken / "below"):
        one_line_error(run_script("generator.py", "--generated-dir", folder),
                       f"{taken} is a file, not a folder")
    assert taken.read_text() == "not a folder"


def test_a_negative_compile_timeout_is_refused(tiny):
    one_line_error(run_script("compile.py", "--generated-dir", tiny, "--compile-timeout=-1"),
                   "must be a positive number of seconds")


def test_a_leading_star_in_dispatches_is_a_shell_wildcard(tiny):
    result = run_script("profiler.py", "--generated-dir", tiny, "--dispatches=*f32t_*default$",
                        "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "1 dispatches would be profiled" in result.stdout


def csv_of(path, runtimes):
    import pandas as pd
    pd.DataFrame({"Dispatch": [f"d{i}" for i in range(len(runtimes))],
                  "Runtime(ms)": runtimes, "ci_low": runtimes, "ci_high": runtimes}).to_csv(path, index=False)
    return path


def test_compare_csv_refuses_a_runtime_that_is_not_a_number(tmp_path):
    old = csv_of(tmp_path / "old.csv", [1.0, 2.0])
    new = csv_of(tmp_path / "new.csv", [1.0, "fast"])
    one_line_error(run_script("compare.py", "--csv", old, new, "--output", tmp_path / "r.json"),
                   "Runtime(ms) of d1 is 'fast', not a number")
    assert not (tmp_path / "r.json").exists()


def test_compare_csv_output_in_a_new_folder_and_under_a_file(tmp_path):
    old = csv_of(tmp_path / "old.csv", [1.0, 2.0])
    made = run_script("compare.py", "--csv", old, old, "--output", tmp_path / "new" / "r.json")
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "new" / "r.json").is_file() and (tmp_path / "new" / "r.png").is_file()
    (tmp_path / "afile").write_text("")
    one_line_error(run_script("compare.py", "--csv", old, old, "--output",
                              tmp_path / "afile" / "r.json"), "cannot write")


@pytest.mark.parametrize("args,message", [
    (["--model", "--spec", "missing.mlir"], "--spec missing.mlir does not exist"),
    (["--model", "--spec", "README.md"], "not a valid MLIR module"),
    (["--spec", "tests/data/seed_matmul.mlir"], "--spec applies to --model"),
    (["--rewrites", "none"], "--rewrites applies to --model"),
    (["--model", "--rewrites", "winograd,bogus"], "--rewrites winograd,bogus: not a rewrite (bogus)"),
    (["--runtimes", "none"], "--runtimes applies to --model"),
    (["--dispatches", "reduction"], "--dispatches applies to --model"),
    (["--model", "--dispatches", "matmul,,conv"], "empty pattern in 'matmul,,conv'"),
    (["--model", "--runtimes", "local-sync,sync"], "--runtimes local-sync,sync: not a runtime (sync)"),
    (["--inputs", "missing.npy"], "--inputs: missing.npy does not exist"),
    (["--inputs", ","], "empty file name"),
    (["--inputs", "8x8xq7"], "unknown element type q7 (known: f64, f32"),
])
def test_autotune_checks_its_options_before_compiling(tmp_path, args, message):
    result = run_script("autotune.py", "--input", "tests/data/seed_matmul.mlir", "--output",
                        tmp_path / "x.csv", *args, timeout=60)
    one_line_error(result, message)
    assert not list(tmp_path.iterdir())


def test_bytes_that_are_no_mlir_are_one_line(tmp_path):
    junk = tmp_path / "junk.mlirbc"
    junk.write_bytes(b"\xff\xfe\x00binary")
    for script, args in (("autotune.py", ["--list"]),
                         ("compare.py", ["--variant", "a=", "--variant", "b=", "--random-inputs", "0"])):
        one_line_error(run_script(script, "--input", junk, *args, timeout=60),
                       "neither MLIR text nor MLIR bytecode")


def tune_failing_model(tmp_path, name: str, body: str, arguments: str, result: str):
    """autotune.py --model on a one-function torch module IREE fails on; no folder is left."""
    model = tmp_path / name
    model.write_text(f"func.func @main({arguments}) -> {result} {{\n{body}"
                     f"  return %0 : {result}\n}}\n")
    outcome = run_script("autotune.py", "--input", model, "--model", "--output",
                         tmp_path / "out" / "x.csv", timeout=120)
    assert not (tmp_path / "out").exists()  # nor the folders it would have written in
    return outcome


def test_a_model_iree_cannot_compile_is_one_line_naming_the_op_it_failed_on(tmp_path):
    """A model IREE fails on (here an op torch-mlir cannot lower, as PyTorch's GRU) is one
    line: IREE's diagnostic, the source line and op it points at, and how to export it so it
    arrives decomposed."""
    tensor = "!torch.vtensor<[2,4],f32>"
    result = tune_failing_model(
        tmp_path, "gru.mlir",
        f'  %0 = torch.operator "torch.aten.not_an_op"(%x) : ({tensor}) -> {tensor}\n',
        f"%x: {tensor}", tensor)
    one_line_error(result, "failed to legalize operation 'torch.operator'")
    assert "(at gru.mlir:2: torch.aten.not_an_op); torch-mlir does not lower" in result.stderr
    assert result.stderr.rstrip().endswith("(add_ops=[torch.ops.aten.not_an_op])"), result.stderr


def test_a_model_iree_crashes_on_is_one_line_naming_the_pattern_that_crashed(tmp_path):
    """IREE 3.13's iree-compile crashes (SIGSEGV) lowering torch's scatter of a source, as a
    mixture-of-experts router exports it (top-k gates scattered into a dense gate matrix): the
    error names the lowering that crashed, so the user knows which op to export another way."""
    gates, picks = "!torch.vtensor<[4,8],f32>", "!torch.vtensor<[4,2],f32>"
    ids = "!torch.vtensor<[4,2],si64>"
    result = tune_failing_model(
        tmp_path, "moe_gates.mlir",
        "  %dim = torch.constant.int -1\n"
        f"  %0 = torch.aten.scatter.src %g, %dim, %i, %s : {gates}, !torch.int, {ids}, {picks} "
        f"-> {gates}\n", f"%g: {gates}, %i: {ids}, %s: {picks}", gates)
    one_line_error(result, "iree-compile crashed (SIGSEGV) in "
                           "ConvertAtenScatterOp<AtenScatterSrcOp> (TorchToTMTensor.cpp)")


def test_a_model_of_float64_parameters_is_one_line_saying_to_save_them_in_float32(tmp_path):
    """A model whose weights are float64 (numpy's default): IREE 3.13 demotes the module to f32
    but not its parameters' type, and its verifier fails on the load; the line says so."""
    from iree.runtime import ParameterIndex
    archive = ParameterIndex()
    archive.add_buffer("w", np.eye(4).tobytes())
    archive.create_archive_file(str(tmp_path / "w.irpa"))
    tensor = "!torch.vtensor<[4,4],f64>"
    model = tmp_path / "f64.mlir"
    model.write_text(
        'util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<4x4xf64>\n'
        f"func.func @main(%x: {tensor}) -> {tensor} {{\n"
        "  %w = util.global.load @w : tensor<4x4xf64>\n"
        f"  %1 = torch_c.from_builtin_tensor %w : tensor<4x4xf64> -> {tensor}\n"
        f"  %0 = torch.aten.mm %x, %1 : {tensor}, {tensor} -> {tensor}\n"
        f"  return %0 : {tensor}\n}}\n")
    result = run_script("autotune.py", "--input", model, "--model", "--output",
                        tmp_path / "out" / "x.csv", "--calibration=off",
                        f"--parameters=model={tmp_path / 'w.irpa'}", timeout=120)
    one_line_error(result, "does not compile with IREE's defaults")
    assert result.stderr.rstrip().endswith(
        "its parameters are float64 (w), which IREE demotes to f32 and then cannot load: "
        "export the model and save its parameters in float32"), result.stderr


def test_gpu_dispatches_are_profiled_where_only_the_runtime_is(tiny, tools, tmp_path):
    """A GPU machine often has iree-base-runtime alone: profiling what was compiled elsewhere
    needs no iree-compile there; a CPU target (its calibration compiles) still does."""
    runtime_only = tmp_path / "runtime"
    runtime_only.mkdir()
    for tool in (tools.run_module, tools.benchmark_module):
        (runtime_only / tool.name).symlink_to(tool)
    gpu = tmp_path / "gpu"
    assert run_script("generator.py", "--generated-dir", gpu, "--device=cuda", "--problem-m=64",
                      "--problem-n=64", "--problem-k=64", "--data-types=f16").returncode == 0
    result = run_script("profiler.py", "--generated-dir", gpu, "--iree-bin-dir", runtime_only,
                        "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "would be profiled on cuda" in result.stdout
    cpu = run_script("profiler.py", "--generated-dir", tiny, "--iree-bin-dir", runtime_only,
                     "--dry-run")
    assert cpu.returncode == 2 and "cannot find iree-compile" in cpu.stderr
