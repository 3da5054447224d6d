"""ResourceSlice building and publishing, without an API server (an in-memory store)."""

from __future__ import annotations

import itertools
import queue
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from draproto.rest import Rest, RestError
from driver import devices
from driver.breaking_slices import slice_builder
from driver.errors import StoreConflict
from driver.faults import NO_EXECUTE, NO_SCHEDULE, Fault
from driver.inventory import AttributeValue, DeviceInfo, Inventory, MigProfile, Placement, Version
from driver.kubeslices import KubeSliceStore
from driver.slices import SlicePublisher
from driver.slicing import (
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_WITH_EXTRAS,
    DeviceTaint,
    build_slices,
    taints_from_faults,
)
from tests import kube, manifests
from tests.polling import until

DRIVER = "gpu.dra-conformance.io"
NODE = "node-a"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# H100-80GB profiles as NVML reports them (fakegpu/profiles/README.md); engines simplified.
_H100 = [
    # id, index, name, slices, instances, MiB, SMs, placements
    (19, 0, "1g.10gb", 1, 7, 9984, 16, [(i, 1) for i in range(7)]),
    (20, 7, "1g.10gb+me", 1, 1, 9984, 16, [(i, 1) for i in range(7)]),
    (15, 9, "1g.20gb", 1, 4, 20096, 26, [(i, 2) for i in (0, 2, 4, 6)]),
    (14, 1, "2g.20gb", 2, 3, 20096, 32, [(i, 2) for i in (0, 2, 4)]),
    (9, 2, "3g.40gb", 3, 2, 40448, 60, [(0, 4), (4, 4)]),
    (5, 3, "4g.40gb", 4, 1, 40448, 64, [(0, 4)]),
    (0, 4, "7g.80gb", 7, 1, 81152, 132, [(0, 8)]),
]


def h100_profiles() -> list[MigProfile]:
    return [
        MigProfile(
            id=pid,
            index=idx,
            name=name,
            slices=slices,
            instance_count=count,
            memory_bytes=mib * 2**20,
            multiprocessors=sms,
            copy_engines=slices,
            decoders=slices,
            encoders=0,
            jpeg_engines=slices,
            ofa_engines=1 if slices == 7 else 0,
            placements=tuple(Placement(s, n) for s, n in placements),
        )
        for pid, idx, name, slices, count, mib, sms, placements in _H100
    ]


def _gpu(index: int) -> devices._Gpu:
    uuid = f"GPU-{index:08d}-1111-2222-3333-444444444444"
    attributes: dict[str, AttributeValue] = {
        "type": "gpu",
        "uuid": uuid,
        "productName": "NVIDIA H100 80GB HBM3",
        "cudaComputeCapability": Version("9.0.0"),
        "index": index,
        "minor": index,
        "migCapable": True,
    }
    return devices._Gpu(None, index, index, uuid, attributes, 85520809984, True)


def gpu_inventory(count: int) -> Inventory:
    devs = [devices._gpu_device(_gpu(i)) for i in range(count)]
    return Inventory(devices={d.name: d for d in devs})


def partitionable_inventory(count: int) -> Inventory:
    """What discovery gives for ``count`` H100s in partitionable mode (built without NVML)."""
    found: dict[str, DeviceInfo] = {}
    sets: dict[str, dict[str, int]] = {}
    profiles = h100_profiles()
    for i in range(count):
        g = _gpu(i)
        name, counters = devices._counter_set(g, profiles)
        sets[name] = counters
        full = devices._gpu_device(g, consumes={name: dict(counters)})
        found[full.name] = full
        for prof in profiles:
            for placement in prof.placements:
                dev = devices._partition_device(g, prof, placement, name)
                found[dev.name] = dev
    return Inventory(devices=found, counter_sets=sets)


def device_slices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in slices if "devices" in s["spec"]]


def all_devices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices", [])]


# --- building -----------------------------------------------------------------------------------


