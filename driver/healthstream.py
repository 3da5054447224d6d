"""The DRAResourceHealth services (``v1`` and ``v1alpha1``): device health streamed to the kubelet.

Each message is the complete list of the driver's devices; a new one is sent whenever the
health monitor reports a change, and again every ``resend_seconds`` without one: the kubelet
ages each report from its arrival and turns a device ``Unknown`` once its health check timeout
(30 s by default) passes without news. The monitor is reached through ``HealthSource``, so the
stream can be tested without NVML.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from draproto import health_v1_pb2, health_v1_pb2_grpc, health_v1alpha1_pb2, health_v1alpha1_pb2_grpc

__all__ = [
    "RESEND_SECONDS",
    "DeviceHealth",
    "HealthService",
    "HealthServiceV1",
    "HealthServiceV1alpha1",
    "HealthSource",
    "StaticHealth",
    "Subscribers",
]

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"


@dataclass(frozen=True)
class DeviceHealth:
    """The health of one published device, as the stream reports it."""

    status: str
    """``Healthy``, ``Unhealthy`` or ``Unknown``."""
    message: str = ""
    updated: float = 0.0
    """Unix time of the last change."""


class HealthSource(Protocol):
    """What the health stream needs from the health monitor."""

    def snapshot(self) -> Mapping[str, DeviceHealth]:
        """Health of every device by device name."""
        ...

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after every change; returns a function that unsubscribes."""
        ...


class Subscribers:
    """Callbacks to run after a change, added and removed from any thread."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def add(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Subscribe ``callback``; returns a function that unsubscribes it."""
        with self._lock:
            self._callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return unsubscribe

    def notify(self) -> None:
        """Run every callback; one that fails is logged and does not stop the others."""
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("health subscriber failed")


class StaticHealth:
    """A ``HealthSource`` whose states are set by hand: tests, and the fallback without a monitor."""

    def __init__(self, devices: Mapping[str, DeviceHealth] | None = None) -> None:
        self._states = dict(devices or {})
        self._subscribers = Subscribers()
        self._lock = threading.Lock()

    def set(self, device: str, status: str, message: str = "") -> None:
        """Change one device's health and notify subscribers."""
        with self._lock:
            self._states[device] = DeviceHealth(status, message, time.time())
        self._subscribers.notify()

    def snapshot(self) -> Mapping[str, DeviceHealth]:
        with self._lock:
            return dict(self._states)

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribers.add(callback)


_STOP = object()

RESEND_SECONDS = 10.0
"""How often the complete list is sent again without a change (well inside the kubelet's 30 s)."""


class HealthService:
    """The ``DRAResourceHealth`` stream; a subclass per protocol version names its pb2 module."""

    _pb2: ModuleType

    def __init__(
        self,
        source: HealthSource,
        pool_name: str,
        stopping: threading.Event,
        *,
        silent: bool = False,
        timeout_seconds: int = 0,
        resend_seconds: float = RESEND_SECONDS,
    ) -> None:
        self._source = source
        self._pool = pool_name
        self._stopping = stopping
        self._silent = silent
        self._timeout = timeout_seconds
        self._resend = resend_seconds

    def _message(self) -> Any:
        pb2 = self._pb2
        codes = {HEALTHY: pb2.HEALTHY, UNHEALTHY: pb2.UNHEALTHY}
        # The monitor re-checks every device continuously, so each state was determined now.
        now = int(time.time())
        devices = [
            pb2.DeviceHealth(
                device=pb2.DeviceIdentifier(pool_name=self._pool, device_name=name),
                health=codes.get(state.status, pb2.UNKNOWN),
                last_updated_time=max(int(state.updated), now),
                health_check_timeout_seconds=self._timeout,
                message=state.message,
            )
            for name, state in sorted(self._source.snapshot().items())
        ]
        return pb2.NodeWatchResourcesResponse(devices=devices)

    def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
        """Send the full device list now, after each change and every ``resend_seconds``, until stopped."""
        events: queue.Queue[object] = queue.Queue()
        context.add_callback(lambda: events.put(_STOP))
        unsubscribe = self._source.subscribe(lambda: events.put(None))
        log.info("health stream opened", extra={"version": self._pb2.__name__.rsplit(".", 1)[-1]})
        try:
            if not self._silent:
                yield self._message()
            last_sent = time.monotonic()
            while not self._stopping.is_set() and context.is_active():
                try:
                    item = events.get(timeout=min(0.5, self._resend))
                except queue.Empty:
                    if time.monotonic() - last_sent >= self._resend:
                        if not self._silent:
                            yield self._message()
                        last_sent = time.monotonic()
                    continue
                if item is _STOP:
                    break
                while not events.empty():  # coalesce bursts into one message
                    if events.get_nowait() is _STOP:
                        return
                if not self._silent:
                    yield self._message()
                last_sent = time.monotonic()
        finally:
            unsubscribe()
            log.info("health stream closed")


class HealthServiceV1(HealthService, health_v1_pb2_grpc.DRAResourceHealthServicer):
    """``v1.DRAResourceHealth``."""

    _pb2 = health_v1_pb2


class HealthServiceV1alpha1(HealthService, health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    """``v1alpha1.DRAResourceHealth``."""

    _pb2 = health_v1alpha1_pb2


def services(
    source: HealthSource,
    pool_name: str,
    stopping: threading.Event,
    *,
    silent: bool = False,
    resend_seconds: float = RESEND_SECONDS,
) -> tuple[HealthServiceV1, HealthServiceV1alpha1]:
    """The ``v1`` and ``v1alpha1`` servicers over one source."""
    args = (source, pool_name, stopping)
    return (
        HealthServiceV1(*args, silent=silent, resend_seconds=resend_seconds),
        HealthServiceV1alpha1(*args, silent=silent, resend_seconds=resend_seconds),
    )
