"""IREE tool runs as self-contained jobs: what to run goes in, every artifact comes out.

A job runs in a local thread or on a Dask worker. On a worker this module is shipped by value, so
it imports nothing of the project and nothing outside the standard library: a compile worker
needs only `distributed` and `iree-base-compiler`, a profiling worker also `iree-base-runtime`.

A compile job (`run_job`) is a dict: `source` (the MLIR text), `flags` (the iree-compile flags,
with `{dir}` where a path into the job's own folder belongs), `files` (name -> text written into
that folder first, e.g. a tuning spec), `dumps` (folders there that IREE's dump flags fill),
`timeout` (seconds), `arch` (the llvm-cpu architecture the flags leave to the host, or "") and
`compiler` (the iree-compile to use, or "" to find the worker's own).

A tool job (`run_tool`) runs iree-run-module, iree-benchmark-module or iree-compile with `args`
(`{dir}` as above), `files` (name -> bytes) and `outputs` (names of files it writes).

`run_command` is the project's one subprocess runner: an argument list, a timeout, no stdin,
the heap kept (KEPT_HEAP) and the output kept for the caller's log (process.run wraps it for
local runs).
"""
from __future__ import annotations

import functools
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "x64": "x86_64"}
_tool_cache: dict[str, str] = {}
_versions: dict[str, str] = {}


def where(worker=None) -> str:
    """`local`, or the Dask worker's address and host name (inside a task, or `worker`)."""
    try:
        from distributed import get_worker
        worker = worker or get_worker()
    except (ImportError, ValueError):
        return "local"
    return f"{worker.address} ({socket.gethostname()})"


def find_tool(name: str) -> str:
    """This machine's IREE tool: the wheel's native binary, else the one on PATH."""
    if name not in _tool_cache:
        path = shutil.which(name) or ""
        try:
            if name == "iree-compile":
                import iree.compiler
                folder = Path(iree.compiler.__file__).parent / "_mlir_libs"
            else:
                import iree.runtime  # noqa: F401  (makes iree._runtime_libs importable)
                import iree._runtime_libs
                folder = Path(iree._runtime_libs.__file__).parent
            if (folder / name).is_file():
                path = str(folder / name)
        except ImportError:
            pass
        _tool_cache[name] = path
    return _tool_cache[name]


def find_compiler() -> str:
    return find_tool("iree-compile")


def compiler_version(compiler: str = "") -> str:
    """`iree-compile --version`'s compiler version, or "" without a compiler."""
    compiler = compiler or find_compiler()
    if not compiler:
        return ""
    if compiler not in _versions:
        try:
            text = run_command([compiler, "--version"], 60)["stdout"]
        except OSError:
            text = ""
        _versions[compiler] = next(
            (line.split("compiler version", 1)[1].strip() for line in text.splitlines()
             if "compiler version" in line), "unknown")
    return _versions[compiler]


def machine_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def _cpuinfo(*keys: str) -> str | None:
    """The value of the first /proc/cpuinfo line starting with one of `keys` (None: none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(keys):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown"


def cpu_flags() -> set[str]:
    """The CPU's feature flags (x86 `flags`, Arm `Features`)."""
    return set((_cpuinfo("flags", "Features") or "").split())


def physical_cores() -> int:
    """What IREE's local-task device starts a worker thread for."""
    try:
        cores, core = set(), {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            core[key.strip()] = value.strip()
            if not line.strip():
                cores.add((core.get("physical id"), core.get("core id")))
                core = {}
        cores.add((core.get("physical id"), core.get("core id")))
        cores.discard((None, None))
        return len(cores) or os.cpu_count() or 1
    except OSError:
        return os.cpu_count() or 1


def describe(dask_worker=None) -> dict:
    """What this machine compiles and runs with: for checking workers against the client.
    (Client.run passes `dask_worker`; get_worker() only works inside a task.)"""
    try:
        import distributed
        dask_version = distributed.__version__
    except ImportError:
        dask_version = ""
    return {"where": where(dask_worker), "arch": machine_arch(), "iree_version": compiler_version(),
            "compiler": find_compiler(), "distributed": dask_version,
            "runtime": all(find_tool(t) for t in ("iree-run-module", "iree-benchmark-module")),
            "cpu_model": cpu_model(), "physical_cores": physical_cores()}


# glibc malloc settings (read at a process's start) under which it keeps what it frees: no
# block from a fresh mmap, no heap top handed back. IREE's runtime allocates a call's
# transients anew each call; a large one (79 MB of a 2048x1280x5120 f32 GEMM the tuner packs;
# not 38 MB) then comes from a fresh mapping whose every page faults on first touch, inside
# the call's dispatches: 20k page faults a call there, 211 -> 180 ms a call, its operand packs
# 25 -> 17 and 11 -> 7 ms (Zen 3). A served model keeps its memory, and the kernels are timed
# so. Other C libraries ignore these.
# (2 GiB - 1 each: mallopt takes a C int.)
KEPT_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(2**31 - 1), "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}


_MALLOPT = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}  # glibc's malloc.h


