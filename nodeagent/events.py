"""core/v1 Events about pods, as the kubelet records them (source ``kubelet``, host = node)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from nodeagent.errors import KubeError
from nodeagent.kube import Kube
from nodeagent.timeutil import rfc3339

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)

REPEAT_SECONDS = 30.0
"""The same reason and message for the same pod is recorded at most this often."""


class EventRecorder:
    """Creates Events; drops exact repeats within :data:`REPEAT_SECONDS` (retries would flood)."""

    def __init__(self, kube: Kube, node: str) -> None:
        self.kube = kube
        self.node = node
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], tuple[str, float]] = {}

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Warning") -> None:
        """Record an event about ``pod``; failures to record are logged, never raised."""
        md = pod["metadata"]
        ns, name, uid = md["namespace"], md["name"], md["uid"]
        now = time.monotonic()
        with self._lock:
            last = self._last.get((uid, reason))
            if last is not None and last[0] == message and now - last[1] < REPEAT_SECONDS:
                return
            self._last[(uid, reason)] = (message, now)
        stamp = rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "namespace": ns,
                "uid": uid,
                "resourceVersion": md.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "kubelet", "host": self.node},
            "reportingComponent": "kubelet",
            "reportingInstance": self.node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.kube.create_event(ns, event)
        except KubeError as e:
            log.warning(
                "event not recorded", extra={"pod": f"{ns}/{name}", "reason": reason, "error": str(e)}
            )

    def forget(self, uid: str) -> None:
        """Drop what is remembered about a pod."""
        with self._lock:
            for key in [k for k in self._last if k[0] == uid]:
                del self._last[key]
