"""The local tier: control-plane processes and node agents that play the kubelet.

Public names are imported on first use, so that ``python -m clusters.local.agent`` does not
pay for the control-plane machinery it never uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusters.local.attached import AttachedLocalCluster
    from clusters.local.binaries import Binaries, resolve
    from clusters.local.cluster import LocalCluster
    from clusters.local.controlplane import ControlPlane
    from clusters.local.settings import BinariesSettings, LocalSettings

__all__ = [
    "AttachedLocalCluster",
    "Binaries",
    "BinariesSettings",
    "ControlPlane",
    "LocalCluster",
    "LocalSettings",
    "resolve",
]

_WHERE = {
    "AttachedLocalCluster": "clusters.local.attached",
    "Binaries": "clusters.local.binaries",
    "resolve": "clusters.local.binaries",
    "LocalCluster": "clusters.local.cluster",
    "ControlPlane": "clusters.local.controlplane",
    "BinariesSettings": "clusters.local.settings",
    "LocalSettings": "clusters.local.settings",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'clusters.local' has no attribute {name!r}")
