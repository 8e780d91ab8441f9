"""The verifier: seeded inputs, the tolerance rule, and proof that it rejects what it must
(precision loss, scaled results, one wrong element) while accepting honest rounding."""
import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from helpers import run_script
from iree_dispatch_profiler.core.library import DataType, Device, Target, TensorDescription
from iree_dispatch_profiler.ops import attention, conv, cuda_tiles, matmul
from iree_dispatch_profiler.measure import verification


def mm(m, n, k, a="f32t", b="f32t", c="f32t", **more):
    return matmul.MatmulOperation(m, n, k, TensorDescription.parse(a), TensorDescription.parse(b),
                                  TensorDescription.parse(c), **more)


F32_OPS = {
    "matmul": mm(96, 80, 1024),
    "matmul_rhs_column_major": mm(64, 48, 2048, b="f32n"),
    "batch_matmul": mm(32, 40, 512, batch=3),
    "fused_bias_gelu": mm(64, 32, 768, epilogue="bias_gelu"),
    "conv2d": conv.Conv2dOperation(1, 10, 10, 64, 32, 3, 3, (1, 1), (1, 1), (1, 1)),
    "attention": attention.AttentionOperation(2, 32, 64, 128, 64),
}


def checked(op, result, inputs):
    return verification.compare(result, op.reference(*inputs), op, op.accumulation_scale(*inputs))


def f32_result(op, inputs):
    """An honest f32 implementation: BLAS in float32, blocked and reordered as it likes."""
    return op.compute(*inputs, dtype=np.float32).astype(np.float32)


@pytest.fixture(params=sorted(F32_OPS))
def f32_case(request):
    op = F32_OPS[request.param]
    return op, verification.seeded_inputs(op, seed=7)


def test_an_honest_f32_result_passes(f32_case):
    op, inputs = f32_case
    check = checked(op, f32_result(op, inputs), inputs)
    assert check.passed, check.detail
    assert 0 < check.max_abs_error < check.allowed * 10  # it did round: the check is not vacuous


def test_a_result_scaled_by_099_fails(f32_case):
    op, inputs = f32_case
    check = checked(op, f32_result(op, inputs) * np.float32(0.99), inputs)
    assert not check.passed and "allowed" in check.detail


