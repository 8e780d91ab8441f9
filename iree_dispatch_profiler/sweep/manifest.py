"""Dispatches (operation x tuning configuration), their files on disk, and the JSON manifest.

generator.py writes the manifest; compile.py and profiler.py read it and nothing else of the
generator's state.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from iree_dispatch_profiler.core.files import write_atomically
from iree_dispatch_profiler.core.library import Target, TuningConfiguration, UserError
from iree_dispatch_profiler.core.values import matches, shown_patterns
from iree_dispatch_profiler.ops import mlir_text
from iree_dispatch_profiler.ops.registry import Operation, operation_from_json

# 2: llvm-cpu targets carry IREE's resolution of the CPU (name, features, vector width).
MANIFEST_FORMAT = "iree-dispatch-profiler/2"


@dataclass(frozen=True)
class Dispatch:
    operation: Operation
    configuration: TuningConfiguration

    @property
    def name(self) -> str:
        return f"{self.operation.name}_{self.configuration.name}"


@dataclass
class DispatchCollection:
    """One operation with the configurations it is compiled with."""

    operation: Operation
    configurations: list[TuningConfiguration]

    @property
    def dispatches(self) -> list[Dispatch]:
        return [Dispatch(self.operation, c) for c in self.configurations]


@dataclass(frozen=True)
class DispatchPaths:
    """Where one dispatch's files live: `generated/linalg/<kind>/<operation>/<dispatch>.*`."""

    folder: Path
    name: str

    @property
    def mlir(self) -> Path:
        return self.folder / f"{self.name}.mlir"

    @property
    def spec(self) -> Path:
        """The tuning spec of a configuration that a spec attaches (TuningConfiguration.spec_root)."""
        return self.folder / f"{self.name}_spec.mlir"

    @property
    def vmfb(self) -> Path:
        """The one build: verified, then timed."""
        return self.folder / f"{self.name}.vmfb"

    @property
    def compile_log(self) -> Path:
        return self.folder / f"{self.name}.compile.log"

    @property
    def compile_record(self) -> Path:
        return self.folder / f"{self.name}.compile.json"

    @property
    def configs(self) -> Path:
        return self.folder / "configs" / self.name


def select(dispatches: Iterable[Dispatch], patterns: list[re.Pattern] | None) -> list[Dispatch]:
    dispatches = list(dispatches)
    if not patterns:
        return dispatches
    chosen = [d for d in dispatches if matches(d.name, patterns)]
    if not chosen:
        shown = shown_patterns(patterns)
        raise UserError(f"--dispatches={shown} selects none of the {len(dispatches)} dispatches")
    return chosen


class Manifest:
    """The dispatches under one `generated/` folder, their target and the IREE that made them."""

    def __init__(self, root: Path, target: Target, iree_version: str,
                 collections: list[DispatchCollection]):
        self.root = root
        self.target = target
        self.iree_version = iree_version
        self.collections = collections

    @staticmethod
    def root_of(generated_dir: Path) -> Path:
        return generated_dir / "generated"

    @property
    def path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def dispatches(self) -> list[Dispatch]:
        return [d for c in self.collections for d in c.dispatches]

    def operation_folder(self, operation: Operation) -> Path:
        return self.root / "linalg" / operation.kind / operation.name

    def paths(self, dispatch: Dispatch) -> DispatchPaths:
        return DispatchPaths(self.operation_folder(dispatch.operation), dispatch.name)

    def reference_folder(self, operation: Operation) -> Path:
        return self.root / "reference_cache" / operation.name

    def merge(self, collections: list[DispatchCollection]) -> None:
        """Add collections; an operation generated again gets the new configuration list."""
        by_name = {c.operation.name: c for c in self.collections}
        for collection in collections:
            by_name[collection.operation.name] = collection
        self.collections = list(by_name.values())

    def emit(self, collections: list[DispatchCollection], log=print) -> None:
        """Write each dispatch's MLIR, then the manifest (last, so it names only written files)."""
        for collection in collections:
            folder = self.operation_folder(collection.operation)
            log(f"[Generating]: {folder}")
            for dispatch in collection.dispatches:
                log(f"    Emitting tuning configuration : {dispatch.configuration.name}")
                paths = self.paths(dispatch)
                files = {paths.mlir: dispatch.operation.emit_mlir(dispatch.name, dispatch.configuration)}
                if dispatch.configuration.spec_root:
                    files[paths.spec] = mlir_text.configuration_spec(dispatch.configuration)
                for path, text in files.items():
                    if not path.is_file() or path.read_text() != text:  # keeps compiles up to date
                        write_atomically(path, text)
        self.merge(collections)
        self.save()

    def save(self) -> None:
        data = {
            "format": MANIFEST_FORMAT,
            "target": self.target.to_json(),
            "iree_version": self.iree_version,
            "operations": [{"operation": c.operation.to_json(),
                            "configurations": [cfg.to_json() for cfg in c.configurations]}
                           for c in self.collections],
        }
        write_atomically(self.path, json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, generated_dir: Path) -> "Manifest":
        root = cls.root_of(generated_dir)
        path = root / "manifest.json"
        if not path.is_file():
            raise UserError(f"no generated dispatches in {generated_dir} (missing {path}); "
                            f"run generator.py --generated-dir {generated_dir} first")
        try:
            data = json.loads(path.read_text())
            if data.get("format") != MANIFEST_FORMAT:
                old = str(data.get("format", "")).startswith(MANIFEST_FORMAT.split("/")[0])
                raise ValueError(f"format {data.get('format')!r}"
                                 + ("; made by an older version: generate again" if old else ""))
            collections = [
                DispatchCollection(operation_from_json(entry["operation"]),
                                   [TuningConfiguration.from_json(c) for c in entry["configurations"]])
                for entry in data["operations"]]
            return cls(root, Target.from_json(data["target"]), data["iree_version"], collections)
        except (ValueError, KeyError, TypeError) as error:
            raise UserError(f"{path} is not a manifest of this tool ({error})") from None

    @classmethod
    def open_for_generation(cls, generated_dir: Path, target: Target, iree_version: str) -> "Manifest":
        """The existing manifest to add to, or a new one; refuses a foreign or other-target folder."""
        root = cls.root_of(generated_dir)
        for folder in (generated_dir, *generated_dir.parents, root):
            if folder.exists() and not folder.is_dir():
                raise UserError(f"--generated-dir {generated_dir}: {folder} is a file, not a folder")
        if (root / "manifest.json").is_file():
            manifest = cls.load(generated_dir)
            if manifest.target != target:
                raise UserError(f"{root} holds dispatches for {manifest.target.name}, not "
                                f"{target.name}; use another --generated-dir")
            return manifest
        if root.exists() and any(root.iterdir()):
            raise UserError(f"{root} exists but has no manifest.json: not a folder of this tool")
        return cls(root, target, iree_version, [])
