"""Shared argparse groups and value parsers for the command-line scripts."""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from library import ARCH_FIELD, DEFAULT_RUNTIME_DEVICE, RUNTIME_DEVICES, Device, Target, UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


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


def compile_patterns(text: str) -> list[re.Pattern]:
    """Comma-separated patterns, each searched in dispatch names.

    A bare `*` (not after `.`, `)` or `]`) also reads as a shell wildcard, so the old profiler's
    `matmul_..._f16t_*_tensorcore_mmasync` keeps selecting what it says.
    """
    patterns = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            raise argparse.ArgumentTypeError(f"empty pattern in '{text}'")
        try:
            patterns.append(re.compile(item))
            wildcard = re.sub(r"(?<![.)\]\\])\*", ".*", item)
            if wildcard != item:
                patterns.append(re.compile(wildcard))
        except re.error as error:
            raise argparse.ArgumentTypeError(f"invalid regular expression '{item}': {error}") from None
    return patterns


def script_parser(description: str, target_recorded: bool) -> ArgumentParser:
    """The options every script shares: generated folder, IREE tools, dispatch filter, target."""
    parser = ArgumentParser(description=description,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_generated_dir(parser)
    add_iree_bin_dir(parser)
    add_dispatches(parser)
    add_target(parser, recorded=target_recorded)
    return parser


def add_protocol(parser: argparse.ArgumentParser, precision: float, time_budget: float) -> None:
    """When interleaved timing rounds stop (measurement.Protocol's defaults passed in)."""
    parser.add_argument("--precision", type=parse_fraction, default=precision, metavar="FRACTION",
                        help="measure in rounds until each speedup interval's half-width is below "
                             f"this fraction of the speedup (default: {precision:g})")
    parser.add_argument("--time-budget", type=parse_seconds, default=time_budget,
                        metavar="SECONDS", help="seconds of rounds (per operation) before stopping "
                                                f"short of --precision (default: {time_budget:g})")


def add_timeouts(parser: argparse.ArgumentParser, compile_seconds: float, run_seconds: float) -> None:
    parser.add_argument("--compile-timeout", type=parse_seconds, default=compile_seconds,
                        metavar="SECONDS", help=f"limit for one iree-compile (default: {compile_seconds:g})")
    parser.add_argument("--run-timeout", type=parse_seconds, default=run_seconds, metavar="SECONDS",
                        help=f"limit for one run or benchmark sample (default: {run_seconds:g})")


def add_generated_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--generated-dir", type=Path, default=Path("."),
                        help="folder in which the `generated/` folder is created (default: .)")


def add_dispatches(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dispatches", type=compile_patterns, default=None, metavar="REGEX,...",
                        help="comma-separated regular expressions searched in dispatch names; "
                             "`*` also works as a wildcard (default: all)")


def add_parameters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--parameters", action="append", default=[], metavar="SCOPE=FILE.irpa",
                        help="parameter archive, as in IREE's tools (repeatable)")


def parameter_flags(args: argparse.Namespace) -> list[str]:
    """The runtime flags of --parameters, each archive checked to exist."""
    for parameter in getattr(args, "parameters", []):
        file = parameter.rpartition("=")[2]
        if not Path(file).is_file():
            raise UserError(f"--parameters {parameter}: {file} does not exist")
    return [f"--parameters={p}" for p in getattr(args, "parameters", [])]


def add_iree_bin_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iree-bin-dir", "--build-dir", dest="iree_bin_dir", type=Path, default=None,
                        help="folder with iree-compile/iree-run-module/iree-benchmark-module, or an "
                             "IREE build folder with them under tools/ (default: the pip wheels')")


def add_target(parser: argparse.ArgumentParser, recorded: bool) -> None:
    """Target options. With `recorded`, defaults come from the manifest and a conflict is refused."""
    group = parser.add_argument_group("target")
    note = " (default: as generated)" if recorded else ""
    group.add_argument("--device", choices=[d.value for d in Device],
                       default=None if recorded else Device.LLVMCPU.value,
                       help=f"compiler backend{note or ' (default: llvm-cpu)'}")
    group.add_argument("--cpu", default=None if recorded else "host",
                       help=f"llvm-cpu target CPU: host (this machine's, as IREE resolves it) or "
                            f"an LLVM CPU name such as haswell, skylake-avx512, neoverse-n1"
                            f"{note or ' (default: host)'}")
    group.add_argument("--cpu-features", default=None if recorded else "",
                       help="llvm-cpu target features, e.g. +avx2,+fma (default: those of --cpu)")
    group.add_argument("--target-triple", default=None if recorded else "",
                       help="llvm-cpu target triple for another architecture, e.g. "
                            "aarch64-unknown-linux-gnu (default: this machine's)")
    group.add_argument("--cuda-arch", default=None if recorded else "sm_80",
                       help=f"CUDA SM architecture{note or ' (default: sm_80)'}")
    group.add_argument("--rocm-arch", default=None if recorded else "gfx942",
                       help=f"ROCm GFX architecture{note or ' (default: gfx942)'}")
    group.add_argument("--vulkan-target", default=None if recorded else "ampere",
                       help=f"Vulkan target{note or ' (default: ampere)'}")
    group.add_argument("--runtime-device", default=None,
                       help="IREE runtime device: local-task (default for llvm-cpu, all cores), "
                            "local-sync (one thread), cuda, hip, vulkan")


def target_from_args(args: argparse.Namespace) -> Target:
    """The target as asked; launchers.resolve_target makes its llvm-cpu part concrete."""
    device = Device(args.device)
    target = Target(device, args.cpu, args.cuda_arch, args.rocm_arch, args.vulkan_target)
    target = Target.from_json(target.to_json())  # keep only the architecture of its device
    if device is Device.LLVMCPU:
        target = replace(target, cpu_features=args.cpu_features, target_triple=args.target_triple)
    elif args.cpu != "host" or args.cpu_features or args.target_triple:
        raise UserError(f"--cpu, --cpu-features and --target-triple are llvm-cpu options, not "
                        f"{device.value} ones")
    return target


def check_target(args: argparse.Namespace, recorded: Target) -> Target:
    """The manifest's target; a device or architecture option given must agree with it."""
    asked = {"device": (args.device, recorded.device.value)}
    arch_field = ARCH_FIELD[recorded.device]  # other devices' architectures play no part
    asked[arch_field] = (getattr(args, arch_field), getattr(recorded, arch_field))
    if recorded.device is Device.LLVMCPU:
        if args.cpu == recorded.arch:  # the resolved name (znver3) also names it
            del asked["cpu"]
        asked["cpu_features"] = (args.cpu_features, recorded.cpu_features)
        asked["target_triple"] = (args.target_triple, recorded.target_triple)
    for key, (value, have) in asked.items():
        if value is not None and value != have:
            raise UserError(f"--{key.replace('_', '-')}={value} conflicts with the generated "
                            f"dispatches' target {recorded.name}; run generator.py again to change it")
    return recorded


def runtime_device(args: argparse.Namespace, target: Target) -> str:
    device = args.runtime_device or DEFAULT_RUNTIME_DEVICE[target.device]
    if device not in RUNTIME_DEVICES[target.device]:
        raise UserError(f"--runtime-device={device} cannot run {target.device.value} dispatches "
                        f"(use {' or '.join(RUNTIME_DEVICES[target.device])})")
    return device


def run_main(main: Callable[[Sequence[str] | None], int]) -> None:
    """Run a script's main: a UserError is one line on stderr and exit 2, never a traceback."""
    try:
        code = main(None)
    except UserError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted; finished results are kept", file=sys.stderr)
        code = 130
    sys.exit(code)
