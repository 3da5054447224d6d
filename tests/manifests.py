"""The Kubernetes objects the tests create, in one place.

The cluster tests run the reference driver's example (``driver/deploy/examples/gpu-pod.yaml``,
the one its README shows): :func:`gpu_pod`. The builders below make the variations other tests
need: a claim or a claim template for a device class, a pod using claims, a device class.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "GPU_POD_CONTAINER",
    "REFERENCE_DRIVER",
    "claim_template",
    "device_class",
    "example",
    "gpu_pod",
    "pod",
    "resource_claim",
]

Obj = dict[str, Any]

EXAMPLES = Path(__file__).resolve().parent.parent / "driver" / "deploy" / "examples"
REFERENCE_DRIVER = "gpu.dra-conformance.io"
"""The reference driver's default name, also the name of its DeviceClass for whole GPUs."""
GPU_POD_CONTAINER = "main"
"""The container of :func:`gpu_pod` that uses the GPU."""


@cache
def _example(name: str) -> tuple[Obj, ...]:
    return tuple(doc for doc in yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text()) if doc)


def example(name: str) -> list[Obj]:
    """The objects of ``driver/deploy/examples/<name>.yaml`` (fresh copies)."""
    return copy.deepcopy(list(_example(name)))


def gpu_pod(namespace: str, name: str = "p1", template: str = "one-gpu") -> tuple[Obj, Obj]:
    """The example's claim template and pod, named ``template`` and ``name``, in ``namespace``."""
    claim_tmpl, gpu = example("gpu-pod")
    claim_tmpl["metadata"] = {"name": template, "namespace": namespace}
    gpu["metadata"] = {"name": name, "namespace": namespace}
    gpu["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = template
    return claim_tmpl, gpu


def _claim_spec(device_class: str, request: str) -> Obj:
    return {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": device_class}}]}}


def resource_claim(namespace: str, name: str, device_class: str, request: str = "gpu") -> Obj:
    """A ResourceClaim for one device of ``device_class``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": _claim_spec(device_class, request),
    }


def claim_template(namespace: str, name: str, device_class: str, request: str = "gpu") -> Obj:
    """A ResourceClaimTemplate for one device of ``device_class``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": _claim_spec(device_class, request)},
    }


def pod(
    namespace: str,
    name: str,
    claims: Mapping[str, Mapping[str, str]],
    *,
    container: str = "app",
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A pod whose one container uses every claim of ``claims``.

    ``claims``: pod claim name -> ``{"resourceClaimName": ...}`` or
    ``{"resourceClaimTemplateName": ...}``.
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": {
            "automountServiceAccountToken": False,
            "resourceClaims": [{"name": n, **source} for n, source in claims.items()],
            "containers": [
                {
                    "name": container,
                    "image": "registry.example/app:1",
                    "resources": {"claims": [{"name": n} for n in claims]},
                }
            ],
        },
    }


def device_class(driver: str, name: str | None = None) -> Obj:
    """A DeviceClass selecting every device of ``driver`` (named after it unless ``name``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name or driver},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }
