"""The API requests the suite makes, on plain JSON objects (dicts), for the kinds it uses.

Tests read and write objects as the YAML a person would write, not as generated model classes;
one table (:data:`KINDS`) says where each kind lives. Watches stream decoded events. A refusal is
an :class:`ApiError` of the class of its status, each also the :mod:`draproto.rest` error of that
status: code catches ``NotFound``, ``Conflict``, ``Gone``, ``Invalid`` from there rather than test
the status.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.errors import ResourceError
from draproto.rest import AlreadyExists, Conflict, Gone, Invalid, NotFound, RestError, error_type

__all__ = [
    "KINDS",
    "ApiAlreadyExists",
    "ApiConflict",
    "ApiError",
    "ApiGone",
    "ApiInvalid",
    "ApiNotFound",
    "Kind",
    "Kube",
    "api_error",
    "meta",
]


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
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
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
    """The API server answered a request with an error status (or none: ``status`` 0, ``reason``
    ``Unreachable``); of the subclass of its status (:func:`api_error`). ``str()`` reads
    ``STATUS REASON: REQUEST: MESSAGE``; :attr:`status`, :attr:`reason` (the Status reason) and
    :attr:`message` (the server's message) are those of :class:`~draproto.rest.RestError`."""


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
    NotFound: ApiNotFound,
    Conflict: ApiConflict,
    AlreadyExists: ApiAlreadyExists,
    Gone: ApiGone,
    Invalid: ApiInvalid,
}


def api_error(text: str, status: int = 0, reason: str = "", message: str = "") -> ApiError:
    """The :class:`ApiError` of an answer with ``status`` and the Status ``reason``: of the subclass
    of the draproto error class ``draproto.rest.error_type`` names."""
    kind = _API_ERRORS.get(error_type(status, reason), ApiError)
    return kind(text, status, reason, message)


