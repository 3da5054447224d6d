"""What a local cluster's daemon records of its cluster (``state.json`` in its state dir), typed.

The daemon (:mod:`clusters.local.daemon`) writes a :class:`DaemonState` once its cluster is ready
and again after each request that changed a process; every other process (the CLI, pytest workers,
the conformance runner, a later run reusing a kept cluster) reads it back with
:meth:`DaemonState.from_json`. A file that is not this layout (malformed, or written by another
version of dra-conformance) is a :class:`~clusters.errors.ClusterStateError` naming the file and
the field that is missing or wrong.

The layout on disk::

    {"ready": true, "daemon_pid": 123, "state_dir": "...", "control_socket": ".../ctl.sock",
     "settings": {...LocalSettings...}, "kubeconfig": "...", "server": "https://...",
     "root": "/tmp/dXXXX", "k8s_version": "1.37.2", "binaries": {"dir": "...", "source": "cache"},
     "feature_gates": {"Gate": true}, "runtime_config": ["resource.k8s.io/v1"],
     "controllers": ["..."], "control_plane": {"etcd": 124, ...},
     "nodes": {"node-0": {"root": "...", "kind": "agent", "agent_pid": 125, "runtime_pid": null,
                          "driver_pid": 126, "driver_command": ["..."]}},
     "timings": {"control_plane": 4.2, ...}}

``ready`` is always true (the file exists only once the cluster is ready); it is written for
readers of older versions and not read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from clusters.errors import ClusterStateError
from clusters.local.settings import LocalSettings

__all__ = ["BinariesEntry", "DaemonState", "NodeEntry"]

T = TypeVar("T")


class _Fields:
    """One JSON object of a state file, read field by field: a field that is missing or of another
    type is a :class:`ClusterStateError` naming the file and the field (``nodes.node-0.root``)."""

    def __init__(self, data: object, source: Path, where: str = "") -> None:
        self.source = source
        self.where = where
        if not isinstance(data, dict):
            raise self.error("", f"is {type(data).__name__}, not an object")
        self.data: dict[str, Any] = data

    def error(self, key: str, problem: str) -> ClusterStateError:
        field = f"{self.where}{key}" or "(the whole file)"
        return ClusterStateError(
            f"{self.source}: field {field!r} {problem} (not the state of this version of dra-conformance)"
        )

    def _take(self, key: str, kinds: tuple[type, ...], what: str, *, optional: bool = False) -> Any:
        if key not in self.data:
            raise self.error(key, "is missing")
        value = self.data[key]
        if value is None and optional:
            return None
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self.error(key, f"is {value!r}, not {what}")
        return value

    def text(self, key: str) -> str:
        return str(self._take(key, (str,), "a string"))

    def optional_text(self, key: str) -> str | None:
        value = self._take(key, (str,), "a string or null", optional=True)
        return None if value is None else str(value)

    def integer(self, key: str) -> int:
        return int(self._take(key, (int,), "an integer"))

    def optional_integer(self, key: str) -> int | None:
        value = self._take(key, (int,), "an integer or null", optional=True)
        return None if value is None else int(value)

    def flag(self, key: str) -> bool:
        return bool(self._take(key, (bool,), "true or false"))

    def number(self, key: str) -> float:
        return float(self._take(key, (int, float), "a number"))

    def path(self, key: str) -> Path:
        return Path(self.text(key))

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._take(key, (list,), "a list of strings")
        if not all(isinstance(item, str) for item in value):
            raise self.error(key, f"is {value!r}, not a list of strings")
        return tuple(value)

    def child(self, key: str) -> _Fields:
        return _Fields(self._take(key, (dict,), "an object"), self.source, f"{self.where}{key}.")

    def optional_child(self, key: str) -> _Fields | None:
        value = self._take(key, (dict,), "an object or null", optional=True)
        return None if value is None else _Fields(value, self.source, f"{self.where}{key}.")


@dataclass(frozen=True)
class NodeEntry:
    """One fake node of the cluster, as the daemon last saw it."""

    root: Path
    """The node's root dir (kubelet dirs, CDI dir, fake GPU state)."""
    kind: str
    """What plays the kubelet: ``agent`` (the node agent) or ``kubelet``."""
    agent_pid: int | None
    """The node agent's (or kubelet's) PID; None when it does not run."""
    runtime_pid: int | None
    """A kubelet node's fake container runtime's PID; None on an agent node."""
    driver_pid: int | None
    """The driver's PID; None when no driver runs."""
    driver_command: tuple[str, ...]
    """The driver's command line, placeholders filled in (empty: none)."""

    def to_data(self) -> dict[str, Any]:
        """As JSON-able data."""
        return {
            "root": str(self.root),
            "kind": self.kind,
            "agent_pid": self.agent_pid,
            "runtime_pid": self.runtime_pid,
            "driver_pid": self.driver_pid,
            "driver_command": list(self.driver_command),
        }


@dataclass(frozen=True)
class BinariesEntry:
    """The Kubernetes binaries the cluster runs."""

    directory: Path
    """Where they are."""
    source: str
    """Where they came from (``cache``, ``download``, ``build``, ``bin-dir``)."""


