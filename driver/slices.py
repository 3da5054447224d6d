"""Publishing the node's ResourceSlices and keeping them published.

One pool per node, named after the node, owned by the Node object so that it goes
away with the node; ``driver.slicing`` builds the bodies. ``SlicePublisher`` keeps the
API server in line with them: it writes the slices, bumps the generation on every write,
watches the node's slices and rewrites them when someone else deletes or edits one, and
removes them on shutdown unless told to keep them. It talks to the API server through a
``SliceStore`` (``driver.kubeslices.KubeSliceStore`` over the kubernetes client; tests use
an in-memory one).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from driver.errors import StoreConflict
from driver.inventory import Inventory
from driver.slicing import Body, DeviceTaint, build_slices

__all__ = ["PublisherBreakage", "SlicePublisher", "SliceStore"]

log = logging.getLogger(__name__)

CHURN_SECONDS = 2.0
"""How often the ``churn-slices`` switch rewrites the pool."""


@dataclass(frozen=True)
class PublisherBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change how the
    publisher behaves; a real driver has none. (Those that only change the slices written are a
    wrapper around the builder, ``driver.breaking_slices``.)"""

    no_slices: bool = False
    no_republish: bool = False
    stale_after_rewrite: bool = False
    churn_slices: bool = False
    no_rewatch: bool = False
    sticky_taint: bool = False
    recreate_on_start: bool = False

    @classmethod
    def of(cls, breaks: Callable[[str], bool]) -> PublisherBreakage:
        return cls(
            no_slices=breaks("no-slices"),
            no_republish=breaks("no-republish"),
            stale_after_rewrite=breaks("stale-after-rewrite"),
            churn_slices=breaks("churn-slices"),
            no_rewatch=breaks("no-rewatch"),
            sticky_taint=breaks("sticky-taint"),
            recreate_on_start=breaks("recreate-slices-on-start"),
        )


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
        build: Callable[..., list[Body]] = build_slices,
        breaks: Callable[[str], bool] = lambda rule: False,
        resync_seconds: float = 60.0,
        max_backoff_seconds: float = 30.0,
    ) -> None:
        self.store = store
        self.driver_name = driver_name
        self.node_name = node_name
        self.pool_name = pool_name or node_name
        self.keep = keep
        self._build_slices = build
        """``driver.slicing.build_slices``, or the rule-breaking wrapper of ``driver.breaking_slices``."""
        self._breakage = breakage = PublisherBreakage.of(breaks)
        # churn-slices: rewrite the pool every few seconds though nothing changed
        self._resync: float | None = (
            min(resync_seconds, CHURN_SECONDS) if breakage.churn_slices else resync_seconds
        )
        if breakage.no_rewatch:
            self._resync = None  # once the watch ends, nothing brings a changed pool back
        self._max_backoff = max_backoff_seconds
        self._lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._inventory: Inventory | None = None
        self._taints: dict[str, list[DeviceTaint]] = {}
        self._generation = 0
        self._written: dict[str, str] = {}
        self._rewrote = False
        """Whether a pass restored the pool after someone else changed it (stale-after-rewrite)."""
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
        # Its own lock, never held across API calls: health callbacks land here and must not wait.
        with self._state_lock:
            if inventory is not None:
                self._inventory = inventory
            if taints is not None:
                kept = self._taints if self._breakage.sticky_taint else {}  # a taint once set stays
                self._taints = {**kept, **{name: list(ts) for name, ts in taints.items() if ts}}
        self._wake.set()

    def _wanted(self) -> tuple[Inventory | None, dict[str, list[DeviceTaint]]]:
        with self._state_lock:
            return self._inventory, self._taints

    def _build(
        self, inventory: Inventory, taints: Mapping[str, Sequence[DeviceTaint]], generation: int
    ) -> list[Body]:
        return self._build_slices(
            inventory,
            driver_name=self.driver_name,
            node_name=self.node_name,
            pool_name=self.pool_name,
            generation=generation,
            node_uid=self._node_uid,
            taints=taints,
        )

    def desired(self, generation: int | None = None) -> list[Body]:
        """The slices as they should be now (generation: the current one unless given)."""
        inventory, taints = self._wanted()
        if inventory is None:
            return []
        return self._build(inventory, taints, self._generation if generation is None else generation)

    def sync(self) -> bool:
        """One pass: make the API server match. Returns whether anything was written.

        API errors propagate; the background loop retries them.
        """
        with self._lock:
            inventory, taints = self._wanted()
            if inventory is None or self._stopping.is_set() or self._breakage.no_slices:
                return False  # stopping: a pass must not write after stop() removed the slices
            # Asked every pass: a Node deleted and made again has a new UID, and slices owned by
            # the old one would be garbage-collected as fast as we write them.
            uid = self.store.node_uid(self.node_name)
            if uid is None and (self._node_uid is not None or self._passes == 0):
                log.warning("Node object not found; slices published without an owner", extra=self._ctx())
            self._node_uid = uid
            existing_list, self._list_rv = self.store.list(self.driver_name, self.node_name)
            if self._passes == 0 and self._breakage.recreate_on_start:
                for body in existing_list:
                    self.store.delete(_name(body))
                existing_list = []
            existing = {_name(s): s for s in existing_list}
            key = json.dumps(self._build(inventory, taints, 0), sort_keys=True)
            current = {name: _rv(s) for name, s in existing.items()}
            if self._breakage.stale_after_rewrite and self._rewrote:
                # as client-go's MutationCache before 1.37: the copy of a slice it rewrote hides the
                # slice's deletion, so a deleted slice counts as still there
                current = {**self._written, **current}
            unchanged = current == self._written or self._breakage.no_republish
            if key == self._published_key and unchanged and not self._breakage.churn_slices:
                self._note_pass()
                return False
            if key == self._published_key:
                self._rewrote = True
                log.info(
                    "slices changed by someone else; republishing",
                    extra={
                        **self._ctx(),
                        "missing": sorted(set(self._written) - set(current)),
                        "changed": sorted(
                            n for n in current if n in self._written and current[n] != self._written[n]
                        ),
                        "strangers": sorted(set(current) - set(self._written)),
                    },
                )
            seen_generation = max(
                (int(s.get("spec", {}).get("pool", {}).get("generation", 0)) for s in existing_list),
                default=0,
            )
            self._generation = max(self._generation, seen_generation) + 1
            self._published_key = None
            written: dict[str, str] = {}
            bodies = self._build(inventory, taints, self._generation)
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
                    "devices": len(inventory),
                    "tainted": len(taints),
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
                    self._wake.set()  # what changed while nothing watched: the next pass compares
                for event_type, obj in self.store.watch(self.driver_name, self.node_name, rv):
                    if self._stopping.is_set():
                        return
                    if event_type == "ERROR":
                        self._list_rv = ""
                        break
                    if not self._is_ours_and_current(event_type, obj):
                        # Maybe our own write racing its bookkeeping: the next pass tells.
                        log.debug(
                            "slice event; checking the pool",
                            extra={**self._ctx(), "event": event_type, "slice": _name(obj)},
                        )
                        self._wake.set()
                    if _rv(obj):
                        self._list_rv = _rv(obj)
                backoff = 0.5
            except Exception as e:
                if self._stopping.is_set():
                    return
                if self._breakage.no_rewatch:
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
        """Stop the background work; delete the node's slices unless ``keep``.

        Returns within about ``timeout`` seconds in all: a busy API server must not hold up
        the process's shutdown (whoever sent SIGTERM kills it soon after). The background
        threads are daemons and are not waited for long: a sync pass may be stuck in a request
        to a busy API server. If the slices cannot be removed in time, they stay; the kubelet
        removes them after its grace period.
        """
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        self.store.interrupt()
        joined = min(deadline, time.monotonic() + 1.0)
        for thread in self._threads:
            thread.join(max(0.0, joined - time.monotonic()))
        self._threads.clear()
        if self.keep:
            log.info("leaving resource slices in place", extra=self._ctx())
            return
        result: list[int] = []
        remover = threading.Thread(target=self._remove_all, args=(result,), name="slice-remover", daemon=True)
        remover.start()
        remover.join(max(0.0, deadline - time.monotonic()))
        if remover.is_alive():
            log.error(
                "cannot remove resource slices: the API server did not answer in time",
                extra={**self._ctx(), "timeout": timeout},
            )
            return
        if result:
            log.info("removed resource slices", extra={**self._ctx(), "slices": result[0]})

    def _remove_all(self, result: list[int]) -> None:
        """Delete the node's slices (the last step of :meth:`stop`); appends how many to ``result``."""
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
        result.append(len(existing))
