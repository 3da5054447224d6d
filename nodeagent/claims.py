"""Which ResourceClaims a pod uses, and whether they are ready for the node to prepare.

Pods and claims are JSON dicts as the API server sends them. A pod names its
claims in ``spec.resourceClaims``: directly (``resourceClaimName``) or through a
template, whose generated claim's name the resourceclaim controller records in
``status.resourceClaimStatuses``. Before the kubelet prepares a claim it must be
allocated and reserved for the pod, and a claim from a template must be controlled by
the pod: the status could name any claim of the namespace, and a pod must not get
another's devices that way (kubelet 1.37.2 ``pkg/kubelet/cm/dra/manager.go:287-310``:
``resourceclaim.Name`` says ``mustCheckOwner``, then ``resourceclaim.IsForPod``).

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

from nodeagent.errors import ClaimNotForPod, ClaimNotReady

__all__ = [
    "EXTENDED_RESOURCES",
    "ContainerClaimRef",
    "PodClaim",
    "check_claim",
    "check_owner",
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
    must_check_owner: bool = False
    """Whether the claim was generated from a template, so that :func:`check_claim` must find it
    controlled by the pod (``resourceclaim.Name``'s ``mustCheckOwner``)."""


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
                out.append(PodClaim(name, generated, must_check_owner=True))
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


def check_owner(claim: Obj, pod: Obj) -> None:
    """ClaimNotForPod unless ``claim`` was created for ``pod``: same namespace, and its controller
    (the first owner reference with ``controller: true``) has the pod's UID.

    ``resourceclaim.IsForPod`` (dynamic-resource-allocation v0.37.2 ``resourceclaim/resourceclaim.go
    :123-140``) with the kubelet's ``acceptPodGroupOwner`` false, as with ``DRAWorkloadResourceClaims``
    off (its default in 1.37, and off in this project's clusters): a claim controlled by the pod's
    PodGroup is refused too. With the gate on the kubelet would accept a controller of kind
    ``PodGroup`` in ``scheduling.k8s.io`` named by ``spec.schedulingGroup.podGroupName`` (lines
    131-135, ``isForPodGroupByPod`` 162-173), and a PodGroup's reservation (``IsReservedForPod``
    181-197), which :func:`check_claim` does not accept either. Messages are the kubelet's.
    """
    md = claim.get("metadata") or {}
    pmd = pod.get("metadata") or {}
    where = f"ResourceClaim {md.get('namespace')}/{md.get('name')}"
    pod_name = f"Pod {pmd.get('namespace')}/{pmd.get('name')}"
    if md.get("namespace") != pmd.get("namespace"):
        raise ClaimNotForPod(f"{where} is not in the same namespace as {pod_name}")
    controller = next((r for r in md.get("ownerReferences") or [] if r.get("controller")), None)
    if controller is None or controller.get("uid") != pmd.get("uid"):
        raise ClaimNotForPod(f"{where} was not created for {pod_name} (Pod is not owner)")


def check_claim(claim: Obj, pod: Obj, *, must_check_owner: bool = False) -> None:
    """ClaimNotReady unless ``claim`` is allocated and reserved for ``pod``; first, with
    ``must_check_owner`` (a claim from a template), ClaimNotForPod unless it was created for the
    pod (:func:`check_owner`), as the kubelet checks before ``reservedFor``."""
    if must_check_owner:
        check_owner(claim, pod)
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