@dataclass(frozen=True)
class DaemonState:
    """A running local cluster, as its daemon records it (see the module docstring)."""

    daemon_pid: int
    """The daemon's PID: the state is stale once it is gone."""
    state_dir: Path
    """The daemon's state dir (absolute)."""
    control_socket: Path
    """The unix socket the daemon serves its requests on."""
    settings: LocalSettings
    """The settings the cluster was started with."""
    kubeconfig: Path
    """Admin kubeconfig."""
    server: str | None
    """The API server's URL."""
    root: Path
    """The cluster's root dir (logs, PKI, node roots)."""
    k8s_version: str
    """Kubernetes version ``X.Y.Z``."""
    binaries: BinariesEntry | None
    """The Kubernetes binaries it runs."""
    feature_gates: Mapping[str, bool]
    """The feature gates the control plane runs with."""
    runtime_config: tuple[str, ...]
    """The API groups/versions the API server was told to serve."""
    controllers: tuple[str, ...]
    """The controllers kube-controller-manager runs."""
    control_plane: Mapping[str, int | None]
    """Control-plane processes' PIDs by component name (``etcd``, ``kube-apiserver``, ...)."""
    nodes: Mapping[str, NodeEntry]
    """The fake nodes by name."""
    timings: Mapping[str, float]
    """Seconds each step of the start took."""

    def pids(self) -> list[int]:
        """Every process it recorded: the daemon, the control plane, the nodes' agents, runtimes and
        drivers (those that run)."""
        nodes = [(n.agent_pid, n.runtime_pid, n.driver_pid) for n in self.nodes.values()]
        found = [self.daemon_pid, *self.control_plane.values(), *(pid for pids in nodes for pid in pids)]
        return [pid for pid in found if pid is not None]

    def to_data(self) -> dict[str, Any]:
        """As JSON-able data (what :meth:`to_json` writes)."""
        return {
            "ready": True,
            "daemon_pid": self.daemon_pid,
            "state_dir": str(self.state_dir),
            "control_socket": str(self.control_socket),
            "settings": self.settings.to_data(),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "root": str(self.root),
            "k8s_version": self.k8s_version,
            "binaries": None
            if self.binaries is None
            else {"dir": str(self.binaries.directory), "source": self.binaries.source},
            "feature_gates": dict(self.feature_gates),
            "runtime_config": list(self.runtime_config),
            "controllers": list(self.controllers),
            "control_plane": dict(self.control_plane),
            "nodes": {name: node.to_data() for name, node in self.nodes.items()},
            "timings": dict(self.timings),
        }

    def to_json(self) -> str:
        """The state file's text."""
        return json.dumps(self.to_data(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: Path) -> DaemonState:
        """The state in ``text``, read from the file ``source``; :class:`ClusterStateError` naming
        ``source`` and the field when it is not JSON or not this layout (an older version's)."""
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ClusterStateError(f"{source} is not JSON ({e}): not a local cluster's state") from None
        fields = _Fields(data, source)
        return cls(
            daemon_pid=fields.integer("daemon_pid"),
            state_dir=fields.path("state_dir"),
            control_socket=fields.path("control_socket"),
            settings=_settings(fields),
            kubeconfig=fields.path("kubeconfig"),
            server=fields.optional_text("server"),
            root=fields.path("root"),
            k8s_version=fields.text("k8s_version"),
            binaries=_binaries(fields.optional_child("binaries")),
            feature_gates=_each(fields.child("feature_gates"), _Fields.flag),
            runtime_config=fields.strings("runtime_config"),
            controllers=fields.strings("controllers"),
            control_plane=_each(fields.child("control_plane"), _Fields.optional_integer),
            nodes=_each(fields.child("nodes"), lambda nodes, name: _node(nodes.child(name))),
            timings=_each(fields.child("timings"), _Fields.number),
        )


def _each(fields: _Fields, read: Callable[[_Fields, str], T]) -> dict[str, T]:
    """Every field of an object (a map by name), each read with ``read``."""
    return {name: read(fields, name) for name in fields.data}


def _binaries(fields: _Fields | None) -> BinariesEntry | None:
    return (
        None if fields is None else BinariesEntry(directory=fields.path("dir"), source=fields.text("source"))
    )


def _settings(fields: _Fields) -> LocalSettings:
    data = fields.child("settings").data
    try:
        return LocalSettings.from_data(data)
    except (KeyError, TypeError, ValueError) as e:
        problem = f"holds no settings of this version ({type(e).__name__}: {e})"
        raise fields.error("settings", problem) from None


def _node(fields: _Fields) -> NodeEntry:
    return NodeEntry(
        root=fields.path("root"),
        kind=fields.text("kind"),
        agent_pid=fields.optional_integer("agent_pid"),
        runtime_pid=fields.optional_integer("runtime_pid"),
        driver_pid=fields.optional_integer("driver_pid"),
        driver_command=fields.strings("driver_command"),
    )
