"""Direct calls on a driver's kubelet-plugin sockets, as the kubelet makes them (REG rules).

:func:`find_plugin` scans a node's plugin-registration directory for the socket whose
``GetInfo`` names the driver; :class:`PluginClient` calls ``NodePrepareResources`` /
``NodeUnprepareResources`` on its endpoint through v1 or v1beta1, and returns the answers as
plain data, so tests compare what the driver said, not protobuf objects.
"""

from __future__ import annotations

import contextlib
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

import draproto
from conformance.errors import ConformanceError

__all__ = [
    "DRA_SERVICES",
    "ClaimAnswer",
    "ClaimRef",
    "Device",
    "PluginClient",
    "PluginInfo",
    "PluginNotFound",
    "find_plugin",
    "get_info",
    "is_socket",
    "notify",
]

DRA_SERVICES = {draproto.DRA_V1: "v1", draproto.DRA_V1BETA1: "v1beta1"}
"""DRAPlugin version strings the kubelet knows, with the stub package they map to."""


class PluginNotFound(ConformanceError):
    """No registration socket on the node answers ``GetInfo`` with the driver's name."""


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in a request."""

    namespace: str
    """The claim's namespace."""
    uid: str
    """The claim's UID (the key of the answer)."""
    name: str
    """The claim's name."""


@dataclass(frozen=True)
class Device:
    """One prepared device of an answer."""

    request_names: tuple[str, ...]
    """The requests it was allocated for (empty: every request)."""
    pool_name: str
    """Its pool."""
    device_name: str
    """Its name in the pool."""
    cdi_device_ids: tuple[str, ...]
    """Fully qualified CDI device names."""
    share_id: str = ""
    """Consumable-capacity share id (v1 only)."""


@dataclass(frozen=True)
class ClaimAnswer:
    """The driver's answer for one claim."""

    devices: tuple[Device, ...] = ()
    """Prepared devices (prepare only)."""
    error: str = ""
    """Non-empty when the claim failed."""


@dataclass(frozen=True)
class PluginInfo:
    """What ``GetInfo`` answered on a registration socket."""

    socket: Path
    """The registration socket."""
    type: str
    """``DRAPlugin`` for a DRA driver."""
    name: str
    """The driver name."""
    endpoint: str
    """The service socket (absolute path on the node), as the driver answered."""
    versions: tuple[str, ...] = field(default_factory=tuple)
    """Supported versions, DRAPlugin and health."""
    local_endpoint: str = ""
    """Where this machine dials :attr:`endpoint`: the endpoint itself (the default), or the cluster's
    relay of it (:meth:`clusters.Cluster.node_socket`)."""

    def __post_init__(self) -> None:
        if not self.local_endpoint:
            object.__setattr__(self, "local_endpoint", self.endpoint)


@contextlib.contextmanager
def _channel(path: str | Path, timeout: float = 10.0) -> Iterator[grpc.Channel]:
    channel = grpc.insecure_channel(f"unix://{path}")
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        yield channel
    finally:
        channel.close()


def get_info(socket: Path, timeout: float = 10.0) -> PluginInfo:
    """Call ``GetInfo`` on a registration socket."""
    with _channel(socket, timeout) as channel:
        stub = draproto.registration_pb2_grpc.RegistrationStub(channel)
        info = stub.GetInfo(draproto.registration_pb2.InfoRequest(), timeout=timeout)
    return PluginInfo(socket, info.type, info.name, info.endpoint, tuple(info.supported_versions))


def notify(socket: Path, registered: bool, error: str = "", timeout: float = 10.0) -> None:
    """Call ``NotifyRegistrationStatus`` on a registration socket."""
    with _channel(socket, timeout) as channel:
        stub = draproto.registration_pb2_grpc.RegistrationStub(channel)
        status = draproto.registration_pb2.RegistrationStatus(plugin_registered=registered, error=error)
        stub.NotifyRegistrationStatus(status, timeout=timeout)


def is_socket(path: Path) -> bool:
    """Whether ``path`` is a unix socket."""
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


def find_plugin(registry_dir: Path, driver: str, timeout: float = 10.0) -> PluginInfo:
    """The registration socket in ``registry_dir`` whose ``GetInfo`` names ``driver``, whatever its file
    name; of several (a rolling update: one per pod UID) the newest, which the kubelet uses too."""
    seen = []
    found: list[tuple[int, PluginInfo]] = []
    for path in sorted(registry_dir.iterdir()) if registry_dir.is_dir() else []:
        if not is_socket(path):
            continue
        try:
            info = get_info(path, timeout)
        except (grpc.RpcError, grpc.FutureTimeoutError) as e:
            seen.append(f"{path.name} (no answer: {type(e).__name__})")
            continue
        if info.name == driver:
            try:
                found.append((path.stat().st_mtime_ns, info))
            except OSError:
                continue  # gone meanwhile
            continue
        seen.append(f"{path.name} ({info.name})")
    if found:
        return max(found, key=lambda f: f[0])[1]
    raise PluginNotFound(
        f"no registration socket in {registry_dir} answers GetInfo with driver {driver!r}; "
        f"found: {', '.join(seen) or 'none'}"
    )


def _device(d: Any) -> Device:
    share = str(getattr(d, "share_id", "") or "")
    return Device(tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids), share)


class PluginClient:
    """NodePrepareResources / NodeUnprepareResources on a driver's service socket."""

    def __init__(self, endpoint: str, version: str = draproto.DRA_V1, timeout: float = 45.0) -> None:
        if version not in DRA_SERVICES:
            raise ValueError(f"unknown DRAPlugin version {version!r}; known: {', '.join(DRA_SERVICES)}")
        self.endpoint = endpoint
        """The service socket."""
        self.version = version
        """``v1.DRAPlugin`` or ``v1beta1.DRAPlugin``."""
        self.timeout = timeout
        """Per-call timeout (the kubelet's is 45 s)."""
        self._pb = draproto.dra_v1_pb2 if version == draproto.DRA_V1 else draproto.dra_v1beta1_pb2
        self._grpc = draproto.dra_v1_pb2_grpc if version == draproto.DRA_V1 else draproto.dra_v1beta1_pb2_grpc

    def _claims(self, claims: Sequence[ClaimRef]) -> list[Any]:
        return [self._pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    def prepare_raw(self, claims: Sequence[ClaimRef]) -> Any:
        """The prepare response as protobuf (for checks of its exact shape)."""
        with _channel(self.endpoint) as channel:
            stub = self._grpc.DRAPluginStub(channel)
            return stub.NodePrepareResources(
                self._pb.NodePrepareResourcesRequest(claims=self._claims(claims)), timeout=self.timeout
            )

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimAnswer]:
        """Prepare ``claims``; the answer per claim UID."""
        response = self.prepare_raw(claims)
        return {
            uid: ClaimAnswer(tuple(_device(d) for d in answer.devices), answer.error)
            for uid, answer in response.claims.items()
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimAnswer]:
        """Unprepare ``claims``; the answer (an error or none) per claim UID."""
        with _channel(self.endpoint) as channel:
            stub = self._grpc.DRAPluginStub(channel)
            response = stub.NodeUnprepareResources(
                self._pb.NodeUnprepareResourcesRequest(claims=self._claims(claims)), timeout=self.timeout
            )
        return {uid: ClaimAnswer(error=answer.error) for uid, answer in response.claims.items()}
