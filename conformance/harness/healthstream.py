"""A driver's device health stream, read as the kubelet reads it (HEALTH rules).

:class:`HealthStream` opens ``NodeWatchResources`` on a driver's service socket (``v1`` or
``v1alpha1`` of ``DRAResourceHealth``) and reads it on a thread of its own, keeping every message
as a :class:`HealthReport` with the time it arrived. Tests wait on what the driver said with
:meth:`HealthStream.wait` (woken by each message, never polling) and check that something was
never said with :meth:`HealthStream.never`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

import draproto
from conformance.harness.waiting import WaitTimeout

__all__ = ["HEALTH_VERSIONS", "DeviceHealth", "HealthReport", "HealthStream", "choose_version"]

T = TypeVar("T")

HEALTH_VERSIONS = (draproto.HEALTH_V1, draproto.HEALTH_V1ALPHA1)
"""The health service versions the kubelet knows, preferred first (as 1.37 chooses)."""

_NAMES = {0: "Unknown", 1: "Healthy", 2: "Unhealthy"}


def choose_version(advertised: tuple[str, ...] | list[str]) -> str | None:
    """The health version to open: ``v1`` when advertised, else ``v1alpha1``, else None."""
    return next((v for v in HEALTH_VERSIONS if v in advertised), None)


@dataclass(frozen=True)
class DeviceHealth:
    """One device's entry in a message."""

    pool: str
    """Its pool."""
    device: str
    """Its name in the pool."""
    health: str
    """``Healthy``, ``Unhealthy`` or ``Unknown``."""
    message: str = ""
    """Why, for people."""


@dataclass(frozen=True)
class HealthReport:
    """One message of the stream."""

    at: float
    """When it arrived (``time.monotonic()``)."""
    devices: dict[tuple[str, str], DeviceHealth] = field(default_factory=dict)
    """The devices it lists, by ``(pool, device)``."""

    def health(self, pool: str, device: str) -> str:
        """The device's health in this message (``absent`` when it is not listed)."""
        found = self.devices.get((pool, device))
        return found.health if found is not None else "absent"

    def unhealthy(self, pool: str | None = None) -> list[str]:
        """The devices this message says are unhealthy (of ``pool``, or of any as ``pool/device``)."""
        return sorted(
            d if pool is not None else f"{p}/{d}"
            for (p, d), h in self.devices.items()
            if h.health == "Unhealthy" and (pool is None or p == pool)
        )

    def describe(self) -> str:
        """A line for failure messages."""
        return f"{len(self.devices)} device(s), unhealthy: {', '.join(self.unhealthy()) or 'none'}"


class HealthStream:
    """``NodeWatchResources`` on ``endpoint``, read on a thread; a context manager (closes it)."""

    def __init__(self, endpoint: str, version: str) -> None:
        if version not in HEALTH_VERSIONS:
            raise ValueError(f"unknown health version {version!r}; known: {', '.join(HEALTH_VERSIONS)}")
        self.endpoint = endpoint
        """The driver's service socket."""
        self.version = version
        """``v1.DRAResourceHealth`` or ``v1alpha1.DRAResourceHealth``."""
        self.opened = time.monotonic()
        """When the stream was opened (``time.monotonic()``)."""
        self._reports: list[HealthReport] = []
        self._ended: str = ""
        self._changed = threading.Condition()
        self._channel = grpc.insecure_channel(f"unix://{endpoint}")
        pb2, grpc_pb2 = (
            (draproto.health_v1_pb2, draproto.health_v1_pb2_grpc)
            if version == draproto.HEALTH_V1
            else (draproto.health_v1alpha1_pb2, draproto.health_v1alpha1_pb2_grpc)
        )
        stub: Any = grpc_pb2.DRAResourceHealthStub(self._channel)
        self._call: Any = stub.NodeWatchResources(pb2.NodeWatchResourcesRequest())
        self._closing = False
        self._thread = threading.Thread(target=self._read, name="health-stream", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        why = "the driver ended the stream"
        try:
            for message in self._call:
                devices = {}
                for d in message.devices:
                    pool, name = d.device.pool_name, d.device.device_name
                    health = _NAMES.get(int(d.health), "Unknown")
                    devices[(pool, name)] = DeviceHealth(pool, name, health, d.message)
                with self._changed:
                    self._reports.append(HealthReport(time.monotonic(), devices))
                    self._changed.notify_all()
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            details = e.details() if isinstance(e, grpc.Call) else str(e)
            why = f"the stream failed: {code}: {details}"
        except Exception as e:  # a message that does not decode is the driver's fault: say so
            why = f"the stream broke: {e!r}"
        with self._changed:
            self._ended = "" if self._closing else why
            self._closing = True
            self._changed.notify_all()

    @property
    def reports(self) -> list[HealthReport]:
        """Every message so far, oldest first."""
        with self._changed:
            return list(self._reports)

    def _first(
        self, check: Callable[[HealthReport], T | None], seconds: float, after: int, what: str
    ) -> tuple[int, T] | None:
        """The first message from index ``after`` on for which ``check`` is truthy, waiting up to
        ``seconds`` for more; None when none came. Raises when the stream ended first."""
        deadline = time.monotonic() + seconds
        cursor = after
        with self._changed:
            while True:
                for i in range(cursor, len(self._reports)):
                    value = check(self._reports[i])
                    if value:
                        return i, value
                cursor = max(cursor, len(self._reports))
                if self._ended:
                    raise WaitTimeout(
                        f"{self._ended} while waiting for {what} on the {self.version} stream of "
                        f"{self.endpoint}, after {len(self._reports)} message(s)"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)

    def wait(
        self,
        what: str,
        check: Callable[[HealthReport], T | None],
        timeout: float,
        *,
        after: int = 0,
    ) -> tuple[int, T]:
        """Wait for the first message from index ``after`` on for which ``check`` is truthy; its
        index and the value. Raises :class:`~conformance.harness.waiting.WaitTimeout` naming ``what``."""
        found = self._first(check, timeout, after, what)
        if found is None:
            reports = self.reports
            last = reports[-1].describe() if reports else "none"
            raise WaitTimeout(
                f"timed out after {timeout:.0f} s waiting for {what} on the {self.version} stream of "
                f"{self.endpoint}; {len(reports)} message(s), the last: {last}"
            )
        return found

    def never(
        self, what: str, check: Callable[[HealthReport], T | None], seconds: float, *, after: int = 0
    ) -> T | None:
        """Watch the messages from index ``after`` on for ``seconds``: the first truthy ``check``, or
        None when none came. A stream that ends meanwhile raises (nothing more can be seen)."""
        found = self._first(check, seconds, after, what)
        return None if found is None else found[1]

    def close(self) -> None:
        """Cancel the stream and close the channel."""
        with self._changed:
            self._closing = True
        self._call.cancel()
        self._thread.join(timeout=5)
        self._channel.close()

    def __enter__(self) -> HealthStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
