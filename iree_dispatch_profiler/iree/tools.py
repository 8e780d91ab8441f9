"""IREE's tools: found in the pip wheels (their native executables) or a source build."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree import iree_jobs


def _find(name: str, bin_dir: Path | None) -> Path | None:
    """`name` in `bin_dir` (or its tools/), else the pip wheels' native executable."""
    if bin_dir is None:
        path = iree_jobs.find_tool(name)
        return Path(path) if path else None
    return next((f / name for f in (bin_dir / "tools", bin_dir) if (f / name).is_file()), None)


@dataclass(frozen=True)
class IreeTools:
    # None on a machine with only iree-base-runtime (a GPU box that runs what was compiled here)
    compile: Path | None
    run_module: Path
    benchmark_module: Path
    profile: Path | None = None
    # IREE's version where there is no compiler: the one that compiled what will run
    compiled_by: str = ""

    @classmethod
    def locate(cls, bin_dir: Path | None = None, compiled_by: str = "") -> "IreeTools":
        """The native executables: from `bin_dir` (or its tools/), else inside the pip wheels.

        The wheels' console scripts are Python wrappers costing ~0.1 s a call, so we bypass them.
        Given `compiled_by`, only running is asked for, so iree-compile may be missing.
        """
        def required(name: str) -> Path:
            path = _find(name, bin_dir)
            if path is None:
                where = f"in {bin_dir} or {bin_dir}/tools" if bin_dir else \
                    "(install iree-base-compiler and iree-base-runtime, or pass --iree-bin-dir)"
                raise UserError(f"cannot find {name} {where}")
            return path

        compiler = _find("iree-compile", bin_dir) if compiled_by else required("iree-compile")
        run_module, benchmark_module = required("iree-run-module"), required("iree-benchmark-module")
        # iree-profile ships beside iree-benchmark-module; a build without it loses one source
        profile = benchmark_module.parent / "iree-profile"
        return cls(compiler, run_module, benchmark_module,
                   profile if profile.is_file() else None, compiled_by)

    def version(self) -> str:
        if self.compile is None:
            return self.compiled_by
        return iree_jobs.compiler_version(str(self.compile))
