"""The local tier: control-plane processes, plus per fake node a node agent and a driver.

The node agent is a program of its own (``nodeagent``, started as ``python -m nodeagent``);
this package uses only its directory layout (:mod:`nodeagent.layout`).
"""

from __future__ import annotations

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
