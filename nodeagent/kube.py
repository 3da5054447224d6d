"""The few API-server requests the agent makes, on plain JSON.

The agent works on objects as JSON dicts, not as generated models: the
kubernetes client's models drop fields they do not know and refuse objects
that miss fields they think required, and a kubelet stand-in must see what the
server sent. :class:`RestKube` uses the ``kubernetes`` client for configuration,
TLS and auth, and sends the requests through :mod:`draproto.rest`. :class:`Kube` is the seam tests
fill with an in-memory fake.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any, Protocol

from draproto.apiconn import connect
from draproto.rest import Conflict, NotFound, Rest, RestError, q
from nodeagent.errors import KubeError, kube_error

__all__ = ["Kube", "RestKube"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class Kube(Protocol):
    """What the agent asks of the API server.

    Every method raises :class:`~nodeagent.errors.KubeError` (with the HTTP status, 0 when no
    answer came; of the subclass of the status, :func:`~nodeagent.errors.kube_error`) when the API
    server refuses, cannot be reached, or answers garbage; nothing else, so callers catch that and
    let bugs through.
    """

    def list_pods(self, node: str) -> tuple[list[Obj], str]:
        """Pods bound to ``node`` and the list's resourceVersion."""

    def watch_pods(self, node: str, resource_version: str, timeout_seconds: int) -> Iterator[tuple[str, Obj]]:
        """Watch events (type, object) of pods bound to ``node``; ends when the server ends it."""

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """A pod, or None when it does not exist."""

    def update_pod_status(self, pod: Obj) -> Obj:
        """PUT the pod's status subresource (KubeConflict, 409, on a stale resourceVersion)."""

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete with grace period 0 and a UID precondition; gone already counts as done."""

    def get_claim(self, namespace: str, name: str) -> Obj | None:
        """A ResourceClaim, or None when it does not exist."""

    def create_event(self, namespace: str, event: Obj) -> None:
        """Create a core/v1 Event."""

    def delete_slices(self, node: str, driver: str | None = None) -> int:
        """Delete the node's ResourceSlices (of one driver, or all); how many were deleted."""

    def get_node(self, name: str) -> Obj | None:
        """The Node, or None."""

    def create_node(self, node: Obj) -> Obj:
        """Create the Node."""

    def patch_node_status(self, name: str, patch: Obj) -> Obj:
        """Strategic-merge-patch the Node's status."""

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """A coordination.k8s.io/v1 Lease, or None."""

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        """Create a Lease."""

    def update_lease(self, namespace: str, lease: Obj) -> Obj:
        """Replace a Lease (KubeConflict, 409, on a stale resourceVersion)."""


