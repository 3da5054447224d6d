"""Consumable capacity (KEP-5075): whole GPUs that several claims share, each taking part of them.

With ``--gpu-sharing consumable`` a whole GPU (kind ``gpu``, MIG off) is published with
``allowMultipleAllocations`` and two capacities, each with a ``requestPolicy``:

- ``memory``: the GPU's memory in bytes; a claim takes at least 1Gi, in steps of 1Mi;
- ``computeShare``: 100 is the whole GPU; a claim takes at least 1, in steps of 1.

The default of each policy is the WHOLE capacity, so a claim that asks for no capacity takes the
whole GPU, as without sharing: claims still get distinct GPUs, run out of them and free them. A
claim that asks for part (``capacity.requests``) gets a share: the scheduler writes a ``shareID``
and what the share consumes (``consumedCapacity``) into the allocation.

At prepare the driver reads the consumed amounts (:func:`consumed`, bad ones fail the claim),
refuses a share that would overdraw the GPU beside the shares already prepared on it
(``driver.conflicts.check_capacity``: the driver's accounting agrees with the scheduler's), and
tells the container its share (:func:`share_env`). Pure: no side effects here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from driver._names import shown
from driver.config import parse_quantity
from driver.errors import ClaimError, ConfigError
from driver.inventory import GIB, MIB, DeviceInfo, Inventory, RequestPolicy

__all__ = [
    "COMPUTE_SHARE",
    "MEMORY",
    "SHARE_ENV",
    "SHARING_MODES",
    "WHOLE_GPU_SHARE",
    "consumed",
    "make_consumable",
    "memory_policy",
    "share_env",
    "shared_by_capacity",
]

SHARING_MODES = ("exclusive", "consumable")
"""The values of ``--gpu-sharing``: one claim per GPU, or GPUs shared by capacity."""

MEMORY = "memory"
COMPUTE_SHARE = "computeShare"
WHOLE_GPU_SHARE = 100
"""The ``computeShare`` capacity of a whole GPU: shares are percentages of its compute."""

SHARE_ENV = {MEMORY: "GPU_MEMORY_LIMIT", COMPUTE_SHARE: "GPU_COMPUTE_SHARE"}
"""Capacity -> the env var that tells a container how much of it its share holds (bytes,
percent)."""

_COMPUTE_POLICY = RequestPolicy(default=WHOLE_GPU_SHARE, minimum=1, step=1)


def memory_policy(total: int) -> RequestPolicy:
    """How claims take a GPU's memory: all by default, else at least 1Gi in steps of 1Mi.

    The API wants ``default - min`` a multiple of ``step``: memory sizes are whole MiB on every
    GPU we know of; where one is not, there is no step (any amount from the minimum up).
    """
    step: int | None = MIB if total % MIB == 0 else None
    minimum = GIB if total >= GIB + (step or 0) else (step or 1)
    if step is not None and minimum + step > total:  # the API: min + step within the capacity
        step = None
    return RequestPolicy(default=total, minimum=min(minimum, total), step=step)


def shared_by_capacity(dev: DeviceInfo) -> DeviceInfo:
    """``dev`` published with ``allowMultipleAllocations``, its memory and ``computeShare`` taken by
    capacity under their request policies."""
    capacity = dict(dev.capacity)
    policies: dict[str, RequestPolicy] = {}
    if MEMORY in capacity:
        policies[MEMORY] = memory_policy(capacity[MEMORY])
    capacity[COMPUTE_SHARE] = WHOLE_GPU_SHARE
    policies[COMPUTE_SHARE] = _COMPUTE_POLICY
    return dataclasses.replace(dev, capacity=capacity, multi_allocatable=True, request_policies=policies)


def make_consumable(inventory: Inventory, gpus: Collection[int] | None = None) -> Inventory:
    """The inventory with its whole GPUs shared by capacity (only those with an index in ``gpus``,
    when given).

    A GPU that consumes counters (MIG on, partitionable) stays as it is: its partitions already
    share its hardware, and a share of the whole GPU would have to draw all of its counters.
    """
    devices = {
        name: (
            shared_by_capacity(dev)
            if dev.kind == "gpu" and not dev.consumes_counters and (gpus is None or dev.index in gpus)
            else dev
        )
        for name, dev in inventory.devices.items()
    }
    return dataclasses.replace(inventory, devices=devices)


def consumed(info: DeviceInfo, raw: Any) -> dict[str, int] | None:
    """What one allocation result consumes of ``info`` (its ``consumedCapacity``, ``raw``).

    Every amount must be a quantity from zero to what the device publishes, of a capacity it
    publishes. On a device shared by capacity the amounts it leaves out are the policy's defaults
    (a result with a ``shareID`` but no ``consumedCapacity`` takes the whole GPU); on any other
    device the amounts are checked, and None returned: nothing is shared there.
    Raises ``ClaimError`` naming the field and the value.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ClaimError(f"consumedCapacity: {shown(raw)} is not a map of capacity names to quantities")
    amounts: dict[str, int] = {}
    for key, value in raw.items():
        field = f"consumedCapacity.{shown(key, 64) if not isinstance(key, str) else key[:64]}"
        if key not in info.capacity:
            have = ", ".join(info.capacity) or "none"
            raise ClaimError(f"{field}: device {info.name} has no such capacity (it has {have})")
        unit = "bytes" if key == MEMORY else "units"
        try:
            amount = parse_quantity(value, field, allow_zero=True, unit=unit)
        except ConfigError as e:
            raise ClaimError(str(e)) from None
        if amount > info.capacity[key]:
            raise ClaimError(
                f"{field}: {shown(value)} is more than device {info.name} has ({info.capacity[key]})"
            )
        amounts[key] = amount
    if not info.multi_allocatable:
        return None
    return {**info.default_consumption(), **amounts}


def share_env(amounts: Mapping[str, int]) -> dict[str, str]:
    """The env that tells a container its share: ``GPU_MEMORY_LIMIT`` (bytes), ``GPU_COMPUTE_SHARE``
    (percent of the GPU)."""
    return {SHARE_ENV[key]: str(amount) for key, amount in sorted(amounts.items()) if key in SHARE_ENV}
