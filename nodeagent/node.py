"""The fake Node object and its Lease heartbeat.

The Node is created when missing (capacity, labels, Ready) and its Ready
condition is refreshed; the Lease in ``kube-node-lease`` is renewed every
heartbeat, or the node-lifecycle controller would taint the node not-ready
after its grace period. On shutdown the Node stays: it belongs to the cluster.
"""

from __future__ import annotations

import logging
import platform
import threading
from typing import Any

from draproto.rest import Conflict
from nodeagent.errors import KubeError
from nodeagent.kube import Kube
from nodeagent.settings import Settings
from nodeagent.skipops import FEATURE as OPTIONAL_NODE_OPERATIONS
from nodeagent.timeutil import micro_time, rfc3339

__all__ = ["NodeHeartbeat"]

NODE_ALLOCATABLE_RESOURCES = "DRANodeAllocatableResources"
"""The node feature a kubelet declares with that gate on (``status.declaredFeatures``)."""

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
HOST_IP = "127.0.0.1"


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


class NodeHeartbeat:
    """Keeps the Node present and Ready and its Lease renewed, on a thread."""

    def __init__(self, settings: Settings, kube: Kube) -> None:
        self.settings = settings
        self.kube = kube
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="node-heartbeat", daemon=True)
        self.node_uid = ""
        self._since = rfc3339()  # conditions have held since the agent started

    def kubelet_version(self) -> str:
        """``v1.<minor>.0``, what the Node reports as its kubelet version."""
        major, minor = self.settings.k8s_version
        return f"v{major}.{minor}.0"

    def _conditions(self) -> list[dict[str, Any]]:
        now = rfc3339()
        out = []
        for kind, status, reason, message in (
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "dra-conformance node agent is posting ready status"),
        ):
            out.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": self._since,
                }
            )
        return out

    def _status(self) -> dict[str, Any]:
        status = self._base_status()
        declared = []
        if self.settings.node_allocatable_resources and self.settings.at_least(1, 37):
            # what a 1.37 kubelet declares for this gate (component-helpers nodedeclaredfeatures
            # dranodeallocatableresources Discover); the API server's NodeDeclaredFeatures admission
            # asks for it before it takes a slice of this node with nodeAllocatableResources
            declared.append(NODE_ALLOCATABLE_RESOURCES)
        if self.settings.optional_node_operations and self.settings.at_least(1, 37):
            # likewise draoptionalnodeoperations; the scheduler asks for it (dynamicresources.go)
            declared.append(OPTIONAL_NODE_OPERATIONS)
        if declared:
            status["declaredFeatures"] = declared
        return status

    def _base_status(self) -> dict[str, Any]:
        return {
            "capacity": dict(self.settings.capacity),
            "allocatable": dict(self.settings.capacity),
            "conditions": self._conditions(),
            "addresses": [
                {"type": "InternalIP", "address": HOST_IP},
                {"type": "Hostname", "address": self.settings.node_name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": self.settings.node_name,
                "systemUUID": self.settings.node_name,
                "bootID": self.settings.node_name,
                "kernelVersion": platform.release(),
                "osImage": "dra-conformance fake node",
                "containerRuntimeVersion": "fake://1.0.0",
                "kubeletVersion": self.kubelet_version(),
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": _arch(),
            },
        }

    def ensure_node(self) -> None:
        """Create the Node if missing, else mark it Ready; KubeError when the server refuses."""
        name = self.settings.node_name
        node = self.kube.get_node(name)
        if node is None:
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": _arch(),
                "dra-conformance.io/fake-node": "true",
                **self.settings.labels,
            }
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {},
                "status": self._status(),
            }
            try:
                node = self.kube.create_node(body)
                log.info("node created", extra={"node": name})
            except Conflict:
                node = self.kube.get_node(name) or {}
        self.node_uid = str((node.get("metadata") or {}).get("uid", ""))
        self.kube.patch_node_status(name, {"status": self._status()})

    def renew_lease(self) -> None:
        """Create or renew the node's Lease."""
        name = self.settings.node_name
        now = micro_time()
        lease = self.kube.get_lease(LEASE_NAMESPACE, name)
        if lease is None:
            md: dict[str, Any] = {"name": name, "namespace": LEASE_NAMESPACE}
            if self.node_uid:
                md["ownerReferences"] = [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": self.node_uid}
                ]
            self.kube.create_lease(
                LEASE_NAMESPACE,
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": md,
                    "spec": {
                        "holderIdentity": name,
                        "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                        "renewTime": now,
                    },
                },
            )
            return
        lease.setdefault("spec", {}).update(
            {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS, "renewTime": now}
        )
        self.kube.update_lease(LEASE_NAMESPACE, lease)

    def beat(self) -> None:
        """One heartbeat: Node status and Lease."""
        self.ensure_node()
        self.renew_lease()

    def start(self) -> None:
        """Beat once now (errors propagate), then on a thread."""
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        """Stop beating (the Node and Lease stay)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_seconds):
            try:
                self.beat()
            except KubeError as e:
                log.warning("heartbeat failed", extra={"node": self.settings.node_name, "error": str(e)})
