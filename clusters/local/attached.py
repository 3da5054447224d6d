"""A local cluster run by a daemon (``cluster up``, or a test session), seen from another process."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clusters.errors import ClusterError, ClusterStateError, UpdateFailed
from clusters.local import daemon
from clusters.local.cluster import LocalClusterBase, LocalNode, companions_of
from clusters.local.state import DaemonState

__all__ = ["AttachedLocalCluster"]


class AttachedLocalCluster(LocalClusterBase):
    """Talks to the daemon that owns a :class:`~clusters.local.cluster.LocalCluster`.

    Restarts go through the daemon (it owns the processes); container views are read from
    the node roots directly. :meth:`stop` only closes the API client: the cluster stays up
    (use :meth:`shutdown` to stop it).
    """

    def __init__(self, state_dir: Path, state: DaemonState | None = None) -> None:
        found = state if state is not None else daemon.read_state(state_dir)
        if found is None:
            raise ClusterStateError(
                f"no running local cluster in {state_dir} (start one with 'dra-conformance cluster up')"
            )
        self.state_dir = state_dir
        """The daemon's state dir."""
        self.state = found
        """The daemon's state (PIDs, node roots, kubeconfig) as of attaching."""

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig."""
        return self.state.kubeconfig

    @property
    def k8s_version(self) -> str:
        """Kubernetes version ``X.Y.Z``."""
        return self.state.k8s_version

    def nodes(self) -> list[str]:
        """Names of the fake nodes."""
        return list(self.state.nodes)

    def node_root(self, node: str) -> Path:
        """The root dir of a node (kubelet dirs, CDI dir, fake GPU state)."""
        entry = self.state.nodes.get(node)
        if entry is None:
            raise ClusterError(f"unknown node {node!r}; nodes: {self.nodes()}")
        return entry.root

    def companion_drivers(self) -> frozenset[str]:
        """The NIC driver when the daemon's settings run it."""
        return companions_of(self.state.settings.nic_driver)

    def _local_node(self, name: str) -> LocalNode:
        return LocalNode(name, self.node_root(name))

    def stop_driver(self, node: str) -> None:
        """Stop the driver on ``node`` until :meth:`restart_driver`."""
        daemon.request(self.state_dir, "stop_driver", node=node)

    def start_driver(self, node: str, command: Sequence[str]) -> None:
        """Replace the driver on ``node`` (placeholders ``{node}``, ``{root}``, ``{kubeconfig}``)."""
        daemon.request(self.state_dir, "start_driver", node=node, command=list(command))

    def reset_drivers(self, command: Sequence[str] | None = None) -> None:
        """Give every node a fresh driver running ``command`` (None: the one it had), as
        :meth:`~clusters.local.cluster.LocalCluster.reset_drivers` says."""
        daemon.request(self.state_dir, "reset_drivers", command=None if command is None else list(command))

    def restart_driver(self, node: str, *, crash: bool = False) -> None:
        """Restart the driver on ``node`` (``crash``: SIGKILL instead of SIGTERM)."""
        daemon.request(self.state_dir, "restart_driver", node=node, crash=crash)

    def update_driver(self, node: str, *, fail: bool = False) -> None:
        """A rolling update of the driver on ``node`` (``fail``: one whose new instance exits;
        ``UpdateFailed`` then)."""
        answer = daemon.request(self.state_dir, "update_driver", node=node, fail=fail)
        if answer.get("failed"):
            raise UpdateFailed(str(answer["failed"]))

    def restart_kubelet(self, node: str, *, crash: bool = False) -> None:
        """Restart the node agent on ``node`` (``crash``: SIGKILL instead of SIGTERM)."""
        daemon.request(self.state_dir, "restart_kubelet", node=node, crash=crash)

    def stop_kubelet(self, node: str) -> None:
        """Stop the node agent on ``node`` until :meth:`restart_kubelet`."""
        daemon.request(self.state_dir, "stop_kubelet", node=node)

    def restart_component(self, component: str, *, crash: bool = False) -> None:
        """Restart one control-plane component (e.g. ``kube-apiserver``; ``crash``: SIGKILL)."""
        daemon.request(self.state_dir, "restart_component", component=component, crash=crash)

    def status(self) -> dict[str, Any]:
        """Health of every process and their memory, from the daemon."""
        return daemon.request(self.state_dir, "status", timeout=30)

    def stop(self) -> None:
        """Close the API client; the cluster keeps running."""
        self.close_client()

    def shutdown(self) -> None:
        """Stop the cluster (the daemon and everything it runs)."""
        self.close_client()
        daemon.shutdown(self.state_dir)
