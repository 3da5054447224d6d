"""Cluster backends behind one interface: local, kind, k3s, external.

A test asks a :class:`Cluster` for what it needs (API client, nodes, driver and kubelet
restarts, what a container sees); a backend that cannot do something raises
:class:`CapabilityMissing` and the test skips with that reason. The pytest fixtures live in
:mod:`clusters.pytest_plugin` (loaded through the ``pytest11`` entry point).
"""

from __future__ import annotations

from clusters.base import Cluster, ContainerView, pod_key
from clusters.errors import (
    BinariesError,
    CapabilityMissing,
    ChecksumMismatch,
    ClusterError,
    ClusterStateError,
    ControlPlaneError,
    GoBuildError,
    NodeError,
)

__all__ = [
    "BinariesError",
    "CapabilityMissing",
    "ChecksumMismatch",
    "Cluster",
    "ClusterError",
    "ClusterStateError",
    "ContainerView",
    "ControlPlaneError",
    "GoBuildError",
    "NodeError",
    "pod_key",
]
