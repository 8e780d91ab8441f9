"""The command lines' shared parts: the parser, option groups every script or several share,
what their values become (target, runtime device, compile builder, timing machine), and the
one `main` wrapper that turns a UserError into one line and exit 2."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from iree_dispatch_profiler.core.library import (ARCH_FIELD, DEFAULT_RUNTIME_DEVICE,
                                                 RUNTIME_DEVICES, Device, Target, UserError)
from iree_dispatch_profiler.core.values import (compile_patterns, parse_fraction, parse_seconds,
                                                parse_size)
from iree_dispatch_profiler.iree.builder import Builder
from iree_dispatch_profiler.iree.dask_client import connect
from iree_dispatch_profiler.iree import modules
from iree_dispatch_profiler.iree.machines import Here, Remote
from iree_dispatch_profiler.iree.compile_cache import CompileCache, default_dir
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.measure import calibration
from iree_dispatch_profiler.iree.timers import DEFAULT_SOURCE, TIMING_SOURCES


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


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
    add_timing_source(parser)


def add_html(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument("--html", type=Path, metavar="FILE.html", required=required,
                        help="also write one self-contained HTML report (opens offline in a "
                             "browser; report.py makes the same from the result files later)")


def write_html(path: Path, page) -> None:
    """Write an --html report (a report.content.Page) and say where, with its size."""
    from iree_dispatch_profiler.report import outputs  # pandas: loaded only for a report
    size = outputs.write(path, page)
    print(f"HTML report: {path} ({size / 1e6:.2f} MB)")


def command_line() -> str:
    """This script's command line, as a report shows it."""
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])


def add_timing_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timing-source", choices=list(TIMING_SOURCES), default=DEFAULT_SOURCE,
                        help="what times each sample: " + "; ".join(
                            f"{name}: {what}" for name, what in TIMING_SOURCES.items())
                        + f" (default: {DEFAULT_SOURCE}; where it cannot time a benchmark, the "
                          "next dispatch source does, and the results say which)")
    # every timing session measures the machine it runs on, at its start and end
    parser.add_argument("--calibration", choices=[*calibration.LEVELS, calibration.OFF],
                        default="full",
                        help="the machine's state measured at the start and end of the session "
                             "(an in-cache compute kernel, a memory-bound one and numpy's GEMM): "
                             "full (about 4 s each), quick (under 1 s, a wide interval) or off "
                             "(default: full)")


def add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None, metavar="URL|off",
                        help="the results store every verified result goes into (and the tuner "
                             "reuses answers from): sqlite:///FILE or postgresql://USER@HOST/DB "
                             "(a team's server); off: none (default: SQLite in the cache folder)")


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


def parse_paths(text: str) -> list[Path]:
    """`@a.npy,@b.npy` (the @ as in IREE's tools is optional)."""
    paths = [Path(item.strip().removeprefix("@")) for item in text.split(",")]
    if not all(str(p) not in ("", ".") for p in paths):
        raise argparse.ArgumentTypeError(f"empty file name in '{text}'")
    return paths


def parse_inputs(text: str) -> list[modules.InputItem]:
    """`@a.npy,8x256xf32`: per argument a .npy file or a type to draw at random at."""
    try:
        return [modules.parse_input_item(item) for item in text.split(",")]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} in '{text}'") from None


def add_inputs(parser) -> None:
    parser.add_argument("--inputs", type=parse_inputs, default=None, metavar="@A.npy,8x256xf32",
                        help="per function argument, in order: a .npy file, or a type to draw "
                             "seeded random values at (how a dynamic size is set); checked "
                             "against the function's types")


def add_parameters(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
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
    """The target as asked; target.resolve_target makes its llvm-cpu part concrete."""
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


def add_compile_cluster(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("where compiles run, and the compile cache")
    group.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786",
                       help="compile on this Dask cluster (workers need distributed and "
                       "iree-base-compiler); default: this machine's cores")
    group.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                       help=f"the compile cache (default: {default_dir()}, under XDG_CACHE_HOME)")
    group.add_argument("--cache-max-size", type=parse_size, default=None, metavar="SIZE",
                       help="prune the least recently used entries beyond this (default: 10G)")
    group.add_argument("--no-cache", action="store_true", help="always run iree-compile")


def add_profile_on(parser: argparse.ArgumentParser, scheduler_too: bool) -> None:
    group = parser.add_argument_group("where dispatches run and are timed")
    if scheduler_too:
        group.add_argument("--scheduler", default=None, metavar="tcp://HOST:8786",
                           help="the Dask cluster of --profile-on")
    group.add_argument("--profile-on", default=None, metavar="WORKER",
                       help="verify and time on this Dask worker of --scheduler (its address or "
                       "host name; it needs iree-base-runtime too) instead of this machine")


def builder_from_args(args: argparse.Namespace, tools: IreeTools, target: Target,
                      iree_version: str, client=None) -> Builder:
    """The builder of --scheduler (connecting, unless given its `client`) and the cache."""
    cache = None
    if not args.no_cache:
        cache = CompileCache(args.cache_dir or default_dir())
        if args.cache_max_size is not None:
            cache.max_bytes = args.cache_max_size
    if client is None and args.scheduler:
        client = connect(args.scheduler, iree_version)
    return Builder(tools, target, iree_version, cache, client)


def machine_from_args(args: argparse.Namespace, iree_version: str, client=None) -> Here | Remote:
    """Where tools run and times come from: the worker of --profile-on (connecting, unless given
    the `client`), or this machine."""
    if args.profile_on is None:
        return Here()
    if not args.scheduler:
        raise UserError("--profile-on needs --scheduler (the cluster the worker belongs to)")
    return Remote(client or connect(args.scheduler, iree_version), args.profile_on)


class _OutputWhileRead:
    """sys.stdout for a reader that may leave early (`generator.py | head`): from then on the
    output is dropped and the work goes on, since its files are what it is for (a closed
    pipe had ended the run with a traceback, before it wrote anything)."""

    def __init__(self, stream):
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self._gone = True
        # what the stream still buffers is flushed at exit: to nowhere, not to the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def run_main(main: Callable[[Sequence[str] | None], int]) -> None:
    """Run a script's main: a UserError is one line on stderr and exit 2, never a traceback;
    a reader of its output that leaves early does not end it."""
    sys.stdout = _OutputWhileRead(sys.stdout)  # type: ignore[assignment]
    try:
        code = main(None)
    except UserError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted; finished results are kept", file=sys.stderr)
        code = 130
    sys.exit(code)
