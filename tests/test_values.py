import argparse

import pytest

from iree_dispatch_profiler.core import values
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.sweep.manifest import select


def test_sizes_accept_single_lists_and_inclusive_ranges():
    assert values.parse_sizes("768") == [768]
    assert values.parse_sizes("64,128") == [64, 128]
    assert values.parse_sizes("64:1024:128") == [64, 192, 320, 448, 576, 704, 832, 960]
    assert values.parse_sizes("64:256:64") == [64, 128, 192, 256]


@pytest.mark.parametrize("text", ["abc", "0", "-4", "64:32:8", "64:128:0", "64:128", "1:2:x", ""])
def test_sizes_reject_bad_input(text):
    with pytest.raises(argparse.ArgumentTypeError):
        values.parse_sizes(text)


@pytest.mark.parametrize("text,value", [("true", True), ("TRUE", True), ("1", True),
                                        ("false", False), ("False", False), ("0", False)])
def test_bool_accepts_exactly_true_false_1_0(text, value):
    assert values.parse_bool(text) is value


@pytest.mark.parametrize("text", ["yes", "no", "on", "2", ""])
def test_bool_rejects_anything_else(text):
    with pytest.raises(argparse.ArgumentTypeError):
        values.parse_bool(text)


def test_num_cpu_minus_one_means_all_cores_and_zero_is_refused():
    assert values.parse_num_cpu("-1") >= 1
    assert values.parse_num_cpu("3") == 3
    for bad in ("0", "-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            values.parse_num_cpu(bad)


class Named:
    def __init__(self, name):
        self.name = name


NAMES = [
    "matmul_3456x1024x2048_f16t_f16t_f16t_tile_config_128x128_32x5_tensorcore_mmasync",
    "matmul_3456x1024x2048_f16t_f16t_f16t_tile_config_128x256_32x3_tensorcore_mmasync",
    "matmul_3456x1024x2048_f16t_f16t_f16t_default",
    "matmul_3456x1024x2048_f32t_f32t_f32t_tile_config_128x128_16x5_tensorcore_mmasync",
]


def chosen(pattern):
    return [d.name for d in select([Named(n) for n in NAMES], values.compile_patterns(pattern))]


def test_seed_wildcard_pattern_selects_the_tensorcore_configs_of_one_operation():
    assert chosen("matmul_3456x1024x2048_f16t_f16t_f16t_*_tensorcore_mmasync") == NAMES[:2]


def test_patterns_are_regular_expressions_searched_in_names():
    assert chosen("f32t_.*_16x5") == [NAMES[3]]
    assert chosen("_default$,128x256") == [NAMES[1], NAMES[2]]


def test_pattern_selecting_nothing_and_invalid_regex_are_user_errors():
    with pytest.raises(UserError, match="selects none"):
        chosen("conv2d")
    with pytest.raises(argparse.ArgumentTypeError, match="invalid regular expression"):
        values.compile_patterns("matmul_(")
