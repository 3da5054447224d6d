"""DRA plugin discovery and registration, as the kubelet's plugin manager does them.

The registry dir is scanned for ``*.sock``; a new (or replaced) socket gets the
registration handshake: ``GetInfo``, checks, the version choice (the first
entry of the plugin's list that the agent supports), ``NotifyRegistrationStatus``.
A registered plugin is reached through one gRPC channel per endpoint, reused
for every call (:class:`~nodeagent.draclient.DRAClient` makes them). When a
driver's last plugin goes away the ``on_unregistered`` callback runs (slice
cleanup hangs off it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

import draproto
from draproto import registration_pb2, registration_pb2_grpc
from nodeagent.draclient import DRAClient
from nodeagent.errors import PluginError
from nodeagent.health import HealthCache, HealthWatcher, choose_health_version
from nodeagent.settings import Settings

__all__ = ["Plugin", "PluginManager", "choose_dra_version"]

log = logging.getLogger(__name__)

_FULL_NAMES = {
    "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin": draproto.DRA_V1,
    "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin": draproto.DRA_V1BETA1,
}
SUPPORTED_DRA_VERSIONS = (draproto.DRA_V1, draproto.DRA_V1BETA1)


def choose_dra_version(supported: list[str] | tuple[str, ...]) -> str | None:
    """The first DRAPlugin version in the plugin's list that the agent speaks, or None."""
    for entry in supported:
        version = _FULL_NAMES.get(entry, entry)
        if version in SUPPORTED_DRA_VERSIONS:
            return version
    return None


@dataclass
class Plugin:
    """One registered plugin instance (a driver may have more than one while it restarts)."""

    driver: str
    endpoint: str
    version: str
    supported: tuple[str, ...]
    socket: Path
    stamp: tuple[int, int]
    client: DRAClient
    health: HealthWatcher | None = field(default=None, repr=False)


def _stamp(st: os.stat_result) -> tuple[int, int]:
    return st.st_ino, st.st_mtime_ns


