"""Building a sweep's dispatches: the vmfb of each, its compile record
(what profiler.py reads of it), skipped when up to date, compiled many at a time."""
from __future__ import annotations

import json
import math
import shutil
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Generator

from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import Device, Target
from iree_dispatch_profiler.iree.builder import Builder
from iree_dispatch_profiler.iree.config_check import configuration_applied
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, compile_command, compile_flags
from iree_dispatch_profiler.sweep.manifest import Dispatch, DispatchPaths, Manifest


@dataclass
class CompileRecord:
    """What compile.py knows of one dispatch, saved beside its vmfb for profiler.py."""

    dispatch: str
    status: str  # "ok" or "failed"
    reason: str = ""
    compile_seconds: float = 0.0
    vmfb_bytes: int = 0
    config_applied: str = "n.a."  # yes / no / n.a. (default and flag variants)
    repeat_count: int = 1
    command: list[str] = field(default_factory=list)  # the iree-compile command, in full
    flags: list[str] = field(default_factory=list)  # target, configuration and extra flags
    iree_version: str = ""
    compiled_on: str = "local"  # or the Dask worker's address and host name
    cache: str = "off"  # hit: restored from the compile cache, no iree-compile ran; miss; off

    def save(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> "CompileRecord | None":
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def repeat_count(flops: int, target: Target) -> int:
    """Dispatch repetitions in the build: enough work per invocation (~1 ms on a CPU,
    ~0.1 ms on a GPU) that the invocation overhead stops counting."""
    work = 5e7 if target.device is Device.LLVMCPU else 1e10
    return max(1, min(100, math.ceil(work / max(flops, 1))))


def compile_dispatch(builder: Builder, paths: DispatchPaths, dispatch: Dispatch,
                     extra_flags: list[str], timeout: float, force: bool) -> tuple[CompileRecord, bool]:
    """Build the one vmfb of a dispatch, verified and timed alike (each run of a generated
    dispatch writes its whole result from its inputs, so R repeats leave what one run leaves;
    README, Timing); returns (record, was_up_to_date)."""
    target, config = builder.target, dispatch.configuration
    repeats = repeat_count(dispatch.operation.flops, target)
    flags = [*dispatch.operation.compile_flags, *config.flags, *extra_flags]
    if config.spec_root:
        flags.append(f"{SPEC_FLAG}={paths.spec}")
    # the repeats and the dump serve the measurement, not the configuration: left out of
    # record.flags, which users copy
    repeat = [f"--iree-hal-benchmark-dispatch-repeat-count={repeats}"] if repeats > 1 else []
    build_flags = [*flags, *repeat, f"--iree-hal-dump-executable-configurations-to={paths.configs}"]
    command = compile_command(builder.tools, target, paths.mlir, paths.vmfb, build_flags)
    previous = CompileRecord.load(paths.compile_record)
    if (not force and previous is not None and previous.status == "ok"
            and previous.command == command and previous.iree_version == builder.iree_version
            and _newer_than(paths.vmfb, paths.mlir)):
        return previous, True

    # An interrupted rebuild must not leave an "ok" record beside a half-written vmfb.
    for stale in (paths.compile_record, paths.vmfb):
        stale.unlink(missing_ok=True)
    shutil.rmtree(paths.configs, ignore_errors=True)
    record = CompileRecord(paths.name, "failed", repeat_count=repeats, command=command,
                           flags=compile_flags(target, flags), iree_version=builder.iree_version)
    result = builder.compile(paths.mlir, paths.vmfb, build_flags, timeout)
    record.compile_seconds = round(result.seconds, 3)
    record.compiled_on, record.cache = result.compiled_on, result.cache
    if result.ok:
        record.status = "ok"
        record.vmfb_bytes = paths.vmfb.stat().st_size
        record.config_applied = configuration_applied(paths.configs, config)
    else:
        record.reason = result.failure("iree-compile", timeout)
    paths.compile_log.write_text(f"$ {' '.join(command)}\n{result.stderr}")
    record.save(paths.compile_record)
    return record, False


def _newer_than(path: Path, source: Path) -> bool:
    return path.is_file() and source.is_file() and path.stat().st_mtime >= source.stat().st_mtime



def compile_dispatches(builder: Builder, manifest: Manifest, dispatches: list[Dispatch],
                       extra_flags: list[str], timeout: float, force: bool,
                       jobs: int) -> Generator[tuple[CompileRecord, bool], None, None]:
    """compile_dispatch for each dispatch, `jobs` at a time: (record, was_up_to_date) as each
    finishes. Each thread waits on one compile, here or on the cluster."""
    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(compile_dispatch, builder, manifest.paths(d), d, extra_flags, timeout,
                           force) for d in dispatches]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        # On Ctrl-C the running compiles got the signal too; queued ones must not start.
        pool.shutdown(wait=True, cancel_futures=True)
