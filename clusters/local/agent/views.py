"""ContainerView files: what each container of a running pod sees (docs/interfaces.md)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["remove_views", "view_path", "write_view"]


def view_path(containers_dir: Path, ns: str, pod: str, container: str) -> Path:
    """``<containers_dir>/<ns>_<pod>_<container>.json``."""
    return containers_dir / f"{ns}_{pod}_{container}.json"


def write_view(containers_dir: Path, ns: str, pod: str, container: str, view: dict[str, Any]) -> None:
    """Write one view atomically (a reader never sees half a file)."""
    containers_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=containers_dir, prefix=".view.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(view, f, indent=1, sort_keys=True)
        os.replace(tmp, view_path(containers_dir, ns, pod, container))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def remove_views(containers_dir: Path, ns: str, pod: str) -> None:
    """Remove every view of a pod."""
    prefix = f"{ns}_{pod}_"
    try:
        names = os.listdir(containers_dir)
    except FileNotFoundError:
        return
    for n in names:
        if n.startswith(prefix) and n.endswith(".json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(containers_dir / n)
