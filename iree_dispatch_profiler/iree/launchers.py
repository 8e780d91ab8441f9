"""IREE's tools as this project runs them: find them, resolve the target, build compile command
lines, run and benchmark modules.

Every call returns a typed result; a dispatch's own failure (compile error, crash, hang) is a
status with a reason, never an exception. Subprocesses get argument lists, timeouts and logs.
"""
from __future__ import annotations

import difflib
import json
import math
import re
import signal
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Sequence

from iree_dispatch_profiler.core.library import CpuTarget, Device, Target, UserError
from iree_dispatch_profiler.iree import iree_jobs
from iree_dispatch_profiler.ops import cpu_tiles

TOOL_NAMES = ("iree-compile", "iree-run-module", "iree-benchmark-module")


@dataclass(frozen=True)
class IreeTools:
    compile: Path
    run_module: Path
    benchmark_module: Path
    profile: Path | None = None

    @classmethod
    def locate(cls, bin_dir: Path | None = None) -> "IreeTools":
        """The native executables: from `bin_dir` (or its tools/), else inside the pip wheels.

        The wheels' console scripts are Python wrappers costing ~0.1 s a call, so we bypass them.
        """
        found = {}
        for name in TOOL_NAMES:
            if bin_dir is None:
                candidates = [Path(p) for p in [iree_jobs.find_tool(name)] if p]
            else:
                candidates = [f / name for f in (bin_dir / "tools", bin_dir) if (f / name).is_file()]
            if not candidates:
                where = f"in {bin_dir} or {bin_dir}/tools" if bin_dir else \
                    "(install iree-base-compiler and iree-base-runtime, or pass --iree-bin-dir)"
                raise UserError(f"cannot find {name} {where}")
            found[name] = candidates[0]
        # iree-profile ships beside iree-benchmark-module; a build without it loses one source
        profile = found["iree-benchmark-module"].parent / "iree-profile"
        return cls(*(found[n] for n in TOOL_NAMES), profile if profile.is_file() else None)

    def version(self) -> str:
        return iree_jobs.compiler_version(str(self.compile))


# --------------------------------------------------------------------------------------------
# Target resolution: ask IREE what it makes of the CPU options, exactly as it will compile.
_PROBE = """func.func @probe(%a: tensor<4xf32>) -> tensor<4xf32> {
  %b = arith.addf %a, %a : tensor<4xf32>
  return %b : tensor<4xf32>
}
"""
_TARGET_FIELDS = {"name": r'cpu = "([^"]*)"', "features": r'cpu_features = "([^"]*)"',
                  "native_vector_bytes": r"native_vector_size = (\d+)",
                  "resolved_triple": r'target_triple = "([^"]*)"'}


def resolve_cpu_target(tools: IreeTools, target: Target, runner: Runner | None = None) -> CpuTarget:
    """IREE's resolution of --cpu/--cpu-features/--target-triple (`host` becomes the CPU and
    features of the machine `runner` runs on). Unknown names are a UserError: IREE only warns
    about an unknown aarch64 CPU or feature and compiles generic code."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "probe.mlir"
        source.write_text(_PROBE)
        asked_flags = replace(target, cpu_target=None).compiler_flags()
        result = (runner or run)([str(tools.compile), str(source), *asked_flags,
                                  "--compile-to=executable-sources"], 120)
    stderr = result.stderr
    asked = " ".join(target.requested_cpu_flags())
    if "Unknown CPU for target architecture" in stderr:
        arch = stderr.split("Unknown CPU for target architecture", 1)[1].split(".", 1)[0].strip()
        known = re.search(r"List of accepted CPUs: (.*)", stderr)
        names = [n.strip() for n in known.group(1).split(",")] if known else []
        close = difflib.get_close_matches(target.cpu, names, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise UserError(f"--cpu={target.cpu} is not a CPU LLVM knows for {arch}{hint} "
                        f"(list: iree-compile --iree-llvmcpu-target-cpu=help {asked})")
    unknown = sorted(set(re.findall(r"'([^']*)' is not a recognized feature", stderr)))
    if unknown:
        raise UserError(f"--cpu-features: {', '.join(unknown)} not known to LLVM for this target")
    if "createTargetMachine" in stderr or (not result.ok and target.target_triple):
        raise UserError(f"--target-triple={target.target_triple}: iree-compile cannot target it")
    if not result.ok:
        raise UserError(f"iree-compile cannot resolve the target ({asked}): "
                        f"{result.failure('iree-compile', 120)}")
    found = {key: re.search(pattern, result.stdout) for key, pattern in _TARGET_FIELDS.items()}
    if not all(found.values()):
        raise UserError(f"iree-compile printed no executable target for {asked}")
    values = {key: match.group(1) for key, match in found.items()}
    arch = values.pop("resolved_triple").split("-", 1)[0]
    host = target.cpu == "host" and not target.target_triple and runner in (None, run)
    return CpuTarget(values["name"], values["features"], target.target_triple, arch,
                     int(values["native_vector_bytes"]),
                     (host and host_cache_bytes(2)) or cpu_tiles.DEFAULT_L2_CACHE_BYTES,
                     (host and host_cache_bytes(3)) or cpu_tiles.DEFAULT_L3_CACHE_BYTES)


def host_cache_bytes(level: int) -> int:
    """A core's share of this machine's cache at `level` from sysfs (Linux): its size over the
    CPUs sharing it. 0 when unreadable (the CPU rules then assume a typical one)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() != str(level):
                continue
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
            sharing = sum(len(range(int(a), int(b or a) + 1)) for a, _, b in
                          (part.partition("-") for part in
                           (index / "shared_cpu_list").read_text().strip().split(",")))
            return int(size.rstrip("KMG")) * scale // max(sharing, 1)
        except (OSError, ValueError):
            continue
    return 0


