"""What IREE is measured against: numpy/OpenBLAS on the same problem, and this machine's peak
(BLAS GEMM GFLOP/s, large-copy GB/s) for the roofline."""
from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from launchers import BenchmarkResult, cpu_model


# float32 BLAS for every input type (numpy has no f16/bf16/int BLAS); our integer-valued
# inputs keep int8 products exact in float32 up to K = 2^21.
NUMPY_COMPUTE_TYPE = np.float32


def time_numpy(operation, inputs: list[np.ndarray], repetitions: int,
               min_time: float) -> tuple[BenchmarkResult, np.ndarray]:
    """Median-able times (ms) of the numpy computation, conversion to float32 included: that
    is what a numpy user pays for an f16 or int8 problem."""
    dtype = NUMPY_COMPUTE_TYPE
    result = operation.compute(*inputs, dtype=dtype)  # warm-up, and the result to verify
    times = []
    for _ in range(repetitions):
        runs, start = 0, time.perf_counter()
        while True:
            operation.compute(*inputs, dtype=dtype)
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        times.append(elapsed / runs * 1e3)
    return BenchmarkResult(True, times_ms=times), result


def _cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "iree-dispatch-profiler" / "machine_peak.json"


def machine_peak() -> dict:
    """{gflops, gbps} of this machine, measured once per CPU model and cached."""
    path = _cache_file()
    key = f"{cpu_model()}|{os.cpu_count()}|numpy {np.__version__}"
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
