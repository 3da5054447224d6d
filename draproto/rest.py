"""Requests to the API server as plain JSON.

Both sides of a node, the driver and the node agent, ask the API server about the same objects
(claims, slices, pods, the node) and must see what the server sent: the client's generated models
drop fields they do not know, and its API classes import every model they name, about a second
of CPU per process that touches ``CoreV1Api``. :class:`Rest` sends each request itself over a
:class:`~draproto.apiconn.Connection` (:func:`~draproto.apiconn.connect` reads a kubeconfig
without the kubernetes client), or over a kubernetes client ``ApiClient``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import urllib3

from draproto.apiconn import ApiConnection, Connection, of_client

__all__ = ["Rest", "RestError", "q"]

Obj = dict[str, Any]


def q(value: str) -> str:
    """``value`` quoted as one path segment."""
    return quote(value, safe="")


class RestError(Exception):
    """The API server refused a request, answered garbage, or could not be reached."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status; 0 when no answer came."""
        self.reason = reason
        """The server's ``message`` (or the raw body) when it refused; empty otherwise."""


class Rest:
    """Plain-JSON requests over one connection pool and its credentials."""

    def __init__(self, connection: Connection | Any, timeout: float = 30.0) -> None:
        self.connection: Connection = (
            connection
            if isinstance(connection, ApiConnection) or not hasattr(connection, "param_serialize")
            else of_client(connection)
        )
        """The server's address, TLS and credentials (a kubernetes client ``ApiClient`` is wrapped)."""
        self.timeout = timeout
        """Seconds a request may take when the call gives none."""
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
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
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
            raise RestError(f"{method} {path}: {e}") from e

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
        """The JSON answer of one request; :class:`RestError` unless the status is 2xx."""
        resp = self._open(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        try:
            data = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise RestError(f"{method} {path}: {e}") from e
        finally:
            resp.release_conn()
        if not 200 <= resp.status < 300:
            reason = data.decode(errors="replace")
            with contextlib.suppress(ValueError, AttributeError):
                reason = json.loads(data).get("message", reason)
            raise RestError(f"{method} {path}: {resp.status} {reason}", resp.status, reason)
        try:
            out: Obj = json.loads(data) if data else {}
        except ValueError as e:
            raise RestError(f"{method} {path}: the answer is not JSON: {e}", resp.status) from e
        return out

    def get(self, path: str, *, query: Mapping[str, str] | None = None) -> Obj | None:
        """The object at ``path``, or None when the server says 404."""
        try:
            return self.send("GET", path, query=query)
        except RestError as e:
            if e.status == 404:
                return None
            raise

    def watch(
        self, path: str, query: Mapping[str, str], timeout_seconds: int, *, bookmarks: bool = False
    ) -> Iterator[tuple[str, Obj]]:
        """Watch events (type, object) of the list at ``path`` (``BOOKMARK`` ones too with
        ``bookmarks``); ends when the server ends the watch (after ``timeout_seconds``) or
        :meth:`interrupt` is called."""
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
            raise RestError(f"watch {path}: {resp.status} {data.decode(errors='replace')}", resp.status)
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
                raise RestError(f"watch {path} broke: {e}") from e
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