class PluginManager:
    """Watches the registry dir and keeps the registered plugins and their channels."""

    def __init__(
        self,
        settings: Settings,
        *,
        health: HealthCache | None = None,
        on_registered: Callable[[str], None] | None = None,
        on_unregistered: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.health = health if health is not None else HealthCache()
        self.on_registered = on_registered
        self.on_unregistered = on_unregistered
        self._lock = threading.RLock()
        self._by_socket: dict[Path, Plugin] = {}
        self._by_driver: dict[str, list[Plugin]] = {}
        self._channels: dict[str, tuple[grpc.Channel, int]] = {}
        self._pending: set[Path] = set()
        self._failed: dict[Path, tuple[int, int]] = {}
        self._retry: dict[Path, tuple[tuple[int, int], float, float]] = {}
        """Sockets whose GetInfo failed: (stamp, next try at, current delay)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="plugin-watcher", daemon=True)
        self._handshakes: list[threading.Thread] = []

    # -- lifecycle

    def start(self) -> None:
        """Create the registry dir and start watching it."""
        self.settings.layout.registry_dir.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching, stop health streams, close channels (plugins stay registered on their side)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for t in list(self._handshakes):
            t.join(timeout=self.settings.registration_timeout_seconds * 2 + 1)
        with self._lock:
            plugins = list(self._by_socket.values())
            self._by_socket.clear()
            self._by_driver.clear()
            channels = [c for c, _ in self._channels.values()]
            self._channels.clear()
        for p in plugins:
            if p.health is not None:
                p.health.stop()
        for c in channels:
            c.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:
                log.exception("registry scan failed")
            self._stop.wait(self.settings.poll_seconds)

    # -- queries

    def client(self, driver: str) -> DRAClient:
        """The client of the driver's newest plugin; PluginError when none is registered."""
        with self._lock:
            plugins = self._by_driver.get(driver)
            if not plugins:
                raise PluginError(
                    f"DRA driver {driver} is not registered on node {self.settings.node_name} "
                    f"(no plugin socket in {self.settings.layout.registry_dir})"
                )
            return plugins[-1].client

    def registered(self, driver: str) -> bool:
        """Whether at least one plugin of ``driver`` is registered."""
        with self._lock:
            return bool(self._by_driver.get(driver))

    def drivers(self) -> list[str]:
        """Names of the drivers with a registered plugin."""
        with self._lock:
            return sorted(d for d, ps in self._by_driver.items() if ps)

    def plugins(self) -> list[Plugin]:
        """All registered plugins."""
        with self._lock:
            return list(self._by_socket.values())

    # -- scanning

    def scan(self) -> None:
        """One pass over the registry dir: register new sockets, drop vanished ones."""
        seen: dict[Path, tuple[int, int]] = {}
        try:
            entries = list(os.scandir(self.settings.layout.registry_dir))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            if not entry.name.endswith(".sock") or entry.name.startswith("."):
                continue
            try:
                seen[Path(entry.path)] = _stamp(entry.stat(follow_symlinks=False))
            except FileNotFoundError:
                continue
        with self._lock:
            gone = [p for p, plugin in self._by_socket.items() if seen.get(p) != plugin.stamp]
        for path in gone:
            self._deregister(path, "socket removed" if path not in seen else "socket replaced")
        with self._lock:
            for path in list(self._failed):
                if seen.get(path) != self._failed[path]:
                    del self._failed[path]
            for path in list(self._retry):
                if seen.get(path) != self._retry[path][0]:
                    del self._retry[path]
            now = time.monotonic()
            todo = [
                (p, s)
                for p, s in seen.items()
                if p not in self._by_socket
                and p not in self._pending
                and p not in self._failed
                and (p not in self._retry or self._retry[p][1] <= now)
            ]
            self._pending.update(p for p, _ in todo)
        self._handshakes = [t for t in self._handshakes if t.is_alive()]
        for path, stamp in todo:
            t = threading.Thread(target=self._handshake, args=(path, stamp), name=f"register-{path.name}")
            t.daemon = True
            self._handshakes.append(t)
            t.start()

    def wait_for(self, driver: str, timeout: float) -> bool:
        """Block until ``driver`` is registered (tests and startup use it)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.registered(driver):
                return True
            time.sleep(0.05)
        return self.registered(driver)

    # -- registration

    def _handshake(self, path: Path, stamp: tuple[int, int]) -> None:
        fields: dict[str, Any] = {"node": self.settings.node_name, "socket": str(path)}
        timeout = self.settings.registration_timeout_seconds
        try:
            with grpc.insecure_channel(f"unix://{path}") as channel:
                stub = registration_pb2_grpc.RegistrationStub(channel)
                try:
                    info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=timeout)
                except grpc.RpcError as e:
                    # not a plugin yet (still starting) or not a plugin at all: try again, less and less often
                    with self._lock:
                        delay = min(self._retry.get(path, (stamp, 0.0, 0.25))[2] * 2, 30.0)
                        self._retry[path] = (stamp, time.monotonic() + delay, delay)
                    log.warning(
                        "GetInfo failed; will retry",
                        extra={**fields, "error": str(e.code()), "retry_in": delay},
                    )
                    return
                error = self._validate(info)
                version = choose_dra_version(list(info.supported_versions))
                if not error and version is None:
                    error = (
                        f"none of the plugin's versions {list(info.supported_versions)} is supported "
                        f"(this agent speaks {list(SUPPORTED_DRA_VERSIONS)})"
                    )
                if error:
                    log.error("plugin rejected", extra={**fields, "driver": info.name, "error": error})
                    with self._lock:
                        self._failed[path] = stamp
                    with contextlib.suppress(grpc.RpcError):
                        stub.NotifyRegistrationStatus(
                            registration_pb2.RegistrationStatus(plugin_registered=False, error=error),
                            timeout=timeout,
                        )
                    return
                assert version is not None
                plugin = self._register(path, stamp, info, version)
                try:
                    stub.NotifyRegistrationStatus(
                        registration_pb2.RegistrationStatus(plugin_registered=True), timeout=timeout
                    )
                except grpc.RpcError as e:
                    log.warning("NotifyRegistrationStatus failed", extra={**fields, "error": str(e.code())})
                log.info(
                    "plugin registered",
                    extra={
                        **fields,
                        "driver": plugin.driver,
                        "version": version,
                        "endpoint": plugin.endpoint,
                    },
                )
                if self.on_registered is not None:
                    self.on_registered(plugin.driver)
        except Exception:
            log.exception("plugin handshake broke", extra=fields)
        finally:
            with self._lock:
                self._pending.discard(path)

    def _validate(self, info: registration_pb2.PluginInfo) -> str:
        if info.type != draproto.DRA_PLUGIN_TYPE:
            return f"plugin type {info.type!r} is not {draproto.DRA_PLUGIN_TYPE!r}"
        if not info.name:
            return "plugin name (the driver name) is empty"
        if not info.endpoint or not os.path.isabs(info.endpoint):
            return f"endpoint {info.endpoint!r} is not an absolute socket path"
        return ""

    def _register(
        self, path: Path, stamp: tuple[int, int], info: registration_pb2.PluginInfo, version: str
    ) -> Plugin:
        with self._lock:
            channel = self._channel(info.endpoint)
            client = DRAClient(info.name, channel, version, self.settings.grpc_timeout_seconds)
            plugin = Plugin(
                driver=info.name,
                endpoint=info.endpoint,
                version=version,
                supported=tuple(info.supported_versions),
                socket=path,
                stamp=stamp,
                client=client,
            )
            health_version = choose_health_version(plugin.supported, self.settings.k8s_version)
            if health_version is not None:
                plugin.health = HealthWatcher(
                    plugin.driver,
                    channel,
                    health_version,
                    self.health,
                    retry_initial=self.settings.retry_initial_seconds,
                    retry_max=self.settings.retry_max_seconds,
                )
            self._by_socket[path] = plugin
            self._by_driver.setdefault(plugin.driver, []).append(plugin)
        if plugin.health is not None:
            plugin.health.start()
        return plugin

    def _channel(self, endpoint: str) -> grpc.Channel:
        channel, refs = self._channels.get(endpoint, (None, 0))
        if channel is None:
            channel = grpc.insecure_channel(f"unix://{endpoint}")
        self._channels[endpoint] = (channel, refs + 1)
        return channel

    def _release_channel(self, endpoint: str) -> None:
        channel, refs = self._channels[endpoint]
        if refs <= 1:
            del self._channels[endpoint]
            channel.close()
        else:
            self._channels[endpoint] = (channel, refs - 1)

    def _deregister(self, path: Path, why: str) -> None:
        with self._lock:
            plugin = self._by_socket.pop(path, None)
            if plugin is None:
                return
            remaining = [p for p in self._by_driver.get(plugin.driver, []) if p is not plugin]
            self._by_driver[plugin.driver] = remaining
            if not remaining:
                del self._by_driver[plugin.driver]
        if plugin.health is not None:
            plugin.health.stop()
        with self._lock:
            self._release_channel(plugin.endpoint)
        log.info(
            "plugin unregistered",
            extra={"node": self.settings.node_name, "driver": plugin.driver, "socket": str(path), "why": why},
        )
        if not remaining:
            self.health.clear(plugin.driver)
            if self.on_unregistered is not None:
                self.on_unregistered(plugin.driver)
