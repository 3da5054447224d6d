"""Requests to the API server as plain JSON.

Both sides of a node, the driver and the node agent, ask the API server about the same objects
(claims, slices, pods, the node) and must see what the server sent: the client's generated models
drop fields they do not know, and its API classes import every model they name, about a second
of CPU per process that touches ``CoreV1Api``. :class:`Rest` sends each request itself over a
:class:`~draproto.apiconn.Connection` (:func:`~draproto.apiconn.connect` reads a kubeconfig
without the kubernetes client), or over a kubernetes client ``ApiClient``. It is the one HTTP path
to the API server of every process of ours and of the suite (``conformance.harness.kube`` is its
kinds table and verbs over a :class:`Rest`). A refusal raises the :class:`RestError` subclass of
its status (:func:`error_type`, the one table of status codes): callers catch :class:`NotFound`,
:class:`Conflict`, :class:`Gone` or :class:`Invalid`, and the node agent's and the suite's own
errors are subclasses of these (a :class:`Rest` raises the suite's own when given its ``errors``).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3

from draproto.apiconn import ApiConnection, Connection, of_client

__all__ = [
    "AlreadyExists",
    "Conflict",
    "ErrorMaker",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "Rest",
    "RestError",
    "error_type",
    "group_path",
    "q",
    "rest_error",
]

Obj = dict[str, Any]


def q(value: str) -> str:
    """``value`` quoted as one path segment."""
    return quote(value, safe="")


def group_path(group_version: str) -> str:
    """The URL path of an API group version: ``/api/v1`` for the core group, else ``/apis/GROUP/VERSION``."""
    return "/api/v1" if group_version == "v1" else f"/apis/{group_version}"


class RestError(Exception):
    """The API server refused a request, answered garbage, or could not be reached.

    A refusal is raised as the subclass its status names (:func:`error_type`): catch
    :class:`Forbidden`, :class:`NotFound`, :class:`Conflict` (:class:`AlreadyExists` among them),
    :class:`Gone` or :class:`Invalid` rather than test :attr:`status`. ``str()`` of the error says
    what was asked and what came back.
    """

    def __init__(self, text: str, status: int = 0, reason: str = "", message: str = "") -> None:
        super().__init__(text)
        self.status = status
        """The HTTP status; 0 when no answer came."""
        self.reason = reason
        """The ``reason`` of the server's Status (``NotFound``, ``AlreadyExists``, ``Conflict``,
        ``Invalid``, ...); empty when the answer named none or none came."""
        self.message = message
        """The ``message`` of the server's Status (the raw body when the answer is no Status);
        empty when no answer came."""


class Forbidden(RestError):
    """403: the account may not do this (RBAC, an admission policy)."""


class NotFound(RestError):
    """404: the object (or the resource) does not exist."""


class Conflict(RestError):
    """409: the write lost to another (a stale resourceVersion, a failed precondition), or the
    object exists (:class:`AlreadyExists`)."""


class AlreadyExists(Conflict):
    """409 with the reason ``AlreadyExists``: a create of a name that is taken."""


class Gone(RestError):
    """410: a watch or list from a resourceVersion the server no longer keeps."""


class Invalid(RestError):
    """422: the object does not validate (or a field may not change)."""


_BY_STATUS: Mapping[int, type[RestError]] = {
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
}
_BY_REASON: Mapping[tuple[int, str], type[RestError]] = {(409, "AlreadyExists"): AlreadyExists}


def error_type(status: int, reason: str = "") -> type[RestError]:
    """The class of the error for an answer with ``status`` and the Status ``reason``: the one
    place that reads status codes (:class:`RestError` itself for any other status, or none)."""
    return _BY_REASON.get((status, reason)) or _BY_STATUS.get(status, RestError)


def rest_error(text: str, status: int = 0, reason: str = "", message: str = "") -> RestError:
    """The error of an answer with ``status``, of the class :func:`error_type` picks."""
    return error_type(status, reason)(text, status, reason, message)


def _status_of(data: bytes) -> tuple[str, str]:
    """The ``reason`` and ``message`` of a Status answer (none and the raw body when it is not one)."""
    reason, message = "", data.decode(errors="replace")
    with contextlib.suppress(ValueError, AttributeError):
        status = json.loads(data)
        message = status.get("message", message)
        reason = str(status.get("reason") or "")
    return reason, message


ErrorMaker = Callable[[str, int, str, str], RestError]
"""Makes the error of a request from its text, HTTP status, Status reason and message, of the
class :func:`error_type` names (:func:`rest_error`, or a family of subclasses of those classes)."""


def _program() -> str:
    """The name of this process's program: the module ``python -m`` ran (``driver``,
    ``nodeagent``), else the script's name; ``python`` for code given on the command line."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return str(spec.name).removesuffix(".__main__")
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return script if script and not script.startswith("-") else "python"