def _dry(dry_run: bool) -> dict[str, str]:
    """The query of a dry run (none otherwise)."""
    return {"dryRun": "All"} if dry_run else {}


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj["metadata"]`` (empty when missing)."""
    return obj.get("metadata") or {}


class Kube:
    """JSON requests over a ``kubernetes.client.ApiClient`` (its TLS and credentials)."""

    def __init__(
        self, api_client: Any, timeout: float = 30.0, headers: Mapping[str, str] | None = None
    ) -> None:
        self.api = api_client
        """The underlying client."""
        self.timeout = timeout
        """Seconds a single request may take."""
        self.headers: Mapping[str, str] = dict(headers or {})
        """Sent with every request (impersonation: :meth:`impersonating`)."""

    def impersonating(self, user: str, extra: Mapping[str, str] | None = None) -> Kube:
        """The same connection acting as ``user`` (a service account gets its groups from the API
        server), with one value per ``extra`` key; needs the right to impersonate."""
        headers = {"Impersonate-User": user}
        for key, value in (extra or {}).items():
            headers[f"Impersonate-Extra-{urllib.parse.quote(key, safe='')}"] = value
        return Kube(self.api, self.timeout, headers)

    def _open(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        *,
        body: Any,
        content_type: str,
        timeout: Any,
        accept: str = "application/json",
    ) -> Any:
        """Send a request; the raw urllib3 response (body not read yet)."""
        import urllib3

        method, url, headers, _, _ = self.api.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params={"Accept": accept, "Content-Type": content_type, **self.headers},
            auth_settings=["BearerToken"],
        )
        payload = None if body is None else json.dumps(body)
        try:
            return self.api.rest_client.pool_manager.request(
                method, url, body=payload, headers=headers, timeout=timeout, preload_content=False
            )
        except urllib3.exceptions.HTTPError as e:
            raise ApiError(f"0 Unreachable: {method} {path}: {e}", 0, "Unreachable") from e

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
        """One request; the decoded JSON answer, or :class:`ApiError`."""
        params = [(k, str(v)) for k, v in (query or {}).items() if v is not None]
        data = self._read(method, path, params, body=body, content_type=content_type, timeout=timeout)
        return json.loads(data) if data else None

    def _read(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        *,
        body: Any,
        content_type: str,
        timeout: float | None,
        accept: str = "application/json",
    ) -> bytes:
        """The whole answer of one request, or :class:`ApiError` for a status outside 2xx."""
        import urllib3

        limit = urllib3.Timeout(total=timeout or self.timeout)
        response = self._open(
            method, path, query, body=body, content_type=content_type, timeout=limit, accept=accept
        )
        try:
            data: bytes = response.read()
        finally:
            response.release_conn()
        if not 200 <= response.status < 300:
            raise _api_error(response.status, data, f"{method} {path}")
        return data

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
        try:
            return dict(self.request("GET", KINDS[kind].path(namespace, name)))
        except NotFound:
            return None

    def objects(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of ``kind`` (in ``namespace``, or all namespaces when None)."""
        k = KINDS[kind]
        path = k.path(namespace) if namespace or not k.namespaced else f"/{_prefix(k)}/{k.plural}"
        answer = self.request("GET", path, query={"labelSelector": labels, "fieldSelector": fields})
        return [dict(item) for item in answer.get("items") or []]

    def objects_and_version(
        self, kind: str, namespace: str | None = None, *, fields: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Like :meth:`objects`, with the list's resourceVersion (to watch from)."""
        k = KINDS[kind]
        path = k.path(namespace) if namespace or not k.namespaced else f"/{_prefix(k)}/{k.plural}"
        answer = self.request("GET", path, query={"fieldSelector": fields})
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
        """Stream ``(type, object)`` events until the server ends the watch after ``timeout_seconds``."""
        import urllib3

        k = KINDS[kind]
        path = k.path(namespace) if namespace or not k.namespaced else f"/{_prefix(k)}/{k.plural}"
        query = [("watch", "1"), ("timeoutSeconds", str(timeout_seconds))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if fields:
            query.append(("fieldSelector", fields))
        limit = urllib3.Timeout(connect=10, read=timeout_seconds + 15)
        response = self._open("GET", path, query, body=None, content_type="application/json", timeout=limit)
        try:
            if not 200 <= response.status < 300:
                raise _api_error(response.status, response.read(), f"watch {path}")
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        code, reason = int(status.get("code", 500)), str(status.get("reason"))
                        message = str(status.get("message") or "")
                        raise api_error(f"{code} {reason}: {status}", code, reason, message)
                    yield str(event["type"]), dict(event["object"])
        finally:
            response.release_conn()

    def text(self, path: str, timeout: float | None = None) -> str:
        """``GET path`` answered in plain text (``/metrics``); :class:`ApiError` when it is refused."""
        data = self._read(
            "GET", path, [], body=None, content_type="text/plain", timeout=timeout, accept="text/plain"
        )
        return data.decode(errors="replace")

    def server_version(self) -> str:
        """The API server's ``gitVersion`` (``v1.37.2``)."""
        return str(self.request("GET", "/version").get("gitVersion", ""))

    def served(self, group_version: str) -> list[str]:
        """The kinds an API group version serves (empty when it is not served)."""
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        try:
            answer = self.request("GET", path)
        except NotFound:
            return []
        return [str(r.get("kind")) for r in answer.get("resources") or [] if "/" not in str(r.get("name"))]


def _prefix(kind: Kind) -> str:
    return "api/v1" if kind.group_version == "v1" else f"apis/{kind.group_version}"


def _api_error(status: int, data: bytes, what: str) -> ApiError:
    reason, message = "", data.decode(errors="replace")[:500]
    try:
        body = json.loads(data or b"{}")
        reason = str(body.get("reason") or "")
        message = str(body.get("message") or message)
    except (ValueError, TypeError, AttributeError):
        pass
    return api_error(f"{status} {reason}: {what}: {message}", status, reason, message)
