"""How the harness reaches a node's probe: :func:`tcp` (an address the profile's
``external.probeAddress`` command prints) or :class:`PortForwards` (the pod of the probe DaemonSet on
the node, through the API server's port-forward). Each gives a :data:`~clusters.probe.relay.Dial`.
"""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path
from typing import Any, cast

from clusters.errors import ProbeError
from clusters.probe.manifest import PROBE_LABELS, PROBE_NAME, PROBE_PORT
from clusters.probe.protocol import parse_address
from clusters.probe.relay import Dial

__all__ = ["PortForwards", "tcp"]

log = logging.getLogger(__name__)

DIAL_TIMEOUT = 10.0
"""Seconds a TCP connection to a probe may take."""


def tcp(address: str) -> Dial:
    """Dials ``HOST:PORT``; :class:`ProbeError` naming the text when it is not an address."""
    try:
        host, port = parse_address(address)
    except ValueError as e:
        raise ProbeError(f"probe address: {e}") from None

    def dial() -> socket.socket:
        return socket.create_connection((host, port), timeout=DIAL_TIMEOUT)

    return dial


class PortForwards:
    """Port-forwards, through the API server of ``kubeconfig``, to port ``port`` of the probe pod
    (labels :data:`~clusters.probe.manifest.PROBE_LABELS`) of a node in ``namespace``.

    One port-forward per connection; the pod of a node is looked up once, and again after a failed
    port-forward. The port-forward to a running probe is untested: the local tier's nodes fake their
    pods (its self-test checks the pod lookup and the failure on such a pod).
    """

    def __init__(self, kubeconfig: Path, namespace: str, port: int = PROBE_PORT) -> None:
        self.namespace = namespace
        """Where the DaemonSet runs."""
        self.port = port
        """The probe's port in its pod."""
        self._kubeconfig = kubeconfig
        self._api: Any = None
        self._pods: dict[str, str] = {}
        # kubernetes.stream swaps its client's call_api while it opens a stream: a client of its own,
        # one opening at a time
        self._lock = threading.Lock()

    def dial(self, node: str) -> Dial:
        """Dials the probe of ``node``."""
        return lambda: self._connect(node)

    def _client(self) -> Any:
        """The kubernetes client's ``ApiClient``: the port-forward is a WebSocket stream that only
        ``kubernetes.stream`` speaks here; the pod lookup is a plain request over the same client."""
        from kubernetes import config

        if self._api is None:
            self._api = config.new_client_from_config(config_file=str(self._kubeconfig))  # type: ignore[no-untyped-call]
        return self._api

    def _pod(self, node: str) -> str:
        from draproto.rest import Rest, RestError, q

        selector = ",".join(f"{k}={v}" for k, v in PROBE_LABELS.items())
        query = {"labelSelector": selector, "fieldSelector": f"spec.nodeName={node}"}
        try:
            answer = Rest(self._client()).send(
                "GET", f"/api/v1/namespaces/{q(self.namespace)}/pods", query=query
            )
        except RestError as e:
            raise ProbeError(f"cannot list the probe pods in namespace {self.namespace!r}: {e}") from e
        running = sorted(
            str(p["metadata"]["name"])
            for p in answer.get("items") or []
            if (p.get("status") or {}).get("phase") == "Running"
        )
        if not running:
            raise ProbeError(
                f"no running {PROBE_NAME} pod on node {node} in namespace {self.namespace!r}: deploy it "
                f"(dra-conformance probe manifest --image IMAGE --namespace {self.namespace} "
                "| kubectl apply -f -)"
            )
        return running[0]

    def _connect(self, node: str) -> socket.socket:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        for attempt in (1, 2):
            with self._lock:
                pod = self._pods.get(node) or self._pod(node)
                self._pods[node] = pod
                try:
                    forward = portforward(
                        client.CoreV1Api(self._client()).connect_get_namespaced_pod_portforward,
                        pod,
                        self.namespace,
                        ports=str(self.port),
                    )
                except ApiException as e:
                    self._pods.pop(node, None)
                    if attempt == 2:
                        raise ProbeError(
                            f"port-forward to {self.namespace}/{pod}:{self.port} (node {node}) failed: "
                            f"{e.reason}; may the kubeconfig create pods/portforward there?"
                        ) from e
                    log.info(
                        "port-forward failed, looking the pod up again", extra={"node": node, "pod": pod}
                    )
                    continue
            return cast(socket.socket, forward.socket(self.port))
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the API client."""
        if self._api is not None:
            self._api.close()
            self._api = None
