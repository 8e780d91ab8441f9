"""A content-addressed store of compile results, shared by runs, sweeps and tuners.

The key hashes everything that decides what iree-compile produces: the MLIR text, the flags (with
output and dump paths replaced by placeholders), the files they name (a tuning spec), the IREE
version and the resolved target (triple, CPU, features). An entry holds the vmfb, the dumped
folders (configs/: the config-applied check reads them) and the compiler's stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


DEFAULT_MAX_BYTES = 10 << 30


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "iree-dispatch-profiler" / "compile"


def job_key(job: dict, iree_version: str, target: dict) -> str:
    """The hash of what decides the result; where and with which binary it runs does not."""
    decisive = {"source": job["source"], "flags": job["flags"], "files": job.get("files", {}),
                "dumps": job.get("dumps", []), "iree_version": iree_version, "target": target}
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@dataclass
class CompileCache:
    root: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    hits: int = 0
    misses: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> dict | None:
        """A stored result in run_job's form, marked `cache: hit`; None (a miss) otherwise."""
        entry = self._entry(key)
        try:
            meta = json.loads((entry / "entry.json").read_text())
            result = {**meta, "vmfb": (entry / "module.vmfb").read_bytes(),
                      "dumps": {name: {p.name: p.read_text() for p in sorted((entry / name).iterdir())}
                                for name in meta["dumps"]}, "cache": "hit"}
            os.utime(entry / "entry.json")  # recently used: pruned last
        except (OSError, ValueError, KeyError):
            with self._lock:
                self.misses += 1
            return None
        with self._lock:
            self.hits += 1
        return result

    def put(self, key: str, result: dict) -> None:
        """Store a successful compile (failures are retried next time: a timeout may pass)."""
        if result["returncode"] != 0 or result["vmfb"] is None:
            return
        entry = self._entry(key)
        if entry.is_dir():
            return
        staging = entry.with_name(f".{key}.tmp{os.getpid()}_{threading.get_ident()}")
        try:
            staging.mkdir(parents=True)
            (staging / "module.vmfb").write_bytes(result["vmfb"])
            for name, files in result["dumps"].items():
                (staging / name).mkdir()
                for file, text in files.items():
                    (staging / name / file).write_text(text)
            meta = {"returncode": 0, "stderr": result["stderr"][-4000:],
                    "seconds": result["seconds"], "compiled_on": result["compiled_on"],
                    "dumps": sorted(result["dumps"]), "stored": time.time()}
            (staging / "entry.json").write_text(json.dumps(meta))
            staging.rename(entry)  # complete or absent, even if we are killed
        except OSError:
            pass  # a full disk or a racing writer: the compile itself stands
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, folder) of every entry."""
        found = []
        for entry in self.root.glob("??/*"):
            try:
                found.append(((entry / "entry.json").stat().st_mtime, _size(entry), entry))
            except OSError:
                continue
        return found

    def prune(self) -> tuple[int, int]:
        """Drop least recently used entries until the cache fits; (bytes kept, entries dropped)."""
        entries = sorted(self.entries(), key=lambda e: e[0])
        total, dropped = sum(e[1] for e in entries), 0
        for _, size, entry in entries:
            if total <= self.max_bytes:
                break
            shutil.rmtree(entry, ignore_errors=True)
            total, dropped = total - size, dropped + 1
        return total, dropped

    def summary(self) -> str:
        kept, dropped = self.prune()
        looked = self.hits + self.misses
        rate = f"{100 * self.hits / looked:.0f}%" if looked else "n.a."
        pruned = f", {dropped} least recently used entries pruned" if dropped else ""
        return (f"Compile cache: {self.hits} hits, {self.misses} misses (hit rate {rate}), "
                f"{kept / (1 << 20):.1f} MiB of {self.max_bytes / (1 << 30):g} GiB in {self.root}{pruned}")
