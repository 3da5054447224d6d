"""The companion NIC driver's one concept: its devices, the slice that publishes them, and the
DRAPlugin and Registration services that prepare them."""

from __future__ import annotations

import json
import logging
import os
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

import draproto
from draproto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from draproto.rest import Rest, RestError, q

__all__ = [
    "CDI_KIND",
    "DEFAULT_DRIVER",
    "NUMA_NODE",
    "NicDriver",
    "nic_names",
    "numa_node_of",
    "slice_manifest",
]

log = logging.getLogger(__name__)

DEFAULT_DRIVER = "nic.dra-conformance.io"
"""The companion's driver name unless ``--driver-name`` says otherwise."""

CDI_KIND = "nic.dra-conformance.io/nic"
"""The CDI kind of the prepared NICs (``<kind>=<claim uid>-<device>``)."""

NUMA_NODE = "resource.kubernetes.io/numaNode"
"""The standard attribute of the NUMA node a device is closest to (KEP-6072)."""

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def nic_names(count: int) -> list[str]:
    """The device names of ``count`` NICs."""
    return [f"nic-{i}" for i in range(count)]


def numa_node_of(index: int, numa_nodes: int) -> int:
    """The NUMA node of NIC ``index``: the NICs are spread over the nodes in turn."""
    return index % max(numa_nodes, 1)


def slice_manifest(driver: str, node: str, node_uid: str, count: int, numa_nodes: int) -> dict[str, Any]:
    """The one ResourceSlice of ``node``'s NICs (pool ``node``, owned by its Node)."""
    devices = [
        {
            "name": name,
            "attributes": {
                "index": {"int": i},
                "model": {"string": "fake-nic"},
                NUMA_NODE: {"int": numa_node_of(i, numa_nodes)},
            },
        }
        for i, name in enumerate(nic_names(count))
    ]
    owner = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}", "ownerReferences": owner if node_uid else []},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


