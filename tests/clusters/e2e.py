"""What the end-to-end cluster tests share: run the example GPU pod, watch processes go."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from tests import kube
from tests.manifests import gpu_pod
from tests.polling import until

__all__ = ["run_pod", "running", "still_running"]


def run_pod(api_client: Any, namespace: str, name: str = "p1", timeout: float = 60) -> Any:
    """Create the example claim template and pod; return the pod once Running (fails with its events)."""

    core = kube.core(api_client)

    def has_default_account() -> bool:  # pods are refused until the controller made it
        return any(
            sa.metadata.name == "default" for sa in core.list_namespaced_service_account(namespace).items
        )

    until(has_default_account, what=f"the default service account of {namespace}")
    template, pod = gpu_pod(namespace, name)
    kube.resource(api_client).create_namespaced_resource_claim_template(namespace, template)
    core.create_namespaced_pod(namespace, pod)

    def running_pod() -> Any:
        got = core.read_namespaced_pod(name, namespace)
        return got if got.status.phase == "Running" else None

    try:
        return until(running_pod, timeout, f"pod {namespace}/{name} Running", interval=0.25)
    except AssertionError as e:
        events = [f"{ev.reason}: {ev.message}" for ev in core.list_namespaced_event(namespace).items]
        raise AssertionError(f"{e}; events: {events}") from None


def running(pid: int) -> bool:
    """Whether ``pid`` runs (an exited process waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def still_running(pids: list[int], timeout: float = 10) -> list[int]:
    """The PIDs still running after up to ``timeout`` s (exited children can take a moment to be reaped)."""
    with contextlib.suppress(AssertionError):
        until(lambda: not any(running(p) for p in pids), timeout, interval=0.1)
    return [p for p in pids if running(p)]
