"""The kubelet's DRA client: NodePrepareResources / NodeUnprepareResources with the kubelet's checks.

This is the node's side of the DRAPlugin service (the driver serves it, in ``driver/plugin.py``);
``ClaimRef``, ``PreparedDevice`` and ``PrepareError`` exist on the driver's side too, under the
same names, for the same things seen from there.

One :class:`DRAClient` per registered plugin, over the plugin's shared channel, in the version
the registration chose (``v1`` or ``v1beta1``). The checks on an answer are the kubelet's: a gRPC
error discards the whole response; every claim of the request must be in the response, a UID
that was not asked for is an error, and a per-claim ``error`` fails that claim. Any of these
fails the batch with a PrepareError naming claims and driver: the caller keeps the pod Pending
and retries the whole batch (drivers are idempotent).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc

import draproto
from draproto import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from nodeagent.errors import PrepareError

__all__ = ["ClaimRef", "DRAClient", "PreparedDevice", "cdi_ids"]

log = logging.getLogger(__name__)

_PREPARE = "NodePrepareResources"
_UNPREPARE = "NodeUnprepareResources"


class ClaimRef(NamedTuple):
    """The identity of a ResourceClaim, as NodePrepareResources takes it."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} (uid {self.uid})"


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim, as the driver answered it."""

    driver: str
    pool: str
    device: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str | None = None
    """Only DRAPlugin ``v1`` answers carry one."""

    def serves(self, request: str | None) -> bool:
        """Whether a container referencing ``request`` (None: the whole claim) gets this device.

        Matching is by exact string; empty ``request_names`` means every request.
        """
        return request is None or not self.request_names or request in self.request_names

    def to_json(self) -> dict[str, Any]:
        """JSON form (the agent's checkpoint keeps it)."""
        out: dict[str, Any] = {
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
            "requestNames": list(self.request_names),
            "cdiDeviceIDs": list(self.cdi_device_ids),
        }
        if self.share_id is not None:
            out["shareID"] = self.share_id
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreparedDevice:
        """Inverse of :meth:`to_json`."""
        return cls(
            driver=data["driver"],
            pool=data.get("pool", ""),
            device=data.get("device", ""),
            request_names=tuple(data.get("requestNames", ())),
            cdi_device_ids=tuple(data.get("cdiDeviceIDs", ())),
            share_id=data.get("shareID"),
        )


def cdi_ids(devices: Sequence[PreparedDevice], request: str | None) -> list[str]:
    """CDI ids a container referencing ``request`` (None: the whole claim) gets, in order, once each."""
    ids: list[str] = []
    for dev in devices:
        if dev.serves(request):
            ids.extend(i for i in dev.cdi_device_ids if i not in ids)
    return ids


_PrepareResponse = dra_v1_pb2.NodePrepareResourcesResponse | dra_v1beta1_pb2.NodePrepareResourcesResponse
_UnprepareResponse = (
    dra_v1_pb2.NodeUnprepareResourcesResponse | dra_v1beta1_pb2.NodeUnprepareResourcesResponse
)
_Stub = dra_v1_pb2_grpc.DRAPluginStub | dra_v1beta1_pb2_grpc.DRAPluginStub


class DRAClient:
    """Calls one driver's DRAPlugin service (v1 or v1beta1) over a shared channel."""

    def __init__(self, driver: str, channel: grpc.Channel, version: str, timeout: float) -> None:
        self.driver = driver
        """The driver name the plugin registered with."""
        self.version = version
        """``draproto.DRA_V1`` or ``draproto.DRA_V1BETA1``."""
        self.timeout = timeout
        """Per-call deadline in seconds (the kubelet's is 45)."""
        self._stub: _Stub = (
            dra_v1_pb2_grpc.DRAPluginStub(channel)
            if version == draproto.DRA_V1
            else dra_v1beta1_pb2_grpc.DRAPluginStub(channel)
        )

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, list[PreparedDevice]]:
        """Prepare ``claims`` with one call: devices by claim UID; PrepareError names claims and driver."""
        refs = [c._asdict() for c in claims]
        response: _PrepareResponse
        with self._call(_PREPARE, claims):
            if isinstance(self._stub, dra_v1_pb2_grpc.DRAPluginStub):
                request = dra_v1_pb2.NodePrepareResourcesRequest(claims=refs)
                response = self._stub.NodePrepareResources(request, timeout=self.timeout)
            else:
                request_beta = dra_v1beta1_pb2.NodePrepareResourcesRequest(claims=refs)
                response = self._stub.NodePrepareResources(request_beta, timeout=self.timeout)
        problems = self._check_keys(_PREPARE, claims, set(response.claims))
        out: dict[str, list[PreparedDevice]] = {}
        for c in claims:
            result = response.claims.get(c.uid)
            if result is None:
                continue
            if result.error:
                problems.append(f"driver {self.driver} failed to prepare claim {c}: {result.error}")
                continue
            out[c.uid] = [self._device(d) for d in result.devices]
        if problems:
            raise PrepareError("; ".join(problems))
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> None:
        """Unprepare ``claims`` with one call; PrepareError naming claims and driver on any failure."""
        refs = [c._asdict() for c in claims]
        response: _UnprepareResponse
        with self._call(_UNPREPARE, claims):
            if isinstance(self._stub, dra_v1_pb2_grpc.DRAPluginStub):
                request = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=refs)
                response = self._stub.NodeUnprepareResources(request, timeout=self.timeout)
            else:
                request_beta = dra_v1beta1_pb2.NodeUnprepareResourcesRequest(claims=refs)
                response = self._stub.NodeUnprepareResources(request_beta, timeout=self.timeout)
        problems = self._check_keys(_UNPREPARE, claims, set(response.claims))
        for c in claims:
            result = response.claims.get(c.uid)
            if result is not None and result.error:
                problems.append(f"driver {self.driver} failed to unprepare claim {c}: {result.error}")
        if problems:
            raise PrepareError("; ".join(problems))

    @contextlib.contextmanager
    def _call(self, method: str, claims: Sequence[ClaimRef]) -> Iterator[None]:
        """Around one raw call: a gRPC error (an answer that does not parse is one) fails every claim."""
        try:
            yield
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            details = e.details() if isinstance(e, grpc.Call) else str(e)
            names = ", ".join(map(str, claims))
            raise PrepareError(
                f"{method} of driver {self.driver} failed for claims {names}: "
                f"{code.name if code is not None else 'UNKNOWN'}: {details}"
            ) from e

    def _check_keys(self, method: str, claims: Sequence[ClaimRef], answered: set[str]) -> list[str]:
        problems = [
            f"claim {c} is missing from the {method} response of driver {self.driver}"
            for c in claims
            if c.uid not in answered
        ]
        for uid in sorted(answered - {c.uid for c in claims}):
            problems.append(f"the {method} response of driver {self.driver} names unknown claim uid {uid}")
        return problems

    def _device(self, d: dra_v1_pb2.Device | dra_v1beta1_pb2.Device) -> PreparedDevice:
        return PreparedDevice(
            driver=self.driver,
            pool=d.pool_name,
            device=d.device_name,
            request_names=tuple(d.request_names),
            cdi_device_ids=tuple(d.cdi_device_ids),
            share_id=d.share_id if isinstance(d, dra_v1_pb2.Device) and d.HasField("share_id") else None,
        )
