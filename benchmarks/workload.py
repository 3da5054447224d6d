"""What the cluster benchmarks create: a namespace ready for pods, a GPU claim template, claimed pods."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["DRIVER", "claim_pod", "namespace_with_gpu_template", "ready_namespace"]

DRIVER = "gpu.dra-conformance.io"
"""The reference driver's name, and its DeviceClass for one whole GPU."""


def ready_namespace(api: Any, namespace: str) -> None:
    """Create ``namespace`` and wait for its default service account (pods are refused until then)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            break
        except client.exceptions.ApiException:
            time.sleep(0.05)


def namespace_with_gpu_template(api: Any, namespace: str) -> None:
    """Create ``namespace`` (wait for its default service account) and a one-GPU claim template ``gpu``."""
    from kubernetes import client

    ready_namespace(api, namespace)
    template: Any = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu"},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
        },
    }
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(namespace, template)


def claim_pod(name: str, *, template: str | None = None, claim: str | None = None) -> Any:
    """A pod of one container that uses one claim: made from ``template``, or the existing ``claim``.

    A plain dict, typed ``Any``: the kubernetes client's stubs ask for ``V1Pod`` and take a dict.
    """
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", **source}],
        },
    }
