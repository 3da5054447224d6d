"""ResourceSlices: what the driver publishes about its node's devices.

One pool per node, named after the node, owned by the Node object so that it goes
away with the node. ``build_slices`` turns an ``Inventory`` (and device taints) into
``resource.k8s.io/v1`` ResourceSlice bodies, pure and deterministic:

- counter sets of partitionable GPUs go in slices of their own (the API allows
  ``sharedCounters`` or ``devices`` in a slice, not both; at most 8 sets a slice);
- devices are packed in order, at most 128 a slice, or 64 in a slice where any device
  has taints, consumes counters or carries a list attribute;
- every slice carries the same ``pool.generation`` and the right ``resourceSliceCount``.

``SlicePublisher`` keeps the API server in line with that: it writes the slices, bumps
the generation on every write, watches the node's slices and rewrites them when
someone else deletes or edits one, and removes them on shutdown unless told to keep
them. It talks to the API server through a ``SliceStore`` (``KubeSliceStore`` over the
kubernetes client; tests use an in-memory one).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from driver.devices import DeviceInfo, Inventory, Version
from driver.health import Fault

__all__ = [
    "MAX_COUNTER_SETS_PER_SLICE",
    "MAX_DEVICES_PER_SLICE",
    "MAX_DEVICES_PER_SLICE_WITH_EXTRAS",
    "DeviceTaint",
    "KubeSliceStore",
    "SlicePublisher",
    "SliceStore",
    "build_slices",
    "device_body",
    "slice_name",
    "taints_from_faults",
]

log = logging.getLogger(__name__)

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_EXTRAS = 64
"""The limit for a slice where a device has taints, consumes counters or has a list attribute."""
MAX_COUNTER_SETS_PER_SLICE = 8

API_VERSION = "resource.k8s.io/v1"

Body = dict[str, Any]
"""A Kubernetes object as JSON (camelCase keys), the way the API server speaks it."""


@dataclass(frozen=True)
class DeviceTaint:
    """A taint the driver puts on one of its devices (``spec.devices[].taints[]``).

    ``effect`` is ``NoSchedule`` (no new claims) or ``NoExecute`` (pods using it are
    evicted too); ``time_added`` is a unix timestamp.
    """

    key: str
    value: str
    effect: str
    time_added: float | None = None

    def body(self) -> Body:
        """The taint as the API server expects it."""
        out: Body = {"key": self.key, "value": self.value, "effect": self.effect}
        if self.time_added is not None:
            stamp = datetime.fromtimestamp(int(self.time_added), tz=UTC)
            out["timeAdded"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        return out


def taints_from_faults(faults: Mapping[str, Fault], driver_name: str) -> dict[str, list[DeviceTaint]]:
    """One taint per unhealthy device: key ``<driver>/unhealthy``, the reason as value, the fault's effect."""
    return {
        name: [DeviceTaint(f"{driver_name}/unhealthy", fault.reason, fault.severity, fault.since)]
        for name, fault in faults.items()
    }


def _attribute(value: object) -> Body:
    # bool before int: True is an int too.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.value}
    if isinstance(value, list | tuple):
        items = list(value)
        if all(isinstance(v, bool) for v in items):
            return {"bools": items}
        if all(isinstance(v, int) for v in items):
            return {"ints": items}
        if all(isinstance(v, Version) for v in items):
            return {"versions": [v.value for v in items]}
        return {"strings": [str(v) for v in items]}
    return {"string": str(value)}


def device_body(dev: DeviceInfo, taints: Sequence[DeviceTaint] = ()) -> Body:
    """One ``spec.devices[]`` entry: attributes, capacity, counters consumed, taints."""
    body: Body = {
        "name": dev.name,
        "attributes": {key: _attribute(value) for key, value in dev.attributes.items()},
    }
    if dev.capacity:
        body["capacity"] = {key: {"value": str(value)} for key, value in dev.capacity.items()}
    if dev.consumes_counters:
        body["consumesCounters"] = [
            {"counterSet": name, "counters": {k: {"value": str(v)} for k, v in counters.items()}}
            for name, counters in dev.consumes_counters.items()
        ]
    if taints:
        body["taints"] = [t.body() for t in taints]
    return body


def _has_extras(body: Body) -> bool:
    """Whether this device lowers its slice's limit to 64."""
    if body.get("taints") or body.get("consumesCounters"):
        return True
    lists = ("bools", "ints", "strings", "versions")
    return any(key in attr for attr in body.get("attributes", {}).values() for key in lists)


