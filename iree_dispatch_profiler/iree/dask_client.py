"""The Dask cluster behind --scheduler: connecting to it (checked first, so that an unreachable
scheduler is one line), what its workers are, and functions shipped to them by value."""
from __future__ import annotations

import warnings

from iree_dispatch_profiler.core.library import Device, Target, UserError
from iree_dispatch_profiler.iree import iree_jobs

CONNECT_SECONDS = 8  # with Python's start, an unreachable scheduler fails within 15 s


WORKER_WAIT_SECONDS = 30


def host_arch(target: Target) -> str:
    """The architecture a worker must have: the flags name none when compiling for the host's."""
    if target.device is Device.LLVMCPU and not target.resolved_cpu().triple:
        return target.resolved_cpu().arch
    return ""


def describe_workers(client) -> dict[str, dict]:
    """Each worker's iree_jobs.describe(), by address."""
    return client.run(ByValue(iree_jobs.describe))


class ByValue:
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
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.core import rpc

    async def identity():
        async with rpc(address, timeout=CONNECT_SECONDS) as scheduler:
            return await asyncio.wait_for(scheduler.identity(), CONNECT_SECONDS)

    try:
        scheme, location = parse_address(address)
        if scheme == "tcp":  # a refused port is refused at once: Dask would retry it for seconds
            socket.create_connection(parse_host_port(location), timeout=CONNECT_SECONDS).close()
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
    workers = describe_workers(client)
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