def resolve_target(tools: IreeTools, target: Target, runner: Runner | None = None) -> Target:
    """The target with its llvm-cpu part resolved (other devices need no resolution)."""
    if target.device is not Device.LLVMCPU:
        return target
    return replace(target, cpu_target=resolve_cpu_target(tools, target, runner))


def check_runnable(tools: IreeTools, target: Target, runner: Runner | None = None,
                   machine: str = "this machine") -> None:
    """Refuse, in one line, to run llvm-cpu code the machine (`runner`'s) cannot execute."""
    if target.device is not Device.LLVMCPU:
        return
    host = resolve_cpu_target(tools, Target(), runner)
    why = target.resolved_cpu().cannot_run_on(host)
    if why:
        why = why.replace("this machine", machine)
        raise UserError(f"these dispatches were compiled for {target.resolved_cpu().summary}; "
                        f"{machine} cannot run them: {why}. Profile them on such a machine, or "
                        "generate again for --cpu=host")


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
            return f"{what} timed out after {timeout:g} s"
        if self.returncode < 0:
            return f"{what} crashed ({signal.Signals(-self.returncode).name})"
        # IREE's first diagnostic, without the `/long/path/x.mlir:3:5: error: ` prefix (the full
        # text stays in the log).
        for line in self.stderr.splitlines():
            match = re.search(r"\berror: (.*)", line)
            if match:
                return f"{what}: {match.group(1).strip().rstrip(':')[:300]}"
            # A flag it rejects: `iree-compile: Unknown command line argument '--x'.  Try: ...`
            match = re.search(r"(Unknown command line argument '[^']*')", line)
            if match:
                return f"{what}: {match.group(1)}"
        detail = (self.stderr.strip().splitlines() or ["no output"])[-1].strip()
        return f"{what} exited {self.returncode}: {detail[:300]}"


def run(command: list[str], timeout: float) -> ProcessResult:
    """`command` on this machine (iree_jobs.run_command, the one subprocess runner)."""
    return ProcessResult(**iree_jobs.run_command(command, timeout))


# How a tool is run: `run` here, or cluster.Remote.run on a chosen worker.
Runner = Callable[[list[str], float], ProcessResult]


# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
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

@dataclass
class Sample:
    """One timing: ms per computation, or why there is none."""

    ok: bool
    reason: str = ""
    ms: float = math.nan


# Google Benchmark's own warm-up before each sample: first-touch page faults and the worker
# threads' start belong to no computation.
WARMUP_SECONDS = 0.01

# Timing sources: which instrument reads a sample, and of what. The dispatch sources time the
# dispatches alone; on a 2-core VM the invocation of a 512^3 matmul took 1.35x its dispatch and
# varied three times as much.
DEVICE_PROFILING = "device-profiling"  # HAL host-execution events: median of each dispatch's runs
DISPATCH_STATISTICS = "dispatch-statistics"  # --dispatch_statistics: mean of its dispatches' runs
INVOCATION = "invocation"  # iree-benchmark-module's time of the whole call
TIMING_SOURCES = {
    DEVICE_PROFILING: "iree-benchmark-module --device_profiling_mode=host-execution, read with "
                      "iree-profile: the median of each dispatch's executions in one process",
    DISPATCH_STATISTICS: "iree-benchmark-module --dispatch_statistics: the mean time of the "
                         "dispatches in one process",
    INVOCATION: "iree-benchmark-module: the mean time of the whole call in one process",
}


