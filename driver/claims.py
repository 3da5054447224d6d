"""Where prepare gets ResourceClaims from: the API server, or memory in tests and benchmarks.

A claim is handled as the API server's JSON (a plain dict with camelCase keys): that is
what both sources return, and it keeps new API fields visible without waiting for the
client's models.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from driver.errors import ClaimError

__all__ = [
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "ApiClaimSource",
    "ClaimSource",
    "MemoryClaimSource",
    "is_extended_resource_claim",
]

EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
"""Set to ``"true"`` on the claim kube-scheduler makes for a pod's extended resources (KEP-5004)."""


def is_extended_resource_claim(claim: Mapping[str, Any]) -> bool:
    """Whether the scheduler made ``claim`` for a pod's extended resources (not a user's claim)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true"


class ClaimSource(Protocol):
    """Reads one ResourceClaim."""

    def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The claim as API JSON, or None when it does not exist."""
        ...


class ApiClaimSource:
    """Reads ``resource.k8s.io/v1`` ResourceClaims from the API server."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        from kubernetes import client

        self._timeout = timeout_s
        # Any: the client's models are not needed, the raw JSON is read instead
        self._typed: Any = client.ResourceV1Api(api_client) if hasattr(client, "ResourceV1Api") else None
        self._custom: Any = client.CustomObjectsApi(api_client)

    def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            if self._typed is not None:
                response = self._typed.read_namespaced_resource_claim(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                )
                data: Mapping[str, Any] = json.loads(response.data)
                return data
            obj: Mapping[str, Any] = self._custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", name, _request_timeout=self._timeout
            )
            return obj
        except ApiException as e:
            if e.status == 404:
                return None
            raise ClaimError(f"cannot read ResourceClaim {namespace}/{name}: {e.status} {e.reason}") from e
        except Exception as e:  # urllib3 connection errors and the like; the kubelet retries
            raise ClaimError(f"cannot read ResourceClaim {namespace}/{name}: {e}") from e


class MemoryClaimSource:
    """Claims held in memory: the test and benchmark stand-in for the API server."""

    def __init__(self) -> None:
        self._claims: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._lock = threading.Lock()

    def put(self, claim: Mapping[str, Any]) -> None:
        """Add or replace a claim (keyed by its metadata namespace and name)."""
        meta = claim["metadata"]
        with self._lock:
            self._claims[(meta["namespace"], meta["name"])] = claim

    def delete(self, namespace: str, name: str) -> None:
        """Forget a claim."""
        with self._lock:
            self._claims.pop((namespace, name), None)

    def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            return self._claims.get((namespace, name))
