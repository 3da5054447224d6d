"""Device status (KEP-4817): the ``status.devices`` entries the driver writes into its claims.

After a claim is prepared, each of its devices gets one entry: ``driver``, ``pool``, ``device``,
``shareID`` (consumable capacity), a ``Ready`` condition (``True``, reason ``Prepared``) and
``data``, a JSON object with what the inventory knows of the device (type, UUID, PCI bus id; the
parent GPU's UUID and the MIG profile of a MIG device or partition); a GPU attached on demand keeps
its attach conditions (``driver.binding``). Unprepare removes them.

Both are one server-side apply of the claim's ``status`` subresource with the driver name as field
manager (``ClaimSource.apply_device_status``; a replace where the API server cannot patch the
claim's status, see ``driver.claims``): the driver's own entries are replaced as a whole, those
of other drivers and other writers are kept, and an apply with no entries removes the driver's.
KEP-4817 adds the field for information only (it changes nothing in how a claim is allocated,
prepared or used), so a failed write never fails a prepare or an unprepare: it is logged as a
warning, and a claim that is gone counts as done. The entries are written for the claims a call
prepared afresh, not for one answered from the checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from driver.binding import attached_conditions, metav1_time
from driver.checkpoint import ClaimRecord, PreparedDevice
from driver.claims import ClaimSource
from driver.errors import DriverError
from driver.inventory import Inventory
from driver.planning import ClaimRef
from driver.settings import Settings

__all__ = ["READY", "REASON_PREPARED", "DeviceStatusWriter", "entries", "entry"]

log = logging.getLogger(__name__)

READY = "Ready"
"""The condition type KEP-4817 names: ``True`` once the device is configured for the claim."""
REASON_PREPARED = "Prepared"

Entry = dict[str, Any]
"""One ``status.devices`` entry, as API JSON."""


def _now() -> datetime:
    return datetime.now(UTC)


def _data(device: PreparedDevice, inventory: Inventory) -> dict[str, Any]:
    """What the inventory knows of ``device``: what a reader of the claim can tell it by."""
    info = inventory.get(device.device)
    data: dict[str, Any] = {"type": device.kind if device.kind in ("gpu", "license") else "mig"}
    uuid = device.uuid or (info.uuid if info is not None else None)
    if uuid:
        data["uuid"] = uuid  # a partition's is that of the MIG device made for this claim
    if info is None:
        return data
    if info.kind != "gpu" and info.parent_uuid:
        data["parentUUID"] = info.parent_uuid
    if info.profile is not None:
        data["profile"] = info.profile.name
    for key, name in (("productName", "productName"), ("resource.kubernetes.io/pciBusID", "pciBusID")):
        value = info.attributes.get(key)
        if isinstance(value, str) and value:
            data[name] = value
    return data


def entry(
    device: PreparedDevice, inventory: Inventory, driver_name: str, when: datetime, *, ready: bool = True
) -> Entry:
    """The ``status.devices`` entry of one prepared device (``ready=False``: the condition lies,
    for the ``device-status-not-ready`` switch)."""
    out: Entry = {"driver": driver_name, "pool": device.pool, "device": device.device}
    if device.share_id:
        out["shareID"] = device.share_id
    ids = ", ".join(device.cdi_ids) or "none"
    out["conditions"] = [
        {
            "type": READY,
            "status": "True" if ready else "False",
            "reason": REASON_PREPARED,
            "message": f"prepared for the claim's containers (CDI devices: {ids})",
            "lastTransitionTime": metav1_time(when),
        }
    ]
    info = inventory.get(device.device)
    if info is not None and info.binding_conditions:
        # attached on demand: the apply keeps the attach conditions (a prepared device is attached)
        out["conditions"] += attached_conditions(when)
    out["data"] = _data(device, inventory)
    return out


def entries(
    record: ClaimRecord, inventory: Inventory, driver_name: str, when: datetime, *, ready: bool = True
) -> list[Entry]:
    """The entries of every device of a prepared claim, in the claim's order."""
    return [entry(device, inventory, driver_name, when, ready=ready) for device in record.devices]


class DeviceStatusWriter:
    """Writes and removes the driver's ``status.devices`` entries through a ``ClaimSource``."""

    def __init__(
        self,
        claims: ClaimSource,
        settings: Settings,
        inventory: Inventory,
        *,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.claims = claims
        self.settings = settings
        self.inventory = inventory
        self._clock = clock

    def prepared(self, records: Sequence[ClaimRecord]) -> None:
        """Write the entries of freshly prepared claims (each failure logged, none raised)."""
        when = self._clock()
        # the seam: the suite's rule-breaking switch (driver/breakage.py); a real driver has none
        ready = not self.settings.breaks("device-status-not-ready")
        for record in records:
            written = entries(record, self.inventory, self.settings.driver_name, when, ready=ready)
            self._apply(ClaimRef.of(record), written, "write")

    def unprepared(self, refs: Sequence[ClaimRef]) -> None:
        """Remove the entries of unprepared claims (each failure logged, none raised)."""
        for ref in refs:
            self._apply(ref, [], "remove")

    def _apply(self, ref: ClaimRef, written: list[Entry], what: str) -> None:
        fields = {"claim": ref.uid, "namespace": ref.namespace, "claim_name": ref.name}
        try:
            answer = self.claims.apply_device_status(
                ref.namespace, ref.name, ref.uid, self.settings.driver_name, written
            )
        except DriverError as e:  # informational only (KEP-4817): never fails the claim
            log.warning(f"cannot {what} the claim's status.devices", extra={**fields, "error": str(e)})
            return
        except Exception as e:  # a bug of ours; still never fails the claim
            log.warning(
                f"cannot {what} the claim's status.devices", extra={**fields, "error": str(e)}, exc_info=True
            )
            return
        if answer is None:
            log.info(f"claim gone; no status.devices to {what}", extra=fields)
            return
        if written and not _mine(answer, self.settings.driver_name):
            log.warning(
                "the API server dropped the claim's status.devices "
                "(is the DRAResourceClaimDeviceStatus feature gate off?)",
                extra=fields,
            )


def _mine(claim: Mapping[str, Any], driver_name: str) -> bool:
    """Whether the claim's status holds an entry of this driver."""
    devices = (claim.get("status") or {}).get("devices") or []
    return any(d.get("driver") == driver_name for d in devices)
