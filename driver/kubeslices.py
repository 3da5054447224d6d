"""``KubeSliceStore``: the publisher's ``SliceStore`` over the kubernetes client.

Raw JSON both ways (``_preload_content=False`` out, models built from dicts in), so the
publisher sees what the API server sent; every request has a timeout, so a call the API
server never answers cannot hang a thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from driver.errors import StoreConflict
from driver.slicing import Body

__all__ = ["KubeSliceStore"]


class KubeSliceStore:
    """``SliceStore`` over the kubernetes client (``ResourceV1Api``, raw JSON both ways)."""

    def __init__(
        self, api_client: Any, *, watch_timeout_seconds: int = 60, request_timeout_seconds: float = 30.0
    ) -> None:
        from kubernetes import client, watch

        # Any: the client's typed signatures want models; we pass models built from JSON dicts.
        self._core: Any = client.CoreV1Api(api_client)
        self._resource: Any = client.ResourceV1Api(api_client)
        self._models: Any = client
        self._watch_mod: Any = watch
        self._watch_timeout = watch_timeout_seconds
        self._timeout = request_timeout_seconds
        """Per request (not the watch): a call the API server never answers must not hang a thread."""
        self._watch: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def _json(response: Any) -> Body:
        data: Body = json.loads(response.data)
        return data

    def node_uid(self, node_name: str) -> str | None:
        from kubernetes.client.exceptions import ApiException

        try:
            node = self._json(
                self._core.read_node(node_name, _preload_content=False, _request_timeout=self._timeout)
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        uid = node.get("metadata", {}).get("uid")
        return str(uid) if uid else None

    def list(self, driver_name: str, node_name: str) -> tuple[list[Body], str]:
        data = self._json(
            self._resource.list_resource_slice(
                field_selector=f"spec.driver={driver_name},spec.nodeName={node_name}",
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        )
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def create(self, body: Body) -> Body:
        from kubernetes.client.exceptions import ApiException

        try:
            model = self._models.V1ResourceSlice.from_dict(body)
            return self._json(
                self._resource.create_resource_slice(
                    model, _preload_content=False, _request_timeout=self._timeout
                )
            )
        except ApiException as e:
            if e.status == 409:
                raise StoreConflict(body["metadata"]["name"]) from e
            raise

    def replace(self, body: Body) -> Body:
        model = self._models.V1ResourceSlice.from_dict(body)
        name = body["metadata"]["name"]
        return self._json(
            self._resource.replace_resource_slice(
                name, model, _preload_content=False, _request_timeout=self._timeout
            )
        )

    def delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._resource.delete_resource_slice(name, _preload_content=False, _request_timeout=self._timeout)
        except ApiException as e:
            if e.status != 404:
                raise

    def watch(self, driver_name: str, node_name: str, resource_version: str) -> Iterator[tuple[str, Body]]:
        w = self._watch_mod.Watch()
        with self._lock:
            self._watch = w
        try:
            for event in w.stream(
                self._resource.list_resource_slice,
                field_selector=f"spec.driver={driver_name},spec.nodeName={node_name}",
                resource_version=resource_version,
                timeout_seconds=self._watch_timeout,
                deserialize=False,
            ):
                yield str(event.get("type", "")), event.get("object") or {}
        finally:
            with self._lock:
                self._watch = None

    def interrupt(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.stop()
