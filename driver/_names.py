"""Checks on names that come from outside and become paths: claim UIDs, share ids.

A claim UID from the kubelet names files (``<cdi-dir>/<driver>-<uid>.json``,
``<plugin-dir>/claims/<uid>/``), so it is checked before any file is touched, and every path
built from one is checked again to stay under its root.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from driver.errors import PrepareError

__all__ = ["MAX_UID_CHARS", "check_uid", "shown", "within"]

MAX_UID_CHARS = 64
"""Kubernetes UIDs are 36-character UUIDs; tests and tools use shorter ids, never longer."""

_UID = re.compile(rf"^[A-Za-z0-9](?:[A-Za-z0-9-]{{0,{MAX_UID_CHARS - 2}}}[A-Za-z0-9])?$")


def shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about hostile input."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"  # repr() of a huge int is slow, or refused
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_uid(value: str, what: str = "claim UID") -> None:
    """Raise ``PrepareError`` unless ``value`` is a UID that is safe as one path component.

    Letters, digits and ``-``, starting and ending with a letter or digit, at most 64
    characters: every UUID passes; ``..``, ``/``, NUL, empty and over-long strings do not.
    """
    if not _UID.match(value):
        raise PrepareError(
            f"{shown(value)} is not a valid {what}: want letters, digits and '-' "
            f"(a UUID such as 0b0a3e36-5f4f-4e8c-9d0e-6a3f2b1c4d5e), at most {MAX_UID_CHARS} characters"
        )


def within(root: Path, path: Path) -> Path:
    """``path`` if it stays under ``root`` once normalized; ``PrepareError`` otherwise."""
    normal = Path(os.path.normpath(path.absolute()))
    base = Path(os.path.normpath(root.absolute()))
    if normal == base or not normal.is_relative_to(base):
        raise PrepareError(f"refusing path {shown(str(path), 120)}: it is not inside {base}")
    return path
