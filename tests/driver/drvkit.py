"""Helpers for the driver's own tests: a node with temp dirs, a small inventory, in-memory claims.

No NVML and no API server here: the inventory is built by hand, partitions are faked, and
claims come from ``MemoryClaimSource``. gRPC and files are real.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc

from draproto import dra_v1_pb2, dra_v1_pb2_grpc
from driver.breaking import interceptors
from driver.breaking_cdi import spec_store
from driver.claims import MemoryClaimSource
from driver.inventory import DeviceInfo, Inventory, MigProfile, Placement
from driver.plugin import PluginServer
from driver.settings import BackendSettings, KubeletSettings, Settings
from driver.state import DeviceState

DRIVER = "gpu.dra-conformance.io"
NODE = "node-a"

PROFILE_3G = MigProfile(
    id=9, index=2, name="3g.71gb", slices=3, instance_count=2, memory_bytes=71168 * 2**20,
    multiprocessors=60, copy_engines=3, decoders=3, encoders=0, jpeg_engines=3, ofa_engines=0,
    placements=(Placement(0, 4), Placement(4, 4)),
)  # fmt: skip


def gpu(index: int) -> DeviceInfo:
    """A whole GPU ``gpu-<index>``."""
    return DeviceInfo(
        name=f"gpu-{index}", kind="gpu", uuid=f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        parent_uuid=None, index=index, minor=index, attributes={"type": "gpu"}, capacity={"memory": 2**30},
    )  # fmt: skip


def partition(index: int, start: int) -> DeviceInfo:
    """A 3g partition of GPU ``index`` at memory slice ``start``."""
    parent = gpu(index)
    return DeviceInfo(
        name=f"gpu-{index}-part-3g71gb-{start}", kind="partition", uuid=None, parent_uuid=parent.uuid,
        index=index, minor=index, attributes={"type": "mig"}, capacity={"memory": PROFILE_3G.memory_bytes},
        profile=PROFILE_3G, placement=Placement(start, 4),
    )  # fmt: skip


def inventory() -> Inventory:
    """Four whole GPUs and two partitions of a fifth."""
    devs = [gpu(i) for i in range(4)] + [partition(4, 0), partition(4, 4)]
    return Inventory(devices={d.name: d for d in devs})


class FakePartitioner:
    """Records partition creation; fails on demand."""

    def __init__(self) -> None:
        self.live: dict[str, str] = {}
        self.fail: str | None = None

    def prepare(self, info: DeviceInfo) -> str:
        if self.fail:
            from driver.errors import DeviceError

            raise DeviceError(self.fail)
        return self.live.setdefault(info.name, f"MIG-{uuidlib.uuid4()}")

    def unprepare(self, info: DeviceInfo) -> None:
        self.live.pop(info.name, None)

    def exists(self, info: DeviceInfo) -> str | None:
        return self.live.get(info.name)


def result(request: str, device: str, **extra: Any) -> dict[str, Any]:
    """One allocation result for this driver on this node's pool."""
    return {"request": request, "driver": DRIVER, "pool": NODE, "device": device, **extra}


def opaque(
    parameters: Mapping[str, Any], source: str = "FromClaim", requests: Sequence[str] = ()
) -> dict[str, Any]:
    """One ``status.allocation.devices.config`` entry for this driver."""
    entry: dict[str, Any] = {"source": source, "opaque": {"driver": DRIVER, "parameters": dict(parameters)}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def make_claim(
    name: str,
    results: Sequence[Mapping[str, Any]],
    configs: Sequence[Mapping[str, Any]] = (),
    *,
    namespace: str = "default",
    uid: str | None = None,
) -> dict[str, Any]:
    """An allocated ResourceClaim as API JSON."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuidlib.uuid4())},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {"devices": {"results": list(results), "config": list(configs)}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": str(uuidlib.uuid4())}],
        },
    }


class MemoryPodSource:
    """Pods held in memory, by (namespace, name): what the pod switches of ``driver.consumers`` read."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Mapping[str, Any]] = {}

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.pods.get((namespace, name))


def make_pod(
    name: str, claims: Mapping[str, str], uses: Sequence[str], namespace: str = "default"
) -> dict[str, Any]:
    """A pod whose ``spec.resourceClaims`` maps entry names to claims; its one container uses ``uses``."""
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuidlib.uuid4())},
        "spec": {
            "resourceClaims": [
                {"name": entry, "resourceClaimName": claim} for entry, claim in claims.items()
            ],
            "containers": [{"name": "ctr", "resources": {"claims": [{"name": u} for u in uses]}}],
        },
    }


@dataclass
class Node:
    """One driver instance under test, with its dirs and seams."""

    root: Path
    settings: Settings
    claims: MemoryClaimSource
    partitioner: FakePartitioner
    inventory: Inventory
    boot_id: str = "boot-1"
    servers: list[PluginServer] = field(default_factory=list)
    pods: MemoryPodSource = field(default_factory=MemoryPodSource)

    def state(self, **changes: Any) -> DeviceState:
        """A fresh ``DeviceState`` over the node's dirs (a restart, when called again), its CDI specs
        wrapped as ``driver.__main__`` wraps them when a rule-breaking switch is on."""
        settings = replace(self.settings, **changes) if changes else self.settings
        return DeviceState(
            settings,
            self.inventory,
            self.claims,
            partitioner=self.partitioner,
            boot_id=self.boot_id,
            pods=self.pods,
            specs=spec_store(settings),
        )

    def serve(self, state: DeviceState | None = None, **kwargs: Any) -> PluginServer:
        """Start the plugin's gRPC servers, wrapped as ``driver.__main__`` wraps them when a
        rule-breaking switch is on; stopped at teardown."""
        state = state or self.state()
        server = PluginServer(self.settings, state, interceptors=interceptors(self.settings, state), **kwargs)
        server.start()
        self.servers.append(server)
        return server

    def channel(self, path: Path | None = None) -> grpc.Channel:
        """A channel to the DRA socket (or another socket)."""
        return grpc.insecure_channel(f"unix://{path or self.settings.dra_socket}")

    def put(self, claim: dict[str, Any]) -> dict[str, Any]:
        """Store a claim in the in-memory API."""
        self.claims.put(claim)
        return claim


def node_settings(root: Path, **changes: Any) -> Settings:
    """Settings for a node rooted at ``root``."""
    settings = Settings(
        node_name=NODE,
        driver_name=DRIVER,
        kubelet=KubeletSettings(registry_dir=root / "reg", plugin_dir=root / "plugin", cdi_dir=root / "cdi"),
        backend=BackendSettings(kind="fake", node_name=NODE),
    )
    return replace(settings, **changes)


def _claims(pb2: Any, claims: Sequence[Mapping[str, Any]]) -> list[Any]:
    return [
        pb2.Claim(namespace=c["metadata"]["namespace"], uid=c["metadata"]["uid"], name=c["metadata"]["name"])
        for c in claims
    ]


def prepare(
    node: Node, *claims: Mapping[str, Any], pb2: Any = dra_v1_pb2, grpc_mod: Any = dra_v1_pb2_grpc
) -> Any:
    """``NodePrepareResources`` over the node's DRA socket (v1 unless other modules are given)."""
    request = pb2.NodePrepareResourcesRequest(claims=_claims(pb2, claims))
    return grpc_mod.DRAPluginStub(node.channel()).NodePrepareResources(request, timeout=10)


def unprepare(
    node: Node, *claims: Mapping[str, Any], pb2: Any = dra_v1_pb2, grpc_mod: Any = dra_v1_pb2_grpc
) -> Any:
    """``NodeUnprepareResources`` over the node's DRA socket (v1 unless other modules are given)."""
    request = pb2.NodeUnprepareResourcesRequest(claims=_claims(pb2, claims))
    return grpc_mod.DRAPluginStub(node.channel()).NodeUnprepareResources(request, timeout=10)
