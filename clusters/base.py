"""The interface every cluster backend implements, and what a container sees.

A test never asks which tier it runs on: it asks the :class:`Cluster` for what it
needs. A backend that cannot do something raises
:class:`~clusters.errors.CapabilityMissing`, and the test skips with that reason.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from clusters.errors import CapabilityMissing

if TYPE_CHECKING:
    from draproto.apiconn import Connection
    from draproto.rest import Rest

__all__ = ["Cluster", "ContainerView", "PodRef", "pod_key"]

PodRef = Any
"""A pod: a ``"namespace/name"`` string, a ``V1Pod``-like object, or a pod dict."""


def pod_key(pod: PodRef) -> tuple[str, str]:
    """Return ``(namespace, name)`` of a pod given as a string, object or dict."""
    if isinstance(pod, str):
        namespace, sep, name = pod.partition("/")
        if not sep or not namespace or not name:
            raise ValueError(f"pod reference {pod!r} is not of the form 'namespace/name'")
        return namespace, name
    if isinstance(pod, Mapping):
        meta = pod["metadata"]
        return str(meta["namespace"]), str(meta["name"])
    return str(pod.metadata.namespace), str(pod.metadata.name)


@dataclass(frozen=True)
class ContainerView:
    """What one running container sees of its devices: every CDI edit (env, device nodes, mounts, net
    devices, hooks, group ids, Intel RDT) and the CDI ids."""

    env: dict[str, str] = field(default_factory=dict)
    """Environment variables the CDI edits set."""
    device_nodes: list[dict[str, Any]] = field(default_factory=list)
    """CDI ``deviceNodes`` entries (``path``, ``type``, ...)."""
    mounts: list[dict[str, Any]] = field(default_factory=list)
    """CDI ``mounts`` entries (``hostPath``, ``containerPath``, ...)."""
    cdi_devices: list[str] = field(default_factory=list)
    """Fully qualified CDI device names (``vendor/class=name``) injected into the container."""
    net_devices: list[dict[str, Any]] = field(default_factory=list)
    """CDI 1.1 ``netDevices`` entries (``hostInterfaceName`` -> ``name`` in the container)."""
    hooks: list[dict[str, Any]] = field(default_factory=list)
    """CDI ``hooks`` entries (``hookName``, ``path``, ``args``, ``env``, ``timeout``)."""
    additional_gids: list[int] = field(default_factory=list)
    """CDI ``additionalGids``: extra group ids of the container's process."""
    intel_rdt: dict[str, Any] | None = None
    """CDI ``intelRdt`` (``closID``, ``l3CacheSchema``, ``memBwSchema``, ...), when an edit sets it."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContainerView:
        """Build a view from the JSON form the node agent writes (docs/interfaces.md)."""
        return cls(
            env={str(k): str(v) for k, v in dict(data.get("env") or {}).items()},
            device_nodes=[dict(d) for d in data.get("device_nodes") or []],
            mounts=[dict(m) for m in data.get("mounts") or []],
            cdi_devices=[str(d) for d in data.get("cdi_devices") or []],
            net_devices=[dict(n) for n in data.get("net_devices") or []],
            hooks=[dict(h) for h in data.get("hooks") or []],
            additional_gids=[int(g) for g in data.get("additional_gids") or []],
            intel_rdt=dict(data["intel_rdt"]) if data.get("intel_rdt") else None,
        )

    @classmethod
    def from_file(cls, path: Path) -> ContainerView:
        """Read a view from a JSON file."""
        return cls.from_dict(json.loads(path.read_text()))


class Cluster(abc.ABC):
    """A Kubernetes cluster the suite runs against.

    Usable as a context manager: leaving the ``with`` block calls :meth:`stop`.
    """

    backend: ClassVar[str] = "abstract"
    """Short backend name (``local``, ``kind``, ``k3s``, ``external``) used in messages."""

    capabilities: frozenset[str] = frozenset()
    """What this backend can do beyond the API: ``grpc`` (reach a driver's sockets and CDI specs
    on a node), ``view`` (:meth:`container_view`), ``restart-driver``, ``restart-kubelet``,
    ``restart-apiserver``. A method whose capability is missing raises
    :class:`~clusters.errors.CapabilityMissing`. Fixed per backend, except for an external
    cluster, whose profile's commands add them."""

    _api_client: Any = None
    _connection: Connection | None = None

    def connection(self) -> Connection:
        """The connection to this cluster's API server (:func:`draproto.apiconn.connect` of
        :attr:`kubeconfig`, made once): what :meth:`rest` and the suite's requests go through,
        without importing the kubernetes client (a third of a second of CPU a process), unless the
        kubeconfig hands its credentials to a plugin."""
        if self._connection is None:
            from draproto.apiconn import connect

            self._connection = connect(self.kubeconfig)
        return self._connection

    def rest(self) -> Rest:
        """Plain-JSON requests over :meth:`connection`."""
        from draproto.rest import Rest

        return Rest(self.connection())

    @property
    @abc.abstractmethod
    def kubeconfig(self) -> Path:
        """Absolute path of an admin kubeconfig for this cluster."""

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for :attr:`kubeconfig` (created once, then reused)."""
        if self._api_client is None:
            from kubernetes import config

            self._api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(self.kubeconfig)
            )
        return self._api_client

    @abc.abstractmethod
    def nodes(self) -> list[str]:
        """Names of the nodes where the driver under test runs."""

    def node_values(self, node: str) -> dict[str, str]:
        """What the placeholders of a node's command templates stand for (e.g. a profile's fault
        commands): ``node`` and ``kubeconfig`` on every backend; a backend that knows more adds it
        (the local tier: ``root``, the node's root dir). A template that needs a value the backend
        leaves out cannot run there."""
        return {"node": node, "kubeconfig": str(self.kubeconfig)}

    def companion_drivers(self) -> frozenset[str]:
        """Names of the DRA drivers this fixture runs on the nodes beside the one under test (the
        local tier's NIC driver): their registration sockets and slices are not the driver's."""
        return frozenset()

    def on_node(self, node: str, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` where ``node``'s commands run: here (the default, for nodes
        on this machine or commands that reach the node themselves), or inside the node (kind and
        k3s: in the driver pod, whose ``{root}`` and ``{python}`` :meth:`node_values` gives)."""
        return list(argv)

    def stop_driver(self, node: str) -> None:
        """Stop the driver on ``node`` (gracefully) until :meth:`restart_driver` starts it again."""
        raise CapabilityMissing(self.backend, "stop the driver")

    def start_driver(self, node: str, command: Sequence[str]) -> None:
        """(Re)start the driver on ``node`` with ``command`` instead of the current one."""
        raise CapabilityMissing(self.backend, "start a driver with a custom command")

    def restart_driver(self, node: str, *, crash: bool = False) -> None:
        """Stop the driver on ``node`` (if it runs) and start it again with the same command
        (``crash``: kill it, as a crash would, instead of stopping it gracefully)."""
        raise CapabilityMissing(self.backend, "restart the driver")

    def update_driver(self, node: str, *, fail: bool = False) -> None:
        """A rolling update of the driver on ``node``: start a second instance beside the running one,
        wait until it registered, then stop the old one. With ``fail`` the new instance is given a
        setting it refuses (an unknown flag): it must exit before it registers, and the old one keeps
        serving; ``UpdateFailed`` says so (anything else is an error of the cluster or the driver)."""
        raise CapabilityMissing(self.backend, "update the driver (two instances at once)")

    def restart_kubelet(self, node: str, *, crash: bool = False) -> None:
        """Restart the kubelet (or the node agent playing it) on ``node`` (``crash``: kill it first)."""
        raise CapabilityMissing(self.backend, "restart the kubelet")

    def stop_kubelet(self, node: str) -> None:
        """Stop the kubelet on ``node`` (gracefully) until :meth:`restart_kubelet` starts it again."""
        raise CapabilityMissing(self.backend, "stop the kubelet")

    def restart_component(self, component: str, *, crash: bool = False) -> None:
        """Restart a control-plane component (``kube-apiserver``, ``kube-scheduler``, ...; ``crash``:
        kill it first) and wait until it answers again."""
        raise CapabilityMissing(self.backend, f"restart {component}")

    def container_view(self, pod: PodRef, container: str) -> ContainerView:
        """What ``container`` of ``pod`` sees of its devices."""
        raise CapabilityMissing(self.backend, "show what a container sees")

    def node_cdi_specs(self, node: str) -> list[dict[str, object]]:
        """The CDI specs on ``node``, parsed (what :meth:`container_view` infers CDI devices from)."""
        raise CapabilityMissing(self.backend, "read the CDI specs of a node")

    def registry_dir(self, node: str) -> Path:
        """The plugin-registration directory of ``node``, where drivers put registration sockets."""
        raise CapabilityMissing(self.backend, "reach the driver's sockets on a node")

    def cdi_dir(self, node: str) -> Path:
        """The directory of ``node`` where drivers write CDI specs."""
        raise CapabilityMissing(self.backend, "read the CDI specs of a node")

    def node_socket(self, node: str, path: str) -> Path:
        """Where this machine dials the unix socket ``path`` of ``node`` (an absolute path on the
        node, as a driver names its endpoint in ``GetInfo``): the path itself where the node's files
        are this machine's (the default), else a local relay of it (an external cluster's probe),
        which does not exist when nothing is at ``path`` on the node."""
        return Path(path)

    def node_logs(self, node: str) -> dict[str, Path]:
        """Log files of ``node``'s processes by name (``driver``, ``kubelet``); empty when unknown."""
        return {}

    @abc.abstractmethod
    def stop(self) -> None:
        """Release the cluster (stop what this object started). Safe to call twice."""

    def close_client(self) -> None:
        """Close the cached API client and connection, if any."""
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