def slice_name(node_name: str, driver_name: str, number: int) -> str:
    """``<node>-<driver>-<n>``: stable, so a slice is updated in place rather than replaced."""
    name = f"{node_name}-{driver_name}-{number}".lower()
    if len(name) > 253:
        digest = hashlib.sha256(f"{node_name}/{driver_name}".encode()).hexdigest()[:12]
        name = f"{node_name[:200]}-{digest}-{number}".lower()
    return name


def _pack(devices: list[Body], oversized: bool) -> list[list[Body]]:
    if oversized:
        return [devices] if devices else []
    chunks: list[list[Body]] = []
    current: list[Body] = []
    extras = False
    for dev in devices:
        dev_extras = _has_extras(dev)
        limit = MAX_DEVICES_PER_SLICE_WITH_EXTRAS if (extras or dev_extras) else MAX_DEVICES_PER_SLICE
        if len(current) >= limit:
            chunks.append(current)
            current, extras = [], False
        current.append(dev)
        extras = extras or dev_extras
    if current:
        chunks.append(current)
    return chunks


def build_slices(
    inventory: Inventory,
    *,
    driver_name: str,
    node_name: str,
    generation: int,
    pool_name: str | None = None,
    node_uid: str | None = None,
    taints: Mapping[str, Sequence[DeviceTaint]] | None = None,
    oversized: bool = False,
) -> list[Body]:
    """The node's pool as ResourceSlice bodies, ready to create or replace.

    ``oversized`` is the ``oversized-slice`` rule-breaking switch: all devices in one
    slice whatever the limit. A pool with no devices still gets one empty slice, so
    that consumers can tell "no devices" from "driver not running".
    """
    pool = pool_name or node_name
    taints = taints or {}
    devices = [device_body(dev, taints.get(dev.name, ())) for dev in inventory]
    specs: list[Body] = []
    counter_sets = [
        {"name": name, "counters": {k: {"value": str(v)} for k, v in counters.items()}}
        for name, counters in inventory.counter_sets.items()
    ]
    for i in range(0, len(counter_sets), MAX_COUNTER_SETS_PER_SLICE):
        specs.append({"sharedCounters": counter_sets[i : i + MAX_COUNTER_SETS_PER_SLICE]})
    specs.extend({"devices": chunk} for chunk in _pack(devices, oversized))
    if not specs:
        specs.append({"devices": []})
    metadata_extra: Body = {}
    if node_uid:
        metadata_extra["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
        ]
    slices = []
    for number, content in enumerate(specs):
        spec: Body = {
            "driver": driver_name,
            "nodeName": node_name,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": len(specs)},
            **content,
        }
        slices.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": slice_name(node_name, driver_name, number), **metadata_extra},
                "spec": spec,
            }
        )
    return slices


# --- the API server side ------------------------------------------------------------------------


class SliceStore(Protocol):
    """The few API calls the publisher makes; bodies are plain JSON dicts."""

    def node_uid(self, node_name: str) -> str | None:
        """The Node's UID, or None when there is no such Node."""
        ...

    def list(self, driver_name: str, node_name: str) -> tuple[list[Body], str]:
        """The node's slices of this driver, and the list's resourceVersion."""
        ...

    def create(self, body: Body) -> Body:
        """Create a slice; raises ``StoreConflict`` when the name is taken."""
        ...

    def replace(self, body: Body) -> Body:
        """Overwrite the slice named in the body (unconditionally)."""
        ...

    def delete(self, name: str) -> None:
        """Delete a slice; one that is already gone is fine."""
        ...

    def watch(self, driver_name: str, node_name: str, resource_version: str) -> Iterator[tuple[str, Body]]:
        """Events (``ADDED``/``MODIFIED``/``DELETED``, object) after that version, until interrupted."""
        ...

    def interrupt(self) -> None:
        """End the current ``watch`` from another thread."""
        ...


class StoreConflict(Exception):
    """The object already exists (HTTP 409)."""


