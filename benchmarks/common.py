"""What the benchmark scripts share: running our scripts, and the side-by-side ratio table."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "workloads"
sys.path.insert(0, str(ROOT))  # the package from this checkout, installed or not

from iree_dispatch_profiler.measure.blas import BLAS_PINS  # noqa: E402


def lines_as_printed() -> None:
    """Each printed line reaches a redirected stdout at once: a long benchmark's blocks are
    there as each ends, and an interrupted run keeps them."""
    sys.stdout.reconfigure(line_buffering=True)


def parse_args(description: str) -> tuple[argparse.Namespace, Path]:
    """Each benchmark's options, and its work folder (a new temporary one by default)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--work-dir", type=Path, default=None, help="keep generated files here")
    args = parser.parse_args()
    lines_as_printed()
    return args, args.work_dir or Path(tempfile.mkdtemp(prefix="bench_"))


POSITIVE = ("var",)  # parameters drawn positive: a batch norm's running variance (its root)


def write_parameters(source: Path, archive: Path, seed: int = 0) -> tuple[str, dict]:
    """An .irpa of random weights for the parameters `source` reads (of one scope): f32 ones
    scaled by 1/sqrt(its fan-in) as initializers do (those named in POSITIVE: their absolute
    value plus 0.5; bf16 ones the same, rounded), i8 ones over the whole range; returns
    (scope, {key: array}) so that PyTorch can be given the same weights."""
    from iree_dispatch_profiler.iree import modules
    found = modules.parameters(source)
    if not found:
        return "", {}
    from iree.runtime import ParameterIndex
    rng, index, arrays = np.random.default_rng(seed), ParameterIndex(), {}
    for _, key, kind in found:
        dims, _, element = kind.rpartition("x")
        if element not in ("f32", "bf16", "i8"):
            sys.exit(f"{source}: parameter {key} is {kind}; random weights are written for f32, "
                     "bf16 and i8")
        shape = tuple(int(d) for d in dims.split("x"))
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if element == "i8":  # a quantized weight: the whole int8 range
            arrays[key] = rng.integers(-128, 128, size=shape).astype(np.int8)
        else:
            arrays[key] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
            if key.rsplit(".", 1)[-1] in POSITIVE:
                arrays[key] = np.abs(arrays[key]) + np.float32(0.5)
            if element == "bf16":
                arrays[key] = arrays[key].astype(ml_dtypes.bfloat16)
        # the bytes as they lie (the module says their type)
        index.add_buffer(key, arrays[key].view(np.uint16) if element == "bf16" else arrays[key])
    archive.parent.mkdir(parents=True, exist_ok=True)
    index.create_archive_file(str(archive))
    return found[0][0], arrays


def best_blas_environment() -> dict[str, str]:
    """This environment without BLAS_PINS: for a command that times the numpy anchor, which is
    then measured at its best kernel."""
    return {name: value for name, value in os.environ.items() if name not in BLAS_PINS}


