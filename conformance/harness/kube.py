"""The API requests the suite makes, on plain JSON objects (dicts), for the kinds it uses.

Tests read and write objects as the YAML a person would write, not as generated model classes;
one table (:data:`KINDS`) says where each kind lives, and :class:`Kube` is its verbs over a
:class:`draproto.rest.Rest`, the one HTTP path of our processes too. Watches stream decoded events.
A refusal is an :class:`ApiError` of the class of its status, each also the :mod:`draproto.rest`
error of that status: code catches ``NotFound``, ``Conflict``, ``Gone``, ``Invalid`` from there
rather than test the status.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.errors import ResourceError
from draproto.rest import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    Rest,
    RestError,
    error_type,
    group_path,
)

__all__ = [
    "KINDS",
    "ApiAlreadyExists",
    "ApiConflict",
    "ApiError",
    "ApiForbidden",
    "ApiGone",
    "ApiInvalid",
    "ApiNotFound",
    "Kind",
    "Kube",
    "api_error",
    "meta",
]

SUITE_AGENT = "dra-conformance-suite"
"""The ``User-Agent`` of the suite's requests (the audit log tells them from the driver's)."""


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the API."""

    group_version: str
    """``v1`` or ``group/version``."""
    plural: str
    """The resource name in URLs."""
    namespaced: bool
    """Whether objects live in a namespace."""

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str = "") -> str:
        """The URL path of the collection, or of one object (and a subresource)."""
        base = group_path(self.group_version)
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.plural} are namespaced: give a namespace")
            base += f"/namespaces/{namespace}"
        path = f"{base}/{self.plural}"
        if name:
            path += f"/{name}"
            if subresource:
                path += f"/{subresource}"
        return path

    def every(self, namespace: str | None = None) -> str:
        """The URL path of the collection: in ``namespace``, or across all namespaces when None."""
        if namespace or not self.namespaced:
            return self.path(namespace)
        return f"{group_path(self.group_version)}/{self.plural}"


RESOURCE_V1 = "resource.k8s.io/v1"

