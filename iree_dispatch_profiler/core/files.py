"""Files that appear complete or not at all: what every writer of results uses."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file that appears under `path` complete or not at all: readers never see a
    half-written file, even if we are interrupted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            yield handle
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomically(path: Path, text: str) -> None:
    with atomic_file(path) as handle:
        handle.write(text.encode())
