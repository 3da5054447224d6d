"""Conflicts by hardware: whether a claim may have its devices, and who else keeps a partition.

What counts is the hardware, not the device's name: a whole GPU and a partition of it overlap,
as do two partitions on the same memory slices. Sharing is for one device only, and admin access
is the exception (it exists to reach devices that are in use). No side effects here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from driver.checkpoint import UNPREPARE_STARTED, ClaimRecord, PreparedDevice
from driver.errors import DeviceConflict
from driver.inventory import Inventory
from driver.planning import ClaimRef

__all__ = ["check_conflicts", "partition_holders"]


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
    Raises ``DeviceConflict`` naming the claim, the device and the claim that holds it.
    """
    planned = list(planned)
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
