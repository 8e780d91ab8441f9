"""The numpy anchor says what it is: numpy's BLAS, its kernel and threads, and a warning when
the environment pins a kernel below what the CPU supports."""
from iree_dispatch_profiler.core.library import TensorDescription
from iree_dispatch_profiler.measure import blas, verification
from iree_dispatch_profiler.ops import matmul
from iree_dispatch_profiler.sweep import baselines


def mm(m, n, k):
    f32 = TensorDescription.parse("f32t")
    return matmul.MatmulOperation(m, n, k, f32, f32, f32)


OPENBLAS = [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.31",
             "architecture": "Haswell", "num_threads": 2}]


def test_the_numpy_anchor_names_its_blas_and_a_kernel_pinned_below_the_cpu():
    text, warning = blas.blas_summary(OPENBLAS, {}, {"avx2", "avx512f"})
    assert text == "OpenBLAS 0.3.31, Haswell kernel, 2 threads" and warning == ""
    _, pinned = blas.blas_summary(OPENBLAS, {"OPENBLAS_CORETYPE": "Haswell"}, {"avx512f"})
    assert "OPENBLAS_CORETYPE=Haswell" in pinned and "AVX-512" in pinned
    _, avx2 = blas.blas_summary(OPENBLAS, {"OPENBLAS_CORETYPE": "Haswell"}, {"avx2"})
    assert "pins" in avx2 and "AVX-512" not in avx2
    best = [{**OPENBLAS[0], "architecture": "SkylakeX"}]
    assert blas.blas_summary(best, {}, {"avx512f"})[1] == ""
    here, _ = blas.blas_summary()  # this process's numpy, as threadpoolctl sees it
    assert "threads" in here and "not identified" not in here
    kernel = baselines.NumpyKernel(mm(8, 8, 8), verification.seeded_inputs(mm(8, 8, 8), 0))
    assert here in kernel.description


def test_timed_calls_takes_the_statistic_asked_for_slow_calls_counted_by_the_mean():
    """iree-benchmark-module reports the mean of its calls; a caller timed beside it with the
    mean counts its slow calls too, where the median drops them."""
    import itertools
    import statistics
    import time
    pauses = itertools.cycle([0.0, 0.0, 0.0, 0.02])  # every fourth call is slow

    def call():
        time.sleep(next(pauses))
    median = blas.timed_calls(call, 0.2)
    mean = blas.timed_calls(call, 0.2, statistics.fmean)
    assert median.ok and mean.ok
    # a quarter of the calls take 20 ms: about 5 ms in the mean; the median is a fast call's
    assert mean.ms > 3 and median.ms < mean.ms / 2
