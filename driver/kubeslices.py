"""``KubeSliceStore``: the publisher's ``SliceStore`` on the API server.

Raw JSON both ways (:mod:`draproto.rest`), so the publisher sees what the API server sent; every
request has a timeout, so a call the API server never answers cannot hang a thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from draproto.rest import Conflict, NotFound, Rest, q
from driver.errors import StoreConflict
from driver.slicing import Body

__all__ = ["SLICES", "KubeSliceStore"]

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class KubeSliceStore:
    """``SliceStore`` over :class:`~draproto.rest.Rest` (``resource.k8s.io/v1``, raw JSON both ways)."""

    def __init__(
        self, rest: Rest, *, watch_timeout_seconds: int = 60, request_timeout_seconds: float = 30.0
    ) -> None:
        self._rest = rest
        self._watch_timeout = watch_timeout_seconds
        self._timeout = request_timeout_seconds
        """Per request (not the watch): a call the API server never answers must not hang a thread."""

    def node_uid(self, node_name: str) -> str | None:
        node = self._rest.get(f"/api/v1/nodes/{q(node_name)}")
        uid = (node or {}).get("metadata", {}).get("uid")
        return str(uid) if uid else None

    @staticmethod
    def _selector(driver_name: str, node_name: str) -> dict[str, str]:
        return {"fieldSelector": f"spec.driver={driver_name},spec.nodeName={node_name}"}

    def list(self, driver_name: str, node_name: str) -> tuple[list[Body], str]:
        data = self._rest.send(
            "GET", SLICES, query=self._selector(driver_name, node_name), timeout=self._timeout
        )
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def create(self, body: Body) -> Body:
        try:
            return self._rest.send("POST", SLICES, body=body, timeout=self._timeout)
        except Conflict as e:
            raise StoreConflict(body["metadata"]["name"]) from e

    def replace(self, body: Body) -> Body:
        name = body["metadata"]["name"]
        return self._rest.send("PUT", f"{SLICES}/{q(name)}", body=body, timeout=self._timeout)

    def delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            self._rest.send("DELETE", f"{SLICES}/{q(name)}", timeout=self._timeout)

    def watch(self, driver_name: str, node_name: str, resource_version: str) -> Iterator[tuple[str, Body]]:
        query = {**self._selector(driver_name, node_name), "resourceVersion": resource_version}
        yield from self._rest.watch(SLICES, query, self._watch_timeout)

    def interrupt(self) -> None:
        self._rest.interrupt()
