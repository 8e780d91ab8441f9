"""What the tests share: run the real scripts (and so the real IREE tools) as a user would,
the CPUs of each SIMD family, the profiler's quick settings. Imported as `helpers`."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from iree_dispatch_profiler.core.library import CpuTarget

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "tests" / "data"
# The scripts' compile cache (compile_cache.default_dir): one per test session, shared by its
# tests as by a user's runs, and never the user's own.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="idp_test_cache_")

# One CPU of each SIMD family, as IREE resolves them (native_vector_size), for tests that need
# no compiler.
AVX2 = CpuTarget("haswell", "+avx,+avx2,+fma,+f16c", "", "x86_64", 32, 256 << 10)
AVX512 = CpuTarget("skylake-avx512", "+avx,+avx2,+avx512f,+f16c,+fma", "", "x86_64", 64, 1 << 20)
NEON = CpuTarget("neoverse-n1", "+neon,+fullfp16,+dotprod", "aarch64-unknown-linux-gnu",
                 "aarch64", 16, 1 << 20)


# Profiler settings for tests: the protocol's minimum of rounds (enough for an interval: the
# budget ends a session only after them), whatever the precision; no calibration
# (tests/test_calibration.py measures it).
FAST = ["--benchmark-min-time=0.01", "--benchmark-repetitions=3", "--time-budget=0.3",
        "--calibration=off"]


# iree-compile's flag (and compile.py's) for code that is not run here (cross-compiled, or read
# only for its dumps): IREE accepts or rejects a config in its codegen passes (the vector-size
# check among them); stopping after them skips LLVM's object emission, about half of each
# compile. The full sweeps for other CPUs, with vmfbs, are the README's commands.
CODEGEN_ONLY = "--compile-to=executable-targets"
STOP_AFTER_CODEGEN = f"--iree-compile-extra-flags={CODEGEN_ONLY}"


# autotune.py's settings for tests: short timing batches and sessions, no calibration, no store
# (the tests check what happens, not which config is fastest)
QUICK_TUNING = ["--batch-seconds", "1", "--confirm-seconds", "2", "--calibration=off",
                "--store=off"]
# and with --model: no other runtimes timed at the end (about 10 s a run; the tests that
# check them ask for them)
QUICK_MODEL = [*QUICK_TUNING, "--runtimes=none"]


def run_script(script: str, *args: str, timeout: float = 600,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`env`: variables set for the script on top of this process's environment."""
    return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)


def default_f32_matmul(folder: Path, m: int, n: int, k: int):
    """IREE's default for one f32 matmul, generated and compiled in `folder`: its manifest,
    dispatch, paths and input buffers."""
    from iree_dispatch_profiler.sweep.manifest import Manifest
    from iree_dispatch_profiler.measure.verification import ReferenceCache
    assert run_script("generator.py", "--generated-dir", folder, f"--problem-m={m}",
                      f"--problem-n={n}", f"--problem-k={k}", "--data-types=f32t_f32t_f32t",
                      "--dispatches=_default$").returncode == 0
    assert run_script("compile.py", "--generated-dir", folder).returncode == 0
    manifest = Manifest.load(folder)
    dispatch = manifest.dispatches[0]
    cache = ReferenceCache(manifest.reference_folder(dispatch.operation), dispatch.operation)
    return manifest, dispatch, manifest.paths(dispatch), cache.ensure_inputs()


def curated(name: str):
    """The curated flag set `name` (tuning.flags.CURATED)."""
    from iree_dispatch_profiler.tuning.flags import CURATED

    (found,) = [f for f in CURATED if f.name == name]
    return found


def one_line_error(result: subprocess.CompletedProcess, message: str) -> None:
    """A script's refusal: exit 2 and `message` in one line of stderr, no traceback."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
