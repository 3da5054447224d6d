"""List-typed device attributes (KEP-5491, gate ``DRAListTypeAttributes``, alpha since 1.36).

With ``--list-attributes`` every device also carries ``sharingStrategies``: the sharing strategies
its opaque config takes (``driver.config.STRATEGIES``), published as a list of strings
(``{"strings": [...]}``). A claim then selects by one of them with CEL
(``"MPS" in device.attributes["<driver>"].sharingStrategies``) and ``matchAttribute`` over it
asks for devices whose lists meet (list semantics: a non-empty intersection).

The API server takes a list attribute only with the gate on: with it off it empties the list and
then refuses the whole slice ("exactly one value must be specified"): the setting is off by
default, for clusters that turn the gate on.

Testing switch ``scalar-list-attrs`` (``driver.slices``): each list attribute is published as its
first value, a scalar: the stored slice has no list to select by.
Pure: no side effects here.
"""

from __future__ import annotations

import dataclasses

from driver.config import STRATEGIES
from driver.inventory import Inventory
from driver.slicing import Body

__all__ = ["LIST_KEYS", "SHARING_STRATEGIES", "scalar_lists", "with_list_attributes"]

SHARING_STRATEGIES = "sharingStrategies"
"""The list attribute (strings) of the sharing strategies a device's config takes."""

LIST_KEYS: dict[str, str] = {"strings": "string", "ints": "int", "bools": "bool", "versions": "version"}
"""Each list key of a ResourceSlice attribute, with the scalar key of its elements."""


def with_list_attributes(inventory: Inventory) -> Inventory:
    """The inventory with ``sharingStrategies`` on every device."""
    devices = {
        name: dataclasses.replace(dev, attributes={**dev.attributes, SHARING_STRATEGIES: list(STRATEGIES)})
        for name, dev in inventory.devices.items()
    }
    return dataclasses.replace(inventory, devices=devices)


def scalar_lists(device: Body) -> None:
    """Switch ``scalar-list-attrs``: every list attribute of a slice device becomes its first value."""
    for name, entry in (device.get("attributes") or {}).items():
        for key, scalar in LIST_KEYS.items():
            values = entry.get(key)
            if values:
                device["attributes"][name] = {scalar: values[0]}
