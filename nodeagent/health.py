"""Device health reported by DRA plugins over the DRAResourceHealth stream.

The cache keeps, per driver, the last health of each device and when the
report arrived; a report older than its timeout (30 s unless the plugin sets
``health_check_timeout_seconds``) reads as Unknown, as in the kubelet. Watchers run one thread per
registered plugin that advertises (or, on 1.36 and older, is assumed to serve)
a health service.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

import draproto
from draproto import health_v1_pb2, health_v1_pb2_grpc, health_v1alpha1_pb2, health_v1alpha1_pb2_grpc

__all__ = ["HEALTHY", "UNHEALTHY", "UNKNOWN", "HealthCache", "HealthWatcher", "choose_health_version"]

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"
DEFAULT_TIMEOUT_SECONDS = 30.0
_NAMES = {0: UNKNOWN, 1: HEALTHY, 2: UNHEALTHY}
_DeviceHealth = health_v1_pb2.DeviceHealth | health_v1alpha1_pb2.DeviceHealth

if TYPE_CHECKING:  # grpc.CallIterator exists only in the type stubs
    _Stream = (
        grpc.CallIterator[health_v1_pb2.NodeWatchResourcesResponse]
        | grpc.CallIterator[health_v1alpha1_pb2.NodeWatchResourcesResponse]
    )


def choose_health_version(supported: list[str] | tuple[str, ...], k8s_version: tuple[int, int]) -> str | None:
    """The health service version the kubelet of ``k8s_version`` would open, or None.

    1.37 prefers v1 over v1alpha1 whatever the plugin's order and opens a stream only when one
    is advertised; 1.36 and older open v1alpha1 whenever the ResourceHealthStatus gate is on.
    """
    if k8s_version >= (1, 37):
        if draproto.HEALTH_V1 in supported:
            return draproto.HEALTH_V1
        if draproto.HEALTH_V1ALPHA1 in supported:
            return draproto.HEALTH_V1ALPHA1
        return None
    return draproto.HEALTH_V1ALPHA1


@dataclass(frozen=True)
class _Entry:
    health: str
    updated: float
    timeout: float
    message: str


class HealthCache:
    """Last reported health per (driver, pool, device); ``on_change(driver)`` after each update."""

    def __init__(self, on_change: Callable[[str], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._devices: dict[str, dict[tuple[str, str], _Entry]] = {}
        self.on_change = on_change

    def update(self, driver: str, devices: Sequence[_DeviceHealth]) -> None:
        """Merge one stream message (``DeviceHealth`` messages of either version)."""
        now = time.time()
        with self._lock:
            table = self._devices.setdefault(driver, {})
            changed = False
            for d in devices:
                key = (d.device.pool_name, d.device.device_name)
                timeout = float(d.health_check_timeout_seconds) or DEFAULT_TIMEOUT_SECONDS
                if timeout <= 0:
                    timeout = DEFAULT_TIMEOUT_SECONDS
                # like the kubelet: staleness counts from when the report arrived, not from the
                # driver's last_updated_time, so a driver must repeat itself within the timeout
                entry = _Entry(_NAMES.get(int(d.health), UNKNOWN), now, timeout, d.message)
                old = table.get(key)
                changed |= old is None or old.health != entry.health
                table[key] = entry
        if changed and self.on_change is not None:
            self.on_change(driver)

    def clear(self, driver: str) -> None:
        """Forget a driver's devices (its plugin went away): they read as Unknown."""
        with self._lock:
            had = bool(self._devices.pop(driver, None))
        if had and self.on_change is not None:
            self.on_change(driver)

    def get(self, driver: str, pool: str, device: str, now: float | None = None) -> str:
        """``Healthy``, ``Unhealthy`` or ``Unknown`` (never reported, or the report is stale)."""
        now = time.time() if now is None else now
        with self._lock:
            entry = self._devices.get(driver, {}).get((pool, device))
        if entry is None or now - entry.updated > entry.timeout:
            return UNKNOWN
        return entry.health


class HealthWatcher:
    """Reads one plugin's health stream on a thread until stopped or told Unimplemented."""

    def __init__(
        self,
        driver: str,
        channel: grpc.Channel,
        version: str,
        cache: HealthCache,
        *,
        retry_initial: float = 1.0,
        retry_max: float = 16.0,
    ) -> None:
        self.driver = driver
        self.version = version
        self._cache = cache
        self._stop = threading.Event()
        self._channel = channel
        self._call: _Stream | None = None
        self._lock = threading.Lock()
        self._retry = (retry_initial, retry_max)
        self._thread = threading.Thread(target=self._run, name=f"health-{driver}", daemon=True)
        self.stopped_unimplemented = False
        """Set when the plugin answered Unimplemented and watching stopped for good."""

    def start(self) -> None:
        """Start the reading thread."""
        self._thread.start()

    def stop(self) -> None:
        """Cancel the stream and end the thread."""
        self._stop.set()
        self._cancel()
        self._thread.join(timeout=5)

    def _cancel(self) -> None:
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves RpcContext.cancel bare

    def _open(self) -> _Stream:
        if self.version == draproto.HEALTH_V1:
            v1 = health_v1_pb2_grpc.DRAResourceHealthStub(self._channel)
            return v1.NodeWatchResources(health_v1_pb2.NodeWatchResourcesRequest())
        v1alpha1 = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(self._channel)
        return v1alpha1.NodeWatchResources(health_v1alpha1_pb2.NodeWatchResourcesRequest())

    def _run(self) -> None:
        delay = self._retry[0]
        fields = {"driver": self.driver, "version": self.version}
        while not self._stop.is_set():
            try:
                call = self._open()
                with self._lock:
                    self._call = call
                if self._stop.is_set():
                    self._cancel()
                    return
                log.info("health stream open", extra=fields)
                for message in call:
                    self._cache.update(self.driver, list(message.devices))
                    delay = self._retry[0]
                log.info("health stream ended by the plugin", extra=fields)
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                if self._stop.is_set() or code == grpc.StatusCode.CANCELLED:
                    return
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    log.info("plugin does not implement health; not watching", extra=fields)
                    self.stopped_unimplemented = True
                    return
                log.warning("health stream failed", extra={**fields, "error": str(code)})
            except Exception:  # a garbage message must not kill the agent
                log.exception("health stream broke", extra=fields)
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, self._retry[1])
