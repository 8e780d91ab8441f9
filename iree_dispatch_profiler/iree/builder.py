"""Where compiles run: this machine's cores or a Dask cluster, behind the compile cache.

Callers hand `Builder.compile` an iree-compile job as they would run it here (source, output and
dump paths, flags). The builder turns it into a path-free job (iree_jobs), answers it from the
cache, from an identical job already in flight, or by running it (in the calling thread, or on a
Dask worker), then writes the vmfb and dumps where the caller asked.
"""
from __future__ import annotations

import shutil
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from iree_dispatch_profiler.core.files import atomic_file
from iree_dispatch_profiler.core.library import Device, Target, UserError
from iree_dispatch_profiler.iree import iree_jobs
from iree_dispatch_profiler.iree.compile_cache import CompileCache, job_key
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, compile_flags
from iree_dispatch_profiler.iree.process import ProcessResult
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.iree.dask_client import ByValue, describe_workers, host_arch

RETRIES = 2  # a job whose worker died, or that raised, runs again this often elsewhere


DUMP_FLAGS = ("--iree-hal-dump-executable-configurations-to",
              "--iree-hal-dump-executable-benchmarks-to", "--iree-hal-dump-executable-sources-to")


@dataclass
class Compiled(ProcessResult):
    """An iree-compile result, with where it ran and whether the cache answered it."""

    compiled_on: str = "local"
    cache: str = "off"  # hit / miss / off


class Builder:
    """Compiles for one target: from the cache, else here or on the Dask cluster of `client`."""

    def __init__(self, tools: IreeTools, target: Target, iree_version: str,
                 cache: CompileCache | None, client=None):
        self.tools, self.target, self.iree_version = tools, target, iree_version
        self.cache, self.client = cache, client
        self._inflight: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._compile_job = ByValue(iree_jobs.run_job) if client is not None else None
        arch = host_arch(target) if client is not None else ""
        if arch:  # the flags leave the architecture to the worker: it must be the client's
            others = [info["where"] for info in describe_workers(client).values()
                      if info["arch"] != arch]
            if others:
                raise UserError(f"the target is this {arch} host's, and workers "
                                f"{', '.join(others)} are not {arch} (generate with --target-triple)")
        if target.device is Device.LLVMCPU:
            cpu = target.resolved_cpu()
            self.target_key = {"triple": cpu.triple, "cpu": cpu.name, "features": cpu.features,
                               "arch": cpu.arch}
        else:
            self.target_key = target.to_json()

    @property
    def where(self) -> str:
        if self.client is None:
            return "this machine"
        return f"the Dask cluster at {self.client.scheduler.address} ({self.slots} worker threads)"

    @property
    def slots(self) -> int:
        """Compiles the cluster runs at once (0 without one)."""
        if self.client is None:
            return 0
        return sum(w["nthreads"] for w in self.client.scheduler_info()["workers"].values())

    def compile(self, source: Path, output: Path, flags: list[str], timeout: float) -> Compiled:
        """iree-compile `source` to `output` with the target's and `flags`; dump flags' folders
        are filled as iree-compile would fill them."""
        job, dumps = self._job(source, flags, timeout)
        key = job_key(job, self.iree_version, self.target_key)
        with self._lock:
            running = self._inflight.get(key)
            if running is None:
                running = self._inflight[key] = Future()
                owner = True
            else:
                owner = False
        if owner:
            try:
                result = self.cache.get(key) if self.cache else None
                if result is None:
                    result = self._run(job)
                    result["cache"] = "miss" if self.cache else "off"
                    if self.cache:
                        self.cache.put(key, result)
                running.set_result(result)
            except BaseException as error:
                running.set_exception(error)
                raise
            finally:
                with self._lock:
                    del self._inflight[key]
        else:
            result = {**running.result(), "cache": "hit"}  # its twin compiled it just now
        return self._materialize(result, output, dumps)

    def _job(self, source: Path, flags: list[str], timeout: float) -> tuple[dict, dict[str, Path]]:
        """The path-free job, and where its dump folders go here."""
        job_flags, files, dumps = [], {}, {}
        for flag in compile_flags(self.target, flags):
            name, _, value = flag.partition("=")
            if name in DUMP_FLAGS:
                folder = name.rsplit("-", 2)[-2]  # configurations / benchmarks / sources
                dumps[folder] = Path(value)
                flag = f"{name}={{dir}}/{folder}"
            elif name == SPEC_FLAG:
                files["spec.mlir"] = Path(value).read_text()
                flag = f"{name}={{dir}}/spec.mlir"
            job_flags.append(flag)
        job = {"source": source.read_text(), "flags": job_flags, "files": files,
               "dumps": sorted(dumps), "timeout": timeout,
               "arch": host_arch(self.target) if self.client is not None else "",
               "compiler": "" if self.client is not None else str(self.tools.compile)}
        return job, dumps

    def _run(self, job: dict) -> dict:
        if self.client is None:
            return iree_jobs.run_job(job)
        try:
            return self.client.submit(self._compile_job, job, pure=False, retries=RETRIES).result(
                timeout=job["timeout"] * (RETRIES + 1) + 120)
        except Exception as error:  # a lost worker (KilledWorker), a cancelled job, a timeout
            return {"returncode": 1, "stderr": f"error: the Dask job failed after {RETRIES} "
                    f"retries: {type(error).__name__}: {error}", "seconds": 0.0, "vmfb": None,
                    "dumps": {}, "compiled_on": "dask"}

    def _materialize(self, result: dict, output: Path, dumps: dict[str, Path]) -> Compiled:
        for name, folder in dumps.items():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for file, text in result["dumps"].get(name, {}).items():
                (folder / file).write_text(text)
        if result["vmfb"] is not None:
            with atomic_file(output) as handle:
                handle.write(result["vmfb"])
        else:
            output.unlink(missing_ok=True)
        stderr = result["stderr"]
        if result["cache"] == "hit":
            stderr = (f"(restored from the compile cache; compiled on {result['compiled_on']} in "
                      f"{result['seconds']:.2f} s)\n{stderr}")
        return Compiled(result["returncode"], "", stderr, result["seconds"],
                        compiled_on=result["compiled_on"], cache=result["cache"])

    def summary(self) -> str:
        return self.cache.summary() if self.cache else "Compile cache: off (--no-cache)"

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