@dataclass
class Benchmark:
    """One function of one vmfb as iree-benchmark-module times it, by `source`. Each `sample` is
    one process timing about `seconds` of work; after the first, the iteration count is fixed
    from the last time, so no time goes into Google Benchmark's own iteration search.

    A dispatch source that finds no dispatch rows (a backend without them, a tool without
    iree-profile) falls back to the next one, and `source` says which timed the samples."""

    tools: IreeTools
    vmfb: Path
    function: str
    device: str
    inputs: list[str]  # --input= values: `2x3xf32=@a.bin`, `@a.npy`
    repeats: int = 1  # dispatch repeat count compiled into the vmfb
    flags: list[str] = field(default_factory=list)  # --parameters=..., task topology
    timeout: float = 120.0
    source: str = DEVICE_PROFILING
    dispatches: tuple[str, ...] = ()  # with a dispatch source: time only these dispatches
    runner: Runner | None = None  # where it runs: here by default
    invocation_ms: float = math.nan
    rows: list[dict[str, tuple[float, float]]] = field(default_factory=list)  # per sample
    invocations: list[float] = field(default_factory=list)  # the whole call's ms, per sample
    runs_per_call: dict[str, int] = field(default_factory=dict)  # device profiling, per dispatch

    def __post_init__(self) -> None:
        # The profile is read here: a remote worker's file is out of reach.
        if self.source == DEVICE_PROFILING and (self.tools.profile is None
                                                or self.runner not in (None, run)):
            self.source = DISPATCH_STATISTICS

    def command(self, seconds: float, profile: Path | None = None,
                calls: int | None = None) -> list[str]:
        if calls is None and self.invocation_ms > 0:
            calls = max(1, math.ceil(seconds * 1e3 / self.invocation_ms))
        # Google Benchmark counts items: with --batch_size=R, N iterations are N / R calls
        time_flag = f"{calls * self.repeats}x" if calls else f"{seconds:g}s"
        if self.source == DEVICE_PROFILING:
            # no warm-up: every call is in the profile, and the first call's runs are dropped
            source_flags = ["--device_profiling_mode=host-execution",
                            f"--device_profiling_output={profile}", "--benchmark_min_warmup_time=0"]
        else:
            source_flags = [f"--benchmark_min_warmup_time={WARMUP_SECONDS}",
                            *(["--dispatch_statistics"] if self.source == DISPATCH_STATISTICS else [])]
        return [str(self.tools.benchmark_module), f"--module={self.vmfb}",
                f"--function={self.function}", f"--device={self.device}",
                *(f"--input={i}" for i in self.inputs), *self.flags,
                # the vmfb repeats each dispatch `repeats` times; batch_size divides that back out
                f"--batch_size={self.repeats}", "--benchmark_repetitions=1",
                f"--benchmark_min_time={time_flag}", "--benchmark_format=json", *source_flags]

    def sample(self, seconds: float) -> Sample:
        if self.source == DEVICE_PROFILING:
            return self.profiled_sample(seconds)
        result = (self.runner or run)(self.command(seconds), self.timeout)
        if not result.ok:
            return Sample(False, result.failure("iree-benchmark-module", self.timeout))
        invocation, rows = parse_benchmark_json(result.stdout)
        if invocation.ok:
            self.invocation_ms = invocation.ms * self.repeats
            self.rows.append(rows)
            self.invocations.append(invocation.ms)
        if self.source == DISPATCH_STATISTICS and not rows:
            self.source = INVOCATION  # this backend has none: the invocation it is
        if self.source == INVOCATION or not invocation.ok:
            return invocation
        return self.dispatch_sample(rows)

    def dispatch_sample(self, rows: dict[str, tuple[float, float]]) -> Sample:
        """The sample of the timed dispatches among one process's `rows`."""
        if not rows:
            return Sample(False, "no dispatch ran")
        if self.dispatches:
            if not set(self.dispatches) & set(rows):
                return Sample(False, f"no dispatch {', '.join(self.dispatches)} ran")
            return Sample(True, ms=sum(ms for name, (_, ms) in rows.items()
                                       if name in self.dispatches))
        return Sample(True, ms=sum(ms for _, ms in rows.values()))

    def profiled_sample(self, seconds: float) -> Sample:
        """One process under HAL device profiling. The first sample is preceded by one call
        alone, which tells how often each dispatch runs per call and how long a call takes."""
        with tempfile.TemporaryDirectory(prefix="idp-profile-") as folder:
            profile = Path(folder) / "sample.ireeprof"
            if not self.runs_per_call:
                calibration = self.profiled_run(1, profile)
                if isinstance(calibration, Sample):
                    return calibration
                self.invocation_ms, events = calibration
                self.runs_per_call = {name: len(times) for name, times in events.items()}
                if not self.runs_per_call:  # the tool gave no events: use the next source
                    self.source = DISPATCH_STATISTICS
                    return self.sample(seconds)
            calls = max(2, math.ceil(seconds * 1e3 / self.invocation_ms))
            timed = self.profiled_run(calls, profile)
        if isinstance(timed, Sample):
            return timed
        invocation_ms, events = timed
        if any(len(events.get(name, ())) < runs * calls
               for name, runs in self.runs_per_call.items()):
            # a profile that lost runs cannot be counted: the statistics time this benchmark
            self.source = DISPATCH_STATISTICS
            return self.sample(seconds)
        self.invocation_ms = invocation_ms
        self.invocations.append(invocation_ms / self.repeats)
        # the first call's runs are the warm-up (first touch, threads starting): dropped
        rows = {name: (runs / self.repeats,
                       statistics.median(events[name][runs:]) * runs / self.repeats)
                for name, runs in self.runs_per_call.items()}
        self.rows.append(rows)
        return self.dispatch_sample(rows)

    def profiled_run(self, calls: int, profile: Path
                     ) -> Sample | tuple[float, dict[str, list[float]]]:
        """(ms per call, each dispatch's run times in ms in start order), or the failure."""
        result = run(self.command(0, profile, calls), self.timeout)
        if not result.ok:
            return Sample(False, result.failure("iree-benchmark-module", self.timeout))
        invocation, _ = parse_benchmark_json(result.stdout)
        if not invocation.ok:
            return invocation
        read = run([str(self.tools.profile), "dispatch", "--format=jsonl", "--dispatch_events",
                    str(profile)], self.timeout)
        if not read.ok:
            return Sample(False, read.failure("iree-profile", self.timeout))
        return invocation.ms * self.repeats, parse_profile_events(read.stdout)


