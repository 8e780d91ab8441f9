"""IREE's tools: found in the pip wheels (their native executables) or a source build."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree import iree_jobs

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
