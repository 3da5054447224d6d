"""License seats (--license-seats, driver.licenses): devices in a slice that skips node operations."""

from __future__ import annotations

import pytest

from driver.deviceclasses import class_name, device_classes
from driver.errors import SettingsError
from driver.inventory import SKIP_ALL, Inventory
from driver.licenses import LICENSE_TYPE, with_license_seats
from driver.settings import from_args
from driver.slicing import build_slices
from tests.driver.drvkit import (
    DRIVER,
    NODE,
    Node,
    gpu,
    inventory,
    make_claim,
    partition,
    prepare,
    result,
    unprepare,
)


def _seated() -> Inventory:
    return with_license_seats(inventory())


def test_a_seat_for_each_whole_gpu_only() -> None:
    seats = [d for d in _seated() if d.kind == "license"]
    assert [d.name for d in seats] == [f"gpu-{i}-license" for i in range(4)]
    for seat in seats:
        whole = inventory()[seat.name.removesuffix("-license")]
        assert seat.attributes["type"] == LICENSE_TYPE
        assert seat.uuid is None and seat.parent_uuid == whole.uuid and seat.index == whole.index
        assert not seat.capacity and not seat.consumes_counters
        assert seat.skip_node_operations == SKIP_ALL


def test_a_seat_conflicts_with_no_hardware() -> None:
    seated = _seated()
    seat = seated["gpu-0-license"]
    assert not seat.overlaps(gpu(0)) and not gpu(0).overlaps(seat)
    assert not seat.overlaps(partition(0, 0)) and not seated["gpu-1-license"].overlaps(seat)
    assert seat.overlaps(seat)


def test_seats_get_a_slice_that_skips_node_operations() -> None:
    slices = build_slices(_seated(), driver_name=DRIVER, node_name=NODE, generation=1)
    skipping = [s for s in slices if "skipNodeOperations" in s["spec"]]
    assert [s["spec"]["skipNodeOperations"] for s in skipping] == [["*"]]
    assert {d["name"] for d in skipping[0]["spec"]["devices"]} == {f"gpu-{i}-license" for i in range(4)}
    others = {d["name"] for s in slices if s not in skipping for d in s["spec"].get("devices") or []}
    assert others == set(inventory().devices)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    plain = build_slices(inventory(), driver_name=DRIVER, node_name=NODE, generation=1)
    assert not [s for s in plain if "skipNodeOperations" in s["spec"]]


def test_the_seat_class() -> None:
    classes = {c["metadata"]["name"]: c for c in device_classes(DRIVER)}
    seat_class = classes[class_name(DRIVER, LICENSE_TYPE)]
    assert '.type == "license"' in seat_class["spec"]["selectors"][0]["cel"]["expression"]
    assert "extendedResourceName" not in seat_class["spec"]


def test_the_setting() -> None:
    assert not from_args(["--node-name", "n"], {}).backend.license_seats
    assert from_args(["--node-name", "n", "--license-seats"], {}).backend.license_seats
    assert from_args(["--node-name", "n"], {"DRA_GPU_LICENSE_SEATS": "true"}).backend.license_seats
    with pytest.raises(SettingsError, match=r"--license-seats: .* publishes none; add gpu"):
        from_args(["--node-name", "n", "--license-seats", "--device-kinds", "mig"], {})


def test_a_seat_asked_for_is_prepared_with_nothing_made(node: Node) -> None:
    """With the gate off, or in a claim of seats alone prepared anyway, a seat is answered with no CDI
    id, no spec is written for it, and unprepare is fine."""
    node.inventory = _seated()
    node.serve()
    claim = node.put(make_claim("seat-only", [result("seat", "gpu-1-license")]))
    uid = claim["metadata"]["uid"]
    answer = prepare(node, claim).claims[uid]
    assert answer.error == ""
    assert [(d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [("gpu-1-license", [])]
    assert not list(node.settings.kubelet.cdi_dir.glob(f"*{uid}*"))
    assert prepare(node, claim).claims[uid].error == ""  # again: the same answer, nothing to remake
    assert unprepare(node, claim).claims[uid].error == ""
    # the GPU of the seat is free for another claim all along
    other = node.put(make_claim("gpu-1", [result("gpu", "gpu-1")]))
    assert prepare(node, other).claims[other["metadata"]["uid"]].error == ""
