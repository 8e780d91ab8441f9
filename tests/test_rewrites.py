"""Source rewrites (iree.rewrites): which ops a rewrite takes and how it writes them (no
compiler runs), that the rewritten op computes a depthwise convolution's numbers (IREE runs
it, numpy is the reference), and the tuner's phase that adopts a rewrite only when it
verifies and is faster, and ships it."""
import subprocess

import numpy as np
import pandas as pd
import pytest

from helpers import DATA_DIR, run_script

DEPTHWISE_MODEL = DATA_DIR / "depthwise_block.mlir"
QUICK = ["--batch-seconds", "1", "--confirm-seconds", "2", "--calibration=off", "--store=off"]


def depthwise(name: str, x: str, k: str, out: str, strides=(1, 1), dilations=(1, 1)) -> str:
    return (f"  %{name} = linalg.depthwise_conv_2d_{'nchw_chw' if name != 'nhwc' else 'nhwc_hwc'}"
            f" {{dilations = dense<[{dilations[0]}, {dilations[1]}]> : vector<2xi64>, "
            f"strides = dense<[{strides[0]}, {strides[1]}]> : vector<2xi64>}} ins(%{name}_x, "
            f"%{name}_k : {x}, {k}) outs(%{name}_o : {out}) -> {out}\n")


def module(ops: list[tuple[str, str, str, str, tuple, tuple]]) -> str:
    """A function of one argument per operand of each depthwise op, returning their results."""
    args, body, results = [], "", []
    for name, x, k, out, strides, dilations in ops:
        args += [f"%{name}_x: {x}", f"%{name}_k: {k}", f"%{name}_o: {out}"]
        body += depthwise(name, x, k, out, strides, dilations)
        results.append((f"%{name}", out))
    return (f"func.func @main({', '.join(args)}) -> ({', '.join(t for _, t in results)}) {{\n"
            f"{body}  return {', '.join(v for v, _ in results)} : "
            f"{', '.join(t for _, t in results)}\n}}\n")


STRIDED = ("strided", "tensor<2x16x13x13xf32>", "tensor<16x3x3xf32>", "tensor<2x16x5x5xf32>",
           (2, 2), (2, 2))


def test_depthwise_taps_takes_static_float_nchw_depthwise_convs_only():
    """An NCHW depthwise conv (strided, dilated, batch 2) becomes one elementwise generic over
    its 9 taps: each a strided slice of the input at the tap's dilated offset, times the
    kernel's channel vector for that tap. Channels-last (IREE vectorizes it), dynamic shapes
    and integers are left as they are; a module with none of them is returned unchanged."""
    from iree_dispatch_profiler.iree import rewrites

    others = [("nhwc", "tensor<1x10x10x8xf32>", "tensor<3x3x8xf32>", "tensor<1x8x8x8xf32>",
               (1, 1), (1, 1)),
              ("dynamic", "tensor<?x8x10x10xf32>", "tensor<8x3x3xf32>", "tensor<?x8x8x8xf32>",
               (1, 1), (1, 1)),
              ("ints", "tensor<1x8x10x10xi32>", "tensor<8x3x3xi32>", "tensor<1x8x8x8xi32>",
               (1, 1), (1, 1))]
    text, count = rewrites.depthwise_taps(module([STRIDED, *others]))
    assert count == 1
    assert text.count("linalg.depthwise_conv_2d_nchw_chw") == 2  # the dynamic and i32 ones
    assert text.count("linalg.depthwise_conv_2d_nhwc_hwc") == 1
    assert text.count("linalg.generic") == 1
    # tap (1, 2) at dilation 2: rows from 2, columns from 4, every second one
    assert "[0, 0, 2, 4] [2, 16, 5, 5] [1, 1, 2, 2]" in text
    assert "[0, 1, 2] [16, 1, 1] [1, 1, 1] : tensor<16x3x3xf32> to tensor<16xf32>" in text
    assert text.count("arith.mulf") == 9 and text.count("arith.addf") == 9
    untouched = module(others)
    assert rewrites.depthwise_taps(untouched) == (untouched, 0)


def reference_depthwise(x, k, init, strides, dilations):
    """numpy's NCHW depthwise convolution, tap by tap, into `init`."""
    out = init.astype(np.float64).copy()
    oh, ow = out.shape[2:]
    for kh in range(k.shape[1]):
        for kw in range(k.shape[2]):
            rows = slice(kh * dilations[0], kh * dilations[0] + strides[0] * (oh - 1) + 1, strides[0])
            cols = slice(kw * dilations[1], kw * dilations[1] + strides[1] * (ow - 1) + 1, strides[1])
            out += x[:, :, rows, cols] * k[None, :, kh, kw, None, None]
    return out


