"""What a claim asks of this node: read it, check it, apply its configs.

No side effects here: ``plan`` turns the kubelet's ``ClaimRef`` into the devices to prepare;
``driver.conflicts`` checks them against other claims, ``driver.state`` does the preparing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from driver import consumable
from driver._names import check_uid, shown
from driver.checkpoint import ClaimRecord, PreparedDevice
from driver.claims import ClaimSource
from driver.config import entries_from_allocation, select
from driver.consumers import reserved_for_no_pod
from driver.devicemetadata import pod_claim_name
from driver.errors import ClaimError, ConfigError, PrepareError
from driver.inventory import Inventory
from driver.settings import Settings

__all__ = ["ClaimRef", "PlanningBreakage", "plan"]


@dataclass(frozen=True)
class PlanningBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change what a claim
    asks; a real driver has none."""

    other_driver_claims: bool = False
    foreign_results: bool = False
    ignore_config: bool = False
    config_to_whole_request: bool = False
    subrequest_name: bool = False
    qualified_request_names: bool = False
    every_request_name: bool = False
    pod_only_reservations: bool = False
    refuse_skipped_devices: bool = False

    @classmethod
    def of(cls, settings: Settings) -> PlanningBreakage:
        return cls(
            other_driver_claims=settings.breaks("prepare-other-driver-claims"),
            foreign_results=settings.breaks("prepare-foreign-results"),
            ignore_config=settings.breaks("ignore-config"),
            config_to_whole_request=settings.breaks("config-to-whole-request"),
            subrequest_name=settings.breaks("subrequest-name"),
            qualified_request_names=settings.breaks("qualified-request-names"),
            every_request_name=settings.breaks("every-request-name"),
            pod_only_reservations=settings.breaks("pod-only-reservations"),
            refuse_skipped_devices=settings.breaks("refuse-skipped-devices"),
        )


@dataclass(frozen=True)
class ClaimRef:
    """What the kubelet tells about a claim: namespace, UID, name."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        text = f"{self.namespace}/{self.name} ({self.uid})"
        if len(text) <= 300 and text.isprintable():
            return text
        return f"{shown(self.namespace)}/{shown(self.name)} ({shown(self.uid)})"

    @classmethod
    def of(cls, record: ClaimRecord) -> ClaimRef:
        """The claim a checkpoint record is of."""
        return cls(namespace=record.namespace, uid=record.uid, name=record.name)

    def check(self) -> None:
        """Raise ``PrepareError`` naming the claim unless its UID is safe to use in paths."""
        try:
            check_uid(self.uid)
        except PrepareError as e:
            raise PrepareError(f"claim {self}: {e}") from None


def _parent_request(request: str) -> str:
    """Containers reference the parent request: ``gpu/sub0`` -> ``gpu``."""
    return request.split("/", 1)[0]


def plan(
    ref: ClaimRef, claims: ClaimSource, settings: Settings, inventory: Inventory
) -> tuple[list[PreparedDevice], str | None]:
    """Read the claim and decide what to prepare; no side effects. The devices, and the pod's name
    for the claim when a template made it (``resource.kubernetes.io/pod-claim-name``).

    Raises ``PrepareError`` (``ClaimError`` for the claim itself) naming claim, device and reason.
    """
    broken = PlanningBreakage.of(settings)
    claim = claims.get_claim(ref.namespace, ref.name)
    if claim is None:
        raise ClaimError(f"claim {ref}: ResourceClaim not found")
    uid = (claim.get("metadata") or {}).get("uid")
    if uid != ref.uid:
        raise ClaimError(f"claim {ref}: the ResourceClaim with this name has UID {uid}; it was re-created")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"claim {ref}: not allocated")
    if broken.pod_only_reservations and (consumers := reserved_for_no_pod(claim)):
        raise PrepareError(f"claim {ref} is reserved for no pod (reservedFor: {', '.join(consumers)})")
    every = (allocation.get("devices") or {}).get("results") or []
    results = [r for r in every if r.get("driver") == settings.driver_name]
    if not results and broken.other_driver_claims:
        results = list(every)  # another driver's results, taken for ours
    if not results:
        raise ClaimError(f"claim {ref}: no device of driver {settings.driver_name} is allocated")
    if broken.foreign_results:
        results = list(every)
    entries = []
    if not broken.ignore_config:
        try:
            entries = entries_from_allocation(
                (allocation.get("devices") or {}).get("config") or [], settings.driver_name
            )
        except ConfigError as e:
            raise PrepareError(f"claim {ref}: {e}") from e
        if broken.config_to_whole_request:  # gpu/sub0 names gpu: every subrequest
            entries = [replace(e, requests=tuple(_parent_request(r) for r in e.requests)) for e in entries]
    planned: dict[tuple[str, str | None], PreparedDevice] = {}
    for result in results:
        name = str(result.get("device", ""))
        pool = str(result.get("pool", ""))
        request = str(result.get("request", ""))
        if pool != settings.pool_name:
            raise ClaimError(
                f"claim {ref}: device {name}: allocated from pool {pool!r}, "
                f"but this node's pool is {settings.pool_name!r}"
            )
        info = inventory.get(name)
        if info is None:
            raise ClaimError(f"claim {ref}: device {name}: no such device on node {settings.node_name}")
        if broken.refuse_skipped_devices and info.skip_node_operations:
            raise PrepareError(
                f"claim {ref}: device {name}: its slice skips node operations "
                f"({', '.join(info.skip_node_operations)}); it is not prepared here"
            )
        try:
            config = None if info.kind == "license" else select(entries, request, info.kind)
        except ConfigError as e:
            raise PrepareError(f"claim {ref}: device {name}: invalid config: {e}") from e
        share_id = result.get("shareID") or None
        if share_id is not None:
            try:
                check_uid(str(share_id), "shareID")
            except PrepareError as e:
                raise ClaimError(f"claim {ref}: device {name}: {e}") from None
        try:
            consumed = consumable.consumed(info, result.get("consumedCapacity"))
        except ClaimError as e:
            raise ClaimError(f"claim {ref}: device {name}: {e}") from None
        key = (name, share_id)
        answered = request if broken.subrequest_name else _parent_request(request)
        if broken.qualified_request_names:
            answered = f"{ref.name}/{answered}"
        if key in planned:
            planned[key].request_names = sorted({*planned[key].request_names, answered})
            continue
        planned[key] = PreparedDevice(
            request_names=[answered],
            pool=pool,
            device=name,
            cdi_ids=[],
            kind=info.kind,
            uuid=info.uuid or "",
            share_id=share_id,
            shareable=bool(share_id) or bool(config and config.shareable),
            admin_access=bool(result.get("adminAccess")),
            config=config,
            consumed=consumed,
        )
    if broken.every_request_name:  # each device named for the claim's every request
        every_request = sorted({name for d in planned.values() for name in d.request_names})
        for prepared in planned.values():
            prepared.request_names = list(every_request)
    return list(planned.values()), pod_claim_name(claim)