def test_one_element_off_by_one_percent_fails(f32_case):
    op, inputs = f32_case
    result = f32_result(op, inputs)
    flat = result.reshape(-1)
    typical = int(np.argsort(np.abs(flat))[flat.size // 2])  # an element of median size
    flat[typical] *= np.float32(1.01)
    check = checked(op, result, inputs)
    assert not check.passed
    assert np.ravel_multi_index(check.worst_index, result.shape) == typical


@pytest.mark.parametrize("demoted", [DataType.bf16, DataType.f16], ids=lambda t: t.short)
def test_inputs_demoted_to_a_narrower_float_fail(f32_case, demoted):
    """What --iree-global-opt-demote-contraction-inputs-type does: the products of rounded
    inputs, summed in f32."""
    op, inputs = f32_case
    narrowed = [a.astype(demoted.numpy).astype(np.float32) for a in inputs]
    check = checked(op, f32_result(op, narrowed), inputs)
    assert not check.passed, check.detail


def test_an_f16_accumulator_is_allowed_its_rounding_but_not_half_the_answer():
    """IREE's default f16 x f16 -> f16 matmul on a CPU without f16 arithmetic rounds every
    partial sum to f16: honest, and far less precise than an f32 accumulator."""
    op = mm(24, 16, 1024, "f16t", "f16t", "f16t")
    a, b = inputs = verification.seeded_inputs(op, seed=3)
    acc = np.zeros((24, 16), np.float16)
    for k in range(op.k):  # sequential, each product and partial sum rounded to f16
        acc = (acc + (a[:, k, None].astype(np.float32) * b[None, k, :]).astype(np.float16)).astype(np.float16)
    assert checked(op, acc, inputs).passed
    reference = op.reference(*inputs)
    assert np.abs(acc - reference).max() > 1e-3 * np.abs(reference).max()  # it did lose precision
    assert not checked(op, (reference * 0.5).astype(np.float16), inputs).passed
    # the same result under an f32 accumulator's tolerance is too imprecise
    wider = mm(24, 16, 1024, "f16t", "f16t", "f32t")
    assert not checked(wider, acc.astype(np.float32), inputs).passed


def truncated_sum(a: np.ndarray, b: np.ndarray, block: int) -> np.ndarray:
    """a @ b as NVIDIA's tensor cores sum it: each block of products added exactly, the
    running f32 sum rounded toward zero."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for k in range(0, a.shape[1], block):
        exact = acc + a64[:, k:k + block] @ b64[k:k + block, :]
        rounded = exact.astype(np.float32)
        away = np.abs(rounded) > np.abs(exact)  # rounded to nearest, away from zero: step back
        rounded[away] = np.nextafter(rounded[away], np.float32(0))
        acc = rounded
    return acc


def test_a_truncating_accumulator_is_allowed_its_bias_but_not_a_wrong_answer():
    op = mm(48, 40, 4096, "f16t", "f16t", "f32t")
    inputs = verification.seeded_inputs(op, seed=5)
    reference, scale = op.reference(*inputs), op.accumulation_scale(*inputs)
    block = cuda_tiles.truncating_block(Target(Device.CUDA), op)
    assert block == cuda_tiles.TRUNCATING_BLOCK
    result = truncated_sum(*inputs, block)
    # round-to-nearest's tolerance rejects it: the roundings' errors add up rather than cancel
    assert not verification.compare(result, reference, op, scale).passed
    check = verification.compare(result, reference, op, scale, block)
    assert check.passed and "truncating every 4 products" in check.detail, check.detail
    assert check.max_abs_error > check.allowed / 20  # the allowance is not vacuous
    flat = result.copy().reshape(-1)
    typical = int(np.argsort(np.abs(flat))[flat.size // 2])
    flat[typical] *= np.float32(1.01)
    assert not verification.compare(flat.reshape(result.shape), reference, op, scale, block).passed
    assert not verification.compare(result * np.float32(0.99), reference, op, scale, block).passed
    # only where the accumulator truncates: f16 on a CPU, f32 on a GPU's FMA units round to nearest
    assert cuda_tiles.truncating_block(Target(), op) == 0
    assert cuda_tiles.truncating_block(Target(Device.CUDA), mm(48, 40, 64)) == 0


def test_integers_must_be_exact_and_use_the_types_range():
    op = mm(32, 32, 4096, "i8t", "i8t", "i32t")
    inputs = verification.seeded_inputs(op, seed=1)
    bound = verification.integer_bound(DataType.i8, op.k)
    assert 2 ** 31 > op.k * bound ** 2 and max(np.abs(a).max() for a in inputs) == bound
    assert verification.integer_bound(DataType.i8, 64) == 127
    exact = op.reference(*inputs).astype(np.int32)
    assert checked(op, exact, inputs).passed
    exact[3, 4] += 1
    check = checked(op, exact, inputs)
    assert not check.passed and check.worst_index == (3, 4) and check.rule == "exact"


def test_float_inputs_are_realistic_not_integers():
    op = mm(64, 64, 64, "bf16t", "bf16t", "f32t")
    for array in verification.seeded_inputs(op, seed=0):
        values = array.astype(np.float64)
        assert np.abs(values).max() <= 1 and values.std() > 0.5
        assert np.mean(values != np.round(values)) > 0.99  # not integer-valued
        assert array.dtype == ml_dtypes.bfloat16
    # no subnormals, which some kernels flush to zero (f16 data tiling without F16C)
    (half,) = verification.seeded_inputs(mm(1, 1, 1 << 20, "f16t", "f16t", "f32t"), seed=0)[:1]
    tiny = np.abs(half[(half != 0)]).min()
    assert tiny >= np.finfo(np.float16).tiny and np.count_nonzero(half == 0) < 200


def test_nan_inf_and_wrong_shape_fail():
    op = mm(8, 8, 16)
    inputs = verification.seeded_inputs(op, seed=0)
    result = f32_result(op, inputs)
    for bad in (np.nan, np.inf):
        broken = result.copy()
        broken[1, 2] = bad
        check = checked(op, broken, inputs)
        assert not check.passed and check.worst_index == (1, 2)
    assert not checked(op, result[:4], inputs).passed


def test_reference_cache_keeps_inputs_reference_and_scale(tmp_path):
    op = mm(16, 8, 32)
    cache = verification.ReferenceCache(tmp_path, op)
    first = cache.load_inputs()
    reference, scale = cache.expected()
    again = verification.ReferenceCache(tmp_path, op)
    assert all(np.array_equal(x, y) for x, y in zip(first, again.load_inputs()))
    saved_reference, saved_scale = again.expected()
    assert np.array_equal(reference, saved_reference) and np.array_equal(scale, saved_scale)
    assert cache.folder.name == verification.INPUTS  # older caches (other inputs) are not read


DEMOTE = ("--iree-global-opt-demote-contraction-inputs-type={} "
          "--iree-global-opt-demote-contraction-inputs-operations=all")


@pytest.mark.iree
@pytest.mark.parametrize("demoted", ["bf16", "f16"])
def test_the_profiler_rejects_a_matmul_compiled_with_demoted_inputs(tmp_path, demoted):
    """Real IREE: IREE's own input demotion is a FAILED verification, its default SUCCESS."""
    shape = ["--problem-m=128", "--problem-n=96", "--problem-k=1024", "--data-types=f32",
             "--dispatches=_default$"]
    for folder, extra in (("plain", ""), ("demoted", DEMOTE.format(demoted))):
        gen = tmp_path / folder
        assert run_script("generator.py", "--generated-dir", gen, *shape).returncode == 0
        done = run_script("compile.py", "--generated-dir", gen, f"--iree-compile-extra-flags={extra}")
        assert done.returncode == 0, done.stderr
        profiled = run_script("profiler.py", "--calibration=off", "--generated-dir", gen, "--profiling-enabled=false",
                              "--output", gen / "data.csv")
        rows = pd.read_csv(gen / "data.csv")
        if folder == "plain":
            assert profiled.returncode == 0 and set(rows["Verification"]) == {"SUCCESS"}
        else:
            assert profiled.returncode == 1 and set(rows["Verification"]) == {"FAILED"}
            assert "allowed" in rows["Reason"].iloc[0] and "f32 accumulator" in rows["Reason"].iloc[0]