USER_AGENT = f"{_program()} (dra-conformance)"
"""The ``User-Agent`` of every request unless the caller's headers name another: the API server's
audit log and metrics then tell the driver's requests from the node agent's and the suite's."""


class Rest:
    """Plain-JSON requests over one connection pool and its credentials."""

    def __init__(
        self,
        connection: Connection | Any,
        timeout: float = 30.0,
        *,
        headers: Mapping[str, str] | None = None,
        errors: ErrorMaker = rest_error,
    ) -> None:
        self.connection: Connection = (
            connection
            if isinstance(connection, ApiConnection) or not hasattr(connection, "param_serialize")
            else of_client(connection)
        )
        """The server's address, TLS and credentials (a kubernetes client ``ApiClient`` is wrapped)."""
        self.timeout = timeout
        """Seconds a request may take when the call gives none."""
        self.headers: Mapping[str, str] = dict(headers or {})
        """Sent with every request (impersonation: ``Impersonate-User``)."""
        self.errors = errors
        """Makes each error raised (:func:`rest_error` unless given)."""
        self._streams: set[Any] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Release the connection pool."""
        self.connection.close()

    def _open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        timeout: float | tuple[float, float] | None,
        accept: str = "application/json",
    ) -> Any:
        headers = {"Accept": accept, "Content-Type": content_type, "User-Agent": USER_AGENT, **self.headers}
        limit = self.timeout if timeout is None else timeout
        if isinstance(limit, tuple):
            t = urllib3.Timeout(connect=limit[0], read=limit[1])
        else:
            t = urllib3.Timeout(total=limit)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        try:
            return self.connection.request(
                method, path, query=query or {}, headers=headers, body=data, timeout=t
            )
        except urllib3.exceptions.HTTPError as e:
            raise self.errors(f"{method} {path}: {e}", 0, "", "") from e

    def _refused(self, what: str, status: int, data: bytes) -> RestError:
        reason, message = _status_of(data)
        return self.errors(f"{what}: {status} {message}", status, reason, message)

    def read(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> bytes:
        """The body of the answer to one request (``accept`` ``text/plain`` for ``/metrics``); the
        error of its status (:func:`error_type`) unless the status is 2xx."""
        resp = self._open(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout, accept=accept
        )
        try:
            data: bytes = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise self.errors(f"{method} {path}: {e}", 0, "", "") from e
        finally:
            resp.release_conn()
        if not 200 <= resp.status < 300:
            raise self._refused(f"{method} {path}", resp.status, data)
        return data

    def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> Obj:
        """The JSON answer of one request (empty when it has no body); the error of its status
        (:func:`error_type`) unless the status is 2xx."""
        data = self.read(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        try:
            out: Obj = json.loads(data) if data else {}
        except ValueError as e:
            raise self.errors(f"{method} {path}: the answer is not JSON: {e}", 0, "", "") from e
        return out

    def get(self, path: str, *, query: Mapping[str, str] | None = None) -> Obj | None:
        """The object at ``path``, or None when the server says 404."""
        try:
            return self.send("GET", path, query=query)
        except NotFound:
            return None

    def resources(self, group_version: str) -> list[Obj]:
        """The resources an API group version serves (the ``resources`` of its ``APIResourceList``,
        their subresources left out: ``name`` is the plural, with ``kind`` and ``namespaced``);
        empty when the server does not serve it."""
        found = (self.get(group_path(group_version)) or {}).get("resources") or []
        return [r for r in found if "/" not in str(r.get("name"))]

    def watch(
        self, path: str, query: Mapping[str, str], timeout_seconds: int, *, bookmarks: bool = False
    ) -> Generator[tuple[str, Obj], None, None]:
        """Watch events (type, object) of the list at ``path`` (``BOOKMARK`` ones too with
        ``bookmarks``; an ``ERROR`` one's object is the Status); ends when the server ends the
        watch (after ``timeout_seconds``) or :meth:`interrupt` is called."""
        params = {**query, "watch": "true", "timeoutSeconds": str(timeout_seconds)}
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        resp = self._open(
            "GET",
            path,
            query=params,
            body=None,
            content_type="application/json",
            timeout=(10.0, timeout_seconds + 15.0),
        )
        if not 200 <= resp.status < 300:
            data = resp.read()
            resp.release_conn()
            raise self._refused(f"watch {path}", resp.status, data)
        with self._lock:
            self._streams.add(resp)
        try:
            buf = b""
            for chunk in resp.stream(4096, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield str(event.get("type", "")), event.get("object") or {}
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            with self._lock:
                interrupted = resp not in self._streams
            if not interrupted:
                raise self.errors(f"watch {path} broke: {e}", 0, "", "") from e
        finally:
            with self._lock:
                self._streams.discard(resp)
            resp.release_conn()

    def interrupt(self) -> None:
        """End every watch now (their iterators stop, without an error)."""
        with self._lock:
            streams = list(self._streams)
            self._streams.clear()
        for resp in streams:
            with contextlib.suppress(Exception):
                resp.shutdown()
