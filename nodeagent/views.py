"""ContainerView files: what each container of a running pod sees (docs/interfaces.md).

Where they go is :meth:`nodeagent.layout.NodeLayout.view_path`.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from nodeagent._files import atomic_write
from nodeagent.layout import NodeLayout, view_prefix

__all__ = ["remove_views", "write_view"]


def write_view(path: Path, view: dict[str, Any]) -> None:
    """Write one view atomically (a reader never sees half a file)."""
    atomic_write(path, json.dumps(view, indent=1, sort_keys=True).encode(), durable=False)


def remove_views(layout: NodeLayout, ns: str, pod: str) -> None:
    """Remove every view of a pod."""
    prefix = view_prefix(ns, pod)
    try:
        names = os.listdir(layout.containers_dir)
    except FileNotFoundError:
        return
    for n in names:
        if n.startswith(prefix) and n.endswith(".json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(layout.containers_dir / n)
