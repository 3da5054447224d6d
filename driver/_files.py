"""Crash-safe file writes shared by the checkpoint and the CDI specs."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["PRIVATE_DIR_MODE", "atomic_write", "fsync_dir", "private_dir"]

PRIVATE_DIR_MODE = 0o750
"""The driver's own dirs: the plugin dir and per-claim dirs (the runtime reads them as root)."""


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed and make it ``0750`` whatever the umask."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry change (a rename or unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True, dir_mode: int = PRIVATE_DIR_MODE
) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a torn one.

    Temp file in the same directory, fsync, rename over the target, fsync the directory.
    ``durable=False`` skips both fsyncs: still atomic for readers and across a crash of the
    process, but possibly lost on power loss; for files rebuilt after a reboot anyway.
    Missing parent dirs are made with ``dir_mode`` (less what the umask takes away).
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)
