"""Which ResourceClaims a pod uses, and whether they are ready for the node to prepare.

Pods and claims are JSON dicts as the API server sends them. A pod names its
claims in ``spec.resourceClaims``: directly (``resourceClaimName``) or through a
template, whose generated claim's name the resourceclaim controller records in
``status.resourceClaimStatuses``. Before the kubelet prepares a claim it must be
allocated and reserved for the pod.

A pod that asks ``resources.requests`` (or ``limits``) for an extended resource a
DeviceClass names (KEP-5004, ``DRAExtendedResource``) has one more claim: the
scheduler makes it and records it in ``status.extendedResourceClaimStatus``, with
which request of it serves which container's resource. As the kubelet's DRA manager
(``pkg/kubelet/cm/dra/manager.go``) does, it is prepared with the pod's other claims,
and a container gets the devices of the requests mapped to the extended resources it
asks for; it has no entry in ``allocatedResourcesStatus`` (only ``resources.claims``
references have one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from nodeagent.errors import ClaimNotReady

__all__ = [
    "EXTENDED_RESOURCES",
    "ContainerClaimRef",
    "PodClaim",
    "check_claim",
    "claim_drivers",
    "container_claim_refs",
    "extended_resource_refs",
    "pod_claims",
]

EXTENDED_RESOURCES = "<extended-resources>"
"""The pod claim name the agent gives the scheduler's claim for extended resources (the scheduler's
own name for it before it is created): no entry of ``spec.resourceClaims`` can have it."""

Obj = dict[str, Any]


@dataclass(frozen=True)
class PodClaim:
    """One entry of ``pod.spec.resourceClaims`` resolved to the ResourceClaim's name."""

    pod_claim_name: str
    """The name containers reference in ``resources.claims[].name``."""
    claim_name: str
    """The ResourceClaim object's name."""


def pod_claims(pod: Obj) -> list[PodClaim]:
    """The pod's claims; ClaimNotReady while a template's claim has not been created yet."""
    status_names: dict[str, str | None] = {}
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        status_names[entry.get("name", "")] = entry.get("resourceClaimName")
    out: list[PodClaim] = []
    for rc in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = rc.get("name", "")
        if rc.get("resourceClaimName"):
            out.append(PodClaim(name, rc["resourceClaimName"]))
        elif rc.get("resourceClaimTemplateName"):
            if name not in status_names:
                raise ClaimNotReady(
                    f"waiting for the ResourceClaim of pod claim {name!r} (template "
                    f"{rc['resourceClaimTemplateName']}) to be created and recorded in "
                    "pod.status.resourceClaimStatuses"
                )
            generated = status_names[name]
            if generated:  # None: the controller decided no claim is needed
                out.append(PodClaim(name, generated))
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        out.append(PodClaim(EXTENDED_RESOURCES, extended["resourceClaimName"]))
    return out


class ContainerClaimRef(NamedTuple):
    """One entry of a container's ``resources.claims``."""

    container: str
    """The container's name."""
    init: bool
    """Whether it is an init container."""
    pod_claim: str
    """The pod claim name it references (an entry of ``pod.spec.resourceClaims``)."""
    request: str | None
    """The request it references, or None for the whole claim."""


def container_claim_refs(pod: Obj) -> list[ContainerClaimRef]:
    """Every claim reference of every container (init containers first)."""
    spec = pod.get("spec") or {}
    out: list[ContainerClaimRef] = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            for ref in (c.get("resources") or {}).get("claims") or []:
                out.append(ContainerClaimRef(c["name"], init, ref["name"], ref.get("request") or None))
    return out


def _asks_for(container: Obj, resource: str) -> bool:
    """Whether ``container`` asks for a non-zero amount of ``resource`` (``requests``; the API
    server copies ``limits`` there when only they are given, so a test's pod may give either)."""
    res = container.get("resources") or {}
    amount = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
    if amount is None:
        return False
    digits = str(amount).rstrip("kKMGTPEim")  # an extended resource is a whole number; "0" is none
    try:
        return float(digits) != 0
    except ValueError:
        return True  # not ours to judge: the API server accepted it


def extended_resource_refs(pod: Obj) -> list[ContainerClaimRef]:
    """What each container gets of the extended-resource claim (pod claim :data:`EXTENDED_RESOURCES`):
    the requests ``status.extendedResourceClaimStatus.requestMappings`` maps to its name and to an
    extended resource it asks for (init containers first)."""
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if not extended.get("resourceClaimName"):
        return []
    spec = pod.get("spec") or {}
    out: list[ContainerClaimRef] = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            for m in extended.get("requestMappings") or []:
                if m.get("containerName") == c["name"] and _asks_for(c, str(m.get("resourceName", ""))):
                    out.append(
                        ContainerClaimRef(c["name"], init, EXTENDED_RESOURCES, m.get("requestName") or None)
                    )
    return out


def check_claim(claim: Obj, pod: Obj) -> None:
    """ClaimNotReady unless ``claim`` is allocated and reserved for ``pod``."""
    md = claim.get("metadata") or {}
    where = f"ResourceClaim {md.get('namespace')}/{md.get('name')}"
    status = claim.get("status") or {}
    if md.get("deletionTimestamp") and not status.get("allocation"):
        raise ClaimNotReady(f"{where} is being deleted")
    if not status.get("allocation"):
        raise ClaimNotReady(f"{where} is not allocated yet")
    pod_uid = pod["metadata"]["uid"]
    if not any(r.get("uid") == pod_uid for r in status.get("reservedFor") or []):
        raise ClaimNotReady(f"{where} is not reserved for pod {pod['metadata']['name']} (uid {pod_uid})")


def claim_drivers(claim: Obj) -> list[str]:
    """The drivers of the claim's allocated devices, in order of first appearance."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    drivers: list[str] = []
    for r in results:
        d = r.get("driver")
        if d and d not in drivers:
            drivers.append(d)
    return drivers
