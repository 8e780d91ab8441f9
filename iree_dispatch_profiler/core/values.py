"""Text typed by users into values: sizes, ranges, counts, seconds, fractions, byte sizes,
choices and dispatch patterns. Each parser raises argparse.ArgumentTypeError with the one line
the user sees, so argparse reports it (exit 2) and config readers can reuse it."""
from __future__ import annotations

import argparse
import os
import re
from typing import Callable, Sequence


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false/1/0, got '{text}'")


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None


def parse_positive(text: str, minimum: int = 1) -> int:
    value = _parse_int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} must be positive" if minimum == 1
                                         else f"{value} must be >= {minimum}")
    return value


def parse_seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def parse_fraction(text: str) -> float:
    """A fraction in (0, 1): `0.02`, or `2%`."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a fraction (0.02 or 2%)") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} must lie between 0 and 1 (0.02 or 2%)")
    return value


def parse_sizes(text: str, minimum: int = 1) -> list[int]:
    """`768`, `64,128,256` or `start:end:step` (end included when the steps land on it)."""
    values: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if ":" not in item:
            values.append(parse_positive(item, minimum))
            continue
        parts = item.split(":")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"range '{item}' must be start:end:step")
        start, end = parse_positive(parts[0], minimum), parse_positive(parts[1], minimum)
        step = _parse_int(parts[2])
        if step <= 0:
            raise argparse.ArgumentTypeError(f"range '{item}' needs a positive step")
        if end < start:
            raise argparse.ArgumentTypeError(f"range '{item}' is empty (end < start)")
        values.extend(range(start, end + 1, step))
    return values


def parse_sizes_or_zero(text: str) -> list[int]:
    """Like parse_sizes, with 0 allowed (padding)."""
    return parse_sizes(text, minimum=0)


def parse_choices(text: str, known: Sequence[str], what: str) -> list[str]:
    """A comma-separated subset of `known`, in the order given, without repeats."""
    chosen = [item.strip() for item in text.split(",")]
    for item in chosen:
        if item not in known:
            raise argparse.ArgumentTypeError(f"unknown {what} '{item}' (known: {', '.join(known)})")
    return list(dict.fromkeys(chosen))


def choices(known: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type for a comma-separated subset of `known`."""
    return lambda text: parse_choices(text, known, what)


def parse_num_cpu(text: str) -> int:
    value = _parse_int(text)
    if value == -1:
        return os.cpu_count() or 1
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value}: use a positive count, or -1 for all cores")
    return value


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """`500M`, `10G`, `2GiB`, `123456` -> bytes."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    try:
        size = float(value[:-1] if unit else value) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 500M, 10G)") from None
    if size < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size cannot be negative")
    return int(size)


def compile_patterns(text: str) -> list[re.Pattern]:
    """Comma-separated patterns, each searched in dispatch names.

    A bare `*` (not after `.`, `)` or `]`) also reads as a shell wildcard, so the old profiler's
    `matmul_..._f16t_*_tensorcore_mmasync` keeps selecting what it says.
    """
    patterns = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            raise argparse.ArgumentTypeError(f"empty pattern in '{text}'")
        wildcard = re.sub(r"(?<![.)\]\\])\*", ".*", item)
        # the regular expression as written (when it is one), and its shell-wildcard reading
        for pattern in dict.fromkeys([item, wildcard]):
            try:
                patterns.append(re.compile(pattern))
            except re.error as error:
                if pattern == wildcard:
                    raise argparse.ArgumentTypeError(
                        f"invalid regular expression '{item}': {error}") from None
    return patterns


def matches(name: str, patterns: list[re.Pattern]) -> bool:
    """Whether a pattern of compile_patterns' finds itself in the dispatch `name`."""
    return any(p.search(name) for p in patterns)


def shown_patterns(patterns: list[re.Pattern]) -> str:
    """compile_patterns' patterns as the option's text again, once each."""
    return ",".join(dict.fromkeys(p.pattern for p in patterns))
