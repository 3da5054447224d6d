"""License seats: devices that need nothing on the node (KEP-5945, gate ``DRAOptionalNodeOperations``,
alpha in 1.37).

With ``--license-seats`` every whole GPU also has a seat, ``gpu-<i>-license`` (attribute ``type``
``license``, its own DeviceClass ``license.<domain>``): the right to run licensed software on that
GPU, which a pod claims like a device. The seat is counted by the scheduler and nothing else: the
container gets no device node, env or file for it. The seats are published in a slice of their own
with ``skipNodeOperations: ["*"]``, so a claim that holds only seats is never sent to the driver; the
scheduler places it only on a node that declares the feature.

The kubelet leaves out a call only when every device of the driver in the claim skips it
(``pkg/kubelet/cm/dra/claiminfo.go`` computeDriverStates): a claim with a seat and a GPU is prepared
as a whole, and with the gate off the API server drops the field and every claim is. So the driver
still prepares a seat when asked: it answers it with no CDI id and makes nothing for it
(``driver.materialize``). A seat shares the GPU's attributes but no hardware: it never conflicts with
the GPU or its partitions, and a fault of the GPU taints its seat too.

Testing switch ``refuse-skipped-devices`` (``driver.planning``): a seat in a prepare call is refused,
as by a driver that counts on the kubelet never asking.
Pure: no side effects here.
"""

from __future__ import annotations

import dataclasses

from driver.inventory import SKIP_ALL, DeviceInfo, Inventory

__all__ = ["LICENSE_TYPE", "with_license_seats"]

LICENSE_TYPE = "license"
"""The seats' ``type`` attribute, and their DeviceClass's first label."""

_NOT_COPIED = frozenset({"uuid", "resource.kubernetes.io/pciBusID"})
"""Attributes of the GPU a seat does not carry: it is no hardware (it keeps the NUMA node)."""


def _seat(gpu: DeviceInfo) -> DeviceInfo:
    attributes = {k: v for k, v in gpu.attributes.items() if k not in _NOT_COPIED}
    return DeviceInfo(
        name=f"{gpu.name}-license",
        kind="license",
        uuid=None,
        parent_uuid=gpu.uuid,
        index=gpu.index,
        minor=gpu.minor,
        attributes={**attributes, "type": LICENSE_TYPE},
        capacity={},
        skip_node_operations=SKIP_ALL,
    )


def with_license_seats(inventory: Inventory) -> Inventory:
    """The inventory with a seat after each whole GPU."""
    devices: dict[str, DeviceInfo] = dict(inventory.devices)
    for dev in inventory:
        if dev.kind == "gpu":
            seat = _seat(dev)
            devices[seat.name] = seat
    return dataclasses.replace(inventory, devices=devices)