class KubeSliceStore:
    """``SliceStore`` over the kubernetes client (``ResourceV1Api``, raw JSON both ways)."""

    def __init__(self, api_client: Any, *, watch_timeout_seconds: int = 60) -> None:
        from kubernetes import client, watch

        # Any: the client's typed signatures want models; we pass models built from JSON dicts.
        self._core: Any = client.CoreV1Api(api_client)
        self._resource: Any = client.ResourceV1Api(api_client)
        self._models: Any = client
        self._watch_mod: Any = watch
        self._watch_timeout = watch_timeout_seconds
        self._watch: Any = None
        self._lock = threading.Lock()

    @staticmethod
    def _json(response: Any) -> Body:
        data: Body = json.loads(response.data)
        return data

    def _status(self, error: Exception) -> int | None:
        status = getattr(error, "status", None)
        return status if isinstance(status, int) else None

    def node_uid(self, node_name: str) -> str | None:
        from kubernetes.client.exceptions import ApiException

        try:
            node = self._json(self._core.read_node(node_name, _preload_content=False))
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
            )
        )
        return list(data.get("items") or []), str(data.get("metadata", {}).get("resourceVersion", ""))

    def create(self, body: Body) -> Body:
        from kubernetes.client.exceptions import ApiException

        try:
            model = self._models.V1ResourceSlice.from_dict(body)
            return self._json(self._resource.create_resource_slice(model, _preload_content=False))
        except ApiException as e:
            if e.status == 409:
                raise StoreConflict(body["metadata"]["name"]) from e
            raise

    def replace(self, body: Body) -> Body:
        model = self._models.V1ResourceSlice.from_dict(body)
        name = body["metadata"]["name"]
        return self._json(self._resource.replace_resource_slice(name, model, _preload_content=False))

    def delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._resource.delete_resource_slice(name, _preload_content=False)
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


def _name(body: Body) -> str:
    return str(body.get("metadata", {}).get("name", ""))


def _rv(body: Body) -> str:
    return str(body.get("metadata", {}).get("resourceVersion", ""))


