"""numpy's BLAS on this machine: what it is (library, version, kernel, threads, as
threadpoolctl reads them), whether the environment pins it below its best kernel, and its calls
timed in this process."""
from __future__ import annotations

import functools
import os
import statistics
import time

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
    # numpy's own first: scipy, when imported, loads an OpenBLAS of its own
    blas = sorted((i for i in infos if i.get("user_api") == "blas"),
                  key=lambda i: "numpy" not in str(i.get("filepath", "")))
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


def timed_calls(function, seconds: float, statistic=statistics.median) -> Sample:
    """ms per call of `function`: the `statistic` (median by default; statistics.fmean is what
    iree-benchmark-module reports of its calls) of calls filling about `seconds`, after one
    untimed call (BLAS threads asleep since the last sample wake up in it). The heap is kept
    as in IREE's timed tools (iree_jobs.KEPT_HEAP): no page faults per call, as a long-running
    process serving the call has none."""
    iree_jobs.keep_this_heap()
    function()
    times, start = [], time.perf_counter()
    while True:
        before = time.perf_counter()
        function()
        after = time.perf_counter()
        times.append((after - before) * 1e3)
        if after - start >= seconds and len(times) >= 3:
            return Sample(True, ms=statistic(times))
