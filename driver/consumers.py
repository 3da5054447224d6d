"""The pods that use a claim, for the rule-breaking switches that tie a claim to them.

A correct driver prepares a claim for the node and keeps it until the kubelet unprepares it: which
pods use it, and which of their containers reference it, is the kubelet's business. Three switches
(``driver.breakage``) make the driver look at the pods anyway, the way drivers that key their
state by pod go wrong:

- ``unprepare-with-first-pod``: a claim's CDI spec is removed as soon as the first pod it was
  prepared for is gone, though other pods still use it (SHARE-PODS);
- ``skip-unreferenced-claims``: a claim no container of its pods references is answered with no
  devices and nothing is written (SHARE-UNUSED);
- ``pod-only-reservations``: a claim reserved for something other than a pod (a PodGroup, as the
  kubelet accepts with ``DRAWorkloadResourceClaims`` on) is refused (PREP-PODGROUP-CLAIM).

Nothing here runs unless one of them is on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from draproto.rest import NotFound, Rest, q

__all__ = [
    "POD_SWITCHES",
    "ApiPodSource",
    "FirstPodWatch",
    "PodSource",
    "first_pod",
    "referenced",
    "reserved_for_no_pod",
]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]

POD_SWITCHES = frozenset({"unprepare-with-first-pod", "skip-unreferenced-claims"})
"""The switches that need a ``PodSource``."""


class PodSource(Protocol):
    """Reads one Pod."""

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """The pod as API JSON, or None when it does not exist."""
        ...


class ApiPodSource:
    """Reads Pods from the API server (raw JSON, :mod:`draproto.rest`)."""

    def __init__(self, rest: Rest, timeout_s: float = 10.0) -> None:
        self._rest = rest
        self._timeout = timeout_s

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._rest.send(
                "GET", f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}", timeout=self._timeout
            )
        except NotFound:
            return None


def _pods(claim: Obj) -> list[tuple[str, str]]:
    """(name, uid) of each pod in the claim's ``status.reservedFor``."""
    return [
        (str(r.get("name")), str(r.get("uid")))
        for r in (claim.get("status") or {}).get("reservedFor") or []
        if r.get("resource") == "pods" and not r.get("apiGroup")
    ]


def first_pod(claim: Obj) -> tuple[str, str] | None:
    """(name, uid) of the first pod the claim is reserved for, if any."""
    pods = _pods(claim)
    return pods[0] if pods else None


def reserved_for_no_pod(claim: Obj) -> list[str]:
    """The consumers in the claim's ``status.reservedFor`` (``group/resource name``) when there are
    some and none is a pod (a ``scheduling.k8s.io`` PodGroup, say); else none. Read only by
    ``pod-only-reservations``."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    if not reserved or _pods(claim):
        return []
    return [f"{r.get('apiGroup') or 'core'}/{r.get('resource')} {r.get('name')}" for r in reserved]


def referenced(claim: Obj, pods: PodSource) -> bool:
    """Whether a container (init, app or ephemeral) of a pod the claim is reserved for references it.

    A pod names the claim through ``spec.resourceClaims[].resourceClaimName`` or, for a claim made
    from a template, ``status.resourceClaimStatuses``; containers reference that entry's name.
    """
    meta = claim.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    for pod_name, _uid in _pods(claim):
        pod = pods.get_pod(namespace, pod_name)
        if pod is None:
            continue
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        entries = {
            str(e.get("name"))
            for e in [*(spec.get("resourceClaims") or []), *(status.get("resourceClaimStatuses") or [])]
            if e.get("resourceClaimName") == name
        }
        containers = [
            *(spec.get("initContainers") or []),
            *(spec.get("containers") or []),
            *(spec.get("ephemeralContainers") or []),
        ]
        for container in containers:
            used = {str(c.get("name")) for c in ((container.get("resources") or {}).get("claims") or [])}
            if used & entries:
                return True
    return False


class FirstPodWatch:
    """Calls ``on_gone(claim_uid)`` once the pod a claim was first prepared for is gone (polled)."""

    def __init__(self, pods: PodSource, on_gone: Callable[[str], None], interval_s: float = 0.5) -> None:
        self._pods = pods
        self._on_gone = on_gone
        self._interval = interval_s
        self._watched: dict[str, tuple[str, str, str]] = {}
        """claim uid -> (namespace, pod name, pod uid)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, claim: Obj) -> None:
        """Remember the claim's first pod (nothing when it has none)."""
        pod = first_pod(claim)
        meta = claim.get("metadata") or {}
        if pod is None:
            return
        with self._lock:
            self._watched.setdefault(str(meta.get("uid")), (str(meta.get("namespace")), *pod))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="first-pod-watch", daemon=True)
                self._thread.start()

    def forget(self, claim_uid: str) -> None:
        """Stop watching for a claim (it was unprepared)."""
        with self._lock:
            self._watched.pop(claim_uid, None)

    def stop(self) -> None:
        """End the polling thread."""
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                watched = dict(self._watched)
            for claim_uid, (namespace, name, uid) in watched.items():
                try:
                    pod = self._pods.get_pod(namespace, name)
                except Exception as e:  # the API server is away: look again next time
                    log.warning("cannot read pod", extra={"pod": f"{namespace}/{name}", "error": str(e)})
                    continue
                if pod is not None and (pod.get("metadata") or {}).get("uid") == uid:
                    continue
                self.forget(claim_uid)
                log.warning(
                    "first pod of the claim is gone: removing its CDI spec (unprepare-with-first-pod)",
                    extra={"claim": claim_uid, "pod": f"{namespace}/{name}"},
                )
                self._on_gone(claim_uid)