class RestKube:
    """:class:`Kube` against a real API server."""

    def __init__(self, kubeconfig: str | None = None, api_client: Any = None) -> None:
        self.rest = Rest(
            api_client if api_client is not None else connect(kubeconfig or None), errors=kube_error
        )
        """Plain-JSON requests to the server (of ``kubeconfig``, of ``api_client``, or in-cluster)."""
        self._lock = threading.Lock()
        self._resource_group: str | None = None

    def close(self) -> None:
        """Release the connection pool."""
        self.rest.close()

    # -- plumbing

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] = 30.0,
    ) -> Any:
        return self.rest.send(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )

    def _get_or_none(self, path: str) -> Obj | None:
        try:
            out: Obj = self._send("GET", path)
        except NotFound:
            return None
        return out

    def _resource_prefix(self) -> str:
        # resource.k8s.io/v1 on 1.34+; v1beta2/v1beta1 keep the same claim/slice shape we read.
        with self._lock:
            if self._resource_group is None:
                versions = []
                try:
                    group = self._send("GET", "/apis/resource.k8s.io")
                    versions = [v["version"] for v in group.get("versions", [])]
                except KubeError as e:
                    log.warning("cannot discover resource.k8s.io versions", extra={"error": str(e)})
                for v in ("v1", "v1beta2", "v1beta1"):
                    if v in versions:
                        self._resource_group = f"/apis/resource.k8s.io/{v}"
                        break
                else:
                    return "/apis/resource.k8s.io/v1"
            return self._resource_group

    # -- pods

    def list_pods(self, node: str) -> tuple[list[Obj], str]:
        """See :class:`Kube`."""
        out = self._send("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})
        return list(out.get("items") or []), str(out.get("metadata", {}).get("resourceVersion", ""))

    def watch_pods(self, node: str, resource_version: str, timeout_seconds: int) -> Iterator[tuple[str, Obj]]:
        """See :class:`Kube`."""
        query = {
            "fieldSelector": f"spec.nodeName={node}",
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource_version:
            query["resourceVersion"] = resource_version
        try:
            yield from self.rest.watch("/api/v1/pods", query, timeout_seconds, bookmarks=True)
        except RestError as e:
            raise kube_error(f"pod watch broke: {e}", e.status, e.reason, e.message) from e

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """See :class:`Kube`."""
        return self._get_or_none(f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}")

    def update_pod_status(self, pod: Obj) -> Obj:
        """See :class:`Kube`."""
        md = pod["metadata"]
        out: Obj = self._send(
            "PUT", f"/api/v1/namespaces/{q(md['namespace'])}/pods/{q(md['name'])}/status", body=pod
        )
        return out

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """See :class:`Kube`."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        # Conflict: the UID precondition failed, our pod is gone
        with contextlib.suppress(NotFound, Conflict):
            self._send("DELETE", f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}", body=body)

    # -- DRA

    def get_claim(self, namespace: str, name: str) -> Obj | None:
        """See :class:`Kube`."""
        return self._get_or_none(
            f"{self._resource_prefix()}/namespaces/{q(namespace)}/resourceclaims/{q(name)}"
        )

    def delete_slices(self, node: str, driver: str | None = None) -> int:
        """See :class:`Kube`."""
        prefix = self._resource_prefix()
        selector = f"spec.nodeName={node}"
        if driver is not None:
            selector += f",spec.driver={driver}"
        items = (
            self._send("GET", f"{prefix}/resourceslices", query={"fieldSelector": selector}).get("items")
            or []
        )
        deleted = 0
        for item in items:
            name = item["metadata"]["name"]
            try:
                self._send("DELETE", f"{prefix}/resourceslices/{q(name)}")
                deleted += 1
            except NotFound:
                pass
        return deleted

    # -- events

    def create_event(self, namespace: str, event: Obj) -> None:
        """See :class:`Kube`."""
        self._send("POST", f"/api/v1/namespaces/{q(namespace)}/events", body=event)

    # -- node and lease

    def get_node(self, name: str) -> Obj | None:
        """See :class:`Kube`."""
        return self._get_or_none(f"/api/v1/nodes/{q(name)}")

    def create_node(self, node: Obj) -> Obj:
        """See :class:`Kube`."""
        out: Obj = self._send("POST", "/api/v1/nodes", body=node)
        return out

    def patch_node_status(self, name: str, patch: Obj) -> Obj:
        """See :class:`Kube`."""
        out: Obj = self._send(
            "PATCH",
            f"/api/v1/nodes/{q(name)}/status",
            body=patch,
            content_type="application/strategic-merge-patch+json",
        )
        return out

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """See :class:`Kube`."""
        return self._get_or_none(f"/apis/coordination.k8s.io/v1/namespaces/{q(namespace)}/leases/{q(name)}")

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        """See :class:`Kube`."""
        out: Obj = self._send(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{q(namespace)}/leases", body=lease
        )
        return out

    def update_lease(self, namespace: str, lease: Obj) -> Obj:
        """See :class:`Kube`."""
        name = lease["metadata"]["name"]
        out: Obj = self._send(
            "PUT", f"/apis/coordination.k8s.io/v1/namespaces/{q(namespace)}/leases/{q(name)}", body=lease
        )
        return out
