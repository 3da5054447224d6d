"""Compatibility groups (KEP-5963): a MIG-partitioned GPU is never shared as a whole at once.

Counters say how much of a GPU its partitions take; they cannot say that a GPU runs in one mode at
a time. A GPU with MIG on runs MIG partitions; a GPU shared by time-slicing or MPS runs as one
device. With ``--compatibility-groups`` a partitionable GPU (``partitionable-mig``) is published
both ways, on its one counter set:

- each partition declares the group ``mig``;
- the whole GPU is shared by capacity (``driver.consumable``: memory and ``computeShare``) and
  declares the group ``whole-gpu``. It consumes only the set's ``whole-gpu`` counter (1 of 1):
  its shares are counted by capacity, not by counters, so by counters alone a partition would fit
  beside it.

The scheduler (gate ``DRADeviceCompatibilityGroups``, alpha in 1.37) allocates devices of one
counter set together only when their groups meet, so partitions and shares of the whole GPU never
meet; at prepare ``driver.conflicts`` refuses the pair all the same (the same GPU).

Testing switch ``compat-groups-missing``: the groups are left out of the slices (the scheduler
then puts a partition beside a share of its GPU, and prepare refuses the second).
Pure: no side effects here.
"""

from __future__ import annotations

import dataclasses

from driver.consumable import shared_by_capacity
from driver.errors import SettingsError
from driver.inventory import DeviceInfo, Inventory

__all__ = ["MIG_GROUP", "WHOLE_GPU_COUNTER", "WHOLE_GPU_GROUP", "group_by_mode"]

MIG_GROUP = "mig"
"""The group of every partition."""
WHOLE_GPU_GROUP = "whole-gpu"
"""The group of the whole GPU, shared by capacity."""
WHOLE_GPU_COUNTER = "whole-gpu"
"""The counter only the whole GPU consumes (a device consumes at least one counter of its set)."""


def _whole(dev: DeviceInfo) -> DeviceInfo:
    shared = shared_by_capacity(dev)
    consumes = {name: {WHOLE_GPU_COUNTER: 1} for name in dev.consumes_counters}
    return dataclasses.replace(shared, consumes_counters=consumes, compatibility_groups=(WHOLE_GPU_GROUP,))


def group_by_mode(inventory: Inventory) -> Inventory:
    """The inventory with every partitionable GPU published in both modes, grouped (see the module).

    Raises ``SettingsError`` when there is no partitionable GPU: the setting would do nothing.
    """
    devices: dict[str, DeviceInfo] = {}
    sets = {name: dict(counters) for name, counters in inventory.counter_sets.items()}
    for name, dev in inventory.devices.items():
        if not dev.consumes_counters:
            devices[name] = dev
        elif dev.kind == "gpu":
            devices[name] = _whole(dev)
            for counter_set in dev.consumes_counters:
                sets[counter_set][WHOLE_GPU_COUNTER] = 1
        else:
            devices[name] = dataclasses.replace(dev, compatibility_groups=(MIG_GROUP,))
    if devices == dict(inventory.devices):
        raise SettingsError(
            "--compatibility-groups: no partitionable GPU was found (it needs --device-kinds "
            "partitionable-mig and a GPU with MIG mode on)"
        )
    return dataclasses.replace(inventory, devices=devices, counter_sets=sets)
