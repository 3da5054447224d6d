"""Device discovery and MIG partitions through pynvml, on fakegpu machines."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from kubernetes import client

import fakegpu
from driver import devices
from driver.devices import discover
from driver.errors import DeviceError
from driver.inventory import DeviceInfo, Inventory, Placement, Version
from driver.partitions import prepare_partition, unprepare_partition
from driver.slicing import build_slices
from tests import kube

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# QualifiedName: an optional DNS-subdomain domain, then a C identifier of at most 32 characters.
ATTRIBUTE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z_][A-Za-z0-9_]{0,31}$")
PCI_BUS_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@pytest.fixture
def h100() -> Iterator[fakegpu.FakeMachine]:
    with fakegpu.installed("dgx-h100", node_name="node-a") as machine:
        yield machine


@pytest.fixture
def h100_mig(h100: fakegpu.FakeMachine) -> fakegpu.FakeMachine:
    """dgx-h100 with MIG mode on and no instances."""
    for gpu in range(h100.gpu_count):
        h100.set_mig_mode(gpu, True)
    return h100


def test_whole_gpus_carry_nvidia_style_attributes(h100: fakegpu.FakeMachine) -> None:
    inv = discover(["gpu"])
    assert list(inv.devices) == [f"gpu-{i}" for i in range(8)]
    dev = inv["gpu-3"]
    attrs = dev.attributes
    assert dev.kind == "gpu" and dev.index == 3 and dev.parent_uuid is None
    assert attrs["type"] == "gpu"
    assert attrs["uuid"] == dev.uuid and str(dev.uuid).startswith("GPU-")
    assert attrs["productName"] == "NVIDIA H100 80GB HBM3"
    assert attrs["brand"] == "Nvidia"
    assert attrs["architecture"] == "Hopper"
    assert attrs["cudaComputeCapability"] == Version("9.0.0")
    for key in ("driverVersion", "cudaDriverVersion", "cudaComputeCapability"):
        value = attrs[key]
        assert isinstance(value, Version) and SEMVER.match(value.value), (key, value)
    assert attrs["index"] == 3 and isinstance(attrs["minor"], int)
    assert PCI_BUS_ID.match(str(attrs["resource.kubernetes.io/pciBusID"]))
    assert dev.capacity == {"memory": 85520809984}
    assert len({d.uuid for d in inv}) == 8


def test_static_mig_devices_of_an_administrator_layout() -> None:
    with fakegpu.installed("dgx-h100-mig"):
        inv = discover(["gpu", "mig"])
    assert all(d.kind == "mig" for d in inv)  # every GPU has MIG on: no whole GPUs
    assert [d.name for d in inv if d.index == 2] == ["gpu-2-mig-3g40gb-1", "gpu-2-mig-3g40gb-2"]
    assert [d.name for d in inv if d.index == 6] == [f"gpu-6-mig-1g10gb-{7 + k}" for k in range(7)]
    dev = inv["gpu-4-mig-2g20gb-5"]
    assert dev.attributes["type"] == "mig"
    assert dev.attributes["profile"] == "2g.20gb"
    assert dev.attributes["parentUUID"] == dev.parent_uuid
    assert str(dev.uuid).startswith("MIG-") and dev.attributes["uuid"] == dev.uuid
    assert dev.placement == Placement(4, 2)
    assert dev.gpu_instance_id == 5 and dev.compute_instance_id == 0
    assert dev.capacity["multiprocessors"] == 32
    assert dev.capacity["memory"] > 20 * 10**9


def test_mig_on_without_a_mig_kind_publishes_nothing_for_that_gpu(h100_mig: fakegpu.FakeMachine) -> None:
    h100_mig.set_mig_mode(0, False)
    assert list(discover(["gpu"]).devices) == ["gpu-0"]


def test_partitionable_mig_has_a_device_per_placement_and_a_counter_set(
    h100_mig: fakegpu.FakeMachine,
) -> None:
    inv = discover(["gpu", "partitionable-mig"])
    assert len(inv.counter_sets) == 8
    on_gpu0 = [d.name for d in inv if d.index == 0]
    assert len(on_gpu0) == 26
    assert on_gpu0[0] == "gpu-0"
    assert {"gpu-0-part-7g80gb-0", "gpu-0-part-3g40gb-4", "gpu-0-part-1g10gbme-6"} <= set(on_gpu0)
    counters = inv.counter_sets["gpu-0-counter-set"]
    assert [counters[f"memory-slice-{i}"] for i in range(8)] == [1] * 8
    assert counters["compute-slices"] == 7
    part = inv["gpu-0-part-3g40gb-4"]
    assert part.kind == "partition" and part.uuid is None
    assert part.consumes_counters["gpu-0-counter-set"] == {
        "memory-slice-4": 1,
        "memory-slice-5": 1,
        "memory-slice-6": 1,
        "memory-slice-7": 1,
        "compute-slices": 3,
        "memory": 40448 * 2**20,
    }
    assert part.attributes["profile"] == "3g.40gb" and part.attributes["type"] == "mig"
    assert inv["gpu-0"].consumes_counters["gpu-0-counter-set"] == counters
    for dev in inv:
        assert DNS_LABEL.match(dev.name), dev.name


def test_h200_profile_names() -> None:
    with fakegpu.installed("dgx-h200") as machine:
        machine.set_mig_mode(0, True)
        inv = discover(["partitionable-mig"])
    assert {str(d.attributes["profile"]) for d in inv if d.kind == "partition"} == {
        "1g.18gb",
        "1g.18gb+me",
        "1g.35gb",
        "2g.35gb",
        "3g.71gb",
        "4g.71gb",
        "7g.141gb",
    }


def test_prepare_partition_creates_the_instance_and_unprepare_destroys_it(
    h100_mig: fakegpu.FakeMachine,
) -> None:
    inv = discover(["partitionable-mig"])
    part = inv["gpu-1-part-3g40gb-4"]
    mig_uuid = prepare_partition(part)
    assert mig_uuid.startswith("MIG-")
    assert prepare_partition(part) == mig_uuid  # idempotent: the same instance again
    static = discover(["mig"])
    (made,) = static
    assert made.uuid == mig_uuid
    assert made.placement == part.placement
    assert made.attributes["profile"] == "3g.40gb"
    (gi,) = h100_mig.snapshot()["gpus"][1]["mig"]["gpu_instances"]
    assert len(gi["compute_instances"]) == 1
    unprepare_partition(part)
    unprepare_partition(part)  # already gone: fine
    assert len(discover(["mig"])) == 0


def test_overlapping_partition_is_refused_with_a_clear_error(h100_mig: fakegpu.FakeMachine) -> None:
    inv = discover(["partitionable-mig"])
    prepare_partition(inv["gpu-0-part-4g40gb-0"])
    prepare_partition(inv["gpu-0-part-3g40gb-4"])
    with pytest.raises(DeviceError, match=r"1g\.10gb at memory slice 2 on GPU GPU-.*gpu-0-part-1g10gb-2"):
        prepare_partition(inv["gpu-0-part-1g10gb-2"])
    assert len(discover(["mig"])) == 2


def test_prepare_refuses_a_device_that_is_not_a_partition(h100: fakegpu.FakeMachine) -> None:
    with pytest.raises(DeviceError, match="gpu-0 is a gpu, not a partition"):
        prepare_partition(discover(["gpu"])["gpu-0"])


def test_gpus_without_mig_stay_whole_in_partitionable_mode() -> None:
    with fakegpu.installed("l4x4"):
        inv = discover(["gpu", "mig", "partitionable-mig"])
    assert [d.kind for d in inv] == ["gpu"] * 4
    assert inv.counter_sets == {}
    assert inv["gpu-0"].attributes["architecture"] == "Ada Lovelace"


def test_jetson_publishes_what_it_can_answer() -> None:
    with fakegpu.installed("jetson-orin"):
        (dev,) = discover(["gpu"])
    assert dev.attributes["productName"] == "Orin (nvgpu)"
    assert dev.attributes["cudaComputeCapability"] == Version("8.7.0")
    assert "resource.kubernetes.io/pciBusID" not in dev.attributes
    assert dev.capacity == {}


@pytest.mark.parametrize("profile", fakegpu.available_profiles())
def test_every_fake_profile_gives_valid_slices(profile: str) -> None:
    with fakegpu.installed(profile) as machine:
        for gpu in range(machine.gpu_count):
            state = machine.state.gpus[gpu]
            if fakegpu.MODELS[state.model].mig_capable and not state.gpu_instances:
                machine.set_mig_mode(gpu, gpu % 2 == 0)
        inv = discover(["gpu", "partitionable-mig"])
    assert len(inv) >= 1
    for body in build_slices(inv, driver_name="gpu.dra-conformance.io", node_name="n", generation=1):
        model = client.V1ResourceSlice.from_dict(body)
        assert kube.to_json(model) == body
        for dev in body["spec"].get("devices", []):
            assert DNS_LABEL.match(dev["name"])
            assert len(dev["attributes"]) + len(dev.get("capacity", {})) <= 32
            for name in [*dev["attributes"], *dev.get("capacity", {})]:
                assert ATTRIBUTE_NAME.match(name), name
            for attr in dev["attributes"].values():
                if "string" in attr:
                    assert len(attr["string"]) <= 64
                if "version" in attr:
                    assert SEMVER.match(attr["version"])


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(DeviceError, match="unknown device kinds"):
        discover(["gpu", "vgpu"])


def test_no_nvml_is_a_device_error() -> None:
    fakegpu.uninstall()
    try:
        discover(["gpu"])
    except DeviceError as e:
        assert "cannot initialise NVML" in str(e)
    else:  # a machine with a real GPU
        pytest.skip("real NVML present")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("535.104.05", "535.104.5"), ("9.0", "9.0.0"), ("550.54.15", "550.54.15"), ("12", "12.0.0")],
)
def test_semver(raw: str, expected: str) -> None:
    assert devices.semver(raw) == expected


def test_inventory_helpers(h100_mig: fakegpu.FakeMachine) -> None:
    inv: Inventory = discover(["partitionable-mig"])
    gpu0 = inv["gpu-0"].uuid
    assert gpu0 is not None
    assert inv.gpu_uuids()[0] == gpu0
    assert len(inv.on_gpu(gpu0)) == 26
    assert inv.by_uuid(gpu0) is inv["gpu-0"]
    assert inv.get("nope") is None and "gpu-0" in inv


def test_partitions_whose_labels_collide_get_the_profile_id(h100_mig: fakegpu.FakeMachine) -> None:
    part = discover(["partitionable-mig"])["gpu-0-part-3g40gb-0"]
    found: dict[str, DeviceInfo] = {}
    devices._add(found, part)
    devices._add(found, part)
    assert list(found) == ["gpu-0-part-3g40gb-0", "gpu-0-part-3g40gb-0-p9"]


def test_gpus_carry_their_numa_node(h100: fakegpu.FakeMachine) -> None:
    inv = discover(["gpu"])
    # a DGX: GPUs 0-3 on the first socket, 4-7 on the second
    assert [inv[f"gpu-{i}"].attributes["resource.kubernetes.io/numaNode"] for i in range(8)] == [0] * 4 + [
        1
    ] * 4
