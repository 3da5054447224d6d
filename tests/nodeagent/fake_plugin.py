"""``FakePlugin``: a DRA driver's kubelet plugin over real gRPC, with knobs, for the node agent's tests."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

import draproto
from nodeagent.layout import NodeLayout

Obj = dict[str, Any]


class FakePlugin:
    """A DRA driver's kubelet plugin: registration socket plus DRA (and health) services.

    Behaviour knobs are plain attributes a test sets before or between calls.
    """

    def __init__(
        self,
        root: Path,
        driver: str = "gpu.example.com",
        versions: tuple[str, ...] = (draproto.DRA_V1,),
        *,
        health_versions: tuple[str, ...] = (),
        serve: tuple[str, ...] | None = None,
        endpoint: str | None = None,
        plugin_type: str = draproto.DRA_PLUGIN_TYPE,
        pod_uid: str = "",
    ) -> None:
        self.driver = driver
        self.versions = versions
        self.health_versions = health_versions
        self.serve = serve if serve is not None else tuple(v for v in versions if "DRAPlugin" in v)
        self.plugin_type = plugin_type
        self.reg_socket = NodeLayout(root).registration_socket(driver)
        self.dra_socket = NodeLayout(root).dra_socket(driver)
        if pod_uid:  # socket names of a rolling update (kubeletplugin.RollingUpdate)
            self.reg_socket = NodeLayout(root).registry_dir / f"{driver}-{pod_uid}-reg.sock"
            self.dra_socket = NodeLayout(root).plugin_dir(driver) / f"dra-{pod_uid}.sock"
        self.endpoint = endpoint if endpoint is not None else str(self.dra_socket)
        self.prepare_calls: list[list[tuple[str, str, str]]] = []
        self.unprepare_calls: list[list[tuple[str, str, str]]] = []
        self.prepare_versions: list[str] = []
        self.registration_status: list[tuple[bool, str]] = []
        self.results: dict[str, list[Obj]] = {}
        """Per claim uid: devices ``{request_names, pool, device, cdi}``; default one device."""
        self.fixed_devices: list[Obj] | None = None
        """Devices for every claim without an entry in ``results`` (instead of one per claim uid)."""
        self.claim_errors: dict[str, str] = {}
        self.unprepare_errors: dict[str, str] = {}
        self.fail_with: grpc.StatusCode | None = None
        self.extra_uid: str | None = None
        self.drop_uid: str | None = None
        self.hang = threading.Event()
        self.garbage: bytes | None = None
        """When set before :meth:`start`, the DRA calls answer these raw bytes instead of a message."""
        self.health_queue: queue.Queue[list[tuple[str, str, int]] | None] = queue.Queue()
        self.health_opened: list[str] = []
        self.health_unimplemented = False
        self._server: grpc.Server | None = None

    # -- answers

    def devices_for(self, uid: str) -> list[Obj]:
        """What prepare answers for ``uid``."""
        if uid not in self.results and self.fixed_devices is not None:
            return self.fixed_devices
        return self.results.get(
            uid,
            [
                {
                    "request_names": [],
                    "pool": "pool-a",
                    "device": "gpu-0",
                    "cdi": [f"example.com/gpu=dev-{uid}"],
                }
            ],
        )

    def _prepare(self, pb: Any, version: str, request: Any, context: grpc.ServicerContext) -> Any:
        claims = [(c.namespace, c.uid, c.name) for c in request.claims]
        self.prepare_calls.append(claims)
        self.prepare_versions.append(version)
        if self.hang.is_set():
            while self.hang.is_set() and context.is_active():
                time.sleep(0.05)
        if self.fail_with is not None:
            context.abort(self.fail_with, "injected failure")
        out = pb.NodePrepareResourcesResponse()
        for _, uid, _ in claims:
            if uid == self.drop_uid:
                continue
            if uid in self.claim_errors:
                out.claims[uid].error = self.claim_errors[uid]
                continue
            entry = out.claims[uid]
            for d in self.devices_for(uid):
                entry.devices.append(
                    pb.Device(
                        request_names=d["request_names"],
                        pool_name=d["pool"],
                        device_name=d["device"],
                        cdi_device_ids=d["cdi"],
                    )
                )
        if self.extra_uid:
            out.claims[self.extra_uid].CopyFrom(pb.NodePrepareResourceResponse())
        return out

    def _unprepare(self, pb: Any, request: Any, context: grpc.ServicerContext) -> Any:
        claims = [(c.namespace, c.uid, c.name) for c in request.claims]
        self.unprepare_calls.append(claims)
        if self.fail_with is not None:
            context.abort(self.fail_with, "injected failure")
        out = pb.NodeUnprepareResourcesResponse()
        for _, uid, _ in claims:
            out.claims[uid].error = self.unprepare_errors.get(uid, "")
        return out

    # -- lifecycle

    def start(self) -> FakePlugin:
        """Serve on both sockets."""
        self.reg_socket.parent.mkdir(parents=True, exist_ok=True)
        self.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        plugin = self

        class Registration(draproto.registration_pb2_grpc.RegistrationServicer):
            def GetInfo(self, request: Any, context: Any) -> Any:
                return draproto.registration_pb2.PluginInfo(
                    type=plugin.plugin_type,
                    name=plugin.driver,
                    endpoint=plugin.endpoint,
                    supported_versions=list(plugin.versions),
                )

            def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
                plugin.registration_status.append((request.plugin_registered, request.error))
                return draproto.registration_pb2.RegistrationStatusResponse()

        draproto.registration_pb2_grpc.add_RegistrationServicer_to_server(Registration(), server)
        for version, pb, mod in (
            (draproto.DRA_V1, draproto.dra_v1_pb2, draproto.dra_v1_pb2_grpc),
            (draproto.DRA_V1BETA1, draproto.dra_v1beta1_pb2, draproto.dra_v1beta1_pb2_grpc),
        ):
            if version not in self.serve:
                continue
            if self.garbage is not None:
                server.add_generic_rpc_handlers((_GarbageHandler(self.garbage),))
                continue

            def make(pb: Any = pb, version: str = version, mod: Any = mod) -> Any:
                class Service(mod.DRAPluginServicer):  # type: ignore[misc]
                    def NodePrepareResources(self, request: Any, context: Any) -> Any:
                        return plugin._prepare(pb, version, request, context)

                    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
                        return plugin._unprepare(pb, request, context)

                return Service()

            mod.add_DRAPluginServicer_to_server(make(), server)
        for version, pb, mod in (
            (draproto.HEALTH_V1, draproto.health_v1_pb2, draproto.health_v1_pb2_grpc),
            (draproto.HEALTH_V1ALPHA1, draproto.health_v1alpha1_pb2, draproto.health_v1alpha1_pb2_grpc),
        ):

            def make_health(pb: Any = pb, version: str = version, mod: Any = mod) -> Any:
                class Health(mod.DRAResourceHealthServicer):  # type: ignore[misc]
                    def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
                        plugin.health_opened.append(version)
                        if plugin.health_unimplemented or version not in plugin.health_versions:
                            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no health here")
                        while context.is_active():
                            try:
                                item = plugin.health_queue.get(timeout=0.1)
                            except queue.Empty:
                                continue
                            if item is None:
                                return
                            msg = pb.NodeWatchResourcesResponse()
                            for pool, device, health in item:
                                msg.devices.append(
                                    pb.DeviceHealth(
                                        device=pb.DeviceIdentifier(pool_name=pool, device_name=device),
                                        health=health,
                                        last_updated_time=int(time.time()),
                                    )
                                )
                            yield msg

                return Health()

            mod.add_DRAResourceHealthServicer_to_server(make_health(), server)
        server.add_insecure_port(f"unix://{self.dra_socket}")
        server.add_insecure_port(f"unix://{self.reg_socket}")
        server.start()
        self._server = server
        return self

    def stop(self, remove_sockets: bool = True) -> None:
        """Stop serving; remove the sockets, as a driver does on shutdown."""
        self.hang.clear()
        self.health_queue.put(None)
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None
        if remove_sockets:
            for s in (self.reg_socket, self.dra_socket):
                s.unlink(missing_ok=True)


if TYPE_CHECKING:  # generic only in the type stubs
    _Handler = grpc.GenericRpcHandler[bytes, bytes]
else:
    _Handler = grpc.GenericRpcHandler


class _GarbageHandler(_Handler):
    """Answers every DRAPlugin call with fixed raw bytes (a plugin that talks garbage)."""

    def __init__(self, garbage: bytes) -> None:
        self.garbage = garbage

    def service(self, handler_call_details: Any) -> Any:
        if ".DRAPlugin/" not in str(handler_call_details.method):
            return None
        # no (de)serializers: the request arrives and the answer leaves as raw bytes
        return grpc.unary_unary_rpc_method_handler(lambda _request, _context: self.garbage)
