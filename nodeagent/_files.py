"""The node agent's one way to write a file: atomically (checkpoint, ContainerView files)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: Path, data: bytes, *, durable: bool) -> None:
    """Replace ``path`` with ``data``: a reader sees the old or the new file, never half of one.

    A temp file beside the target, renamed over it. ``durable`` also fsyncs the file before the
    rename and the directory after it, so the new content survives a power loss (the
    checkpoint); views are rewritten on every start and need not.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:  # the temp file is gone after the rename; it is left only when something failed
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