class SlicePublisher:
    """Keeps the node's pool on the API server equal to what the driver has.

    ``update()`` sets the inventory and taints; ``sync()`` makes one pass (list, then
    create/replace/delete as needed); ``start()`` runs passes in a thread, woken by
    updates and by a watch on the node's slices, retried with backoff on API errors;
    ``stop()`` ends it and deletes the slices unless ``keep``.

    Every write bumps ``pool.generation`` in all slices of the pool, so a consumer never
    sees two different pools under one generation. A slice is up to date when its
    ``resourceVersion`` is the one our last write returned: anything else (deleted,
    edited by someone else, a stranger in our pool) makes the next pass rewrite the pool.
    """

    def __init__(
        self,
        store: SliceStore,
        *,
        driver_name: str,
        node_name: str,
        pool_name: str | None = None,
        keep: bool = False,
        breaks: Callable[[str], bool] = lambda rule: False,
        resync_seconds: float = 60.0,
        max_backoff_seconds: float = 30.0,
    ) -> None:
        self.store = store
        self.driver_name = driver_name
        self.node_name = node_name
        self.pool_name = pool_name or node_name
        self.keep = keep
        self._oversized = breaks("oversized-slice")
        self._resync = resync_seconds
        self._max_backoff = max_backoff_seconds
        self._lock = threading.RLock()
        self._inventory: Inventory | None = None
        self._taints: dict[str, list[DeviceTaint]] = {}
        self._generation = 0
        self._written: dict[str, str] = {}
        self._published_key: str | None = None
        self._list_rv = ""
        self._node_uid: str | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._synced = threading.Condition(self._lock)
        self._passes = 0
        self.last_error: Exception | None = None
        """The error of the last failed pass, None after a good one."""

    @property
    def generation(self) -> int:
        """The pool generation last written."""
        return self._generation

    def update(
        self,
        inventory: Inventory | None = None,
        taints: Mapping[str, Sequence[DeviceTaint]] | None = None,
    ) -> None:
        """Set what to publish (either part; None keeps the current one) and wake the publisher."""
        with self._lock:
            if inventory is not None:
                self._inventory = inventory
            if taints is not None:
                self._taints = {name: list(ts) for name, ts in taints.items() if ts}
        self._wake.set()

    def desired(self, generation: int | None = None) -> list[Body]:
        """The slices as they should be now (generation: the current one unless given)."""
        with self._lock:
            if self._inventory is None:
                return []
            return build_slices(
                self._inventory,
                driver_name=self.driver_name,
                node_name=self.node_name,
                pool_name=self.pool_name,
                generation=self._generation if generation is None else generation,
                node_uid=self._node_uid,
                taints=self._taints,
                oversized=self._oversized,
            )

    def sync(self) -> bool:
        """One pass: make the API server match. Returns whether anything was written.

        API errors propagate; the background loop retries them.
        """
        with self._lock:
            if self._inventory is None:
                return False
            if self._node_uid is None:
                self._node_uid = self.store.node_uid(self.node_name)
                if self._node_uid is None:
                    log.warning("Node object not found; slices published without an owner", extra=self._ctx())
            existing_list, self._list_rv = self.store.list(self.driver_name, self.node_name)
            existing = {_name(s): s for s in existing_list}
            key = json.dumps(self.desired(generation=0), sort_keys=True)
            current = {name: _rv(s) for name, s in existing.items()}
            if key == self._published_key and current == self._written:
                self._note_pass()
                return False
            seen_generation = max(
                (int(s.get("spec", {}).get("pool", {}).get("generation", 0)) for s in existing_list),
                default=0,
            )
            self._generation = max(self._generation, seen_generation) + 1
            self._published_key = None
            written: dict[str, str] = {}
            bodies = self.desired()
            for body in bodies:
                name = _name(body)
                if name in existing:
                    result = self.store.replace(body)
                else:
                    try:
                        result = self.store.create(body)
                    except StoreConflict:
                        result = self.store.replace(body)
                written[name] = _rv(result)
            for name in set(existing) - set(written):
                self.store.delete(name)
            self._written = written
            self._published_key = key
            log.info(
                "published resource slices",
                extra={
                    **self._ctx(),
                    "generation": self._generation,
                    "slices": len(bodies),
                    "devices": len(self._inventory),
                    "tainted": len(self._taints),
                },
            )
            self._note_pass()
            return True

    def _note_pass(self) -> None:
        self._passes += 1
        self.last_error = None
        self._synced.notify_all()

    def wait_synced(self, timeout: float) -> bool:
        """Wait for the background loop to finish a good pass after this call; True if it did."""
        deadline = time.monotonic() + timeout
        with self._lock:
            start = self._passes
            self._wake.set()
            while self._passes == start:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._synced.wait(left)
            return True

    def _ctx(self) -> dict[str, object]:
        return {"driver": self.driver_name, "node": self.node_name, "pool": self.pool_name}

    def _is_ours_and_current(self, event_type: str, obj: Body) -> bool:
        name = _name(obj)
        if event_type == "BOOKMARK":
            return True
        if event_type == "DELETED":
            return name not in self._written
        return self._written.get(name) == _rv(obj)

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            self._wake.wait(self._resync)
            if self._stopping.is_set():
                return
            self._wake.clear()
            try:
                self.sync()
                backoff = 0.5
            except Exception as e:
                self.last_error = e
                log.warning("publishing slices failed; retrying", extra={**self._ctx(), "error": repr(e)})
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)
                self._wake.set()

    def _watch(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                rv = self._list_rv
                if not rv:
                    _, rv = self.store.list(self.driver_name, self.node_name)
                for event_type, obj in self.store.watch(self.driver_name, self.node_name, rv):
                    if self._stopping.is_set():
                        return
                    if event_type == "ERROR":
                        self._list_rv = ""
                        break
                    if not self._is_ours_and_current(event_type, obj):
                        log.info(
                            "slice changed by someone else; republishing",
                            extra={**self._ctx(), "event": event_type, "slice": _name(obj)},
                        )
                        self._wake.set()
                    if _rv(obj):
                        self._list_rv = _rv(obj)
                backoff = 0.5
            except Exception as e:
                if self._stopping.is_set():
                    return
                log.warning("watching slices failed; rewatching", extra={**self._ctx(), "error": repr(e)})
                self._list_rv = ""
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def start(self) -> None:
        """Publish now and keep publishing in the background (a sync thread and a watch thread)."""
        self._stopping.clear()
        self._wake.set()
        for target, name in ((self._run, "slice-publisher"), (self._watch, "slice-watch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the background work; delete the node's slices unless ``keep``."""
        self._stopping.set()
        self._wake.set()
        self.store.interrupt()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()
        if self.keep:
            log.info("leaving resource slices in place", extra=self._ctx())
            return
        with self._lock:
            try:
                existing, _ = self.store.list(self.driver_name, self.node_name)
                for body in existing:
                    self.store.delete(_name(body))
            except Exception as e:
                log.error("cannot remove resource slices", extra={**self._ctx(), "error": repr(e)})
                return
            self._written = {}
            self._published_key = None
        log.info("removed resource slices", extra={**self._ctx(), "slices": len(existing)})
