"""An existing cluster from a kubeconfig: real nodes with the driver under test already installed.

The suite creates API objects there and watches what happens, but it cannot reach the nodes:
no driver sockets, container views or restarts (those rules skip with the reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clusters.base import Cluster
from clusters.errors import ClusterStateError

__all__ = ["ExternalCluster"]


class ExternalCluster(Cluster):
    """Any cluster a kubeconfig reaches."""

    backend = "external"

    def __init__(self, kubeconfig: Path, *, nodes: Sequence[str] = (), driver: str = "") -> None:
        path = kubeconfig.expanduser().resolve()
        if not path.is_file():
            raise ClusterStateError(f"kubeconfig {kubeconfig} does not exist (give --kubeconfig PATH)")
        self._kubeconfig = path
        self._nodes = list(nodes)
        self.driver = driver
        """The driver whose nodes are the nodes under test (when no node list is given)."""

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig given."""
        return self._kubeconfig

    def nodes(self) -> list[str]:
        """The nodes given, else those where the driver publishes node-local ResourceSlices."""
        if self._nodes:
            return list(self._nodes)
        from kubernetes import client

        api = client.ResourceV1Api(self.api_client())
        selector = f"spec.driver={self.driver}" if self.driver else None
        items = api.list_resource_slice(field_selector=selector, _request_timeout=30).items
        return sorted({s.spec.node_name for s in items if s.spec and s.spec.node_name})

    def stop(self) -> None:
        """Close the API client; the cluster is not ours to stop."""
        self.close_client()