KINDS: Mapping[str, Kind] = {
    "Namespace": Kind("v1", "namespaces", False),
    "Node": Kind("v1", "nodes", False),
    "Pod": Kind("v1", "pods", True),
    "Event": Kind("v1", "events", True),
    "Secret": Kind("v1", "secrets", True),
    "ResourceClaim": Kind(RESOURCE_V1, "resourceclaims", True),
    "ResourceClaimTemplate": Kind(RESOURCE_V1, "resourceclaimtemplates", True),
    "ResourceSlice": Kind(RESOURCE_V1, "resourceslices", False),
    "DeviceClass": Kind(RESOURCE_V1, "deviceclasses", False),
    "DeviceTaintRule": Kind(RESOURCE_V1, "devicetaintrules", False),
    "Lease": Kind("coordination.k8s.io/v1", "leases", True),
    "PodGroup": Kind("scheduling.k8s.io/v1beta1", "podgroups", True),
    "ServiceAccount": Kind("v1", "serviceaccounts", True),
    "ClusterRole": Kind("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": Kind("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "ValidatingAdmissionPolicy": Kind(
        "admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False
    ),
    "ValidatingAdmissionPolicyBinding": Kind(
        "admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", False
    ),
}
"""Every kind the suite touches."""


class ApiError(ResourceError, RestError):
    """The API server answered a request with an error status (or none: :attr:`status` 0); of the
    subclass of its status (:func:`api_error`). ``str()`` reads ``REQUEST: STATUS MESSAGE`` (or
    ``REQUEST: WHY NO ANSWER``); :attr:`status`, :attr:`reason` (the Status reason) and
    :attr:`message` (the server's message) are those of :class:`~draproto.rest.RestError`."""


class ApiForbidden(ApiError, Forbidden):
    """403: the account may not do this."""


class ApiNotFound(ApiError, NotFound):
    """404: the object (or the API group) does not exist."""


class ApiConflict(ApiError, Conflict):
    """409: a stale resourceVersion or a failed precondition, or a name that is taken."""


class ApiAlreadyExists(ApiConflict, AlreadyExists):
    """409 AlreadyExists: a create of a name that is taken."""


class ApiGone(ApiError, Gone):
    """410: a watch from a resourceVersion the server no longer keeps."""


class ApiInvalid(ApiError, Invalid):
    """422: the object does not validate (or a field may not change)."""


_API_ERRORS: Mapping[type[RestError], type[ApiError]] = {
    Forbidden: ApiForbidden,
    NotFound: ApiNotFound,
    Conflict: ApiConflict,
    AlreadyExists: ApiAlreadyExists,
    Gone: ApiGone,
    Invalid: ApiInvalid,
}


def api_error(text: str, status: int = 0, reason: str = "", message: str = "") -> ApiError:
    """The :class:`ApiError` of an answer with ``status`` and the Status ``reason``: of the subclass
    of the draproto error class ``draproto.rest.error_type`` names (the ``errors`` of the suite's
    :class:`~draproto.rest.Rest`)."""
    kind = _API_ERRORS.get(error_type(status, reason), ApiError)
    return kind(text, status, reason, message)


def _dry(dry_run: bool) -> dict[str, str]:
    """The query of a dry run (none otherwise)."""
    return {"dryRun": "All"} if dry_run else {}


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj["metadata"]`` (empty when missing)."""
    return obj.get("metadata") or {}


class Kube:
    """The verbs of :data:`KINDS` over a :class:`~draproto.rest.Rest` that raises :class:`ApiError`,
    on ``api``: a kubernetes client ``ApiClient`` (its TLS and credentials) or a
    :class:`~draproto.apiconn.Connection`."""

    def __init__(self, api: Any, timeout: float = 30.0, headers: Mapping[str, str] | None = None) -> None:
        self.rest = Rest(
            api, timeout, headers={"User-Agent": SUITE_AGENT, **(headers or {})}, errors=api_error
        )
        """The requests (``timeout``: seconds one may take; ``headers``: sent with each)."""

    def impersonating(self, user: str, extra: Mapping[str, str] | None = None) -> Kube:
        """The same connection acting as ``user`` (a service account gets its groups from the API
        server), with one value per ``extra`` key; needs the right to impersonate."""
        headers = {"Impersonate-User": user}
        for key, value in (extra or {}).items():
            headers[f"Impersonate-Extra-{urllib.parse.quote(key, safe='')}"] = value
        return Kube(self.rest.connection, self.rest.timeout, headers)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """One request; the decoded JSON answer (empty when none), or :class:`ApiError`. Query
        values of None are left out."""
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        return self.rest.send(
            method, path, query=params, body=body, content_type=content_type, timeout=timeout
        )

    # --- objects ---------------------------------------------------------------------------

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Create ``obj`` (its kind, namespace and name from the object itself); with ``dry_run``
        the API server checks it (admission too) and stores nothing."""
        kind = KINDS[obj["kind"]]
        return dict(
            self.request("POST", kind.path(meta(obj).get("namespace")), body=obj, query=_dry(dry_run))
        )

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        return self.rest.get(KINDS[kind].path(namespace, name))

    def objects(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of ``kind`` (in ``namespace``, or all namespaces when None)."""
        answer = self.request(
            "GET", KINDS[kind].every(namespace), query={"labelSelector": labels, "fieldSelector": fields}
        )
        return [dict(item) for item in answer.get("items") or []]

    def objects_and_version(
        self, kind: str, namespace: str | None = None, *, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Like :meth:`objects`, with the list's resourceVersion (to watch from)."""
        answer = self.request("GET", KINDS[kind].every(namespace), query={"fieldSelector": fields})
        return [dict(i) for i in answer.get("items") or []], str(meta(answer).get("resourceVersion", ""))

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        grace_seconds: int | None = None,
        dry_run: bool = False,
    ) -> bool:
        """Delete an object; False when it was already gone. With ``dry_run`` nothing is deleted."""
        body = None if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        try:
            self.request("DELETE", KINDS[kind].path(namespace, name), body=body, query=_dry(dry_run))
        except NotFound:
            return False
        return True

    def patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        subresource: str = "",
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """A JSON merge patch."""
        return dict(
            self.request(
                "PATCH",
                KINDS[kind].path(namespace, name, subresource),
                body=patch,
                content_type="application/merge-patch+json",
                query=_dry(dry_run),
            )
        )

    def replace(
        self, obj: Mapping[str, Any], subresource: str = "", *, dry_run: bool = False
    ) -> dict[str, Any]:
        """PUT the whole object (with its resourceVersion), or its ``status`` subresource."""
        m = meta(obj)
        path = KINDS[obj["kind"]].path(m.get("namespace"), m["name"], subresource)
        return dict(self.request("PUT", path, body=obj, query=_dry(dry_run)))

    def watch(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        resource_version: str = "",
        fields: str | None = None,
        timeout_seconds: int = 30,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` events until the server ends the watch after ``timeout_seconds``;
        an ``ERROR`` event raises the :class:`ApiError` of its Status (:class:`~draproto.rest.Gone`:
        ``resource_version`` is too old)."""
        path = KINDS[kind].every(namespace)
        query = {"resourceVersion": resource_version, "fieldSelector": fields or ""}
        events = self.rest.watch(path, {k: v for k, v in query.items() if v}, timeout_seconds)
        with contextlib.closing(events):
            for kind_of_event, obj in events:
                if kind_of_event == "ERROR":
                    code, message = int(obj.get("code") or 500), str(obj.get("message") or "")
                    reason = str(obj.get("reason") or "")
                    raise api_error(f"watch {path}: {code} {message or obj}", code, reason, message)
                yield kind_of_event, dict(obj)

    def text(self, path: str, timeout: float | None = None) -> str:
        """``GET path`` answered in plain text (``/metrics``); :class:`ApiError` when it is refused."""
        data = self.rest.read("GET", path, content_type="text/plain", accept="text/plain", timeout=timeout)
        return data.decode(errors="replace")

    def server_version(self) -> str:
        """The API server's ``gitVersion`` (``v1.37.2``)."""
        return str(self.request("GET", "/version").get("gitVersion", ""))

    def served(self, group_version: str) -> list[str]:
        """The kinds an API group version serves (empty when it is not served)."""
        return [str(r.get("kind")) for r in self.rest.resources(group_version)]
