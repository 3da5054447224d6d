"""The rule-breaking switches that distort the published ResourceSlices, as a wrapper around the
slice builder.

``driver.slicing`` cuts the pool into slices as it should and ``driver.slices`` publishes them;
the switches that only change what the slices say live here. ``slice_builder(breaks)`` is
``driver.slicing.build_slices`` itself unless such a switch is on, and ``taint_source(breaks,
taints)`` is ``taints`` itself unless ``restamp-taints`` is: a driver run without these switches
has no wrapper at all. ``driver.__main__`` hands both to the publisher.

On the bodies the builder makes, in this order:

- ``oversized-slice``: every device in one slice, whatever the per-slice limit;
- ``orphan-slices``: no ownerReference to the Node;
- ``hide-device`` drops the last device, ``phantom-device`` adds a copy of it named ``phantom``;
- ``short-counter-set``: the counter sets publish half their ``memory``;
- ``numa-node-missing``, ``compat-groups-missing``, ``no-node-allocatable``: the attribute, the
  groups, the host memory overhead (``nodeAllocatableResources``) left out;
- ``scalar-list-attrs``, ``index-as-string``, ``mistyped-device``, ``product-name-per-device``:
  attributes of the wrong type or value;
- ``wrong-slice-count``: ``resourceSliceCount`` one more than the slices.

And on the taints: ``restamp-taints`` stamps every taint with now whenever the node's taints are
read (each health change), not when its fault began.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from driver.inventory import NUMA_NODE, Inventory
from driver.listattrs import scalar_lists
from driver.nodealloc import NODE_ALLOCATABLE
from driver.slicing import Body, DeviceTaint, build_slices

__all__ = [
    "SLICE_SWITCHES",
    "TAINT_SWITCHES",
    "BreakingSliceBuilder",
    "BuildSlices",
    "slice_builder",
    "taint_source",
]

SLICE_SWITCHES = frozenset(
    {
        "oversized-slice",
        "orphan-slices",
        "hide-device",
        "phantom-device",
        "short-counter-set",
        "numa-node-missing",
        "compat-groups-missing",
        "no-node-allocatable",
        "scalar-list-attrs",
        "index-as-string",
        "mistyped-device",
        "product-name-per-device",
        "wrong-slice-count",
    }
)
"""The switches the slice builder wrapper implements."""

TAINT_SWITCHES = frozenset({"restamp-taints"})
"""The switches the taint wrapper implements."""


BuildSlices = Callable[..., list[Body]]
"""What ``driver.slicing.build_slices`` is: the pool's slice bodies (its keyword arguments)."""


def slice_builder(breaks: Callable[[str], bool]) -> BuildSlices:
    """``build_slices``, wrapped only when a switch of ``SLICE_SWITCHES`` is on."""
    on = frozenset(rule for rule in SLICE_SWITCHES if breaks(rule))
    return BreakingSliceBuilder(on) if on else build_slices


def taint_source(
    breaks: Callable[[str], bool], taints: Callable[[], dict[str, list[DeviceTaint]]]
) -> Callable[[], dict[str, list[DeviceTaint]]]:
    """``taints``, wrapped only when ``restamp-taints`` is on: every taint added now, at every call."""
    if not breaks("restamp-taints"):
        return taints

    def restamped() -> dict[str, list[DeviceTaint]]:
        now = time.time()
        return {name: [dataclasses.replace(t, time_added=now) for t in ts] for name, ts in taints().items()}

    return restamped


def _one_device_slice(bodies: list[Body]) -> list[Body]:
    """The bodies with all devices in the first slice of devices (counter sets stay apart)."""
    with_devices = [b for b in bodies if "devices" in b["spec"]]
    if len(with_devices) < 2:
        return bodies
    first = with_devices[0]
    first["spec"]["devices"] = [d for b in with_devices for d in b["spec"]["devices"]]
    kept = [b for b in bodies if "devices" not in b["spec"] or b is first]
    for body in kept:
        body["spec"]["pool"]["resourceSliceCount"] = len(kept)
    return kept


class BreakingSliceBuilder:
    """``build_slices``, and then the distortions of the switches that are on."""

    def __init__(self, on: frozenset[str]) -> None:
        self.on = on

    def __call__(self, inventory: Inventory, **options: Any) -> list[Body]:
        if "orphan-slices" in self.on:
            options["node_uid"] = None
        bodies = build_slices(inventory, **options)
        if "oversized-slice" in self.on:
            bodies = _one_device_slice(bodies)
        with_devices = [b["spec"]["devices"] for b in bodies if b["spec"].get("devices")]
        if "hide-device" in self.on and with_devices:
            with_devices[-1].pop()
        if "phantom-device" in self.on and with_devices:
            with_devices[-1].append({**with_devices[-1][-1], "name": "phantom"})
        if "short-counter-set" in self.on:
            for body in bodies:
                for counter_set in body["spec"].get("sharedCounters") or []:
                    memory = counter_set["counters"].get("memory")
                    if memory is not None:
                        memory["value"] = str(int(memory["value"]) // 2)
        every_device = [device for devices in with_devices for device in devices]
        for device in every_device:
            self._distort(device)
        if "mistyped-device" in self.on:
            whole = [d for d in every_device if d.get("attributes", {}).get("type") == {"string": "gpu"}]
            if whole:
                whole[0]["attributes"]["type"] = {"string": "GPU"}
        if "wrong-slice-count" in self.on:
            for body in bodies:
                body["spec"]["pool"]["resourceSliceCount"] += 1
        return bodies

    def _distort(self, device: dict[str, Any]) -> None:
        """The switches that change each device on its own."""
        attributes = device.get("attributes", {})
        if "numa-node-missing" in self.on:
            attributes.pop(NUMA_NODE, None)
        if "compat-groups-missing" in self.on:
            for use in device.get("consumesCounters") or []:
                use.pop("compatibilityGroups", None)
        if "no-node-allocatable" in self.on:
            device.pop(NODE_ALLOCATABLE, None)
        if "scalar-list-attrs" in self.on:
            scalar_lists(device)
        if "index-as-string" in self.on:
            index = device.get("attributes", {}).get("index")
            if index is not None and "int" in index:
                device["attributes"]["index"] = {"string": str(index["int"])}
        if "product-name-per-device" in self.on:
            product = device.get("attributes", {}).get("productName")
            if product is not None and "string" in product:
                named = f"{product['string']} {device['name']}"[:64]
                device["attributes"]["productName"] = {"string": named}
