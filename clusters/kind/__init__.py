"""The kind backend: a kind cluster (Kubernetes nodes as Docker containers) with the reference
driver installed from its Helm chart. See :mod:`clusters.kind.cluster`."""

from __future__ import annotations

from clusters.kind.cluster import KIND_CAPABILITIES, KindCluster, find_kind
from clusters.kind.settings import KindSettings

__all__ = ["KIND_CAPABILITIES", "KindCluster", "KindSettings", "find_kind"]