def test_one_slice_for_a_few_gpus_with_pool_owner_and_typed_attributes() -> None:
    slices = build_slices(gpu_inventory(8), driver_name=DRIVER, node_name=NODE, generation=3, node_uid="u-1")
    assert len(slices) == 1
    body = slices[0]
    assert body["apiVersion"] == "resource.k8s.io/v1"
    assert body["spec"]["pool"] == {"name": NODE, "generation": 3, "resourceSliceCount": 1}
    assert body["spec"]["nodeName"] == NODE
    assert body["spec"]["driver"] == DRIVER
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "u-1", "controller": True}
    ]
    dev = body["spec"]["devices"][0]
    assert dev["name"] == "gpu-0"
    assert dev["attributes"]["type"] == {"string": "gpu"}
    assert dev["attributes"]["index"] == {"int": 0}
    assert dev["attributes"]["migCapable"] == {"bool": True}
    assert dev["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert dev["capacity"]["memory"] == {"value": "85520809984"}
    assert "taints" not in dev and "consumesCounters" not in dev


@pytest.mark.parametrize(("count", "sizes"), [(128, [128]), (129, [128, 1]), (300, [128, 128, 44])])
def test_plain_devices_split_at_128(count: int, sizes: list[int]) -> None:
    slices = build_slices(gpu_inventory(count), driver_name=DRIVER, node_name=NODE, generation=1)
    assert [len(s["spec"]["devices"]) for s in slices] == sizes
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(sizes)}
    names = [s["metadata"]["name"] for s in slices]
    assert len(set(names)) == len(names)


def test_partitionable_pool_counters_in_own_slice_and_64_devices_a_slice() -> None:
    inv = partitionable_inventory(8)
    assert len(inv) == 8 * 26  # 25 placements of the 7 profiles, plus the whole GPU
    slices = build_slices(inv, driver_name=DRIVER, node_name=NODE, generation=1)
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    assert len(counter_slices) == 1
    assert "devices" not in counter_slices[0]["spec"]
    assert len(counter_slices[0]["spec"]["sharedCounters"]) == 8
    sizes = [len(s["spec"]["devices"]) for s in device_slices(slices)]
    assert max(sizes) <= MAX_DEVICES_PER_SLICE_WITH_EXTRAS
    assert sum(sizes) == len(inv)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}


def test_partition_consumption_fits_its_counter_set() -> None:
    slices = build_slices(partitionable_inventory(2), driver_name=DRIVER, node_name=NODE, generation=1)
    sets = {cs["name"]: cs["counters"] for s in slices for cs in s["spec"].get("sharedCounters", [])}
    for dev in all_devices(slices):
        assert DNS_LABEL.match(dev["name"]), dev["name"]
        assert len(dev["attributes"]) + len(dev.get("capacity", {})) <= 32
        (consumption,) = dev["consumesCounters"]
        available = sets[consumption["counterSet"]]
        assert len(consumption["counters"]) <= 32
        for counter, amount in consumption["counters"].items():
            assert DNS_LABEL.match(counter), counter
            assert int(amount["value"]) <= int(available[counter]["value"])
    full = next(d for d in all_devices(slices) if d["name"] == "gpu-0")
    assert full["consumesCounters"][0]["counters"] == sets["gpu-0-counter-set"]


def _fits(chosen: list[DeviceInfo], inv: Inventory) -> bool:
    """Whether the counters allow allocating all of ``chosen`` together (as the scheduler does)."""
    left: dict[str, dict[str, int]] = {k: dict(v) for k, v in inv.counter_sets.items()}
    for dev in chosen:
        for set_name, counters in dev.consumes_counters.items():
            for counter, amount in counters.items():
                left[set_name][counter] -= amount
                if left[set_name][counter] < 0:
                    return False
    return True