class NicDriver:
    """The companion on one node: publish the slice, serve the sockets, prepare from the claims."""

    def __init__(
        self,
        rest: Rest,
        *,
        driver: str,
        node: str,
        registry_dir: Path,
        plugin_dir: Path,
        cdi_dir: Path,
        nics: int,
        numa_nodes: int,
    ) -> None:
        self.rest = rest
        self.driver = driver
        self.node = node
        self.registry_dir = registry_dir
        self.plugin_dir = plugin_dir
        self.cdi_dir = cdi_dir
        self.nics = frozenset(nic_names(nics))
        self._count = nics
        self._numa_nodes = numa_nodes
        self._server: grpc.Server | None = None

    @property
    def registration_socket(self) -> Path:
        """Where the kubelet (or node agent) finds the companion."""
        return self.registry_dir / f"{self.driver}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        """Where DRAPlugin is served."""
        return self.plugin_dir / "dra.sock"

    def publish(self) -> None:
        """Create the node's slice, or replace what is there with it."""
        node = self.rest.get(f"/api/v1/nodes/{q(self.node)}") or {}
        body = slice_manifest(
            self.driver,
            self.node,
            str((node.get("metadata") or {}).get("uid", "")),
            self._count,
            self._numa_nodes,
        )
        name = body["metadata"]["name"]
        current = self.rest.get(f"{SLICES}/{q(name)}")
        if current is None:
            self.rest.send("POST", SLICES, body=body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.rest.send("PUT", f"{SLICES}/{q(name)}", body=body)
        log.info("published", extra={"slice": name, "devices": self._count})

    def start(self) -> None:
        """Serve the DRAPlugin socket, then the registration socket (registration last: once the
        kubelet sees it, the plugin must answer)."""
        for d in (self.registry_dir, self.plugin_dir, self.cdi_dir):
            d.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_Plugin(self, dra_v1_pb2), server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_Plugin(self, dra_v1beta1_pb2), server)  # type: ignore[arg-type]
        self.dra_socket.unlink(missing_ok=True)
        server.add_insecure_port(f"unix://{self.dra_socket}")
        registration = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        registration_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), registration)
        self.registration_socket.unlink(missing_ok=True)
        registration.add_insecure_port(f"unix://{self.registration_socket}")
        server.start()
        registration.start()
        self._server, self._registration = server, registration

    def stop(self) -> None:
        """Stop serving and remove the sockets (the slice stays: the node still has the NICs)."""
        for s in (getattr(self, "_registration", None), self._server):
            if s is not None:
                s.stop(1.0).wait()
        self.registration_socket.unlink(missing_ok=True)
        self.dra_socket.unlink(missing_ok=True)

    def _spec_path(self, uid: str) -> Path:
        return self.cdi_dir / f"{CDI_KIND.replace('/', '-')}-{uid}.json"

    def prepare(self, namespace: str, name: str, uid: str) -> list[tuple[str, str, list[str]]]:
        """Prepare the claim's NICs of this driver and node; (request, device, CDI ids) of each.
        Raises ``ValueError`` naming what is wrong with the claim."""
        claim = self.rest.get(f"/apis/resource.k8s.io/v1/namespaces/{q(namespace)}/resourceclaims/{q(name)}")
        if claim is None or (claim.get("metadata") or {}).get("uid") != uid:
            raise ValueError(f"claim {namespace}/{name} ({uid}) not found")
        results = [
            r
            for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            )
            or []
            if r.get("driver") == self.driver
        ]
        if not results:
            raise ValueError(f"claim {namespace}/{name}: no device of driver {self.driver} is allocated")
        answered = []
        devices = []
        for r in results:
            device, pool, request = str(r.get("device")), str(r.get("pool")), str(r.get("request"))
            if pool != self.node or device not in self.nics:
                raise ValueError(
                    f"claim {namespace}/{name}: device {pool}/{device} is not a NIC of {self.node}"
                )
            cdi_name = f"{uid}-{device}"
            env = f"DRA_NIC_{device.upper().replace('-', '_')}={device}"
            devices.append({"name": cdi_name, "containerEdits": {"env": [env]}})
            answered.append((request.split("/", maxsplit=1)[0], device, [f"{CDI_KIND}={cdi_name}"]))
        spec = {"cdiVersion": "0.5.0", "kind": CDI_KIND, "devices": devices}
        path = self._spec_path(uid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(spec))
        os.replace(tmp, path)
        log.info("prepared", extra={"claim": f"{namespace}/{name}", "devices": [d for _, d, _ in answered]})
        return answered

    def unprepare(self, uid: str) -> None:
        """Remove the claim's CDI spec (nothing to do when there is none)."""
        self._spec_path(uid).unlink(missing_ok=True)


class _Registration(registration_pb2_grpc.RegistrationServicer):
    def __init__(self, nic: NicDriver) -> None:
        self._nic = nic

    def GetInfo(self, request: Any, context: Any) -> Any:
        return registration_pb2.PluginInfo(
            type=draproto.DRA_PLUGIN_TYPE,
            name=self._nic.driver,
            endpoint=str(self._nic.dra_socket.absolute()),
            supported_versions=[draproto.DRA_V1, draproto.DRA_V1BETA1],
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if not request.plugin_registered:
            log.error("the kubelet refused the registration", extra={"error": request.error})
        else:
            # a kubelet that (re)starts deletes every slice of its node before it registers the
            # plugins again (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go, wipeResourceSlices):
            # publish the slice once more
            try:
                self._nic.publish()
            except (OSError, RestError) as e:
                log.error("publishing the slice after registration failed", extra={"error": str(e)})
        return registration_pb2.RegistrationStatusResponse()


class _Plugin(dra_v1_pb2_grpc.DRAPluginServicer):
    """DRAPlugin of one protocol version (the v1beta1 service has the same methods)."""

    def __init__(self, nic: NicDriver, pb2: ModuleType) -> None:
        self._nic = nic
        self._pb2 = pb2

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = self._pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            entry = response.claims[claim.uid]
            try:
                for req, device, ids in self._nic.prepare(claim.namespace, claim.name, claim.uid):
                    entry.devices.append(
                        self._pb2.Device(
                            request_names=[req],
                            pool_name=self._nic.node,
                            device_name=device,
                            cdi_device_ids=ids,
                        )
                    )
            except (ValueError, RestError, OSError) as e:
                entry.error = str(e)
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = self._pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            entry = response.claims[claim.uid]
            try:
                self._nic.unprepare(claim.uid)
            except OSError as e:
                entry.error = str(e)
        return response