def kept_heap_environment() -> dict[str, str]:
    """This process's environment, with KEPT_HEAP."""
    return {**os.environ, **KEPT_HEAP}


@functools.cache  # once a process: find_library runs ldconfig (2 ms), and the setting stays
def keep_this_heap() -> bool:
    """KEPT_HEAP in this process, already running (glibc's mallopt): what is timed in it (the
    numpy and PyTorch anchors) runs with the heap IREE's tools get; False where the C library
    is not glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return all(libc.mallopt(_MALLOPT[key], int(value)) == 1 for key, value in KEPT_HEAP.items())


def run_command(command: list[str], timeout: float, cwd: str | None = None) -> dict:
    """returncode (None: killed at the timeout), stdout, stderr and seconds of `command`, run
    with the heap kept (KEPT_HEAP)."""
    start = time.perf_counter()
    try:
        process = subprocess.run(command, capture_output=True, text=True, cwd=cwd,
                                 timeout=timeout, stdin=subprocess.DEVNULL,
                                 env=kept_heap_environment())
        done = {"returncode": process.returncode, "stdout": process.stdout,
                "stderr": process.stderr}
    except subprocess.TimeoutExpired as expired:
        text = [s.decode(errors="replace") if isinstance(s, bytes) else s or ""
                for s in (expired.stdout, expired.stderr)]
        done = {"returncode": None, "stdout": text[0], "stderr": text[1]}
    return {**done, "seconds": time.perf_counter() - start}


def _run_in(folder: str, command: list[str], timeout: float) -> dict:
    """run_command in `folder`, with `{dir}` in the arguments meaning that folder: relative
    paths, since a vmfb embeds its source's path and identical jobs must give identical bytes
    wherever they run."""
    return run_command([command[0], *(a.replace("{dir}", ".") for a in command[1:])], timeout,
                       cwd=folder)


def run_job(job: dict) -> dict:
    """Compile; the result holds the return code (None: timed out), stderr, seconds, the vmfb's
    bytes, the dumped folders (folder -> file name -> text) and where it ran."""
    result = {"returncode": 1, "stderr": "", "seconds": 0.0, "vmfb": None, "dumps": {},
              "compiled_on": where()}
    compiler = job.get("compiler") or find_compiler()
    if not compiler:
        result["stderr"] = "error: no iree-compile on this machine (pip install iree-base-compiler)"
        return result
    if job.get("arch") and job["arch"] != machine_arch():
        result["stderr"] = (f"error: {machine_arch()} machine asked to compile for the host's "
                            f"{job['arch']}: give the target triple explicitly")
        return result
    with tempfile.TemporaryDirectory(prefix="iree_job_") as folder:
        for name, text in job.get("files", {}).items():
            Path(folder, name).write_text(text)
        source, output = Path(folder, "source.mlir"), Path(folder, "out.vmfb")
        source.write_text(job["source"])
        ran = _run_in(folder, [compiler, source.name, *job["flags"], "-o", output.name],
                      job["timeout"])
        result.update(returncode=ran["returncode"], stderr=ran["stderr"], seconds=ran["seconds"])
        if result["returncode"] == 0 and output.is_file():
            result["vmfb"] = output.read_bytes()
            for name in job.get("dumps", []):
                dumped = Path(folder, name)
                result["dumps"][name] = {p.name: p.read_text() for p in sorted(dumped.glob("*"))
                                         if p.is_file()}
    return result


def run_tool(job: dict) -> dict:
    """Run an IREE tool in a folder of its own; the result holds the return code (None: timed
    out), stdout, stderr, seconds and the output files' bytes."""
    result = {"returncode": 1, "stdout": "", "stderr": "", "seconds": 0.0, "outputs": {}}
    tool = find_tool(job["tool"])
    if not tool:
        result["stderr"] = f"error: no {job['tool']} on {where()} (pip install iree-base-runtime)"
        return result
    with tempfile.TemporaryDirectory(prefix="iree_tool_") as folder:
        for name, data in job["files"].items():
            Path(folder, name).write_bytes(data)
        result.update(_run_in(folder, [tool, *job["args"]], job["timeout"]))
        for name in job["outputs"]:
            if Path(folder, name).is_file():
                result["outputs"][name] = Path(folder, name).read_bytes()
    return result