def test_counters_allow_exactly_the_layouts_mig_allows() -> None:
    inv = partitionable_inventory(1)
    d = inv.devices
    assert _fits([d["gpu-0-part-3g40gb-0"], d["gpu-0-part-3g40gb-4"]], inv)
    assert _fits([d["gpu-0-part-4g40gb-0"], d["gpu-0-part-3g40gb-4"]], inv)
    assert _fits([d[f"gpu-0-part-1g10gb-{i}"] for i in range(7)], inv)
    assert _fits([d[f"gpu-0-part-1g20gb-{i}"] for i in (0, 2, 4, 6)], inv)
    assert not _fits([d["gpu-0-part-4g40gb-0"], d["gpu-0-part-3g40gb-0"]], inv)  # overlap
    assert not _fits([d["gpu-0"], d["gpu-0-part-1g10gb-6"]], inv)  # whole GPU takes everything
    assert not _fits([d["gpu-0-part-7g80gb-0"], d["gpu-0-part-1g10gb-0"]], inv)
    assert not _fits([d["gpu-0-part-1g10gbme-0"], d["gpu-0-part-1g10gbme-1"]], inv)  # one +me instance
    assert not _fits([d["gpu-0-part-2g20gb-0"], d["gpu-0-part-1g10gb-1"]], inv)  # slice 1 is in 2g's span


def test_taints_lower_the_limit_to_64() -> None:
    inv = gpu_inventory(100)
    taints = {"gpu-5": [DeviceTaint(f"{DRIVER}/unhealthy", "xid-79", NO_EXECUTE, 1700000000.5)]}
    slices = build_slices(inv, driver_name=DRIVER, node_name=NODE, generation=1, taints=taints)
    sizes = [len(s["spec"]["devices"]) for s in slices]
    assert sizes[0] <= MAX_DEVICES_PER_SLICE_WITH_EXTRAS
    assert sum(sizes) == 100
    tainted = next(d for d in all_devices(slices) if d["name"] == "gpu-5")
    assert tainted["taints"] == [
        {
            "key": f"{DRIVER}/unhealthy",
            "value": "xid-79",
            "effect": "NoExecute",
            "timeAdded": "2023-11-14T22:13:20Z",
        }
    ]


def test_list_attributes_lower_the_limit_to_64() -> None:
    devs = {f"d-{i}": DeviceInfo(f"d-{i}", "gpu", None, None, i, i, {"ids": [1, 2]}, {}) for i in range(70)}
    slices = build_slices(Inventory(devices=devs), driver_name=DRIVER, node_name=NODE, generation=1)
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 6]
    assert slices[0]["spec"]["devices"][0]["attributes"]["ids"] == {"ints": [1, 2]}


def test_oversized_switch_puts_everything_in_one_slice() -> None:
    slices = slice_builder(lambda rule: rule == "oversized-slice")(
        gpu_inventory(200), driver_name=DRIVER, node_name=NODE, generation=1
    )
    assert [len(s["spec"]["devices"]) for s in slices] == [200]
    assert MAX_DEVICES_PER_SLICE < 200


def test_empty_inventory_still_publishes_an_empty_pool() -> None:
    slices = build_slices(Inventory(devices={}), driver_name=DRIVER, node_name=NODE, generation=1)
    assert len(slices) == 1
    assert slices[0]["spec"]["devices"] == []


def test_bodies_read_into_the_kubernetes_models_without_loss() -> None:
    inv = partitionable_inventory(1)
    taints = taints_from_faults({"gpu-0": Fault("xid-48", "XID 48", NO_EXECUTE, 1.0)}, DRIVER)
    for body in build_slices(
        inv, driver_name=DRIVER, node_name=NODE, generation=1, node_uid="u", taints=taints
    ):
        model = client.V1ResourceSlice.from_dict(body)
        again = kube.to_json(model)
        for dev in again["spec"].get("devices", []):
            for taint in dev.get("taints", []):
                taint["timeAdded"] = taint["timeAdded"].replace("+00:00", "Z")
        assert again == body


