"""Objects the end-to-end tests create: one claim template and a pod that uses it."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.dra-conformance.io"


def claim_template(namespace: str, name: str = "one-gpu") -> dict[str, Any]:
    """A ResourceClaimTemplate asking for exactly one GPU of the reference driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
        },
    }


def pod(namespace: str, name: str = "p1", template: str = "one-gpu") -> dict[str, Any]:
    """A pod whose container uses a claim made from ``template``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": template}],
        },
    }


def run_pod(api_client: Any, namespace: str, name: str = "p1", timeout: float = 60) -> Any:
    """Create the template and the pod; return the pod once Running (fails with its events if not)."""
    import time

    from kubernetes import client

    core = client.CoreV1Api(api_client)
    for _ in range(100):  # pods are refused until the service-account controller made "default"
        if any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(namespace).items):
            break
        time.sleep(0.1)
    client.ResourceV1Api(api_client).create_namespaced_resource_claim_template(
        namespace, claim_template(namespace)
    )
    core.create_namespaced_pod(namespace, pod(namespace, name))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = core.read_namespaced_pod(name, namespace)
        if got.status.phase == "Running":
            return got
        time.sleep(0.25)
    events = [f"{e.reason}: {e.message}" for e in core.list_namespaced_event(namespace).items]
    raise AssertionError(
        f"pod {namespace}/{name} not Running after {timeout} s: {got.status.phase}; {events}"
    )


def running(pid: int) -> bool:
    """Whether ``pid`` runs (an exited process waiting to be reaped does not)."""
    from pathlib import Path

    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def still_running(pids: list[int], timeout: float = 10) -> list[int]:
    """The PIDs still running after up to ``timeout`` s (exited children can take a moment to be reaped)."""
    import time

    deadline = time.monotonic() + timeout
    alive = [p for p in pids if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if running(p)]
    return alive
