"""A process run with an argument list and a timeout, as a typed result (the one subprocess
runner is iree_jobs.run_command), and how a tool is run here or on a worker (Runner)."""
from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass
from typing import Callable

from iree_dispatch_profiler.iree import iree_jobs

TIMED_OUT = "timed out"  # in the reason of a process that ran past its timeout


@dataclass
class ProcessResult:
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def failure(self, what: str, timeout: float) -> str:
        """One line saying why a failed process failed."""
        if self.returncode is None:
            return f"{what} {TIMED_OUT} after {timeout:g} s"
        if self.returncode < 0:
            return (f"{what} crashed ({signal.Signals(-self.returncode).name})"
                    f"{_crash_site(self.stderr)}")
        # IREE's first diagnostic, without the `/long/path/x.mlir:3:5: error: ` prefix (the full
        # text stays in the log), and where in the source it is: the line and its op
        lines = self.stderr.splitlines()
        for at, line in enumerate(lines):
            match = re.search(r"\berror: (.*)", line)
            if match:
                said = match.group(1).strip().rstrip(':')[:300]
                return f"{what}: {said}{_where(line, lines[at + 1:])}"
            # A flag it rejects: `iree-compile: Unknown command line argument '--x'.  Try: ...`
            match = re.search(r"(Unknown command line argument '[^']*')", line)
            if match:
                return f"{what}: {match.group(1)}"
        detail = (self.stderr.strip().splitlines() or ["no output"])[-1].strip()
        return f"{what} exited {self.returncode}: {detail[:300]}"


def _crash_site(stderr: str) -> str:
    """` in ConvertAtenScatterOp<AtenScatterSrcOp> (TorchToTMTensor.cpp)`: the innermost pattern
    or pass running when a compiler crashed, from LLVM's stack dump (`#12 0x... symbol file:0:0`):
    which op of the model to export another way, or to report; "" without one."""
    frame = re.search(r"^\s*#\d+ 0x[0-9a-f]+ (.*?)::(matchAndRewrite|runOnOperation)\(.*?"
                      r"(?:\s(\w+\.cpp):\d+:\d+)?$", stderr, re.MULTILINE)
    if not frame:
        return ""
    # the class without its namespaces: mlir::torch::(anonymous namespace)::X<mlir::Y> -> X<Y>
    name = re.sub(r"(?:\(anonymous namespace\)|\w+)::", "", frame[1])
    return f" in {name}" + (f" ({frame[3]})" if frame[3] else "")


def _where(error: str, after: list[str]) -> str:
    """` (at x.mlir:180: torch.aten.topk)` for a diagnostic `x.mlir:180:25: error: ...` whose
    next line quotes the source op, and how to export it decomposed where torch-mlir left it a
    `torch.operator`; "" where it names no file line."""
    place = re.match(r"\s*(?:.*/)?([^/:\s]+):(\d+):\d+: error:", error)
    if not place:
        return ""
    # an op, or the op torch-mlir could not lower: `torch.operator "torch.aten.gru.input"(...)`
    quoted = re.match(r"\s*(?:%[\w#:, %]*=\s*)?\"?([a-z_]\w*\.[\w.]+)\"?(?: \"([\w.]+)\")?",
                      after[0]) if after else None
    op = quoted and (quoted[2] or quoted[1])
    where = f" (at {place[1]}:{place[2]}{': ' + op if op else ''})"
    if quoted and quoted[2] and quoted[1] == "torch.operator":
        # iree-turbine keeps such ops (aten.lstm, aten.gru) whole unless its table decomposes
        # them; torch.export's own table leaves ops torch-mlir does not lower either
        python_op = re.sub(r"^torch\.", "torch.ops.", quoted[2])
        where += (f"; torch-mlir does not lower {quoted[2]}: export the model with it "
                  "decomposed, under iree.turbine.aot.decompositions.extend_aot_decompositions"
                  f"(add_ops=[{python_op}])")
    return where


def run(command: list[str], timeout: float) -> ProcessResult:
    """`command` on this machine (iree_jobs.run_command, the one subprocess runner)."""
    return ProcessResult(**iree_jobs.run_command(command, timeout))


# CPU scheduling policies a command can run under (Linux). SCHED_BATCH threads never preempt
# a running thread when they wake. IREE 3.13's semaphore wait, once woken, spins (pause, no
# yield) until the worker that signalled it has finished its callback: where the waiter wakes
# on that worker's core and preempts it, it spins out its time slice. On a 2-core VM that
# made a ResNeXt block's call 3.0-3.1 ms under the default policy and 1.6-1.9 under
# SCHED_BATCH, alternating processes.
BATCH = "batch"
POLICIES = ("", BATCH)  # "": the kernel's default (SCHED_OTHER)
_UNDER_BATCH = ("import os, sys; os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)); "
                "os.execvp(sys.argv[1], sys.argv[1:])")


def can_schedule(policy: str) -> bool:
    return not policy or hasattr(os, "SCHED_BATCH")


def scheduled(command: list[str], policy: str) -> list[str]:
    """`command` run under the scheduling `policy` ("" as it is): this Python sets it and
    execs the command, which keeps it, its threads too."""
    if not policy:
        return command
    if policy != BATCH or not can_schedule(policy):
        raise ValueError(f"no scheduling policy {policy!r} here")
    return [sys.executable, "-c", _UNDER_BATCH, *command]


# How a tool is run: `run` here, or machines.Remote.run on a chosen worker.
Runner = Callable[[list[str], float], ProcessResult]