def test_taints_from_faults() -> None:
    faults = {
        "gpu-1": Fault("xid-31", "XID 31", NO_SCHEDULE, 10.0),
        "gpu-2": Fault("gpu-lost", "lost", NO_EXECUTE, 20.0),
    }
    taints = taints_from_faults(faults, DRIVER)
    assert taints["gpu-1"] == [DeviceTaint(f"{DRIVER}/unhealthy", "xid-31", "NoSchedule", 10.0)]
    assert taints["gpu-2"][0].effect == "NoExecute"


# --- publishing ---------------------------------------------------------------------------------


class MemoryStore:
    """A ``SliceStore`` that keeps slices in a dict and streams watch events from a queue."""

    def __init__(self, node_uid: str | None = "node-uid-1") -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.uid = node_uid
        self._rv = itertools.count(1)
        self._watchers: list[queue.Queue[tuple[str, dict[str, Any]] | None]] = []
        self.lock = threading.Lock()
        self.writes = 0

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        for q in list(self._watchers):
            q.put((kind, obj))

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(next(self._rv))}}
        self.objects[body["metadata"]["name"]] = stored
        return stored

    def node_uid(self, node_name: str) -> str | None:
        return self.uid

    def list(self, driver_name: str, node_name: str) -> tuple[list[dict[str, Any]], str]:
        with self.lock:
            items = [
                o
                for o in self.objects.values()
                if o["spec"]["driver"] == driver_name and o["spec"].get("nodeName") == node_name
            ]
            return items, str(next(self._rv))

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if body["metadata"]["name"] in self.objects:
                raise StoreConflict(body["metadata"]["name"])
            self.writes += 1
            stored = self._stamp(body)
        self._emit("ADDED", stored)
        return stored

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.writes += 1
            stored = self._stamp(body)
        self._emit("MODIFIED", stored)
        return stored

    def delete(self, name: str) -> None:
        with self.lock:
            obj = self.objects.pop(name, None)
        if obj is not None:
            self._emit("DELETED", obj)

    def edit(self, name: str) -> None:
        """Someone else changes a slice."""
        with self.lock:
            body = self.objects[name]
            body["spec"]["devices"] = body["spec"]["devices"][:1]
            stored = self._stamp(body)
        self._emit("MODIFIED", stored)

    def watch(
        self, driver_name: str, node_name: str, resource_version: str
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        q: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._watchers.append(q)
        try:
            while (item := q.get()) is not None:
                yield item
        finally:
            self._watchers.remove(q)

    def interrupt(self) -> None:
        for q in list(self._watchers):
            q.put(None)


def generations(store: MemoryStore) -> set[int]:
    return {o["spec"]["pool"]["generation"] for o in store.objects.values()}


def publisher(store: MemoryStore, **kwargs: Any) -> SlicePublisher:
    return SlicePublisher(store, driver_name=DRIVER, node_name=NODE, resync_seconds=30, **kwargs)


def test_sync_writes_once_then_does_nothing() -> None:
    store = MemoryStore()
    pub = publisher(store)
    pub.update(partitionable_inventory(8))
    assert pub.sync() is True
    assert len(store.objects) == 5
    assert generations(store) == {1}
    writes = store.writes
    assert pub.sync() is False
    assert store.writes == writes


def test_resync_after_deletion_or_foreign_edit_bumps_generation_everywhere() -> None:
    store = MemoryStore()
    pub = publisher(store)
    pub.update(gpu_inventory(300))
    pub.sync()
    store.delete(f"{NODE}-{DRIVER}-1")
    assert pub.sync() is True
    assert len(store.objects) == 3
    assert generations(store) == {2}
    store.edit(f"{NODE}-{DRIVER}-0")
    assert pub.sync() is True
    assert generations(store) == {3}
    assert len(store.objects[f"{NODE}-{DRIVER}-0"]["spec"]["devices"]) == 128


def test_change_of_devices_or_taints_bumps_generation_and_drops_extra_slices() -> None:
    store = MemoryStore()
    pub = publisher(store)
    pub.update(gpu_inventory(300))
    pub.sync()
    pub.update(gpu_inventory(4))
    assert pub.sync() is True
    assert len(store.objects) == 1
    assert generations(store) == {2}
    pub.update(taints={"gpu-1": [DeviceTaint(f"{DRIVER}/unhealthy", "xid-79", NO_EXECUTE)]})
    assert pub.sync() is True
    (body,) = store.objects.values()
    assert body["spec"]["devices"][1]["taints"][0]["value"] == "xid-79"
    pub.update(taints={})
    assert pub.sync() is True
    assert "taints" not in next(iter(store.objects.values()))["spec"]["devices"][1]
    assert generations(store) == {4}


def test_generation_continues_above_what_a_previous_run_left() -> None:
    store = MemoryStore()
    first = publisher(store, keep=True)
    first.update(gpu_inventory(2))
    first.sync()
    first.update(gpu_inventory(3))
    first.sync()
    first.stop()
    assert generations(store) == {2}
    second = publisher(store)
    second.update(gpu_inventory(3))
    second.sync()
    assert generations(store) == {3}


def test_stop_removes_slices_unless_keep() -> None:
    store = MemoryStore()
    pub = publisher(store)
    pub.update(gpu_inventory(2))
    pub.sync()
    pub.stop()
    assert store.objects == {}
    kept = publisher(store, keep=True)
    kept.update(gpu_inventory(2))
    kept.sync()
    kept.stop()
    assert len(store.objects) == 1


class HangingStore(MemoryStore):
    """An API server that stops answering: ``list`` and ``delete`` block until released."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = threading.Event()
        self.release = threading.Event()

    def list(self, driver_name: str, node_name: str) -> tuple[list[dict[str, Any]], str]:
        if self.hang.is_set():
            self.release.wait(30)
        return super().list(driver_name, node_name)


def test_stop_is_bounded_when_the_api_server_does_not_answer() -> None:
    store = HangingStore()
    pub = publisher(store)
    pub.update(gpu_inventory(2))
    pub.start()
    assert pub.wait_synced(10)
    store.hang.set()
    began = time.monotonic()
    try:
        pub.stop(timeout=0.5)
        assert time.monotonic() - began < 3
        assert len(store.objects) == 1  # could not remove them in time: they stay
    finally:
        store.release.set()


def test_strangers_in_the_pool_are_removed_and_missing_node_means_no_owner() -> None:
    store = MemoryStore(node_uid=None)
    stranger = build_slices(gpu_inventory(1), driver_name=DRIVER, node_name=NODE, generation=7)[0]
    stranger["metadata"]["name"] = "leftover"
    store.create(stranger)
    pub = publisher(store)
    pub.update(gpu_inventory(2))
    pub.sync()
    assert set(store.objects) == {f"{NODE}-{DRIVER}-0"}
    assert generations(store) == {8}
    assert "ownerReferences" not in store.objects[f"{NODE}-{DRIVER}-0"]["metadata"]
    store.uid = "late-uid"
    pub.sync()
    assert store.objects[f"{NODE}-{DRIVER}-0"]["metadata"]["ownerReferences"][0]["uid"] == "late-uid"


def test_oversized_switch_reaches_the_publisher() -> None:
    store = MemoryStore()
    pub = publisher(store, build=slice_builder(lambda rule: rule == "oversized-slice"))
    pub.update(gpu_inventory(200))
    pub.sync()
    assert [len(o["spec"]["devices"]) for o in store.objects.values()] == [200]


def test_background_publisher_republishes_a_deleted_slice() -> None:
    store = MemoryStore()
    pub = publisher(store)
    pub.update(gpu_inventory(3))
    pub.start()
    try:
        until(lambda: len(store.objects) == 1)
        until(lambda: len(store._watchers) == 1)
        store.delete(f"{NODE}-{DRIVER}-0")
        until(lambda: generations(store) == {2})
        store.edit(f"{NODE}-{DRIVER}-0")
        until(lambda: generations(store) == {3})
        assert len(store.objects[f"{NODE}-{DRIVER}-0"]["spec"]["devices"]) == 3
        assert pub.wait_synced(5)
        assert generations(store) == {3}  # our own writes do not trigger more writes
    finally:
        pub.stop()
    assert store.objects == {}


# --- against a real kube-apiserver (local control plane) ----------------------------------------


@pytest.fixture(scope="module")
def api_client() -> Iterator[Any]:
    """A kubernetes ApiClient on a fresh local control plane, with Node ``node-a``."""
    import shutil
    import tempfile
    from pathlib import Path

    from clusters.errors import BinariesError
    from clusters.local.binaries import resolve
    from clusters.local.controlplane import ControlPlane
    from clusters.local.settings import BinariesSettings

    try:
        binaries = resolve(BinariesSettings(download=False, build=False))
    except BinariesError as e:
        pytest.skip(f"no control-plane binaries in the cache: {e}")
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="slc"))
    plane = ControlPlane(binaries, root).start()
    try:
        api = kube.admin_client(plane.kubeconfig)
        kube.core(api).create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield api
    finally:
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)


def _api_slices(api: Any) -> list[dict[str, Any]]:
    items, _ = KubeSliceStore(Rest(api)).list(DRIVER, NODE)
    return sorted(items, key=lambda s: s["metadata"]["name"])


@pytest.mark.cluster
@pytest.mark.xdist_group("driver-slices-apiserver")  # one control plane for them all
def test_api_server_takes_a_partitionable_pool_with_taints_and_gets_it_back_after_deletion(
    api_client: Any,
) -> None:
    node_uid = kube.core(api_client).read_node(NODE).metadata.uid
    pub = SlicePublisher(
        KubeSliceStore(Rest(api_client)), driver_name=DRIVER, node_name=NODE, resync_seconds=30
    )
    taint = DeviceTaint(f"{DRIVER}/unhealthy", "gpu-lost", NO_EXECUTE, time.time())
    pub.update(partitionable_inventory(8), taints={"gpu-3-part-7g80gb-0": [taint]})
    assert pub.sync() is True
    slices = _api_slices(api_client)
    assert len(slices) == 5
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {5}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {1}
    assert {s["metadata"]["ownerReferences"][0]["uid"] for s in slices} == {node_uid}
    tainted = next(d for d in all_devices(slices) if d["name"] == "gpu-3-part-7g80gb-0")
    assert tainted["taints"][0]["effect"] == "NoExecute"
    assert pub.sync() is False  # what the server echoes back counts as ours
    pub.start()
    try:
        kube.resource(api_client).delete_resource_slice(f"{NODE}-{DRIVER}-2")
        until(lambda: {s["spec"]["pool"]["generation"] for s in _api_slices(api_client)} == {2})
        assert len(_api_slices(api_client)) == 5
        edited = _api_slices(api_client)[1]
        edited["spec"]["devices"] = edited["spec"]["devices"][:3]
        KubeSliceStore(Rest(api_client)).replace(edited)
        until(lambda: {s["spec"]["pool"]["generation"] for s in _api_slices(api_client)} == {3})
        assert len(all_devices(_api_slices(api_client))) == 8 * 26
    finally:
        pub.stop()
    assert _api_slices(api_client) == []


@pytest.mark.cluster
@pytest.mark.xdist_group("driver-slices-apiserver")  # one control plane for them all
def test_api_server_refuses_the_oversized_slice_the_switch_makes(api_client: Any) -> None:
    pub = SlicePublisher(
        KubeSliceStore(Rest(api_client)),
        driver_name=DRIVER,
        node_name=NODE,
        build=slice_builder(lambda r: r == "oversized-slice"),
    )
    pub.update(gpu_inventory(MAX_DEVICES_PER_SLICE + 1))
    with pytest.raises(RestError) as caught:
        pub.sync()
    assert caught.value.status == 422
    pub.stop()


@pytest.mark.cluster
@pytest.mark.xdist_group("driver-slices-apiserver")  # one control plane for them all
def test_api_server_keep_leaves_slices(api_client: Any) -> None:
    pub = SlicePublisher(KubeSliceStore(Rest(api_client)), driver_name=DRIVER, node_name=NODE, keep=True)
    pub.update(gpu_inventory(2))
    pub.sync()
    pub.stop()
    assert len(_api_slices(api_client)) == 1
    SlicePublisher(KubeSliceStore(Rest(api_client)), driver_name=DRIVER, node_name=NODE).stop()
    assert _api_slices(api_client) == []


@pytest.mark.cluster
@pytest.mark.xdist_group("driver-slices-apiserver")  # one control plane for them all
def test_api_server_takes_an_empty_pool(api_client: Any) -> None:
    pub = SlicePublisher(KubeSliceStore(Rest(api_client)), driver_name=DRIVER, node_name=NODE)
    pub.update(Inventory(devices={}))
    assert pub.sync() is True
    (body,) = _api_slices(api_client)
    assert body["spec"].get("devices", []) == []
    pub.stop()
    assert _api_slices(api_client) == []


def _ready_node(api: Any) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"pods": "110", "cpu": "8", "memory": "32Gi"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test",
             "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip
    kube.core(api).patch_node_status(
        NODE, {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}
    )


def _allocate(api: Any, name: str, profile: str, count: int) -> list[str] | None:
    """Schedule a pod with a claim for ``count`` partitions of ``profile``; the devices, or None."""
    import json

    selector = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    request = {
        "deviceClassName": "mig.dra-conformance.io",
        "count": count,
        "selectors": [{"cel": {"expression": selector}}],
    }
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
             "spec": {"devices": {"requests": [{"name": "mig", "exactly": request}]}}}  # fmt: skip
    pod = manifests.pod("default", name, {"g": {"resourceClaimName": name}})
    resource, core = kube.resource(api), kube.core(api)
    resource.create_namespaced_resource_claim("default", claim)
    core.create_namespaced_pod("default", pod)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = json.loads(
            resource.read_namespaced_resource_claim(name, "default", _preload_content=False).data
        )
        allocation = (got.get("status") or {}).get("allocation")
        if allocation:
            return [r["device"] for r in allocation["devices"]["results"]]
        status = json.loads(core.read_namespaced_pod(name, "default", _preload_content=False).data).get(
            "status", {}
        )
        if any(c.get("reason") == "Unschedulable" for c in status.get("conditions") or []):
            return None
        time.sleep(0.1)
    raise AssertionError(f"claim {name} neither allocated nor unschedulable in time")


@pytest.mark.cluster
@pytest.mark.xdist_group("driver-slices-apiserver")  # one control plane for them all
def test_the_scheduler_allocates_partitions_only_where_counters_allow(api_client: Any) -> None:
    import yaml

    from driver.deviceclasses import render

    _ready_node(api_client)
    for doc in yaml.safe_load_all(render(DRIVER)):
        kube.resource(api_client).create_device_class(doc)
    pub = SlicePublisher(KubeSliceStore(Rest(api_client)), driver_name=DRIVER, node_name=NODE)
    pub.update(partitionable_inventory(1))
    pub.sync()
    try:
        assert sorted(_allocate(api_client, "two-3g", "3g.40gb", 2) or []) == [
            "gpu-0-part-3g40gb-0",
            "gpu-0-part-3g40gb-4",
        ]
        assert _allocate(api_client, "one-more-1g", "1g.10gb", 1) is None  # every memory slice is taken
    finally:
        pub.stop()