def script(name: str, *args, env: dict[str, str] | None = None) -> float:
    """Run one of our scripts as a user would; returns its wall time."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / name), *map(str, args)], cwd=ROOT,
                            capture_output=True, text=True, env=env)
    if result.returncode not in (0, 1):  # 1: some dispatch failed, which the table shows
        sys.exit(f"{name} failed:\n{result.stderr}")
    return time.perf_counter() - start


def compile_and_profile(work: Path, repetitions: int) -> tuple[pd.DataFrame, float, float]:
    """Compile with -j1 and with all cores (timed), then profile IREE and numpy side by side,
    numpy at its best BLAS kernel (BLAS_PINS unset for that command)."""
    cores = os.cpu_count() or 1
    # both timed without the compile cache: the second would otherwise be read back from it
    serial = script("compile.py", "--generated-dir", work, "-j", "1", "--force-compile",
                    "--no-cache")
    parallel = script("compile.py", "--generated-dir", work, "-j", str(cores), "--force-compile",
                      "--no-cache")
    output = work / "bench.csv"
    pinned = [f"{name}={os.environ[name]}" for name in BLAS_PINS if name in os.environ]
    if pinned:
        print(f"numpy's anchor at its best kernel: {', '.join(pinned)} unset for the profiler")
    script("profiler.py", "--generated-dir", work, "--output", output, "--providers=iree,numpy",
           f"--benchmark-repetitions={repetitions}", "--plot", work / "plots",
           env=best_blas_environment())
    return pd.read_csv(output), serial, parallel


def _families(configurations: pd.Index) -> dict[str, pd.Series]:
    """Which configurations each table column takes its best from."""
    names = configurations.to_series()
    cached = names.str.fullmatch(r"tile_config_\d+x\d+_\d+x\d+x\d+_\d+x\d+x\d+(_peel)?")
    return {"tiles": names.str.startswith("tile_config_") & ~cached, "cache": cached,
            "dt-tiles": names.str.startswith("data_tiling_"),
            "packed": names.str.startswith("packed_"), "inner": names == "default_inner_tiled",
            "decomp": names == "default_decomposed"}


def print_table(data: pd.DataFrame, repetitions: int) -> None:
    """GFLOP/s per operation of IREE default, data tiling, the best of each family of tuning
    configurations (plain tiles, tiles with cache levels, data-tiled, packed), numpy, and
    ratios."""
    first = data[data["Provider"] == "IREE Codegen"].iloc[0]
    # Figures from different machines must never be mixed up: say which CPU these are for.
    print(f"{first['target']} ({int(first['vector bytes'])}-byte vectors) on {first['cpu model']}, "
          f"{first['threads']} threads, IREE {first['IREE version']}, numpy {np.__version__}")
    print(f"cpu features: {first['cpu features']}")
    anchor = data[data["Provider"] != "IREE Codegen"]
    if len(anchor):
        print(f"numpy: {anchor.iloc[0]['target']}")
    width = max(len(o) for o in data["Operation"])
    header = (f"{'operation':{width}} {'default':>8} {'dt+ukr':>7} {'tiles':>7} {'cache':>7} "
              f"{'dt-tiles':>8} {'packed':>7} {'inner':>7} {'decomp':>7} {'numpy':>7} "
              f"{'best/def':>8} {'best/numpy':>10} {'its bounds':>12}  best configuration")
    print(header + "\n" + "-" * len(header))
    for operation, rows in data.groupby("Operation", sort=False):
        ok = rows[(rows["Verification"] == "SUCCESS") & (rows["GFLOPs"] > 0)
                  & (rows["Config applied"] != "no")].set_index("Configuration")
        iree = ok[ok["Provider"] == "IREE Codegen"]["GFLOPs"]
        best_of = {name: iree[chosen].max() if chosen.any() else np.nan
                   for name, chosen in _families(iree.index).items()}
        default = iree.get("default", np.nan)
        numpy = ok["GFLOPs"].get("numpy", np.nan)
        best = iree.max() if len(iree) else np.nan
        # what the two 95% intervals allow the ratio to be: a noisy anchor shows as wide bounds
        bounds = ""
        if len(iree) and "numpy" in ok.index:
            fast, anchor_row = ok.loc[iree.idxmax()], ok.loc["numpy"]
            bounds = (f"[{anchor_row['ci_low'] / fast['ci_high']:.2f}, "
                      f"{anchor_row['ci_high'] / fast['ci_low']:.2f}]")
        print(f"{operation:{width}} {default:8.1f} {iree.get('default_data_tiling', np.nan):7.1f} "
              f"{best_of['tiles']:7.1f} {best_of['cache']:7.1f} {best_of['dt-tiles']:8.1f} "
              f"{best_of['packed']:7.1f} {best_of['inner']:7.1f} {best_of['decomp']:7.1f} "
              f"{numpy:7.1f} {best / default:8.2f} {best / numpy:10.2f} {bounds:>12}  "
              f"{iree.idxmax() if len(iree) else 'none'}")
    bad = int((data["Verification"] != "SUCCESS").sum())
    print(f"(GFLOP/s, median of >= {repetitions} interleaved rounds; dt+ukr = default_data_tiling; "
          "tiles / cache / dt-tiles: the best tile config without and with cache levels, and the "
          "best data-tiled config; packed: the best matmul packing its own operands into a "
          "wider register tile (packs and unpack timed with it); inner: data tiling lowered to "
          "inner_tiled; decomp: an attention decomposed into matmuls (default_decomposed); "
          "its bounds: best/numpy from the two 95% intervals of time; IREE: the dispatches' time, "
          "numpy: the whole call of the reference (a @ b), which on small shapes adds its call "
          f"overhead; rows not verified SUCCESS: {bad} of {len(data)})")
