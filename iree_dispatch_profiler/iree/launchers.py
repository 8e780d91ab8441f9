"""IREE's tools launched as this project uses them: the one builder of iree-compile command
lines, and a module run once for its outputs.

Every call returns a typed result; a dispatch's own failure (compile error, crash, hang) is a
status with a reason, never an exception. Subprocesses get argument lists, timeouts and logs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.core.library import Target, UserError
from iree_dispatch_profiler.iree.process import Runner, run
from iree_dispatch_profiler.iree.tools import IreeTools

# Compilation
SPEC_FLAG = "--iree-codegen-tuning-spec-path"


NO_THREADS = "--mlir-disable-threading"


def compile_flags(target: Target, flags: list[str]) -> list[str]:
    """The one place that decides iree-compile's flags: the target's, then `flags`."""
    if any(flag.startswith(SPEC_FLAG) for flag in flags) and NO_THREADS not in flags:
        # IREE 3.13 deadlocks now and then (3 compiles in 30 here) when threads load the
        # tuning spec together (getOrLoadTransformLibraryModule); one thread never did.
        flags = [*flags, NO_THREADS]
    return [*target.compiler_flags(), *flags]


def compile_command(tools: IreeTools, target: Target, source: Path, output: Path,
                    flags: list[str]) -> list[str]:
    """The iree-compile command line, as run here (and as shown to reproduce a build)."""
    return [str(tools.compile), str(source), *compile_flags(target, flags), "-o", str(output)]


# Running and benchmarking
@dataclass(frozen=True)
class Buffer:
    """A raw little-endian file with its IREE type, e.g. `128x256xf16`."""

    path: Path
    shape: tuple[int, ...]
    element_type: str

    @property
    def flag(self) -> str:
        return f"{'x'.join(map(str, self.shape))}x{self.element_type}=@{self.path}"


@dataclass
class RunResult:
    ok: bool
    reason: str = ""


def lower(tools: IreeTools, target: Target, source: Path, work: Path, timeout: float) -> Path:
    """`source` after IREE's input phase, written to `work`: torch, StableHLO and TOSA become
    linalg, and the function signatures readable tensor types (see modules.signatures)."""
    lowered = work / "model_input.mlir"
    result = run(compile_command(tools, target, source, lowered, ["--compile-to=input"]), timeout)
    if not result.ok:
        raise UserError(f"{source} does not compile: {result.failure('iree-compile', timeout)}")
    return lowered


def run_module(tools: IreeTools, vmfb: Path, function: str, device: str, inputs: list[str],
               outputs: list[Path], timeout: float, flags: Sequence[str] = (),
               runner: Runner | None = None) -> RunResult:
    """Run once with `--input=` values, writing each result to its file of `outputs` (`.bin`:
    raw, since .npy cannot hold bf16; `.npy` otherwise)."""
    command = [str(tools.run_module), f"--module={vmfb}", f"--function={function}",
               f"--device={device}", *(f"--input={i}" for i in inputs), *flags,
               *(f"--output=@{o}" for o in outputs)]
    for output in outputs:
        output.unlink(missing_ok=True)
    result = (runner or run)(command, timeout)
    if not result.ok:
        return RunResult(False, result.failure("iree-run-module", timeout))
    if not all(o.is_file() for o in outputs):
        return RunResult(False, "iree-run-module wrote fewer outputs than asked")
    return RunResult(True)
