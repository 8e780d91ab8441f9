"""The resident timing source: IREE's Python runtime in one long-running worker process that
loads each vmfb once and times its calls on request, so that no sample pays a process start,
a module load or an input read. The worker is a process, not this one, so that a hung or
crashing dispatch costs a restart and a recorded reason, never the run.

Requests and replies are JSON lines: {"op": "load", "id", "vmfb", "function", "device",
"inputs"} and {"op": "time", "id", "calls"} -> {"ok", "ms": [one per call] | "reason"}."""
from __future__ import annotations

import json
import math
import selectors
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from iree_dispatch_profiler.iree import iree_jobs
from iree_dispatch_profiler.iree.timing import Sample
from iree_dispatch_profiler.iree.modules import ELEMENT_TYPES

RESIDENT = "resident"
DESCRIPTION = ("IREE's Python runtime in one long-running worker process: the median time of "
               "the whole calls of one sample")


class Resident:
    """The client of one worker; it starts on first use and again after a timeout or crash,
    loading again what was loaded. Its stderr goes to `log`."""

    def __init__(self, log: Path):
        self.log = log
        self.process: subprocess.Popen | None = None
        self.loads: dict[int, dict] = {}  # id -> its load request, sent again after a restart
        self.loaded: set[int] = set()  # ids the running worker has loaded

    def load(self, request: dict) -> int:
        key = len(self.loads)
        self.loads[key] = {**request, "op": "load", "id": key}
        return key

    def time(self, key: int, calls: int, timeout: float) -> tuple[list[float], str]:
        """(ms per call, '') or ([], why)."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        if key not in self.loaded:
            reply = self.ask(self.loads[key], timeout)
            if not reply.get("ok"):
                return [], reply["reason"]
            self.loaded.add(key)
        reply = self.ask({"op": "time", "id": key, "calls": calls}, timeout)
        return (reply["ms"], "") if reply.get("ok") else ([], reply["reason"])

    def start(self) -> None:
        self.close()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "iree_dispatch_profiler.iree.resident"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                env=iree_jobs.kept_heap_environment())

    def ask(self, request: dict, timeout: float) -> dict:
        process = self.process
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                if not selector.select(timeout):
                    self.close()
                    return {"ok": False, "reason": f"resident worker timed out after {timeout:g} s "
                                                   f"(log: {self.log})"}
            line = process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            code = process.wait()
            self.close()
            return {"ok": False, "reason": f"resident worker exited {code} (log: {self.log})"}
        return json.loads(line)

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
        self.loaded.clear()


@dataclass
class ResidentBenchmark:
    """One function of one vmfb timed in the resident worker; the same interface as
    timing.Benchmark. Each sample is one untimed call, then calls for about `seconds`."""

    resident: Resident
    vmfb: Path
    function: str
    device: str
    inputs: list[str]
    repeats: int = 1
    timeout: float = 120.0
    source: str = RESIDENT
    invocation_ms: float = math.nan
    invocations: list[float] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # no per-dispatch rows: whole calls
    key: int = -1

    def sample(self, seconds: float) -> Sample:
        if self.key < 0:
            self.key = self.resident.load({"vmfb": str(self.vmfb), "function": self.function,
                                           "device": self.device, "inputs": self.inputs})
        calls = max(3, math.ceil(seconds * 1e3 / self.invocation_ms)) if self.invocation_ms > 0 else 3
        ms, reason = self.resident.time(self.key, calls, self.timeout)
        if reason:
            return Sample(False, reason)
        self.invocation_ms = statistics.median(ms)
        self.invocations.append(self.invocation_ms / self.repeats)
        return Sample(True, ms=self.invocation_ms / self.repeats)


# ------------------------------------------------------------------------------------------
# The worker.
def _array(value: str):
    """An --input= value as numpy: `@x.npy`, or `2x3xf32=@x.bin` (raw little-endian)."""
    import numpy as np
    if value.startswith("@") and value.endswith(".npy"):
        return np.load(value[1:])
    shape_type, _, path = value.partition("=@")
    if not path:
        raise ValueError(f"input {value!r} is neither @FILE.npy nor SHAPExTYPE=@FILE")
    *dims, element = shape_type.split("x")
    if element not in ELEMENT_TYPES:
        raise ValueError(f"input element type {element} is not supported by the resident worker")
    return np.fromfile(path, dtype=ELEMENT_TYPES[element]).reshape([int(d) for d in dims])


def _serve() -> None:
    import iree.runtime as rt
    configs, loaded = {}, {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["op"] == "load":
                config = configs.setdefault(request["device"], rt.Config(request["device"]))
                module = rt.VmModule.mmap(config.vm_instance, request["vmfb"])
                context = rt.SystemContext(vm_modules=[module], config=config)
                function = context.modules[module.name][request["function"]]
                arguments = [rt.asdevicearray(config.device, _array(i)) for i in request["inputs"]]
                loaded[request["id"]] = (function, arguments)
                reply = {"ok": True}
            else:
                function, arguments = loaded[request["id"]]
                function(*arguments)  # untimed: the caches were another candidate's
                times = []
                for _ in range(request["calls"]):
                    start = time.perf_counter_ns()
                    function(*arguments)
                    times.append((time.perf_counter_ns() - start) * 1e-6)
                reply = {"ok": True, "ms": times}
        except Exception as error:  # reported to the client as this request's reason
            reply = {"ok": False, "reason": f"resident worker: {type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
