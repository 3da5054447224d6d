"""The claims the suite allocates itself (:meth:`Harness.allocated_claim`), on a fake API: no cluster.

A driver restarted after the test before this one (its pool wiped and not published again) may not
have published its pool yet when the next test asks for free devices: the harness waits for them,
within ``timeouts.slices``, rather than fail a rule the driver may well meet.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from conformance.catalogue import RULES
from conformance.harness import Environment, Harness, WaitTimeout
from conformance.profiles import SHIPPED_DIR, parse

DRIVER = "gpu.example.com"
NODE = "node-0"


class _Api:
    """The requests :meth:`Harness.allocated_claim` makes: the node's slices (none for the first
    ``empty`` lists), the claims, and a claim made and given its allocation."""

    def __init__(self, empty: int) -> None:
        self.empty = empty
        self.lists = 0
        self.claims: dict[str, dict[str, Any]] = {}

    def objects(self, kind: str, namespace: str | None = None, fields: str = "") -> list[dict[str, Any]]:
        if kind == "ResourceClaim":
            return [copy.deepcopy(c) for c in self.claims.values()]
        assert kind == "ResourceSlice", kind
        self.lists += 1
        if self.lists <= self.empty:
            return []
        devices = [{"name": f"gpu-{i}"} for i in range(2)]
        return [{"spec": {"driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE}, "devices": devices}}]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        made = {**copy.deepcopy(obj), "metadata": {**obj["metadata"], "uid": "u1"}}
        self.claims[made["metadata"]["name"]] = made
        return copy.deepcopy(made)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return copy.deepcopy(self.claims.get(name))

    def replace(self, obj: dict[str, Any], subresource: str = "") -> dict[str, Any]:
        self.claims[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return copy.deepcopy(obj)


def _harness(api: _Api, slices_timeout: float) -> Harness:
    data: dict[str, Any] = yaml.safe_load((SHIPPED_DIR / "reference-gpu.yaml").read_text())
    data["driver"] = DRIVER
    data["timeouts"] = {**data.get("timeouts", {}), "slices": slices_timeout}
    env = Environment(parse(data, "mine.yaml"), "local", frozenset(), 34, "v1.34.0")
    return Harness(
        cluster=None,  # type: ignore[arg-type]
        kube=api,  # type: ignore[arg-type]
        env=env,
        rule=RULES[0],
        namespace="ns",
        node=NODE,
        marks=None,
    )


def _allocated(api: _Api) -> list[str]:
    (claim,) = api.claims.values()
    return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]


def test_a_pool_not_published_yet_is_waited_for() -> None:
    api = _Api(empty=3)
    dra = _harness(api, slices_timeout=10)
    dra.allocated_claim(2)
    assert api.lists > 3
    assert _allocated(api) == ["gpu-0", "gpu-1"]


def test_too_few_devices_fail_after_the_slices_timeout_and_say_how_many() -> None:
    api = _Api(empty=0)
    dra = _harness(api, slices_timeout=1)
    with pytest.raises(
        WaitTimeout, match=r"3 free devices of gpu.example.com on node node-0; last seen: 2 free"
    ):
        dra.allocated_claim(3)
    assert not api.claims


class _Held(_Api):
    """Two devices, gpu-1 multi-allocatable (or none, ``multi=False``), both held by another test's
    claim for the first ``held`` lists of the slices."""

    def __init__(self, held: int, *, multi: bool = True) -> None:
        super().__init__(empty=0)
        self.held = held
        self.multi = multi
        results = [{"driver": DRIVER, "pool": NODE, "device": f"gpu-{i}", "request": "gpu"} for i in range(2)]
        self.other = {
            "metadata": {"name": "other", "namespace": "ns2", "uid": "u0"},
            "status": {"allocation": {"devices": {"results": results}}},
        }

    def objects(self, kind: str, namespace: str | None = None, fields: str = "") -> list[dict[str, Any]]:
        if kind == "ResourceClaim":
            return [copy.deepcopy(self.other)] if self.lists <= self.held else []
        found = super().objects(kind, namespace, fields)
        for s in found:
            s["spec"]["devices"][1]["allowMultipleAllocations"] = self.multi
        return found


def _multi(device: dict[str, Any]) -> bool:
    return bool(device.get("allowMultipleAllocations"))


def test_a_device_another_test_holds_is_waited_for() -> None:
    api = _Held(held=4)
    dra = _harness(api, slices_timeout=10)
    device = dra.free_device("multi-allocatable device", _multi, claimed="consumable-capacity")
    assert device["name"] == "gpu-1"
    assert api.lists > 4


def test_a_device_held_past_the_slices_timeout_fails_naming_it() -> None:
    dra = _harness(_Held(held=10**6), slices_timeout=1)
    with pytest.raises(WaitTimeout, match=r"a free multi-allocatable device .* every one held: gpu-1"):
        dra.free_device("multi-allocatable device", _multi, claimed="consumable-capacity")


def test_a_node_that_publishes_no_such_device_fails_at_once() -> None:
    api = _Held(held=0, multi=False)
    dra = _harness(api, slices_timeout=60)
    with pytest.raises(AssertionError, match=r"claims consumable-capacity, but node-0 publishes no"):
        dra.free_device("multi-allocatable device", _multi, claimed="consumable-capacity")
    assert api.lists == 1
