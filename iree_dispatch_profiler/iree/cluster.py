"""Where compiles run: this machine's cores or a Dask cluster, behind the compile cache.

Callers hand `Builder.compile` an iree-compile job as they would run it here (source, output and
dump paths, flags). The builder turns it into a path-free job (iree_jobs), answers it from the
cache, from an identical job already in flight, or by running it (in the calling thread, or on a
Dask worker), then writes the vmfb and dumps where the caller asked.
"""
from __future__ import annotations

import shutil
import socket
import threading
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from iree_dispatch_profiler.core.files import atomic_file
from iree_dispatch_profiler.core.library import Device, Target, UserError
from iree_dispatch_profiler.iree import iree_jobs
from iree_dispatch_profiler.iree.compile_cache import CompileCache, job_key
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG, compile_flags
from iree_dispatch_profiler.iree.process import ProcessResult, run
from iree_dispatch_profiler.iree.tools import IreeTools

CONNECT_SECONDS = 8  # with Python's start, an unreachable scheduler fails within 15 s
WORKER_WAIT_SECONDS = 30
SHIPPED_FILES_KEPT = 64  # on the --profile-on worker: an operation's inputs and its vmfbs
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
        self._compile_job = _ByValue(iree_jobs.run_job) if client is not None else None
        arch = _host_arch(target) if client is not None else ""
        if arch:  # the flags leave the architecture to the worker: it must be the client's
            others = [info["where"] for info in _describe(client).values()
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
               "arch": _host_arch(self.target) if self.client is not None else "",
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


class Here:
    """This machine, in Remote's shape: where tools run and what times describe unless
    --profile-on names a worker."""

    remote = False
    name = "this machine"  # in messages
    run = staticmethod(run)

    def __init__(self):
        self.label = socket.gethostname()  # in CSVs
        self.facts = {"cpu_model": iree_jobs.cpu_model(), "physical_cores": iree_jobs.physical_cores()}


class Remote:
    """Runs IREE's tools on one chosen Dask worker (--profile-on), so that timings describe that
    machine. Files named in a command go there once (scattered to the worker and reused); files
    the tool writes come back to the paths the command names."""

    remote = True

    def __init__(self, client, worker: str):
        infos = _describe(client)
        chosen = [a for a, info in infos.items()
                  if worker in (a, info["where"], info["where"].split(" (")[-1].rstrip(")"))]
        if len(chosen) != 1:
            known = ", ".join(info["where"] for info in infos.values())
            raise UserError(f"--profile-on={worker}: {'no' if not chosen else 'more than one'} "
                            f"worker of the cluster is that (workers: {known})")
        self.client, self.address = client, chosen[0]
        self.facts = infos[self.address]
        if not self.facts["runtime"]:
            raise UserError(f"--profile-on={worker}: the worker has no iree-run-module / "
                            "iree-benchmark-module (pip install iree-base-runtime there)")
        self.label = self.name = self.facts["where"]
        self._function = _ByValue(iree_jobs.run_tool)
        self._scattered: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def _ship(self, path: Path):
        """The worker's copy of a local file, sent once while it is unchanged and recent (a
        dropped future frees the worker's memory: a sweep's vmfbs need not all stay there)."""
        status = path.stat()
        key = (str(path), status.st_mtime_ns, status.st_size)
        with self._lock:
            if key not in self._scattered:
                self._scattered[key] = self.client.scatter(path.read_bytes(), workers=[self.address],
                                                           hash=False)
                while len(self._scattered) > SHIPPED_FILES_KEPT:
                    self._scattered.pop(next(iter(self._scattered)))
            self._scattered[key] = self._scattered.pop(key)  # most recently used last
            return self._scattered[key]

    def run(self, command: list[str], timeout: float) -> ProcessResult:
        files, outputs, args = {}, {}, []
        for index, arg in enumerate(command[1:]):
            # A path is what follows the last `@` or `=` (`--module=X`, `--input=2x3xf32=@X`,
            # `--output=@X`), or a whole positional argument.
            cut = max(arg.rfind("@"), arg.rfind("=")) + 1
            head, tail = arg[:cut], Path(arg[cut:])
            name = f"f{index}{tail.suffix}"  # the suffix tells iree-run-module .npy from raw
            if arg.startswith("--output=@"):
                outputs[name] = tail
            elif arg[cut:] and tail.is_absolute() and tail.is_file():
                files[name] = self._ship(tail)
            else:
                args.append(arg)
                continue
            args.append(f"{head}{{dir}}/{name}")
        job = {"tool": Path(command[0]).name, "args": args, "files": files,
               "outputs": sorted(outputs), "timeout": timeout}
        try:
            result = self.client.submit(self._function, job, workers=[self.address],
                                        allow_other_workers=False, pure=False).result(timeout + 120)
        except Exception as error:  # the worker died, or the job could not be sent
            return ProcessResult(1, "", f"error: {self.label} did not run it: "
                                 f"{type(error).__name__}: {error}", 0.0)
        for name, path in outputs.items():
            if name in result["outputs"]:
                with atomic_file(path) as handle:
                    handle.write(result["outputs"][name])
        return ProcessResult(result["returncode"], result["stdout"], result["stderr"],
                             result["seconds"])


def _host_arch(target: Target) -> str:
    """The architecture a worker must have: the flags name none when compiling for the host's."""
    if target.device is Device.LLVMCPU and not target.resolved_cpu().triple:
        return target.resolved_cpu().arch
    return ""


def _describe(client) -> dict[str, dict]:
    """Each worker's iree_jobs.describe(), by address."""
    return client.run(_ByValue(iree_jobs.describe))


class _ByValue:
    """A function that unpickles from its own code, so workers need not have our modules."""

    def __init__(self, function):
        import cloudpickle
        cloudpickle.register_pickle_by_value(iree_jobs)
        self.function, self.blob = function, cloudpickle.dumps(function)
        self.__name__ = function.__name__  # Dask names the job after it

    def __call__(self, *args):
        return self.function(*args)

    def __reduce__(self):
        import cloudpickle
        return cloudpickle.loads, (self.blob,)


def _probe(address: str) -> None:
    """Fail in seconds on an address where no scheduler answers: a Client that cannot connect
    takes another 20 s to give up."""
    import asyncio

    from distributed.core import rpc

    async def identity():
        async with rpc(address, timeout=CONNECT_SECONDS) as scheduler:
            return await asyncio.wait_for(scheduler.identity(), CONNECT_SECONDS)

    try:
        answer = asyncio.run(identity())
    except Exception as error:  # refused, timed out, malformed address, a stranger's protocol
        if isinstance(error, (OSError, TimeoutError, ValueError)):
            detail = f"{type(error).__name__}: {(str(error) or 'no answer').splitlines()[0][:200]}"
        else:
            detail = "what answers there does not speak Dask's protocol"
        raise UserError(f"--scheduler={address}: cannot reach a Dask scheduler there ({detail})") from None
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        raise UserError(f"--scheduler={address}: the service there is not a Dask scheduler")


def connect(address: str, iree_version: str):
    """A Dask client whose workers compile as we would; a UserError (exit 2) otherwise."""
    try:
        from distributed import Client
    except ImportError:
        raise UserError("--scheduler needs the distributed package (pip install distributed)") from None
    import distributed
    _probe(address)
    try:
        with warnings.catch_warnings():
            # Dask warns of any package versions differing (pandas, numpy: workers need
            # neither); the versions that matter are checked below.
            warnings.simplefilter("ignore", distributed.versions.VersionMismatchWarning)
            client = Client(address, timeout=CONNECT_SECONDS, set_as_default=False)
    except Exception as error:  # the port answers, but not as a Dask scheduler
        raise UserError(f"--scheduler={address}: no Dask scheduler answers there "
                        f"({type(error).__name__}: {str(error).splitlines()[0]})") from None
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
    except Exception:  # TimeoutError
        client.close()
        raise UserError(f"--scheduler={address}: no Dask worker joined in {WORKER_WAIT_SECONDS} s "
                        f"(start some: dask worker {address})") from None
    workers = _describe(client)
    problems = []
    for worker, info in workers.items():
        if info["distributed"] != distributed.__version__:
            problems.append(f"{worker} has distributed {info['distributed']}, this machine "
                            f"{distributed.__version__}")
        elif not info["compiler"]:
            problems.append(f"{worker} has no iree-compile (pip install iree-base-compiler)")
        elif info["iree_version"] != iree_version:
            problems.append(f"{worker} has IREE {info['iree_version']}, this machine {iree_version}")
    if problems:
        client.close()
        raise UserError(f"--scheduler={address}: " + "; ".join(problems))
    return client
