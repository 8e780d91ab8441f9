"""What IREE is measured against: numpy/OpenBLAS on the same problem, as a numpy user runs it.
(The roofline's ceilings are measured in every session: measure/calibration.py.)"""
from __future__ import annotations

import numpy as np

from iree_dispatch_profiler.iree.timing import Sample
from iree_dispatch_profiler.measure.blas import blas_summary, timed_calls


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



