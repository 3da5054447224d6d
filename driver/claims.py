"""Where prepare gets ResourceClaims from, and writes their device status to: the API server, or
memory in tests and benchmarks.

A claim is handled as the API server's JSON (a plain dict with camelCase keys): that is
what both sources return, and it keeps new API fields visible without waiting for the
client's models. ``status.devices`` (``driver.devicestatus``) is written by server-side apply.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from draproto.rest import Conflict, Invalid, NotFound, Rest, RestError, q
from driver.errors import ClaimError

__all__ = [
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "ApiClaimSource",
    "ClaimSource",
    "MemoryClaimSource",
    "apply_body",
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

    def apply_device_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any] | None:
        """Make ``devices`` the ``status.devices`` entries ``manager`` owns in the claim (none: remove
        them), keeping everyone else's; the claim as answered, or None when it is gone (or has
        another UID). Raises ``ClaimError`` when the write fails."""
        ...


def apply_body(namespace: str, name: str, uid: str, devices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The server-side apply body of a claim's ``status.devices``; the UID makes the API server refuse
    a claim re-created under the same name (409) instead of writing into it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "status": {"devices": [dict(d) for d in devices]},
    }


class ApiClaimSource:
    """Reads ``resource.k8s.io/v1`` ResourceClaims from the API server (raw JSON, :mod:`draproto.rest`)."""

    def __init__(self, rest: Rest, timeout_s: float = 10.0) -> None:
        self._rest = rest
        self._timeout = timeout_s

    @staticmethod
    def _path(namespace: str, name: str, subresource: str = "") -> str:
        path = f"/apis/resource.k8s.io/v1/namespaces/{q(namespace)}/resourceclaims/{q(name)}"
        return f"{path}/{subresource}" if subresource else path

    def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return self._rest.send("GET", self._path(namespace, name), timeout=self._timeout)
        except NotFound:
            return None
        except RestError as e:
            # no answer (status 0) or a refusal: the kubelet retries
            raise ClaimError(f"cannot read ResourceClaim {namespace}/{name}: {_why(e)}") from e

    def apply_device_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any] | None:
        try:
            data: Mapping[str, Any] = self._rest.send(
                "PATCH",
                self._path(namespace, name, "status"),
                # force: the driver owns its entries, whoever touched them meanwhile
                query={"fieldManager": manager, "force": "true"},
                body=apply_body(namespace, name, uid, devices),
                content_type="application/apply-patch+yaml",
                timeout=self._timeout,
            )
        except RestError as e:
            if isinstance(e, NotFound) or _recreated(e):
                return None  # gone, or re-created: not the claim that was prepared
            if isinstance(e, Invalid) and _allocation_changed(e.message):
                return self._replace_device_status(namespace, name, uid, manager, devices)
            raise ClaimError(
                f"cannot apply status.devices of ResourceClaim {namespace}/{name}: {_why(e)}"
            ) from e
        if _keys(data, manager) != _keys({"status": {"devices": devices}}, manager):
            # entries of this driver that its apply does not own (written by a replace, below)
            # outlive the apply: replace the status instead
            return self._replace_device_status(namespace, name, uid, manager, devices)
        return data

    def _replace_device_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any] | None:
        """``apply_device_status`` by read, modify and replace (PUT) of the status.

        kube-apiserver (seen in 1.37.2) refuses every patch of the status of a claim whose
        allocation carries an opaque config stored as JSON with whitespace (as Python clients send
        it): the patch re-encodes the config compactly, and the allocation then no longer equals
        itself ("status.allocation: ... field cannot be modified once set"). A replace sends the
        status back as the client reads and writes it, which is how that JSON was written. The
        entries of drivers other than ``manager`` are kept; a conflict (someone wrote meanwhile)
        is tried again. What a replace wrote belongs to ``manager``'s update, not to its apply, so
        a later apply cannot remove it: ``apply_device_status`` then replaces again.
        """
        what = f"status.devices of ResourceClaim {namespace}/{name}"
        for _attempt in range(_REPLACE_ATTEMPTS):
            claim = self.get_claim(namespace, name)
            if claim is None or (claim.get("metadata") or {}).get("uid") != uid:
                return None
            status = dict(claim.get("status") or {})
            kept = [d for d in status.get("devices") or [] if d.get("driver") != manager]
            status["devices"] = kept + [dict(d) for d in devices]
            try:
                return self._rest.send(
                    "PUT",
                    self._path(namespace, name, "status"),
                    query={"fieldManager": manager},
                    body={**claim, "status": status},
                    timeout=self._timeout,
                )
            except NotFound:
                return None
            except Conflict:
                continue
            except RestError as e:
                raise ClaimError(f"cannot replace {what}: {_why(e)}") from e
        raise ClaimError(f"cannot replace {what}: it changed {_REPLACE_ATTEMPTS} times while being written")


_REPLACE_ATTEMPTS = 3


def _why(e: RestError) -> str:
    """The status and the server's message of a refusal; what went wrong when no answer came."""
    return f"{e.status} {e.message}" if e.status else str(e)


def _keys(claim: Mapping[str, Any], driver: str) -> set[tuple[str, str, str]]:
    """Pool, device and share id of each ``status.devices`` entry of ``driver``."""
    devices = (claim.get("status") or {}).get("devices") or []
    return {
        (str(d.get("pool")), str(d.get("device")), str(d.get("shareID") or ""))
        for d in devices
        if d.get("driver") == driver
    }


def _allocation_changed(message: str) -> bool:
    """Whether kube-apiserver refused a patch of the status for changing the allocation it re-encoded
    (``status.allocation: Invalid value: null: field cannot be modified once set``)."""
    return "status.allocation" in message and "cannot be modified" in message


def _recreated(e: RestError) -> bool:
    """Whether the API server refused the apply's UID: the claim was re-created under its name
    (``metadata.uid: ... field is immutable``, 422; a UID precondition, 409)."""
    return (isinstance(e, Invalid) and "metadata.uid" in e.message) or (
        isinstance(e, Conflict) and "uid" in e.message.lower()
    )


class MemoryClaimSource:
    """Claims held in memory: the test and benchmark stand-in for the API server.

    ``apply_device_status`` works as the API server's apply would for one manager per driver: the
    entries of the applying driver are replaced, the others kept; every apply is also recorded in
    :attr:`applied`.
    """

    def __init__(self) -> None:
        self._claims: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._lock = threading.Lock()
        self.applied: list[tuple[str, str, str, list[dict[str, Any]]]] = []
        """Each ``apply_device_status``: namespace, name, manager, the entries."""

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

    def apply_device_status(
        self, namespace: str, name: str, uid: str, manager: str, devices: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any] | None:
        with self._lock:
            self.applied.append((namespace, name, manager, [dict(d) for d in devices]))
            claim = self._claims.get((namespace, name))
            if claim is None or (claim.get("metadata") or {}).get("uid") != uid:
                return None
            status = dict(claim.get("status") or {})
            kept = [d for d in status.get("devices") or [] if d.get("driver") != manager]
            status["devices"] = kept + [dict(d) for d in devices]
            if not status["devices"]:
                del status["devices"]
            updated = {**claim, "status": status}
            self._claims[(namespace, name)] = updated
            return updated
