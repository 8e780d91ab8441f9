"""Compile the generated dispatches with iree-compile over all cores.

Each dispatch gets one build, verified and timed alike: small dispatches repeated so that timing
excludes invocation overhead, its executable configuration dumped to check that the requested
tuning configuration is the one IREE used. A failing configuration is recorded with its reason;
the others go on. Compiles run on this machine's cores or on a Dask cluster (--scheduler); the
compile cache answers any compile done before, here or there.
"""
from __future__ import annotations

import argparse
import shlex
import time
from contextlib import closing
from typing import Sequence

from iree_dispatch_profiler.cli import options
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.core.values import parse_bool, parse_num_cpu, parse_seconds
from iree_dispatch_profiler.iree.builder import Builder
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.sweep.build import compile_dispatches
from iree_dispatch_profiler.sweep.manifest import Manifest, select
from iree_dispatch_profiler.sweep.progress import Progress


def parser() -> options.ArgumentParser:
    p = options.script_parser(__doc__, target_recorded=True)
    p.add_argument("-j", "--num-cpu", type=parse_num_cpu, default="-1",
                   help="parallel compiles; -1 = all cores (default)")
    p.add_argument("--force-compile", type=parse_bool, nargs="?", const=True, default=False,
                   metavar="BOOL", help="recompile even up-to-date dispatches")
    p.add_argument("--compile-timeout", type=parse_seconds, default=300.0, metavar="SECONDS",
                   help="limit for one iree-compile run (default: 300)")
    # Old command lines keep working: a dispatch has had one build, verified and timed, since
    # the verify and profile builds became one.
    p.add_argument("--verify-only", type=parse_bool, nargs="?", const=True, default=False,
                   help=argparse.SUPPRESS)
    p.add_argument("--iree-compile-extra-flags", default="", metavar="FLAGS",
                   help='further flags for every compile, e.g. "--iree-opt-level=O3"')
    options.add_compile_cluster(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    manifest = Manifest.load(args.generated_dir)
    target = options.check_target(args, manifest.target)
    dispatches = select(manifest.dispatches, args.dispatches)
    try:
        extra_flags = shlex.split(args.iree_compile_extra_flags)
    except ValueError as error:
        raise UserError(f"--iree-compile-extra-flags: {error}") from None
    tools = IreeTools.locate(args.iree_bin_dir)
    version = tools.version()
    builder = options.builder_from_args(args, tools, target, version)
    try:
        counts = compile_all(args, manifest, builder, dispatches, extra_flags)
    finally:
        builder.close()
    return 1 if counts["failed"] else 0


def compile_all(args, manifest: Manifest, builder: Builder, dispatches: list,
                extra_flags: list[str]) -> dict[str, int]:
    # One compile at a time per core here, or per worker thread of the cluster.
    jobs_at_once = builder.slots or args.num_cpu
    print(f"Compiling {len(dispatches)} dispatches for {manifest.target.name} on {builder.where} "
          f"with {jobs_at_once} parallel jobs (IREE {builder.iree_version})")
    if manifest.target.cpu_target is not None:
        print(f"Target CPU: {manifest.target.cpu_target.summary}")
    counts = {"compiled": 0, "from cache": 0, "up-to-date": 0, "failed": 0}
    progress = Progress(len(dispatches), "dispatches compiled")
    start = time.perf_counter()
    built = compile_dispatches(builder, manifest, dispatches, extra_flags, args.compile_timeout,
                               args.force_compile, jobs_at_once)
    with closing(built):
        for record, up_to_date in built:
            if record.status != "ok":
                counts["failed"] += 1
                progress.message(f"FAILED {record.dispatch}: {record.reason}")
            else:
                counts["up-to-date" if up_to_date else
                       "from cache" if record.cache == "hit" else "compiled"] += 1
                if record.config_applied == "no":
                    progress.message(f"NOTE {record.dispatch}: IREE did not apply the requested "
                                     "configuration (Config applied: no)")
            progress.advance()
    print(f"Compiled {counts['compiled']}, from cache {counts['from cache']}, up-to-date "
          f"{counts['up-to-date']}, failed {counts['failed']} in "
          f"{time.perf_counter() - start:.1f} s wall time")
    print(builder.summary())
    return counts


def run() -> None:
    options.run_main(main)