def parse_profile_events(text: str) -> dict[str, list[float]]:
    """`iree-profile dispatch --format=jsonl --dispatch_events`: each dispatch's run times (ms),
    in the order they started."""
    events: dict[str, list[tuple[int, float]]] = {}
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "host_dispatch_event" and event.get("valid", True):
            events.setdefault(event["key"], []).append(
                (event["start_host_time_ns"], event["duration_ns"] * 1e-6))
    return {name: [ms for _, ms in sorted(runs)] for name, runs in events.items()}


def parse_benchmark_json(text: str) -> tuple[Sample, dict[str, tuple[float, float]]]:
    """The mean real time per iteration of the one repetition, and each dispatch's (calls, ms)
    in it (--dispatch_statistics rows; the time of all its calls in one invocation, measured
    so: a dispatch called 4 times reports 4x the time of one call). All divided by batch_size."""
    try:
        report = json.loads(text)
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
        rows = report["benchmarks"]
        times = [b["real_time"] * scale[b["time_unit"]] for b in rows
                 if b.get("run_type") == "iteration" and "/process_time/" in b["name"]]
        dispatches = {b["name"].split("/", 1)[-1]: (b["calls"], b["real_time"] * scale[b["time_unit"]])
                      for b in rows if "calls" in b}
    except (ValueError, KeyError, TypeError) as error:
        return Sample(False, f"unreadable iree-benchmark-module output ({error})"), {}
    if not times or min(times) <= 0:
        return Sample(False, "iree-benchmark-module reported no time"), {}
    return Sample(True, ms=times[0]), dispatches


def run_facts(tools: IreeTools, target: Target, device: str, machine_facts: dict, timed_on: str,
              timing_source: str) -> dict[str, str]:
    """What a report's header says of a run: target, IREE, runtime device, threads, timing
    source, where and when."""
    cpu = target.cpu_target
    return {"target": f"{target.device.value}:{cpu.summary}" if cpu else target.name,
            "IREE version": tools.version(), "runtime device": device,
            "threads": str(runtime_threads(device, machine_facts.get("physical_cores", 0))),
            "cpu model": machine_facts.get("cpu_model", ""), "timed on": timed_on,
            "timing source": timing_source,
            "date": datetime.now().astimezone().isoformat(timespec="seconds")}


def runtime_threads(device: str, physical_cores: int) -> int | str:
    """Worker threads of the runtime device: local-task uses one per physical core."""
    if device == "local-sync":
        return 1
    return physical_cores if device == "local-task" else "N/A"
