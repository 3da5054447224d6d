"""Conflicts by hardware: whether a claim may have its devices, and who else keeps a partition.

What counts is the hardware, not the device's name: a whole GPU and a partition of it overlap,
as do two partitions on the same memory slices. Sharing is for one device only, and admin access
is the exception (it exists to reach devices that are in use). On a device shared by capacity
(``driver.consumable``) the shares prepared on it must fit in what it publishes, as the scheduler
counts them. No side effects here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from driver.checkpoint import UNPREPARE_STARTED, ClaimRecord, PreparedDevice
from driver.errors import DeviceConflict
from driver.inventory import DeviceInfo, Inventory
from driver.planning import ClaimRef

__all__ = ["check_capacity", "check_conflicts", "partition_holders"]


def check_conflicts(
    ref: ClaimRef,
    planned: Iterable[PreparedDevice],
    others: Iterable[ClaimRecord],
    inventory: Inventory,
    *,
    admin_exempt: bool = True,
    leaked: Collection[str] = (),
) -> None:
    """Refuse devices another claim holds (by hardware), unless both sides allow sharing.

    ``leaked`` are devices an unprepare left marked in use (a testing switch): always refused.
    Shares of a device shared by capacity must fit beside the others (:func:`check_capacity`).
    Raises ``DeviceConflict`` naming the claim, the device and the claim that holds it.
    """
    planned = list(planned)
    others = list(others)
    for device in planned:
        if device.device in leaked:
            raise DeviceConflict(f"claim {ref}: device {device.device}: still marked in use")
    for other in others:
        if other.uid == ref.uid:
            continue
        for theirs in other.devices:
            their_info = inventory.get(theirs.device)
            for device in planned:
                if admin_exempt and (device.admin_access or theirs.admin_access):
                    continue
                if device.device == theirs.device:
                    if not (device.shareable and theirs.shareable):
                        raise DeviceConflict(
                            f"claim {ref}: device {device.device}: already prepared for claim {other.ref} "
                            "and not shareable (neither claim has a sharing config or a share id)"
                        )
                    continue
                info = inventory.get(device.device)
                if info is not None and their_info is not None and info.overlaps(their_info):
                    raise DeviceConflict(
                        f"claim {ref}: device {device.device}: uses the same hardware as {theirs.device}, "
                        f"already prepared for claim {other.ref}"
                    )
    check_capacity(ref, planned, others, inventory)


def _uses(device: PreparedDevice, info: DeviceInfo) -> dict[str, int]:
    """What a prepared device holds of ``info``: its share, else (no share recorded) all of it."""
    return dict(device.consumed) if device.consumed is not None else dict(info.capacity)


def check_capacity(
    ref: ClaimRef, planned: Iterable[PreparedDevice], others: Iterable[ClaimRecord], inventory: Inventory
) -> None:
    """Refuse a share that, with the shares already prepared on its device, takes more of a capacity
    than the device publishes.

    Counted: the other claims' devices and the claim's own earlier shares of the same device (admin
    access aside, on either side: it is meant to reach devices in use). Raises ``DeviceConflict``
    naming the claim, the device, the capacity, what is held and by whom, and what was asked.
    """
    others = [o for o in others if o.uid != ref.uid]
    earlier: list[PreparedDevice] = []
    for device in planned:
        info = inventory.get(device.device)
        if info is not None and info.multi_allocatable and not device.admin_access and device.consumed:
            held = dict.fromkeys(info.capacity, 0)
            holders = sorted(
                {o.ref for o in others for d in o.devices if d.device == device.device and not d.admin_access}
            )
            theirs = [d for o in others for d in o.devices]
            for d in [*theirs, *earlier]:
                if d.device == device.device and not d.admin_access:
                    for key, amount in _uses(d, info).items():
                        held[key] = held.get(key, 0) + amount
            for key, asked in sorted(device.consumed.items()):
                total = info.capacity.get(key, 0)
                if held.get(key, 0) + asked > total:
                    by = f"claims {', '.join(holders)}" if holders else "this claim's other shares"
                    raise DeviceConflict(
                        f"claim {ref}: device {device.device}: capacity {key}: {held.get(key, 0)} is held by "
                        f"{by}, {asked} more asked, the device has {total}"
                    )
        earlier.append(device)


def partition_holders(record: ClaimRecord, device: str, claims: Iterable[ClaimRecord]) -> list[str]:
    """The other claims that keep partition ``device`` of ``record``: those that hold it too,
    except claims being unprepared (they give it up)."""
    return [
        other.ref
        for other in claims
        if other.uid != record.uid
        and other.state != UNPREPARE_STARTED
        and any(d.device == device for d in other.devices)
    ]
