"""conformance.harness.devices: selectors, counters and attributes read from slice devices."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from conformance.harness import (
    cel_literal,
    compatibility_groups,
    consumption,
    counter_sets,
    exact_cel,
    incompatible,
    quantity,
    quantity_text,
    scalar_attributes,
    share_amount,
    takeable,
    twins,
    varying_attribute,
    who_overlaps,
)

DRIVER = "gpu.example.com"


def device(
    name: str, draws: dict[str, str] | None = None, groups: list[str] | None = None, **attrs: Any
) -> dict[str, Any]:
    typed = {
        k: {"bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string": v}
        for k, v in attrs.items()
    }
    found: dict[str, Any] = {"name": name, "attributes": typed}
    if draws is not None:
        found["consumesCounters"] = [
            {"counterSet": "gpu-0-set", "counters": {k: {"value": v} for k, v in draws.items()}}
        ]
        if groups is not None:
            found["consumesCounters"][0]["compatibilityGroups"] = groups
    return found


def test_quantity_and_literals() -> None:
    assert quantity("80Gi") == Decimal(80 * 2**30)
    assert quantity({"value": "500m"}) == Decimal("0.5")
    assert cel_literal(True) == "true"
    assert cel_literal(7) == "7"
    assert cel_literal('a "b" \\c') == '"a \\"b\\" \\\\c"'


def test_scalar_attributes_qualify_names_and_skip_versions() -> None:
    d = device("gpu-0", index=0, model="x")
    d["attributes"]["resource.kubernetes.io/pciBusID"] = {"string": "0000:18:00.0"}
    d["attributes"]["cuda"] = {"version": "9.0.0"}
    assert scalar_attributes(d, DRIVER) == {
        f"{DRIVER}/index": 0,
        f"{DRIVER}/model": "x",
        "resource.kubernetes.io/pciBusID": "0000:18:00.0",
    }


def test_exact_cel_guards_every_attribute() -> None:
    d = device("gpu-0", index=3, healthy=True)
    d["attributes"]["resource.kubernetes.io/pciBusID"] = {"string": "0000:18:00.0"}
    assert exact_cel(d, DRIVER) == (
        f'device.driver == "{DRIVER}"'
        f' && (has(device.attributes["{DRIVER}"].healthy) && device.attributes["{DRIVER}"].healthy == true)'
        f' && (has(device.attributes["{DRIVER}"].index) && device.attributes["{DRIVER}"].index == 3)'
        ' && (has(device.attributes["resource.kubernetes.io"].pciBusID)'
        ' && device.attributes["resource.kubernetes.io"].pciBusID == "0000:18:00.0")'
    )


def test_twins_are_devices_the_exact_selector_also_matches() -> None:
    whole = device("gpu-0", index=0, type="gpu")
    part = device("gpu-0-part", index=0, type="gpu", start=0)  # has every attribute of gpu-0, and more
    other = device("gpu-1", index=1, type="gpu")
    assert twins(whole, [whole, part, other], DRIVER) == ["gpu-0-part"]
    assert twins(part, [whole, part, other], DRIVER) == []


def test_varying_attribute() -> None:
    devices = [device(f"d{i}", index=i // 2, start=i, type="mig") for i in range(4)]
    devices[0]["attributes"]["extra"] = {"int": 9}  # not on every device
    assert varying_attribute(devices, DRIVER) == f"{DRIVER}/start"
    two = devices[:2]
    assert varying_attribute(two, DRIVER) == f"{DRIVER}/start"
    same = [device("a", type="mig", index=1), device("b", type="mig", index=2)]
    assert varying_attribute(same, DRIVER, prefer=["index"]) == f"{DRIVER}/index"
    assert varying_attribute([device("a", type="mig"), device("b", type="mig")], DRIVER) is None
    assert varying_attribute([], DRIVER) is None


def test_counters_and_overlapping_pair() -> None:
    slices: list[dict[str, Any]] = [
        {
            "spec": {
                "sharedCounters": [
                    {"name": "gpu-0-set", "counters": {"slices": {"value": "7"}, "mem": {"value": "8"}}}
                ]
            }
        },
        {"spec": {"devices": []}},
    ]
    sets = counter_sets(slices)
    assert sets == {"gpu-0-set": {"slices": Decimal(7), "mem": Decimal(8)}}
    small = [device(f"p{i}", {"slices": "1", "mem": "1"}) for i in range(3)]
    assert consumption(small[0]) == {"gpu-0-set": {"slices": Decimal(1), "mem": Decimal(1)}}
    assert who_overlaps(small, sets) is None  # three 1-slice partitions fit side by side
    whole = device("gpu-0", {"slices": "7", "mem": "8"})
    too_big = device("huge", {"slices": "9"})
    plain = device("plain")
    assert who_overlaps([*small, whole, too_big, plain], sets) == ("gpu-0", "p0", "gpu-0-set/mem")


def test_takeable_devices_fit_the_counters_together() -> None:
    sets = {"gpu-0-set": {"slices": Decimal(7), "mem": Decimal(8)}}
    found = {
        d["name"]: d
        for d in [
            device("gpu-0", {"slices": "7", "mem": "8"}),
            *(device(f"gpu-0-p{i}", {"slices": "1", "mem": "1"}) for i in range(3)),
            device("plain"),
        ]
    }
    # the whole GPU comes first by name and leaves nothing for its partitions
    assert takeable(found, [], sets) == ["gpu-0", "plain"]
    # a partition in use: the whole GPU no longer fits, the other partitions do
    assert takeable(found, ["gpu-0-p1"], sets) == ["gpu-0-p0", "gpu-0-p2", "plain"]
    assert takeable(found, ["gpu-0", "plain"], sets) == []
    assert takeable({"plain": device("plain")}, [], {}) == ["plain"]


def test_attribute_values_and_their_selectors() -> None:
    from conformance.harness import attribute_value, match_cel

    device = {
        "name": "gpu-0",
        "attributes": {
            "index": {"int": 3},
            "gpu.example.com/model": {"string": "X"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
        },
    }
    assert attribute_value(device, "index", "gpu.example.com") == 3
    assert attribute_value(device, "gpu.example.com/index", "gpu.example.com") == 3
    assert attribute_value(device, "model", "gpu.example.com") == "X"
    assert attribute_value(device, "resource.kubernetes.io/pciBusID", "gpu.example.com") == "0000:18:00.0"
    assert attribute_value(device, "pciBusID", "gpu.example.com") is None
    assert attribute_value(device, "other.example.com/index", "gpu.example.com") is None
    assert match_cel("index", 3, "gpu.example.com") == 'device.attributes["gpu.example.com"].index == 3'
    assert match_cel("a.io/name", 'say "hi"', "d") == 'device.attributes["a.io"].name == "say \\"hi\\""'
    assert match_cel("on", True, "d") == 'device.attributes["d"].on == true'


HALF = Decimal("0.5")


@pytest.mark.parametrize(
    ("capacity", "half"),
    [
        # the reference driver's memory of an H100 (81559 MiB): 40779 MiB, not 40779.5 (rounded down to
        # the step, so two fit), and its compute share
        ({"value": "85520809984", "requestPolicy": {"default": "85520809984",
          "validRange": {"min": "1Gi", "step": "1Mi"}}}, Decimal(40779 * 2**20)),
        ({"value": "100", "requestPolicy": {"default": "100", "validRange": {"min": "1", "step": "1"}}}, 50),
        # dra-example-driver's net profile: bandwidth with a range and a max, vfs always 1
        ({"value": "100Gi", "requestPolicy": {"default": "1Gi",
          "validRange": {"min": "100Mi", "max": "100Gi", "step": "1Mi"}}}, Decimal(50 * 2**30)),
        ({"value": "100", "requestPolicy": {"default": "1", "validValues": ["1"]}}, 1),
        ({"value": "100", "requestPolicy": {"default": "10", "validValues": ["10", "40", "60"]}}, 40),
        # its cpu profile: no policy, any amount
        ({"value": "4"}, 2),
        ({"value": "5"}, Decimal("2.5")),
        # a minimum above half, a max below it, a range without a step
        ({"value": "10", "requestPolicy": {"default": "10", "validRange": {"min": "6"}}}, 6),
        ({"value": "10", "requestPolicy": {"default": "2", "validRange": {"min": "1", "max": "2"}}}, 2),
        ({"value": "9", "requestPolicy": {"default": "9", "validRange": {"min": "1"}}}, 4),
    ],
)  # fmt: skip
def test_share_amount_is_half_rounded_down_to_what_the_policy_takes(
    capacity: dict[str, Any], half: Decimal
) -> None:
    assert share_amount(capacity, HALF) == half


def test_quantity_text() -> None:
    assert quantity_text(Decimal(42760060928)) == "42760060928"
    assert quantity_text(Decimal("2.5")) == "2500m"


def test_compatibility_groups_keep_devices_apart() -> None:
    sets = {"gpu-0-set": {"slices": Decimal(7), "whole": Decimal(1)}}
    shared = device("gpu-0", {"whole": "1"}, ["whole-gpu"])
    parts = [device(f"gpu-0-p{i}", {"slices": "1"}, ["mig"]) for i in range(2)]
    bare = device("gpu-0-q", {"slices": "1"})
    assert compatibility_groups(shared) == {"gpu-0-set": frozenset({"whole-gpu"})}
    assert compatibility_groups(bare) == {"gpu-0-set": frozenset()}
    # the counters fit: only the groups keep them apart; the partitions share "mig"
    assert incompatible([*parts, shared], sets) == ("gpu-0", "gpu-0-p0", "gpu-0-set")
    assert incompatible(parts, sets) is None
    # a device without groups goes only with others without
    assert incompatible([parts[0], bare], sets) == ("gpu-0-p0", "gpu-0-q", "gpu-0-set")
    assert incompatible([bare, device("gpu-0-r", {"slices": "1"})], sets) is None
    # overdrawn counters are ALLOC-PARTITION's pair, not this one
    assert (
        incompatible([device("a", {"slices": "7"}, ["x"]), device("b", {"slices": "1"}, ["y"])], sets) is None
    )
    found = {d["name"]: d for d in [shared, *parts]}
    assert takeable(found, [], sets) == ["gpu-0"]
    assert takeable(found, ["gpu-0-p1"], sets) == ["gpu-0-p0"]
    assert takeable({d["name"]: d for d in [*parts, bare]}, [], sets) == ["gpu-0-p0", "gpu-0-p1"]
