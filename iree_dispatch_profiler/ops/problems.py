"""Problem shapes (MatmulProblem, ConvShape), and shapes from a CSV with named columns
(--problems-file), e.g. the files in workloads/.

Column names differ per source; each field has the aliases below (first match wins), and
`--problems-file-columns field=column,...` maps any other name.
- matmul family: m, n, k and optional b (batch: such rows are batch_matmuls, the others plain
  matmuls); `transA`/`transB` = 1 (DeepBench) store that
  operand transposed, i.e. column-major (`n`); `active` = 0 (mmperf) skips a row.
- conv2d: n, h, w, c, f (output channels), kh, kw, and optional stride/padding/dilation, either
  one column or _h/_w pairs; rows with `groups` != 1 are skipped.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from iree_dispatch_profiler.core.library import UserError

MATMUL_ALIASES = {
    "m": ("m", "M"), "n": ("n", "N"), "k": ("k", "K"), "b": ("b", "B", "batch"),
    "trans_a": ("transA", "trans_a"), "trans_b": ("transB", "trans_b"),
}
CONV_ALIASES = {
    "n": ("n", "N", "batch"), "h": ("h", "H", "H_in"), "w": ("w", "W", "W_in"),
    "c": ("c", "C", "C_in"), "f": ("f", "F", "F_out", "k"),  # DeepBench's k = output channels
    "kh": ("kh", "KH", "filter_h"), "kw": ("kw", "KW", "filter_w"),
    "stride_h": ("stride_h", "stride"), "stride_w": ("stride_w", "stride"),
    "pad_h": ("pad_h", "pad", "padding"), "pad_w": ("pad_w", "pad", "padding"),
    "dil_h": ("dil_h", "dilation"), "dil_w": ("dil_w", "dilation"), "groups": ("groups",),
}


@dataclass(frozen=True)
class MatmulProblem:
    m: int
    n: int
    k: int
    b: int = 0
    trans_a: bool = False
    trans_b: bool = False


@dataclass(frozen=True)
class ConvShape:
    """A 2-D convolution problem: batch n, input h x w x c, filter kh x kw, f output channels,
    and (height, width) pairs of stride, zero padding and dilation."""

    n: int
    h: int
    w: int
    c: int
    f: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.padding[0] - self.dilation[0] * (self.kh - 1) - 1) // self.stride[0] + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.padding[1] - self.dilation[1] * (self.kw - 1) - 1) // self.stride[1] + 1


def parse_column_map(text: str | None) -> dict[str, str]:
    mapping = {}
    for item in filter(None, (i.strip() for i in (text or "").split(","))):
        field, sep, column = item.partition("=")
        if not sep or not field or not column:
            raise UserError(f"--problems-file-columns entry '{item}' must be field=column")
        mapping[field] = column
    return mapping


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = [name for name in reader.fieldnames or [] if name]
    except OSError as error:
        raise UserError(f"cannot read --problems-file {path}: {error.strerror}") from None
    except csv.Error as error:
        raise UserError(f"--problems-file {path} is not a CSV file: {error}") from None
    except UnicodeDecodeError:
        raise UserError(f"--problems-file {path} is not a text file") from None
    if not rows:
        raise UserError(f"--problems-file {path} has no rows")
    return header, rows


def _columns(path: Path, header: list[str], aliases: dict, mapping: dict[str, str],
             required: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for field, names in aliases.items():
        if field in mapping:
            if mapping[field] not in header:
                raise UserError(f"--problems-file-columns: {path} has no column '{mapping[field]}'")
            found[field] = mapping[field]
            continue
        present = [name for name in names if name in header]
        if present:
            found[field] = present[-1]  # as before: the last alias the header has
    missing = [f for f in required if f not in found]
    if missing:
        raise UserError(f"--problems-file {path} lacks columns for {', '.join(missing)} "
                        f"(has {', '.join(header)}; map them with --problems-file-columns)")
    return found


def _integer(path: Path, number: int, column: str, text: str | None, default: int | None = None) -> int:
    if text in (None, "") and default is not None:
        return default
    try:
        value = int(float(str(text)))  # None fails as 'None' does
    except (TypeError, ValueError):
        raise UserError(f"--problems-file {path} row {number}: {column} = '{text}' is not a number") from None
    if value < 0:
        raise UserError(f"--problems-file {path} row {number}: {column} = {value} is negative")
    return value


def matmul_problems(path: Path, mapping: dict[str, str]) -> list[MatmulProblem]:
    header, rows = _rows(path)
    columns = _columns(path, header, MATMUL_ALIASES, mapping, ("m", "n", "k"))
    problems = []
    for number, row in enumerate(rows, start=2):
        if row.get("active", "1") == "0":
            continue
        value = {f: _integer(path, number, c, row.get(c), 0) for f, c in columns.items()}
        if min(value["m"], value["n"], value["k"]) < 1:
            raise UserError(f"--problems-file {path} row {number}: sizes must be positive")
        problems.append(MatmulProblem(value["m"], value["n"], value["k"], value.get("b", 0),
                                      bool(value.get("trans_a")), bool(value.get("trans_b"))))
    return list(dict.fromkeys(problems))  # a shape listed twice is profiled once


def conv_problems(path: Path, mapping: dict[str, str]) -> list[ConvShape]:
    header, rows = _rows(path)
    columns = _columns(path, header, CONV_ALIASES, mapping, ("n", "h", "w", "c", "f", "kh", "kw"))
    defaults = {"stride_h": 1, "stride_w": 1, "pad_h": 0, "pad_w": 0, "dil_h": 1, "dil_w": 1, "groups": 1}
    problems = []
    for number, row in enumerate(rows, start=2):
        value = {f: _integer(path, number, c, row.get(c), defaults.get(f)) for f, c in columns.items()}
        value = {**defaults, **value}
        if value["groups"] != 1:
            continue  # grouped convolutions are not conv_2d ops
        if min(value[f] for f in ("n", "h", "w", "c", "f", "kh", "kw", "stride_h", "stride_w")) < 1:
            raise UserError(f"--problems-file {path} row {number}: sizes must be positive")
        problems.append(ConvShape(value["n"], value["h"], value["w"], value["c"], value["f"],
                                    value["kh"], value["kw"], (value["stride_h"], value["stride_w"]),
                                    (value["pad_h"], value["pad_w"]), (value["dil_h"], value["dil_w"])))
    return list(dict.fromkeys(problems))