@pytest.mark.iree
def test_the_rewritten_depthwise_conv_computes_numpys_numbers(tools, tmp_path):
    """The rewritten strided, dilated, batch-2 depthwise conv, compiled and run by IREE, gives
    numpy's depthwise convolution; with one tap's product subtracted instead of added, it
    does not (the comparison can fail)."""
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.measure.verification import agreement

    text, count = rewrites.depthwise_taps(module([STRIDED]))
    assert count == 1
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in
              ((2, 16, 13, 13), (16, 3, 3), (2, 16, 5, 5))]
    wanted = reference_depthwise(*arrays, (2, 2), (2, 2))
    inputs = []
    for i, array in enumerate(arrays):
        np.save(tmp_path / f"in{i}.npy", array)
        inputs.append(f"--input=@{tmp_path / f'in{i}.npy'}")
    results = {}
    for name, source in (("taps", text), ("wrong", text.replace("arith.addf", "arith.subf", 1))):
        (tmp_path / f"{name}.mlir").write_text(source)
        subprocess.run([str(tools.compile), str(tmp_path / f"{name}.mlir"),
                        "--iree-hal-target-device=local",
                        "--iree-hal-local-target-device-backends=llvm-cpu",
                        "--iree-llvmcpu-target-cpu=host", "-o", str(tmp_path / f"{name}.vmfb")],
                       check=True, timeout=300)
        subprocess.run([str(tools.run_module), f"--module={tmp_path / f'{name}.vmfb'}",
                        "--function=main", *inputs, f"--output=@{tmp_path / f'{name}.npy'}"],
                       check=True, timeout=300, capture_output=True)
        results[name] = agreement(np.load(tmp_path / f"{name}.npy"), wanted.astype(np.float32))
    assert results["taps"].ok, results["taps"].detail
    assert not results["wrong"].ok


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
    assert "Source: rewritten by depthwise_taps (1 op(s) rewritten" in result.stdout
    assert str(source) in (tmp_path / "dw_compile.sh").read_text()
    data_tiling = (tmp_path / "dw_work" / "model_data_tiling.compile.log").read_text()
    assert "--iree-opt-data-tiling" in data_tiling and source.name not in data_tiling
    again = run_script(*args)
    assert again.returncode == 0 and f"Rewrites from {tmp_path / 'dw_rewrites.csv'}" in again.stdout


@pytest.mark.iree
def test_a_rewrite_whose_outputs_differ_is_a_row_and_not_adopted(tmp_path, monkeypatch):
    """A rewrite that changes the numbers (one tap subtracted) fails the verification against
    IREE's default: recorded with its reason, and the model's own source stays. The right one
    is then adopted, and a flag set measured on the rewritten source does not take the place
    of IREE's data tiling of the model (same set name, different module). Run in-process from
    the tuner's own phases, with the wrong rewrite in the registry first."""
    from iree_dispatch_profiler.cli import autotune
    from iree_dispatch_profiler.iree import rewrites
    from iree_dispatch_profiler.tuning import flags as module_flags
    from iree_dispatch_profiler.tuning import model
    from iree_dispatch_profiler.tuning.model import flag_search, rewrite_search

    def wrong(text):
        rewritten, count = rewrites.depthwise_taps(text)
        return rewritten.replace("arith.addf", "arith.subf", 1), count

    real = rewrites.REWRITES
    monkeypatch.setattr(rewrites, "REWRITES", (rewrites.Rewrite("wrong_taps", "a test", wrong),))
    args = autotune.parser().parse_args([
        "--input", str(DEPTHWISE_MODEL), "--model", "--output", str(tmp_path / "dw.csv"), *QUICK])
    s = autotune.settings(args)
    tuner, _ = model.start(s, autotune.prepare(args, s))
    given = s.input
    roots = model.baseline(tuner)
    assert rewrite_search.search_rewrites(tuner, roots) is roots
    record = pd.read_csv(tmp_path / "dw_rewrites.csv", keep_default_na=False)
    assert list(record["status"]) == ["wrong-result"] and list(record["chosen"]) == ["no"]
    assert "outputs differ from IREE's default" in record["reason"][0]
    assert s.input == given and not tuner.rewrite and tuner.default is tuner.iree_default
    assert not (tmp_path / "dw_source.mlir").exists()

    monkeypatch.setattr(rewrites, "REWRITES", real)
    (tmp_path / "dw_rewrites.csv").unlink()
    assert rewrite_search.search_rewrites(tuner, roots) is not roots
    assert s.input == tmp_path / "dw_source.mlir" and tuner.default.name == "default"
    data_tiling = next(f for f in module_flags.CURATED if f.name == "data_tiling")
    _, built = flag_search.measure_round(tuner, [data_tiling])
    own = tuner.data_tiling_build()
    assert built["data_tiling"][0].vmfb != own.vmfb
    assert "dw_source" in (tmp_path / "dw_work" / "source_data_tiling.compile.log").read_text()
    assert "dw_source" not in (tmp_path / "dw_work" / "model_data_tiling.compile.log").read_text()
