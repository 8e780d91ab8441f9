"""The seed auto-scheduler's `auto-scheduler.cfg`, read as printed there (repeated keys
included: the later wins), with our extra keys. Paths in [Env] are relative to the file's folder.

    [Env]            iree_bin (optional), input_file, output_file
    [SearchSpace]    tile_m, tile_n, tile_k, block_dim_x/y/z, pipeline_depth (lists);
                     vector_m, vector_n (CPU register block), peel ([0, 1]: loop
                     peeling), cache_m, cache_n, cache_k (cache levels of large
                     contractions; 0: none), data_tiling ([0, 1, 2]: off, on, on with
                     ukernels; large f32 matmuls), flags (lists of iree-compile flags)
    [SearchStrategy] tuner = GridTuner | RandomTuner | XGBoostTuner | TPETuner (or grid, ...),
                     n_trial, early_stop, seed
"""
from __future__ import annotations

import ast
import configparser
import math
from dataclasses import dataclass, field
from pathlib import Path

from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.tuning import strategies
from iree_dispatch_profiler.tuning.space import TILE_KNOBS

TILE_KEYS = TILE_KNOBS
GPU_KEYS = ("block_dim_x", "block_dim_y", "block_dim_z", "pipeline_depth")
SECTIONS = {
    "Env": ("iree_bin", "input_file", "output_file"),
    "SearchSpace": TILE_KEYS + GPU_KEYS + ("flags",),
    "SearchStrategy": ("tuner", "n_trial", "early_stop", "seed"),
}
MAX_THREADS = 1024
CHOICES = {"peel": (0, 1), "data_tiling": (0, 1, 2)}
ZERO_MEANS_NONE = ("cache_m", "cache_n", "cache_k")


@dataclass
class SchedulerConfig:
    path: Path
    iree_bin: Path | None = None
    input_file: Path | None = None
    output_file: Path | None = None
    lists: dict[str, list[int]] = field(default_factory=dict)  # TILE_KEYS given
    gpu: dict[str, list[int]] = field(default_factory=dict)  # GPU_KEYS given
    flags: list[str] | None = None
    tuner: str | None = None
    n_trial: int | None = None
    early_stop: int | None = None
    seed: int | None = None


def _list(key: str, text: str, kind: type) -> list:
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, list) or not value or not all(
            isinstance(v, kind) and not isinstance(v, bool) for v in value):
        what = "positive integers" if kind is int else "strings"
        raise UserError(f"[SearchSpace] {key} must be a non-empty list of {what}, "
                        f"like [32, 64]; got '{text.strip()}'")
    if key in CHOICES:
        if not set(value) <= set(CHOICES[key]):
            raise UserError(f"[SearchSpace] {key} must hold values among {list(CHOICES[key])}; "
                            f"got '{text.strip()}'")
    elif kind is int and any(v < (0 if key in ZERO_MEANS_NONE else 1) for v in value):
        what = "integers >= 0" if key in ZERO_MEANS_NONE else "positive integers"
        raise UserError(f"[SearchSpace] {key} must hold {what}; got '{text.strip()}'")
    return value


def _int(section: str, key: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise UserError(f"[{section}] {key} must be a positive integer; got '{text.strip()}'")
    return value


def load(path: Path) -> SchedulerConfig:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # keys as written
    try:
        with open(path, encoding="utf-8") as stream:
            parser.read_file(stream)
    except OSError as error:
        raise UserError(f"cannot read config {path}: {error.strerror}") from None
    except configparser.Error as error:
        raise UserError(f"config {path} cannot be read: {str(error).splitlines()[0]}") from None
    config = SchedulerConfig(path)
    for section in parser.sections():
        if section not in SECTIONS:
            raise UserError(f"config {path}: unknown section [{section}] "
                            f"(known: {', '.join(SECTIONS)})")
        for key, text in parser.items(section):
            if key not in SECTIONS[section]:
                raise UserError(f"config {path}: unknown key {key} in [{section}] "
                                f"(known: {', '.join(SECTIONS[section])})")
            _set(config, section, key, text)
    _check_gpu(config)
    return config


def _set(config: SchedulerConfig, section: str, key: str, text: str) -> None:
    folder = config.path.parent
    if section == "Env":
        value = folder / text.strip()
        if key == "iree_bin" and not value.is_dir():
            raise UserError(f"[Env] iree_bin: {value} is not a directory")
        setattr(config, key, value)
    elif key in TILE_KEYS:
        config.lists[key] = _list(key, text, int)
    elif key in GPU_KEYS:
        config.gpu[key] = _list(key, text, int)
    elif key == "flags":
        config.flags = _list(key, text, str)
    elif key == "tuner":
        name = text.strip()
        tuner = strategies.CONFIG_NAMES.get(name, name)
        if tuner not in strategies.NAMES:
            raise UserError(f"[SearchStrategy] tuner {name} is unknown (known: "
                            f"{', '.join([*strategies.CONFIG_NAMES, *strategies.NAMES])})")
        config.tuner = tuner
    else:
        setattr(config, key, _int(section, key, text))


def _check_gpu(config: SchedulerConfig) -> None:
    z = config.gpu.get("block_dim_z", [1])
    if any(v != 1 for v in z):
        raise UserError(f"[SearchSpace] block_dim_z must be [1]; got {z}")
    dims = [config.gpu.get(k, [1]) for k in ("block_dim_x", "block_dim_y", "block_dim_z")]
    largest = math.prod(max(d) for d in dims)
    if largest > MAX_THREADS:
        raise UserError(f"[SearchSpace] block_dim_x * block_dim_y * block_dim_z reaches {largest} "
                        f"threads; a thread block holds at most {MAX_THREADS}")
