"""List-typed attributes (--list-attributes, driver.listattrs) and their testing switch."""

from __future__ import annotations

from typing import Any

from driver.inventory import Inventory
from driver.listattrs import SHARING_STRATEGIES, scalar_lists, with_list_attributes
from driver.settings import from_args
from driver.slicing import build_slices
from tests.driver.drvkit import gpu, partition


def _devices(inventory: Inventory) -> dict[str, Any]:
    bodies = build_slices(inventory, driver_name="gpu.example.com", node_name="n", generation=1)
    return {d["name"]: d for b in bodies for d in b["spec"].get("devices") or []}


def test_every_device_carries_the_strategies_as_a_list_of_strings() -> None:
    devices = (gpu(0), partition(1, 0))
    published = _devices(with_list_attributes(Inventory(devices={d.name: d for d in devices})))
    assert {n: d["attributes"][SHARING_STRATEGIES] for n, d in published.items()} == {
        d.name: {"strings": ["TimeSlicing", "MPS"]} for d in devices
    }
    assert SHARING_STRATEGIES not in _devices(Inventory(devices={"gpu-0": gpu(0)}))["gpu-0"]["attributes"]


def test_the_switch_makes_every_list_kind_a_scalar_of_its_first_value() -> None:
    device: dict[str, Any] = {
        "name": "gpu-0",
        "attributes": {
            "s": {"strings": ["a", "b"]},
            "i": {"ints": [3, 4]},
            "b": {"bools": [True]},
            "v": {"versions": ["1.2.3"]},
            "index": {"int": 0},
        },
    }
    scalar_lists(device)
    assert device["attributes"] == {
        "s": {"string": "a"},
        "i": {"int": 3},
        "b": {"bool": True},
        "v": {"version": "1.2.3"},
        "index": {"int": 0},
    }


def test_the_setting_is_off_unless_asked_for() -> None:
    assert not from_args(["--node-name", "n"], {}).backend.list_attributes
    assert from_args(["--node-name", "n", "--list-attributes"], {}).backend.list_attributes
    assert from_args(["--node-name", "n"], {"DRA_GPU_LIST_ATTRIBUTES": "true"}).backend.list_attributes
