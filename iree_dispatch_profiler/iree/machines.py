"""Where dispatches run and are timed: this machine (Here), or one Dask worker (Remote,
--profile-on) that files are shipped to."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

from iree_dispatch_profiler.core.files import atomic_file
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree import iree_jobs
from iree_dispatch_profiler.iree.process import ProcessResult, run
from iree_dispatch_profiler.iree.dask_client import ByValue, describe_workers

SHIPPED_FILES_KEPT = 64  # on the --profile-on worker: an operation's inputs and its vmfbs


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
        infos = describe_workers(client)
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
        self._function = ByValue(iree_jobs.run_tool)
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
