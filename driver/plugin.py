"""The kubelet plugin: registration and DRA services over unix sockets.

Two gRPC servers, as the kubelet expects them:

- ``<registry-dir>/<driver>-reg.sock``: ``pluginregistration.Registration`` (``GetInfo``,
  ``NotifyRegistrationStatus``). The kubelet finds it by watching the directory.
- ``<plugin-dir>/dra.sock``: ``DRAPlugin`` ``v1`` and ``v1beta1`` (same logic, ``v1beta1``
  lacks ``share_id``), and, with health on, ``DRAResourceHealth`` ``v1`` and ``v1alpha1``.

The DRA socket is up before the registration socket appears, so a kubelet that sees the
plugin can call it at once. Stopping removes the registration socket first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
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
from driver.claims import is_extended_resource_claim
from driver.errors import ClaimError, PrepareError
from driver.healthstream import HealthSource, services
from driver.settings import Settings
from driver.state import ClaimRef, DeviceState

__all__ = ["PluginServer", "slices_left_to", "supported_versions"]

log = logging.getLogger(__name__)

WRONG_POOL_SUFFIX = "-wrong"
SOCKET_MODE = 0o600


def supported_versions(settings: Settings) -> list[str]:
    """``PluginInfo.supported_versions``: DRA v1 first; health versions only with health on."""
    versions = [draproto.DRA_V1, draproto.DRA_V1BETA1]
    if settings.breaks("unserved-dra-version"):  # the kubelet picks the first it knows: v1beta1
        versions = [draproto.DRA_V1BETA1, draproto.DRA_V1]
    if settings.health.enabled:
        versions += [draproto.HEALTH_V1, draproto.HEALTH_V1ALPHA1]
    return versions


class _Registration(registration_pb2_grpc.RegistrationServicer):
    def __init__(self, settings: Settings, registered: threading.Event) -> None:
        self._settings = settings
        self._registered = registered
        self._refused = False
        """Whether a kubelet refused the registration once (``refuse-after-failed-registration``)."""

    def GetInfo(self, request: Any, context: Any) -> Any:
        versions = supported_versions(self._settings)
        if self._settings.breaks("refuse-reregister") and self._registered.is_set():
            versions = []  # a kubelet that registers the plugin again finds no version it speaks
        return registration_pb2.PluginInfo(
            type=draproto.DRA_PLUGIN_TYPE,
            name=self._settings.driver_name,
            endpoint=str(self._settings.dra_socket.absolute()),
            supported_versions=versions,
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if self._refused and self._settings.breaks("refuse-after-failed-registration"):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the registration failed before; not serving")
        if request.plugin_registered:
            log.info("registered with the kubelet", extra={"driver": self._settings.driver_name})
            self._registered.set()
        else:
            log.error("the kubelet refused the registration", extra={"error": request.error})
            self._registered.clear()
            self._refused = True
            if self._settings.breaks("whole-call-errors"):  # as kubeletplugin's registrationServer
                context.abort(grpc.StatusCode.UNKNOWN, f"failed registration process: {request.error}")
        return registration_pb2.RegistrationStatusResponse()


_PREPARING = threading.Lock()
"""Held by the prepare under way (switch ``refuse-concurrent-prepare``)."""


class _DRAPlugin:
    """One DRAPlugin servicer for a protocol version; the logic lives in ``DeviceState``."""

    def __init__(self, pb2: ModuleType, state: DeviceState, settings: Settings) -> None:
        self._pb2 = pb2
        self._state = state
        self._settings = settings
        self._share_ids = pb2 is dra_v1_pb2

    def _batch(self, claims: Sequence[Any]) -> list[Any]:
        if self._settings.breaks("drop-claim-from-batch") and len(claims) >= 2:
            return list(claims[:-1])
        return list(claims)

    def _device(self, device: PreparedDevice) -> Any:
        pool = device.pool + (WRONG_POOL_SUFFIX if self._settings.breaks("wrong-pool-name") else "")
        fields: dict[str, Any] = {
            "request_names": device.request_names,
            "pool_name": pool,
            "device_name": device.device,
            "cdi_device_ids": device.cdi_ids,
        }
        if self._share_ids and device.share_id and not self._settings.breaks("drop-share-id"):
            fields["share_id"] = device.share_id
        return self._pb2.Device(**fields)

    def _refs(self, request: Any, response: Any) -> list[ClaimRef]:
        """The request's claims, each UID once.

        A UID named twice for the same claim is handled once; named for two different claims,
        neither is handled and the UID's answer says why.
        """
        refs: dict[str, ClaimRef] = {}
        twice: set[str] = set()
        for claim in self._batch(request.claims):
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
        if not self._settings.breaks("refuse-concurrent-prepare"):
            return self._prepare(request, context)
        if not _PREPARING.acquire(blocking=False):  # a try-lock where the call should wait its turn
            response = self._pb2.NodePrepareResourcesResponse()
            for claim in request.claims:
                busy = f"claim {claim.namespace}/{claim.name}: busy, another prepare runs"
                response.claims[claim.uid].error = busy
            return response
        try:
            return self._prepare(request, context)
        finally:
            _PREPARING.release()

    def _prepare(self, request: Any, context: Any) -> Any:
        if self._settings.breaks("forget-unbatched-claims"):  # as if each call named every claim
            for uid in set(self._state.prepared()) - {c.uid for c in request.claims}:
                self._state.specs.remove(uid)
        if self._settings.breaks("whole-call-errors"):
            self._read_all_or_abort(request.claims, context)
        response = self._pb2.NodePrepareResourcesResponse()
        refs = self._refs(request, response)
        outcomes = self._state.prepare_batch(refs)
        for ref in refs:
            outcome = outcomes[ref.uid]
            entry = response.claims[ref.uid]
            if isinstance(outcome, Exception) and not self._answered_prepared(ref):
                self._fail(entry, ref, "prepare", outcome)
            elif not isinstance(outcome, Exception) and not self._ignored(ref):
                entry.devices.extend(self._device(d) for d in outcome)
        return response

    def _read_all_or_abort(self, claims: Sequence[Any], context: Any) -> None:
        """``whole-call-errors``: as kubeletplugin's ``getResourceClaims``, read every claim before
        anything is prepared and fail the whole call (a gRPC error) at the first that does not exist,
        is not allocated or was re-created."""
        for claim in claims:
            ref = ClaimRef(namespace=claim.namespace, uid=claim.uid, name=claim.name)
            try:
                found = self._state.claims.get_claim(ref.namespace, ref.name)
            except ClaimError as e:
                why: str | None = f"retrieve claim {ref}: {e}"
            else:
                if found is None:
                    why = f"retrieve claim {ref}: not found"
                elif not (found.get("status") or {}).get("allocation"):
                    why = f"claim {ref} not allocated"
                elif (found.get("metadata") or {}).get("uid") != ref.uid:
                    why = f"claim {ref} got replaced"
                else:
                    why = None
            if why is not None:
                context.abort(grpc.StatusCode.UNKNOWN, f"get resource claims: {why}")

    def _answered_prepared(self, ref: ClaimRef) -> bool:
        """Whether a claim that failed is answered prepared, with no devices (switches
        ``prepare-missing-claims``: its ResourceClaim does not exist; ``prepare-unallocated-claims``:
        it is not allocated)."""
        missing = self._settings.breaks("prepare-missing-claims")
        unallocated = self._settings.breaks("prepare-unallocated-claims")
        if not (missing or unallocated):
            return False
        try:
            claim = self._state.claims.get_claim(ref.namespace, ref.name)
        except ClaimError:
            return False
        if claim is None:
            return missing
        return unallocated and not (claim.get("status") or {}).get("allocation")

    def _ignored(self, ref: ClaimRef) -> bool:
        """Whether the answer leaves out a prepared claim's devices (switch
        ``ignore-extended-resource-claims``: a claim the scheduler made for extended resources)."""
        if not self._settings.breaks("ignore-extended-resource-claims"):
            return False
        try:
            claim = self._state.claims.get_claim(ref.namespace, ref.name)
        except ClaimError:
            return False
        return claim is not None and is_extended_resource_claim(claim)

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

    def __init__(self, state: DeviceState, settings: Settings) -> None:
        super().__init__(dra_v1_pb2, state, settings)


class _DRAPluginV1beta1(_DRAPlugin, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    """DRAPlugin ``v1beta1``."""

    def __init__(self, state: DeviceState, settings: Settings) -> None:
        super().__init__(dra_v1beta1_pb2, state, settings)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class PluginServer:
    """Both gRPC servers of the kubelet plugin; ``start()`` then ``stop()``."""

    def __init__(
        self, settings: Settings, state: DeviceState, health: HealthSource | None = None, *, workers: int = 16
    ) -> None:
        self.settings = settings
        self.state = state
        self.health = health
        self.registered = threading.Event()
        """Set once the kubelet confirmed the registration."""
        self._stopping = threading.Event()
        self._workers = workers
        self._dra: grpc.Server | None = None
        self._reg: grpc.Server | None = None

    def _server(self, path: Path) -> grpc.Server:
        path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        _unlink(path)  # a stale socket of a previous run would make bind fail
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="grpc"))
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
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1(self.state, settings), dra)
        if not settings.breaks("unserved-dra-version"):  # GetInfo still lists it, first
            dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPluginV1beta1(self.state, settings), dra)
        if settings.health.enabled and self.health is not None:
            v1, v1alpha1 = services(
                self.health,
                settings.pool_name,
                self._stopping,
                silent=settings.breaks("no-health"),
                resend_seconds=settings.health.resend_seconds,
            )
            health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(v1, dra)
            if not settings.breaks("unserved-health-version"):  # GetInfo still advertises it
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
