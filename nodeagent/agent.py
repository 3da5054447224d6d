"""The node agent: wires the parts together and runs their threads."""

from __future__ import annotations

import logging
import threading
import time

from nodeagent.checkpoint import Checkpoint
from nodeagent.errors import kube_error
from nodeagent.health import HealthCache
from nodeagent.kube import Kube
from nodeagent.node import NodeHeartbeat
from nodeagent.plugins import PluginManager
from nodeagent.pods import PodManager
from nodeagent.settings import Settings
from nodeagent.slices import SliceJanitor

__all__ = ["Agent"]

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 240
WORKERS = 8


class Agent:
    """One node's kubelet stand-in: ``start()``, then ``stop()`` (or use it as a context manager)."""

    def __init__(self, settings: Settings, kube: Kube, *, manage_node: bool = True) -> None:
        self.settings = settings
        self.kube = kube
        self.manage_node = manage_node
        settings.layout.create()
        self.checkpoint = Checkpoint(settings.layout.checkpoint_path)
        self.health = HealthCache()
        self.plugins = PluginManager(settings, health=self.health)
        self.slices = SliceJanitor(settings, kube, self.plugins.registered)
        self.pods = PodManager(settings, kube, self.plugins, self.checkpoint, self.health)
        self.node = NodeHeartbeat(settings, kube)
        self.health.on_change = self.pods.on_health_change
        self.plugins.on_registered = self._driver_registered
        self.plugins.on_unregistered = self._driver_gone
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _driver_registered(self, driver: str) -> None:
        self.slices.driver_registered(driver)
        self.pods.enqueue_all()  # pods waiting for this driver can go on now

    def _driver_gone(self, driver: str) -> None:
        self.slices.driver_gone(driver)

    def start(self) -> None:
        """Node and Lease, slice wipe, then plugin watching, pod watching and workers."""
        fields = {"node": self.settings.node_name, "root": str(self.settings.root)}
        log.info("node agent starting", extra=fields)
        if self.manage_node:
            self.node.start()
        self.slices.wipe_all()
        self.plugins.start()
        self._spawn(self._watch_pods, "pod-watch")
        self._spawn(self._resync, "resync")
        for i in range(WORKERS):
            self._spawn(self._work, f"pod-worker-{i}")
        log.info("node agent started", extra=fields)

    def stop(self) -> None:
        """Stop every thread; the Node, pods and prepared claims stay as they are."""
        self._stop.set()
        self.pods.queue.shutdown()
        # workers first, so no call is cut off by closing its channel; the pod watch is left to
        # die with the process (it may sit in a read for minutes), as is a worker stuck in a
        # hanging plugin call past the deadline: both are daemon threads holding nothing
        deadline = time.monotonic() + 5
        for t in self._threads:
            if t.name != "pod-watch":
                t.join(timeout=max(deadline - time.monotonic(), 0.01))
        self.plugins.stop()
        self.slices.stop()
        self.node.stop()
        log.info("node agent stopped", extra={"node": self.settings.node_name})

    def __enter__(self) -> Agent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def request_stop(self) -> None:
        """Make ``wait()`` return (safe from a signal handler)."""
        self._stop.set()

    def wait(self) -> None:
        """Block until ``stop()``."""
        # in slices: a signal that lands on another thread wakes no untimed wait of the main one,
        # where Python runs its handler (request_stop)
        while not self._stop.wait(0.5):
            pass

    def _spawn(self, target: object, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _watch_pods(self) -> None:
        node = self.settings.node_name
        delay = 0.5
        while not self._stop.is_set():
            try:
                pods, rv = self.kube.list_pods(node)
                self.pods.replace_all(pods)
                delay = 0.5
                # one watch per list: when the server ends it, relist (cheap, and heals anything missed)
                for kind, obj in self.kube.watch_pods(node, rv, WATCH_TIMEOUT_SECONDS):
                    if self._stop.is_set():
                        return
                    if kind == "ERROR":
                        raise kube_error(
                            f"pod watch error: {obj.get('message')}",
                            int(obj.get("code") or 0),
                            str(obj.get("reason") or ""),
                            str(obj.get("message") or ""),
                        )
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        self.pods.remove(obj)
                    else:
                        self.pods.upsert(obj)
            except Exception as e:
                if self._stop.is_set():
                    return
                log.warning("pod watch failed; relisting", extra={"node": node, "error": str(e)})
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def _resync(self) -> None:
        while not self._stop.wait(self.settings.resync_seconds):
            try:
                self.pods.enqueue_all()
                self.pods.sweep_orphans()
            except Exception:
                log.exception("resync failed")

    def _work(self) -> None:
        while not self._stop.is_set():
            uid = self.pods.queue.get(timeout=1.0)
            if uid is None:
                continue
            try:
                delay = self.pods.sync(uid)
            except Exception:
                log.exception("pod sync failed", extra={"node": self.settings.node_name, "pod_uid": uid})
                delay = self.settings.retry_max_seconds
            finally:
                self.pods.queue.done(uid)
            if delay is not None and not self._stop.is_set():
                self.pods.queue.add(uid, delay)
