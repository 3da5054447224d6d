"""The rule-breaking switches of the kubelet plugin, as a gRPC interceptor around its servicers.

The plugin (``driver.plugin``) serves the DRA protocol as it should; the switches that break one
of its rules by changing what a call asks or answers live here, as Kubernetes' own test driver
wraps its servicer (``kubeletplugin.GRPCInterceptor``). ``interceptors(settings, state)`` is
empty unless such a switch is on, so a driver run without switches has no interceptor at all.

Around each call, outermost first:

- ``refuse-concurrent-prepare``: a prepare that arrives while another runs is answered busy;
- ``forget-unbatched-claims``: the CDI specs of prepared claims the call does not name go;
- ``whole-call-errors``: every claim is read first and the whole call fails at the first that
  cannot be read, is not allocated or was re-created; a refused registration is answered with an
  error;
- ``drop-claim-from-batch``: a request of two or more claims loses its last one;
- the answer: ``prepare-missing-claims`` and ``prepare-unallocated-claims`` turn such a claim's
  error into an empty success, ``ignore-extended-resource-claims`` empties a claim the scheduler
  made for extended resources, ``wrong-pool-name`` and ``drop-share-id`` alter the devices;
- registration: ``unserved-dra-version`` and ``unserved-health-version`` leave a version
  advertised but unserved (``UNIMPLEMENTED``), ``refuse-reregister`` and
  ``refuse-after-failed-registration`` refuse a kubelet that comes again.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import grpc

import draproto
from draproto import dra_v1_pb2, dra_v1beta1_pb2
from driver.claims import is_extended_resource_claim
from driver.errors import ClaimError
from driver.settings import Settings
from driver.state import ClaimRef, DeviceState

__all__ = ["GRPC_SWITCHES", "WRONG_POOL_SUFFIX", "BreakingInterceptor", "interceptors"]

WRONG_POOL_SUFFIX = "-wrong"
"""Appended to the pool of every answered device (``wrong-pool-name``)."""

GRPC_SWITCHES = frozenset(
    {
        "refuse-concurrent-prepare",
        "forget-unbatched-claims",
        "whole-call-errors",
        "drop-claim-from-batch",
        "prepare-missing-claims",
        "prepare-unallocated-claims",
        "ignore-extended-resource-claims",
        "wrong-pool-name",
        "drop-share-id",
        "unserved-dra-version",
        "unserved-health-version",
        "refuse-reregister",
        "refuse-after-failed-registration",
    }
)
"""The switches this interceptor implements."""

_Behavior = Callable[[Any, grpc.ServicerContext], Any]


def interceptors(settings: Settings, state: DeviceState) -> list[BreakingInterceptor]:
    """The ``PluginServer`` interceptors for the switches that are on: none when no switch of
    ``GRPC_SWITCHES`` is."""
    if not settings.break_rules & GRPC_SWITCHES:
        return []
    return [BreakingInterceptor(settings, state)]


def _service(method: str) -> str:
    """``/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources`` -> its service."""
    return method.strip("/").rsplit("/", 1)[0]


def _is(service: str, version: str) -> bool:
    """Whether a service's full name is a ``supported_versions`` entry (``v1beta1.DRAPlugin``)."""
    return service == version or service.endswith("." + version)


class BreakingInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Breaks the plugin's rules whose switches are on, around the servicers of both its sockets.

    One per ``PluginServer``: it keeps what the switches remember of the calls it saw (a prepare
    under way, a refused registration).
    """

    def __init__(self, settings: Settings, state: DeviceState) -> None:
        self._settings = settings
        self._state = state
        self._preparing = threading.Lock()
        """Held by the prepare under way (``refuse-concurrent-prepare``)."""
        self._registered = False
        """Whether the kubelet's last notice confirmed the registration (``refuse-reregister``)."""
        self._refused = False
        """Whether a kubelet refused the registration once (``refuse-after-failed-registration``)."""

    def _breaks(self, rule: str) -> bool:
        return self._settings.breaks(rule)

    def intercept_service(self, continuation: Any, handler_call_details: grpc.HandlerCallDetails) -> Any:
        """The handler of a call, wrapped where a switch changes it; ``None`` for a service left unserved."""
        method = handler_call_details.method
        service = _service(method)
        if (self._breaks("unserved-dra-version") and _is(service, draproto.DRA_V1BETA1)) or (
            self._breaks("unserved-health-version") and _is(service, draproto.HEALTH_V1ALPHA1)
        ):
            return None  # still advertised by GetInfo: the kubelet gets UNIMPLEMENTED
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        name = method.rsplit("/", 1)[-1]
        wrap: Callable[[_Behavior], _Behavior] | None = None
        if _is(service, draproto.DRA_V1) or _is(service, draproto.DRA_V1BETA1):
            pb2 = dra_v1_pb2 if _is(service, draproto.DRA_V1) else dra_v1beta1_pb2
            if name == "NodePrepareResources":
                wrap = functools.partial(self._prepare, pb2=pb2)
            elif name == "NodeUnprepareResources":
                wrap = self._unprepare
        elif service == "pluginregistration.Registration":
            wrap = {"GetInfo": self._get_info, "NotifyRegistrationStatus": self._notify}.get(name)
        if wrap is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            wrap(handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    # DRAPlugin

    def _prepare(self, inner: _Behavior, pb2: ModuleType) -> _Behavior:
        share_ids = pb2 is dra_v1_pb2  # v1beta1 answers have no share_id

        def prepare(request: Any, context: grpc.ServicerContext) -> Any:
            if not self._breaks("refuse-concurrent-prepare"):
                return self._prepare_one(inner, request, context, share_ids=share_ids)
            if not self._preparing.acquire(blocking=False):  # a try-lock where the call should wait its turn
                response = pb2.NodePrepareResourcesResponse()
                for claim in request.claims:
                    busy = f"claim {claim.namespace}/{claim.name}: busy, another prepare runs"
                    response.claims[claim.uid].error = busy
                return response
            try:
                return self._prepare_one(inner, request, context, share_ids=share_ids)
            finally:
                self._preparing.release()

        return prepare

    def _prepare_one(
        self, inner: _Behavior, request: Any, context: grpc.ServicerContext, *, share_ids: bool
    ) -> Any:
        if self._breaks("forget-unbatched-claims"):  # as if each call named every claim
            for uid in set(self._state.prepared()) - {c.uid for c in request.claims}:
                self._state.specs.remove(uid)
        if self._breaks("whole-call-errors"):
            self._read_all_or_abort(request.claims, context)
        batch = self._batch(request)
        response = inner(batch, context)
        for uid, ref in _once(batch.claims).items():
            if uid not in response.claims:
                continue
            entry = response.claims[uid]
            if entry.error:
                if self._answered_prepared(ref):
                    entry.error = ""
            elif self._ignored(ref):
                del entry.devices[:]
        for entry in response.claims.values():
            for device in entry.devices:
                if self._breaks("wrong-pool-name"):
                    device.pool_name += WRONG_POOL_SUFFIX
                if share_ids and self._breaks("drop-share-id"):
                    device.ClearField("share_id")
        return response

    def _unprepare(self, inner: _Behavior) -> _Behavior:
        def unprepare(request: Any, context: grpc.ServicerContext) -> Any:
            return inner(self._batch(request), context)

        return unprepare

    def _batch(self, request: Any) -> Any:
        """``drop-claim-from-batch``: a request of two or more claims without its last one."""
        if not self._breaks("drop-claim-from-batch") or len(request.claims) < 2:
            return request
        trimmed = type(request)()
        trimmed.CopyFrom(request)
        del trimmed.claims[-1]
        return trimmed

    def _read_all_or_abort(self, claims: Any, context: grpc.ServicerContext) -> None:
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
        missing = self._breaks("prepare-missing-claims")
        unallocated = self._breaks("prepare-unallocated-claims")
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
        if not self._breaks("ignore-extended-resource-claims"):
            return False
        try:
            claim = self._state.claims.get_claim(ref.namespace, ref.name)
        except ClaimError:
            return False
        return claim is not None and is_extended_resource_claim(claim)

    # Registration

    def _get_info(self, inner: _Behavior) -> _Behavior:
        def get_info(request: Any, context: grpc.ServicerContext) -> Any:
            info = inner(request, context)
            versions = list(info.supported_versions)
            if self._breaks("unserved-dra-version"):  # the kubelet picks the first it knows: v1beta1
                rest = [v for v in versions if v not in (draproto.DRA_V1, draproto.DRA_V1BETA1)]
                versions = [draproto.DRA_V1BETA1, draproto.DRA_V1, *rest]
            if self._breaks("refuse-reregister") and self._registered:
                versions = []  # a kubelet that registers the plugin again finds no version it speaks
            del info.supported_versions[:]
            info.supported_versions.extend(versions)
            return info

        return get_info

    def _notify(self, inner: _Behavior) -> _Behavior:
        def notify(request: Any, context: grpc.ServicerContext) -> Any:
            if self._refused and self._breaks("refuse-after-failed-registration"):
                context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION, "the registration failed before; not serving"
                )
            answer = inner(request, context)
            self._registered = request.plugin_registered
            if not request.plugin_registered:
                self._refused = True
                if self._breaks("whole-call-errors"):  # as kubeletplugin's registrationServer
                    context.abort(grpc.StatusCode.UNKNOWN, f"failed registration process: {request.error}")
            return answer

        return notify


def _once(claims: Any) -> dict[str, ClaimRef]:
    """The request's claims by UID, without a UID named for two different claims (the plugin
    answers those with an error of their own, which no switch touches)."""
    refs: dict[str, ClaimRef] = {}
    twice: set[str] = set()
    for claim in claims:
        ref = ClaimRef(namespace=claim.namespace, uid=claim.uid, name=claim.name)
        if refs.setdefault(claim.uid, ref) != ref:
            twice.add(claim.uid)
    return {uid: ref for uid, ref in refs.items() if uid not in twice}
