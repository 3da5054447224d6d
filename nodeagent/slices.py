"""ResourceSlice cleanup the kubelet does for its node.

At start every slice of the node is deleted (drivers republish theirs). When a
driver's last plugin goes away its slices are deleted after a grace period,
unless a plugin of that driver registers again before then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from nodeagent.errors import KubeError
from nodeagent.kube import Kube
from nodeagent.settings import Settings

__all__ = ["SliceJanitor"]

log = logging.getLogger(__name__)


class SliceJanitor:
    """Deletes the node's ResourceSlices at start and after a driver has been gone a while."""

    def __init__(self, settings: Settings, kube: Kube, registered: Callable[[str], bool]) -> None:
        self.settings = settings
        self.kube = kube
        self.registered = registered
        self._lock = threading.Lock()
        self._timers: dict[str, threading.Timer] = {}

    def wipe_all(self, attempts: int = 10) -> None:
        """Delete all of the node's slices, retrying while the API server is not ready."""
        for attempt in range(attempts):
            try:
                n = self.kube.delete_slices(self.settings.node_name)
                log.info("wiped node's ResourceSlices", extra={"node": self.settings.node_name, "count": n})
                return
            except KubeError as e:
                log.warning(
                    "wiping ResourceSlices failed", extra={"node": self.settings.node_name, "error": str(e)}
                )
                time.sleep(min(0.5 * 2**attempt, 5))

    def driver_registered(self, driver: str) -> None:
        """A plugin of ``driver`` registered: cancel a pending deletion."""
        with self._lock:
            timer = self._timers.pop(driver, None)
        if timer is not None:
            timer.cancel()
            log.info("slice deletion cancelled, driver is back", extra={"driver": driver})

    def driver_gone(self, driver: str) -> None:
        """The last plugin of ``driver`` went away: delete its slices after the grace period."""
        timer = threading.Timer(self.settings.slice_grace_seconds, self._expire, args=(driver,))
        timer.daemon = True
        with self._lock:
            old = self._timers.pop(driver, None)
            self._timers[driver] = timer
        if old is not None:
            old.cancel()
        timer.start()

    def _expire(self, driver: str) -> None:
        with self._lock:
            self._timers.pop(driver, None)
        if self.registered(driver):
            return
        fields = {"node": self.settings.node_name, "driver": driver}
        try:
            n = self.kube.delete_slices(self.settings.node_name, driver)
            log.info("deleted slices of a driver that went away", extra={**fields, "count": n})
        except KubeError as e:
            log.warning("deleting slices of a gone driver failed", extra={**fields, "error": str(e)})

    def stop(self) -> None:
        """Cancel pending deletions."""
        with self._lock:
            timers = list(self._timers.values())
            self._timers.clear()
        for t in timers:
            t.cancel()
