"""What IREE is measured against: numpy/OpenBLAS on the same problem, and this machine's peak
(BLAS GEMM GFLOP/s, large-copy GB/s) for the roofline."""
from __future__ import annotations

import functools
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from iree_dispatch_profiler.iree import iree_jobs
from iree_dispatch_profiler.iree.timing import Sample


# OpenBLAS's kernels that use AVX-512, by the names threadpoolctl reports
AVX512_KERNELS = {"SkylakeX", "CooperLake", "SapphireRapids"}
# Variables that pin OpenBLAS below its best kernel on some machine images
BLAS_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


@functools.cache
def _loaded_blas() -> list[dict]:
    """threadpoolctl's view of this process's libraries, read once (it scans every loaded one)."""
    from threadpoolctl import threadpool_info
    np.ones((2, 2)) @ np.ones((2, 2))  # the BLAS is loaded by its first call
    return threadpool_info()


def blas_summary(infos: list[dict] | None = None, environ=None,
                 cpu_flags: set[str] | None = None) -> tuple[str, str]:
    """What numpy's BLAS is (library, version, kernel, threads, as threadpoolctl reads them),
    and a warning when the environment pins a kernel below what this CPU supports (some
    machine images set OPENBLAS_CORETYPE=Haswell on AVX-512 CPUs, which halves numpy's GEMM),
    else ''."""
    if infos is None:
        infos = _loaded_blas()
    environ = os.environ if environ is None else environ
    blas = [i for i in infos if i.get("user_api") == "blas"]
    if not blas:
        return "BLAS not identified", ""
    info = blas[0]
    library = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(
        info.get("internal_api", ""), info.get("internal_api", "BLAS"))
    kernel = info.get("architecture") or ""
    text = (f"{library} {info.get('version') or ''}".strip()
            + (f", {kernel} kernel" if kernel else "") + f", {info.get('num_threads')} threads")
    pinned = environ.get("OPENBLAS_CORETYPE", "")
    flags = iree_jobs.cpu_flags() if cpu_flags is None else cpu_flags
    below = library == "OpenBLAS" and "avx512f" in flags and kernel not in AVX512_KERNELS
    warning = ""
    if pinned and below:
        warning = (f"OPENBLAS_CORETYPE={pinned} pins numpy's BLAS to its {kernel} kernel on an "
                   f"AVX-512 CPU: numpy runs below its best (unset {' and '.join(BLAS_PINS)} "
                   "for the anchor at its best kernel)")
    elif pinned:
        warning = f"OPENBLAS_CORETYPE={pinned} pins numpy's BLAS kernel ({kernel})"
    return text, warning


# float32 BLAS for every input type (numpy has no f16/bf16/int BLAS); our integer-valued
# inputs keep int8 products exact in float32 up to K = 2^21.
NUMPY_COMPUTE_TYPE = np.float32


class NumpyKernel:
    """What a numpy user runs for an operation, on arrays already in their own dtype: `a @ b`
    for f32; for f16, bf16 and i8 (no BLAS in numpy) the upcast to f32, then BLAS."""

    source = "in-process"  # timed by perf_counter in this process

    def __init__(self, operation, inputs: list[np.ndarray]):
        self.operation = operation
        self.inputs = inputs
        types = sorted({a.dtype.name for a in inputs} - {np.dtype(NUMPY_COMPUTE_TYPE).name})
        blas = blas_summary()[0]
        self.description = (f"numpy {np.__version__}: upcast {'/'.join(types)} to float32, then "
                            f"BLAS ({blas})" if types
                            else f"numpy {np.__version__}: float32 BLAS ({blas})")
        self.result = self()  # warm-up, and the value to verify

    def __call__(self) -> np.ndarray:
        return self.operation.compute(*self.inputs, dtype=NUMPY_COMPUTE_TYPE)

    def sample(self, seconds: float) -> Sample:
        return timed_calls(self, seconds)


def timed_calls(function, seconds: float) -> Sample:
    """ms per call of `function`: the median of calls filling about `seconds`, after one
    untimed call (BLAS threads asleep since the last sample wake up in it)."""
    function()
    times, start = [], time.perf_counter()
    while True:
        before = time.perf_counter()
        function()
        after = time.perf_counter()
        times.append((after - before) * 1e3)
        if after - start >= seconds and len(times) >= 3:
            return Sample(True, ms=statistics.median(times))


def _cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "iree-dispatch-profiler" / "machine_peak.json"


def machine_peak() -> dict:
    """{gflops, gbps} of this machine, measured once per CPU model and cached."""
    path = _cache_file()
    key = f"{iree_jobs.cpu_model()}|{os.cpu_count()}|numpy {np.__version__}"
    try:
        cached = json.loads(path.read_text())
        if cached.get("key") == key:
            return cached
    except (OSError, ValueError):
        pass
    a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
    a @ a
    gemm = statistics.median(_seconds(lambda: a @ a) for _ in range(5))
    big = np.ones(64 * 2**20 // 4, dtype=np.float32)  # 64 MiB, far beyond the caches
    out = np.empty_like(big)
    copy = statistics.median(_seconds(lambda: np.copyto(out, big)) for _ in range(5))
    peak = {"key": key, "gflops": 2 * 2048**3 / gemm / 1e9, "gbps": 2 * big.nbytes / copy / 1e9}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(peak))
    except OSError:
        pass  # an unwritable cache only costs a re-measurement
    return peak


def _seconds(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start
