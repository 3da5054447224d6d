"""Compatibility groups: partitionable GPUs published in both modes, the modes kept apart."""

from __future__ import annotations

import pytest

import fakegpu
from driver.checkpoint import ClaimRecord, PreparedDevice
from driver.compatibility import MIG_GROUP, WHOLE_GPU_COUNTER, WHOLE_GPU_GROUP, group_by_mode
from driver.conflicts import check_conflicts
from driver.devices import discover
from driver.errors import DeviceConflict, SettingsError
from driver.inventory import Inventory
from driver.planning import ClaimRef
from driver.settings import from_args
from driver.slicing import build_slices
from tests.driver.drvkit import DRIVER, NODE, inventory


@pytest.fixture(scope="module")
def grouped() -> Inventory:
    with fakegpu.installed("dgx-h100-mig-last", node_name="node-a"):
        return group_by_mode(discover(["gpu", "partitionable-mig"]))


def test_partitions_and_the_shared_whole_gpu_are_in_different_groups(grouped: Inventory) -> None:
    inv = grouped
    devices = inv.devices
    whole = devices["gpu-7"]
    assert whole.multi_allocatable and whole.compatibility_groups == (WHOLE_GPU_GROUP,)
    assert whole.consumes_counters == {"gpu-7-counter-set": {WHOLE_GPU_COUNTER: 1}}
    assert set(whole.request_policies) == {"memory", "computeShare"}
    parts = [d for d in devices.values() if d.kind == "partition"]
    assert parts and all(d.compatibility_groups == (MIG_GROUP,) for d in parts)
    assert inv.counter_sets["gpu-7-counter-set"][WHOLE_GPU_COUNTER] == 1
    # the GPUs with MIG off are left as they are
    assert not devices["gpu-0"].compatibility_groups and not devices["gpu-0"].multi_allocatable


def test_slices_declare_the_groups_on_each_counter_consumption(grouped: Inventory) -> None:
    bodies = build_slices(grouped, driver_name=DRIVER, node_name=NODE, generation=1)
    uses = {
        d["name"]: d["consumesCounters"]
        for body in bodies
        for d in body["spec"].get("devices") or []
        if d.get("consumesCounters")
    }
    assert uses["gpu-7"] == [
        {
            "counterSet": "gpu-7-counter-set",
            "counters": {WHOLE_GPU_COUNTER: {"value": "1"}},
            "compatibilityGroups": [WHOLE_GPU_GROUP],
        }
    ]
    assert all(u[0]["compatibilityGroups"] == [MIG_GROUP] for n, u in uses.items() if n != "gpu-7")
    (whole,) = [d for body in bodies for d in body["spec"].get("devices") or [] if d["name"] == "gpu-7"]
    assert whole["allowMultipleAllocations"] is True


def test_without_a_partitionable_gpu_the_setting_is_refused() -> None:
    with pytest.raises(SettingsError, match="no partitionable GPU"):
        group_by_mode(inventory())


def test_prepare_still_refuses_a_share_of_a_gpu_whose_partition_is_prepared(grouped: Inventory) -> None:
    devices = grouped.devices
    part = next(n for n, d in devices.items() if d.kind == "partition")
    held = ClaimRecord(
        uid="a", namespace="ns", name="a",
        devices=[PreparedDevice(request_names=["r"], pool=NODE, device=part, cdi_ids=[], kind="partition")],
    )  # fmt: skip
    share = PreparedDevice(request_names=["r"], pool=NODE, device="gpu-7", cdi_ids=[], shareable=True)
    with pytest.raises(DeviceConflict, match="same hardware"):
        check_conflicts(ClaimRef("ns", "b", "b"), [share], [held], grouped)


def test_the_setting_needs_partitionable_devices() -> None:
    with pytest.raises(SettingsError, match="add partitionable-mig"):
        from_args(["--node-name", "n", "--compatibility-groups"], {})
    on = from_args(["--node-name", "n", "--device-kinds", "gpu,partitionable-mig"],
                   {"DRA_GPU_COMPATIBILITY_GROUPS": "true"})  # fmt: skip
    assert on.backend.compatibility_groups
    assert not from_args(["--node-name", "n"], {}).backend.compatibility_groups
