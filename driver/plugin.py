"""The kubelet plugin: registration and DRA services over unix sockets.

Two gRPC servers, as the kubelet expects them:

- ``<registry-dir>/<driver>-reg.sock``: ``pluginregistration.Registration`` (``GetInfo``,
  ``NotifyRegistrationStatus``). The kubelet finds it by watching the directory.
- ``<plugin-dir>/dra.sock``: ``DRAPlugin`` ``v1`` and ``v1beta1`` (same logic, ``v1beta1``
  lacks ``share_id``), and, with health on, ``DRAResourceHealth`` ``v1`` and ``v1alpha1``.

The DRA socket is up before the registration socket appears, so a kubelet that sees the
plugin can call it at once. Stopping removes the registration socket first.

Interceptors given to ``PluginServer`` wrap the servicers of both sockets (the rule-breaking
switches of ``driver.breaking`` are one, for tests of the suite only).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable
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
    health_v1_pb2_grpc,
    health_v1alpha1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from driver._files import PRIVATE_DIR_MODE, private_dir
from driver.checkpoint import PreparedDevice
from driver.errors import PrepareError
from driver.healthstream import HealthSource, services
from driver.settings import Settings
from driver.state import ClaimRef, DeviceState

__all__ = ["PluginServer", "slices_left_to", "supported_versions"]

log = logging.getLogger(__name__)

SOCKET_MODE = 0o600


def supported_versions(settings: Settings) -> list[str]:
    """``PluginInfo.supported_versions``: DRA v1 first; health versions only with health on."""
    versions = [draproto.DRA_V1, draproto.DRA_V1BETA1]
    if settings.health.enabled:
        versions += [draproto.HEALTH_V1, draproto.HEALTH_V1ALPHA1]
    return versions


class _Registration(registration_pb2_grpc.RegistrationServicer):
    def __init__(self, settings: Settings, registered: threading.Event) -> None:
        self._settings = settings
        self._registered = registered

    def GetInfo(self, request: Any, context: Any) -> Any:
        return registration_pb2.PluginInfo(
            type=draproto.DRA_PLUGIN_TYPE,
            name=self._settings.driver_name,
            endpoint=str(self._settings.dra_socket.absolute()),
            supported_versions=supported_versions(self._settings),
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            log.info("registered with the kubelet", extra={"driver": self._settings.driver_name})
            self._registered.set()
        else:
            log.error("the kubelet refused the registration", extra={"error": request.error})
            self._registered.clear()
        return registration_pb2.RegistrationStatusResponse()


class _DRAPlugin:
    """One DRAPlugin servicer for a protocol version; the logic lives in ``DeviceState``."""

    def __init__(self, pb2: ModuleType, state: DeviceState) -> None:
        self._pb2 = pb2
        self._state = state
        self._share_ids = pb2 is dra_v1_pb2

    def _device(self, device: PreparedDevice) -> Any:
        fields: dict[str, Any] = {
            "request_names": device.request_names,
            "pool_name": device.pool,
            "device_name": device.device,
            "cdi_device_ids": device.cdi_ids,
        }
        if self._share_ids and device.share_id:
            fields["share_id"] = device.share_id
        return self._pb2.Device(**fields)

    def _refs(self, request: Any, response: Any) -> list[ClaimRef]:
        """The request's claims, each UID once.

        A UID named twice for the same claim is handled once; named for two different claims,
        neither is handled and the UID's answer says why.
        """
        refs: dict[str, ClaimRef] = {}
        twice: set[str] = set()
        for claim in request.claims:
            ref = ClaimRef(namespace=claim.namespace, uid=claim.uid, name=claim.name)
            if refs.setdefault(claim.uid, ref) != ref:
                twice.add(claim.uid)
                response.claims[
                    claim.uid
                ].error = f"claim {refs[claim.uid]}: its UID appears twice in the request, also for {ref}"
        return [ref for uid, ref in refs.items() if uid not in twice]

    @staticmethod
    def _fail(entry: Any, ref: ClaimRef, verb: str, error: Exception) -> None:
        """A claim's failure goes in its ``error`` only; what is not a ``PrepareError`` is a bug."""
        if isinstance(error, PrepareError):
            log.warning("claim failed", extra={"call": verb, "claim": ref.uid, "error": str(error)})
            entry.error = str(error)
        else:
            log.error("claim failed unexpectedly", extra={"call": verb, "claim": ref.uid}, exc_info=error)
            entry.error = f"claim {ref}: internal driver error: {error!r}"

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = self._pb2.NodePrepareResourcesResponse()
        refs = self._refs(request, response)
        outcomes = self._state.prepare_batch(refs)
        for ref in refs:
            outcome = outcomes[ref.uid]
            entry = response.claims[ref.uid]
            if isinstance(outcome, Exception):
                self._fail(entry, ref, "prepare", outcome)
            else:
                entry.devices.extend(self._device(d) for d in outcome)
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = self._pb2.NodeUnprepareResourcesResponse()
        refs = self._refs(request, response)
        errors = self._state.unprepare_batch(refs)
        for ref in refs:
            error = errors[ref.uid]
            if error is not None:
                self._fail(response.claims[ref.uid], ref, "unprepare", error)
            else:
                response.claims[ref.uid].error = ""  # the claim is in the answer, without an error
        return response


