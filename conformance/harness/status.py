"""What API objects say of allocation and scheduling: a claim's results and consumers, a pod's
phase and whether the scheduler gave up on it; and the kubelet's reference to a claim.
Plain functions on the objects' JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.harness.kube import meta
from conformance.harness.plugin_client import ClaimRef

__all__ = [
    "AllocatedDevice",
    "allocated_devices",
    "allocation",
    "pod_claim_names",
    "pod_phase",
    "ref",
    "reserved_for",
    "unschedulable",
]


@dataclass(frozen=True)
class AllocatedDevice:
    """One result of a claim's allocation."""

    request: str
    """The request (``gpu``, or ``gpu/sub0`` for a ``firstAvailable`` subrequest)."""
    driver: str
    """The driver."""
    pool: str
    """The pool."""
    device: str
    """The device name."""
    admin_access: bool = False
    """Allocated with admin access."""
    share_id: str = ""
    """Consumable-capacity share id."""


def ref(claim: Mapping[str, Any]) -> ClaimRef:
    """The kubelet's reference to a claim object."""
    m = meta(claim)
    return ClaimRef(m["namespace"], m["uid"], m["name"])


def pod_phase(pod: Mapping[str, Any]) -> str:
    """The pod's phase (empty when it has none yet)."""
    return str((pod.get("status") or {}).get("phase") or "")


def pod_claim_names(pod: Mapping[str, Any]) -> set[str]:
    """The names of the ResourceClaims a pod uses: named ones, and those made from its templates."""
    spec = pod.get("spec") or {}
    names = {
        str(c["resourceClaimName"]) for c in spec.get("resourceClaims") or [] if c.get("resourceClaimName")
    }
    for c in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if c.get("resourceClaimName"):
            names.add(str(c["resourceClaimName"]))
    return names


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """Whether the scheduler reports the pod unschedulable."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def allocation(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The claim's ``status.allocation``, or None when it is not allocated."""
    return (claim.get("status") or {}).get("allocation")


def reserved_for(claim: Mapping[str, Any]) -> list[str]:
    """The names of the consumers (pods) a claim is reserved for."""
    return [str(r.get("name")) for r in (claim.get("status") or {}).get("reservedFor") or []]


def allocated_devices(claim: Mapping[str, Any]) -> list[AllocatedDevice]:
    """A claim's allocation results (empty when not allocated)."""
    results: Iterable[Mapping[str, Any]] = ((allocation(claim) or {}).get("devices") or {}).get(
        "results"
    ) or []
    return [
        AllocatedDevice(
            str(r.get("request")),
            str(r.get("driver")),
            str(r.get("pool")),
            str(r.get("device")),
            bool(r.get("adminAccess")),
            str(r.get("shareID") or ""),
        )
        for r in results
    ]
