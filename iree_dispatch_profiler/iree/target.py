"""The target as IREE resolves it (`host` and CPU options become the CPU, features and vector
width IREE will compile for), whether a machine can run it, and the facts a report's header
gives of a run."""
from __future__ import annotations

import difflib
import re
import tempfile
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from iree_dispatch_profiler.core.library import (LOCAL_SYNC, LOCAL_TASK, CpuTarget, Device,
                                                  Target, UserError)
from iree_dispatch_profiler.iree.process import Runner, run
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.ops import cpu_tiles

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


def target_summary(target: Target) -> str:
    """`llvm-cpu:znver3, x86_64, 32-byte vectors (avx avx2 ...)`, or the device and arch."""
    cpu = target.cpu_target
    return f"{target.device.value}:{cpu.summary}" if cpu else target.name


def machine_facts(device: str, facts: dict, timed_on: str) -> dict:
    """Where a run's times come from: the runtime device, its threads, the CPU model and the
    machine (the sweep's CSV rows and every report header)."""
    return {"runtime device": device,
            "threads": runtime_threads(device, facts.get("physical_cores", 0)),
            "cpu model": facts.get("cpu_model", ""), "timed on": timed_on}


def run_facts(tools: IreeTools, target: Target, device: str, facts: dict, timed_on: str,
              timing_source: str) -> dict[str, str]:
    """What a report's header says of a run: target, IREE, runtime device, threads, timing
    source, where and when."""
    return {"target": target_summary(target), "IREE version": tools.version(),
            **{k: str(v) for k, v in machine_facts(device, facts, timed_on).items()},
            "timing source": timing_source,
            "date": datetime.now().astimezone().isoformat(timespec="seconds")}


def runtime_threads(device: str, physical_cores: int) -> int | str:
    """Worker threads of the runtime device: local-task uses one per physical core."""
    if device == LOCAL_SYNC:
        return 1
    return physical_cores if device == LOCAL_TASK else "N/A"