class _DRAPluginV1(_DRAPlugin, dra_v1_pb2_grpc.DRAPluginServicer):
    """DRAPlugin ``v1`` (answers carry ``share_id``)."""

    def __init__(self, state: DeviceState) -> None:
        super().__init__(dra_v1_pb2, state)


class _DRAPluginV1beta1(_DRAPlugin, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    """DRAPlugin ``v1beta1``."""

    def __init__(self, state: DeviceState) -> None:
        super().__init__(dra_v1beta1_pb2, state)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class PluginServer:
    """Both gRPC servers of the kubelet plugin; ``start()`` then ``stop()``.

    ``interceptors`` wrap the servicers of both servers, first outermost (as kubeletplugin's
    ``GRPCInterceptor``).
    """

    def __init__(
        self,
        settings: Settings,
        state: DeviceState,
        health: HealthSource | None = None,
        *,
        workers: int = 16,
        interceptors: Iterable[grpc.ServerInterceptor] = (),  # type: ignore[type-arg]
    ) -> None:
        self.settings = settings
        self.state = state
        self.health = health
        self.interceptors = list(interceptors)
        self.registered = threading.Event()
        """Set once the kubelet confirmed the registration."""
        self._stopping = threading.Event()
        self._workers = workers
        self._dra: grpc.Server | None = None
        self._reg: grpc.Server | None = None

    def _server(self, path: Path) -> grpc.Server:
        path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        _unlink(path)  # a stale socket of a previous run would make bind fail
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="grpc"),
            interceptors=self.interceptors,
        )
        # Only root (the kubelet) may call the driver, whatever umask it was started with: the
        # socket is bound under a strict umask (no moment of a wider mode), then set to 0600.
        old_umask = os.umask(0o077)
        try:
            server.add_insecure_port(f"unix://{path.absolute()}")
        finally:
            os.umask(old_umask)
        os.chmod(path, SOCKET_MODE)
        return server

    def start(self) -> None:
        """Serve the DRA socket, then the registration socket (readiness)."""
        settings = self.settings
        private_dir(settings.kubelet.plugin_dir)
        dra = self._server(settings.dra_socket)
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1(self.state), dra)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1beta1(self.state), dra)
        if settings.health.enabled and self.health is not None:
            v1, v1alpha1 = services(
                self.health,
                settings.pool_name,
                self._stopping,
                silent=settings.breaks("no-health"),
                resend_seconds=settings.health.resend_seconds,
            )
            health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(v1, dra)
            health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(v1alpha1, dra)
        dra.start()
        self._dra = dra
        reg = self._server(settings.registration_socket)
        registration_pb2_grpc.add_RegistrationServicer_to_server(
            _Registration(settings, self.registered), reg
        )
        reg.start()
        self._reg = reg
        log.info(
            "kubelet plugin serving",
            extra={"registration": str(settings.registration_socket), "endpoint": str(settings.dra_socket)},
        )

    def stop(self, grace: float = 2.0) -> None:
        """Stop both servers and remove their sockets; registration goes first."""
        self._stopping.set()
        if self._reg is not None:
            self._reg.stop(grace).wait()
            self._reg = None
        _unlink(self.settings.registration_socket)
        if self._dra is not None:
            self._dra.stop(grace).wait()
            self._dra = None
        _unlink(self.settings.dra_socket)
        log.info("kubelet plugin stopped")


def slices_left_to(settings: Settings) -> list[str]:
    """The registration sockets of other instances of this driver on the node, to which a stopping
    instance leaves its slices (a rolling update: the new one started beside it). None without a pod
    UID, where there is only ever one instance, and under the ``drop-slices-on-update`` switch."""
    if not settings.pod_uid or settings.breaks("drop-slices-on-update"):
        return []
    mine = settings.registration_socket.name
    found = settings.kubelet.registry_dir.glob(f"{settings.driver_name}-*-reg.sock")
    return sorted(p.name for p in found if p.name != mine)
