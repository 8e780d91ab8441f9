"""One iree-compile run as a self-contained job: what to compile goes in, every artifact comes out.

A job runs in a local thread or on a Dask worker. On a worker this module is shipped by value, so
it imports nothing of the project and nothing outside the standard library: a worker needs only
`distributed` and `iree-base-compiler`.

A job is a dict: `source` (the MLIR text), `flags` (the iree-compile flags, with `{dir}` where a
path into the job's own folder belongs), `files` (name -> text written into that folder first,
e.g. a tuning spec), `dumps` (folders there that IREE's dump flags fill), `timeout` (seconds), `arch`
(the llvm-cpu architecture the flags leave to the host, or "") and `compiler` (the iree-compile to
use, or "" to find the worker's own).
"""
from __future__ import annotations

import platform
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "x64": "x86_64"}
_compiler_cache: dict[str, str] = {}


def where() -> str:
    """`local`, or the Dask worker's address and host name."""
    try:
        from distributed import get_worker
        return f"{get_worker().address} ({socket.gethostname()})"
    except (ImportError, ValueError):
        return "local"


def find_compiler() -> str:
    """This machine's iree-compile: the wheel's native binary, else the one on PATH."""
    if "path" not in _compiler_cache:
        path = shutil.which("iree-compile") or ""
        try:
            import iree.compiler
            native = Path(iree.compiler.__file__).parent / "_mlir_libs" / "iree-compile"
            if native.is_file():
                path = str(native)
        except ImportError:
            pass
        _compiler_cache["path"] = path
    return _compiler_cache["path"]


def compiler_version(compiler: str = "") -> str:
    """`iree-compile --version`'s compiler version, or "" without a compiler."""
    compiler = compiler or find_compiler()
    if not compiler:
        return ""
    if compiler not in _compiler_cache:
        text = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL).stdout
        _compiler_cache[compiler] = next(
            (line.split("compiler version", 1)[1].strip() for line in text.splitlines()
             if "compiler version" in line), "unknown")
    return _compiler_cache[compiler]


def machine_arch() -> str:
    machine = platform.machine().lower()
    return _ARCH_ALIASES.get(machine, machine)


def describe() -> dict:
    """What this machine compiles with: for checking workers against the client."""
    try:
        import distributed
        dask_version = distributed.__version__
    except ImportError:
        dask_version = ""
    return {"where": where(), "arch": machine_arch(), "iree_version": compiler_version(),
            "compiler": find_compiler(), "distributed": dask_version}


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
        # Relative paths, run in the folder: the vmfb embeds them, and identical jobs must give
        # identical bytes wherever they run.
        command = [compiler, source.name, *(f.replace("{dir}", ".") for f in job["flags"]),
                   "-o", output.name]
        start = time.perf_counter()
        try:
            process = subprocess.run(command, capture_output=True, text=True, cwd=folder,
                                     timeout=job["timeout"], stdin=subprocess.DEVNULL)
            result["returncode"], result["stderr"] = process.returncode, process.stderr
        except subprocess.TimeoutExpired as expired:
            result["returncode"] = None
            stderr = expired.stderr or b""
            result["stderr"] = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        result["seconds"] = time.perf_counter() - start
        if result["returncode"] == 0 and output.is_file():
            result["vmfb"] = output.read_bytes()
            for name in job.get("dumps", []):
                dumped = Path(folder, name)
                result["dumps"][name] = {p.name: p.read_text() for p in sorted(dumped.glob("*"))
                                         if p.is_file()}
    return result
