"""What the cluster benchmarks create: a namespace ready for pods, a GPU claim template, claimed pods.

Over :class:`conformance.harness.kube.Kube` (``Kube(cluster.connection())``), on plain JSON objects.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the harness package is a quarter second of imports: the callers import it to run
    from conformance.harness.kube import Kube

__all__ = ["DRIVER", "claim_pod", "namespace_with_gpu_template", "phase", "pod_phase", "ready_namespace"]

DRIVER = "gpu.dra-conformance.io"
"""The reference driver's name, and its DeviceClass for one whole GPU."""


def ready_namespace(kube: Kube, namespace: str) -> None:
    """Create ``namespace`` and wait for its default service account (pods are refused until then)."""
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    while kube.get("ServiceAccount", "default", namespace) is None:
        time.sleep(0.05)


def namespace_with_gpu_template(kube: Kube, namespace: str) -> None:
    """Create ``namespace`` (wait for its default service account) and a one-GPU claim template ``gpu``."""
    ready_namespace(kube, namespace)
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu", "namespace": namespace},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
            },
        }
    )


def claim_pod(
    name: str, namespace: str, *, template: str | None = None, claim: str | None = None
) -> dict[str, Any]:
    """A pod in ``namespace`` of one container that uses one claim: made from ``template``, or the
    existing ``claim``."""
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", **source}],
        },
    }


def phase(pod: dict[str, Any]) -> str:
    """A pod's ``status.phase`` (empty when it has none yet)."""
    return str((pod.get("status") or {}).get("phase") or "")


def pod_phase(kube: Kube, namespace: str, name: str) -> str:
    """The phase of pod ``namespace/name``; :class:`LookupError` when it does not exist (the typed
    client raised on a 404 too: a pod the benchmark made is not expected to vanish)."""
    pod = kube.get("Pod", name, namespace)
    if pod is None:
        raise LookupError(f"pod {namespace}/{name} does not exist")
    return phase(pod)
