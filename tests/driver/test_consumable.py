"""Consumable capacity: whole GPUs published for sharing, what a share consumes, the driver's accounting."""

from __future__ import annotations

import dataclasses
import json
import uuid as uuidlib
from typing import Any

import pytest

from driver.checkpoint import CheckpointStore, ClaimRecord, PreparedDevice
from driver.conflicts import check_capacity, check_conflicts
from driver.consumable import (
    COMPUTE_SHARE,
    MEMORY,
    WHOLE_GPU_SHARE,
    consumed,
    make_consumable,
    memory_policy,
    share_env,
)
from driver.errors import ClaimError, DeviceConflict
from driver.inventory import GIB, MIB, Inventory
from driver.planning import ClaimRef
from driver.slicing import build_slices, device_body
from tests.driver.drvkit import DRIVER, NODE, Node, gpu, make_claim, partition, result

# memory.total of the fakegpu models (fakegpu/profiles/), one that is no whole MiB, and small ones
MEMORY_SIZES = [150754820096, 85520809984, 85899345920, 42949672960, 24152899584, 16106127360,
                85520809984 + 512, GIB + MIB, GIB, GIB - 1, 2 * MIB, MIB, 1]  # fmt: skip


def _api_problems(capacity: dict[str, Any]) -> list[str]:
    """What kube-apiserver 1.37 would refuse in one capacity entry of a multi-allocatable device
    (``validateRequestPolicyRange``, integer arithmetic)."""
    value = int(capacity["value"])
    policy = capacity.get("requestPolicy")
    if policy is None:
        return []
    problems = []
    default = int(policy["default"])
    valid = policy["validRange"]
    low = int(valid["min"])
    step = int(valid["step"]) if "step" in valid else None
    if low > value:
        problems.append(f"min {low} > capacity {value}")
    if default < low:
        problems.append(f"default {default} < min {low}")
    if "max" in valid:
        problems.append("max is not published")
    if step is not None:
        if step <= 0:
            problems.append(f"step {step} <= 0")
        elif low + step > value:
            problems.append(f"min + step {low + step} > capacity {value}")
        elif (default - low) % step:
            problems.append(f"default {default} is not min {low} + n * step {step}")
    return problems


def _shared(inventory: Inventory | None = None, gpus: frozenset[int] | None = None) -> Inventory:
    base = inventory or Inventory(devices={d.name: d for d in (gpu(0), gpu(1))})
    return make_consumable(base, gpus)


def _claim_of(uid: str, *devices: PreparedDevice) -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=f"claim-{uid}", devices=list(devices))


def _share(device: str, memory: int, compute: int, **extra: Any) -> PreparedDevice:
    return PreparedDevice(
        request_names=["gpu"], pool=NODE, device=device, cdi_ids=[], share_id=str(uuidlib.uuid4()),
        shareable=True, consumed={MEMORY: memory, COMPUTE_SHARE: compute}, **extra,
    )  # fmt: skip


# --- publishing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("total", MEMORY_SIZES)
def test_memory_policy_is_all_by_default_and_valid_for_the_api(total: int) -> None:
    policy = memory_policy(total)
    assert policy.default == total
    entry = {"value": str(total), "requestPolicy": policy.body()}
    assert not _api_problems(entry), entry
    if total % MIB == 0 and total > GIB:
        assert (policy.minimum, policy.step) == (GIB, MIB)


def test_a_consumable_gpu_is_published_multi_allocatable_with_a_request_policy_per_capacity() -> None:
    inventory = _shared()
    body = device_body(inventory["gpu-0"])
    assert body["allowMultipleAllocations"] is True
    memory = {"default": str(GIB), "validRange": {"min": str(MIB), "step": str(MIB)}}
    compute = {"default": "100", "validRange": {"min": "1", "step": "1"}}
    assert body["capacity"] == {
        MEMORY: {"value": str(GIB), "requestPolicy": memory},
        COMPUTE_SHARE: {"value": "100", "requestPolicy": compute},
    }
    for entry in body["capacity"].values():
        assert not _api_problems(entry)
    # the attributes stay as they were: the device classes and selectors still match it
    assert body["attributes"] == device_body(gpu(0))["attributes"]


def test_exclusive_gpus_are_published_as_before() -> None:
    body = device_body(gpu(0))
    assert "allowMultipleAllocations" not in body
    assert body["capacity"] == {MEMORY: {"value": str(GIB)}}


def test_only_the_chosen_whole_gpus_become_consumable() -> None:
    counted = dataclasses.replace(gpu(2), consumes_counters={"gpu-2-counter-set": {"memory": GIB}})
    devices = [gpu(0), gpu(1), counted, partition(4, 0)]
    inventory = make_consumable(Inventory(devices={d.name: d for d in devices}), frozenset({1, 2, 4}))
    assert [d.name for d in inventory if d.multi_allocatable] == ["gpu-1"]
    every = make_consumable(Inventory(devices={d.name: d for d in devices}))
    # a GPU that draws on counters (partitionable) and a partition stay exclusive
    assert [d.name for d in every if d.multi_allocatable] == ["gpu-0", "gpu-1"]


def test_allow_multiple_allocations_does_not_lower_the_slice_limit() -> None:
    many = [dataclasses.replace(gpu(0), name=f"gpu-{i}", index=i) for i in range(100)]
    inventory = make_consumable(Inventory(devices={d.name: d for d in many}))
    slices = build_slices(inventory, driver_name=DRIVER, node_name=NODE, generation=1)
    assert [len(s["spec"]["devices"]) for s in slices] == [100]


# --- what a share consumes ------------------------------------------------------------------------


def test_a_share_consumes_what_the_allocation_says_and_the_defaults_for_the_rest() -> None:
    info = _shared()["gpu-0"]
    assert consumed(info, {MEMORY: "512Mi", COMPUTE_SHARE: "50"}) == {MEMORY: 512 * MIB, COMPUTE_SHARE: 50}
    assert consumed(info, {COMPUTE_SHARE: "25"}) == {MEMORY: GIB, COMPUTE_SHARE: 25}
    # a shareID without consumedCapacity: the whole GPU, as the policy defaults say
    assert consumed(info, None) == {MEMORY: GIB, COMPUTE_SHARE: WHOLE_GPU_SHARE}
    assert consumed(info, {MEMORY: "0"}) == {MEMORY: 0, COMPUTE_SHARE: WHOLE_GPU_SHARE}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({MEMORY: "-1Gi"}, r"consumedCapacity\.memory: '-1Gi' must be zero or more"),
        ({MEMORY: "lots"}, r"consumedCapacity\.memory: 'lots' is not a quantity"),
        ({MEMORY: "2Gi"}, r"consumedCapacity\.memory: '2Gi' is more than device gpu-0 has \(1073741824\)"),
        (
            {COMPUTE_SHARE: "101"},
            r"consumedCapacity\.computeShare: '101' is more than device gpu-0 has \(100\)",
        ),
        (
            {COMPUTE_SHARE: "1e30"},
            r"consumedCapacity\.computeShare: '1e30' is out of range; at most \d+ units",
        ),
        (
            {"bandwidth": "1"},
            r"consumedCapacity\.bandwidth: device gpu-0 has no such capacity \(it has memory, ",
        ),
        ({MEMORY: True}, r"consumedCapacity\.memory: must be a quantity"),
        (["memory"], r"consumedCapacity: \['memory'\] is not a map"),
    ],
)
def test_bad_consumed_capacity_names_field_and_value(raw: Any, message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        consumed(_shared()["gpu-0"], raw)


def test_on_an_exclusive_device_consumed_capacity_is_checked_but_nothing_is_shared() -> None:
    assert consumed(gpu(0), {MEMORY: "1Gi"}) is None
    assert consumed(gpu(0), None) is None
    with pytest.raises(ClaimError, match="more than device gpu-0 has"):
        consumed(gpu(0), {MEMORY: "2Gi"})


def test_share_env_names_memory_in_bytes_and_the_compute_share() -> None:
    assert share_env({MEMORY: 512 * MIB, COMPUTE_SHARE: 50, "other": 3}) == {
        "GPU_MEMORY_LIMIT": str(512 * MIB),
        "GPU_COMPUTE_SHARE": "50",
    }


# --- the driver's accounting (pure) ---------------------------------------------------------------


def test_shares_that_fit_beside_the_prepared_ones_pass() -> None:
    inventory = _shared()
    ref = ClaimRef("ns", "new", "new")
    others = [_claim_of("a", _share("gpu-0", GIB // 2, 50))]
    check_conflicts(ref, [_share("gpu-0", GIB // 2, 50)], others, inventory)
    # the other GPU is untouched by shares of gpu-0
    check_capacity(ref, [_share("gpu-1", GIB, 100)], others, inventory)


def test_a_share_that_overdraws_the_device_is_refused_naming_device_capacity_held_and_asked() -> None:
    inventory = _shared()
    ref = ClaimRef("ns", "new", "new")
    others = [_claim_of("a", _share("gpu-0", GIB // 4, 30)), _claim_of("b", _share("gpu-0", GIB // 4, 30))]
    with pytest.raises(DeviceConflict) as caught:
        check_conflicts(ref, [_share("gpu-0", GIB // 4, 41)], others, inventory)
    text = str(caught.value)
    assert "claim ns/new (new): device gpu-0: capacity computeShare: 60 is held by claims" in text
    assert "ns/claim-a (a)" in text and "ns/claim-b (b)" in text
    assert "41 more asked, the device has 100" in text


def test_a_claims_own_shares_of_one_device_count_together() -> None:
    ref = ClaimRef("ns", "new", "new")
    with pytest.raises(DeviceConflict, match="memory: 805306368 is held by this claim's other shares"):
        check_capacity(ref, [_share("gpu-0", 3 * GIB // 4, 10), _share("gpu-0", GIB // 2, 10)], [], _shared())


def test_a_holder_without_a_recorded_share_holds_the_whole_device() -> None:
    """A claim prepared before the GPU was shared (or with no shareID) keeps it all."""
    whole = PreparedDevice(request_names=["gpu"], pool=NODE, device="gpu-0", cdi_ids=[], shareable=True)
    with pytest.raises(DeviceConflict, match="computeShare: 100 is held by claims ns/claim-a"):
        check_capacity(ClaimRef("ns", "n", "n"), [_share("gpu-0", 1, 1)], [_claim_of("a", whole)], _shared())


def test_admin_access_neither_counts_nor_is_counted() -> None:
    inventory = _shared()
    ref = ClaimRef("ns", "new", "new")
    full = [_claim_of("a", _share("gpu-0", GIB, 100))]
    check_conflicts(ref, [_share("gpu-0", GIB, 100, admin_access=True)], full, inventory)
    admin = [_claim_of("a", _share("gpu-0", GIB, 100, admin_access=True))]
    check_conflicts(ref, [_share("gpu-0", GIB, 100)], admin, inventory)


def test_a_claim_is_not_counted_against_itself() -> None:
    ref = ClaimRef("ns", "a", "a")
    check_capacity(ref, [_share("gpu-0", GIB, 100)], [_claim_of("a", _share("gpu-0", GIB, 100))], _shared())


def test_devices_not_shared_by_capacity_are_left_to_the_conflict_check() -> None:
    partitions = Inventory(devices={"p": dataclasses.replace(partition(4, 0), name="p")})
    check_capacity(ClaimRef("ns", "n", "n"), [_share("p", GIB, 100)], [_claim_of("a", _share("p", GIB, 100))],
                   partitions)  # fmt: skip


# --- prepare and unprepare ------------------------------------------------------------------------


@pytest.fixture
def shared(node: Node) -> Node:
    """The test node with GPUs 0 and 1 shared by capacity."""
    node.inventory = make_consumable(node.inventory, frozenset({0, 1}))
    return node


def _ref(claim: dict[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])


def _share_result(device: str, **capacity: str) -> dict[str, Any]:
    extra: dict[str, Any] = {"shareID": str(uuidlib.uuid4())}
    if capacity:
        extra["consumedCapacity"] = {COMPUTE_SHARE if k == "compute" else k: v for k, v in capacity.items()}
    return result("gpu", device, **extra)


def _env(node: Node, claim: dict[str, Any]) -> dict[str, str]:
    spec = json.loads(
        (node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json").read_text()
    )
    entries = spec["devices"][0]["containerEdits"]["env"]
    return dict(e.split("=", 1) for e in entries)


def test_two_halves_share_a_gpu_and_each_container_sees_its_share(shared: Node) -> None:
    state = shared.state()
    a = shared.put(make_claim("a", [_share_result("gpu-0", memory="512Mi", compute="50")]))
    b = shared.put(make_claim("b", [_share_result("gpu-0", memory="512Mi", compute="50")]))
    (da,) = state.prepare(_ref(a))
    (db,) = state.prepare(_ref(b))
    assert da.cdi_ids != db.cdi_ids
    for claim in (a, b):
        env = _env(shared, claim)
        assert env["GPU_MEMORY_LIMIT"] == str(512 * MIB) and env["GPU_COMPUTE_SHARE"] == "50"
        assert env["GPU_DEVICE_GPU_0"] == gpu(0).uuid  # a share looks like the device to a container
    info = json.loads(next((shared.settings.claims_dir / a["metadata"]["uid"]).glob("*.json")).read_text())
    assert info["consumedCapacity"] == {MEMORY: 512 * MIB, COMPUTE_SHARE: 50}
    assert info["env"]["GPU_COMPUTE_SHARE"] == "50"


def test_two_shares_of_one_gpu_in_one_claim_get_names_of_their_own(shared: Node) -> None:
    state = shared.state()
    halves = [_share_result("gpu-0", memory="512Mi", compute="50") for _ in range(2)]
    claim = shared.put(make_claim("two", halves))
    devices = state.prepare(_ref(claim))
    shares = [r["shareID"] for r in halves]
    assert sorted(d.cdi_ids[0].rsplit("=", 1)[1] for d in devices) == sorted(
        f"{claim['metadata']['uid']}-gpu-0-{s}" for s in shares
    )
    more = shared.put(make_claim("more", [_share_result("gpu-0", memory="0", compute="1")]))
    with pytest.raises(DeviceConflict, match="computeShare: 100 is held"):
        state.prepare(_ref(more))


def test_a_third_share_that_does_not_fit_is_refused_until_one_goes(shared: Node) -> None:
    state = shared.state()
    claims = [shared.put(make_claim(n, [_share_result("gpu-0", compute="50", memory="0")])) for n in "abc"]
    for claim in claims[:2]:
        state.prepare(_ref(claim))
    with pytest.raises(DeviceConflict, match=r"device gpu-0: capacity computeShare: 100 is held by claims"):
        state.prepare(_ref(claims[2]))
    assert not shared.settings.kubelet.cdi_dir.joinpath(
        f"{DRIVER}-{claims[2]['metadata']['uid']}.json"
    ).exists()
    state.unprepare(_ref(claims[0]))
    state.prepare(_ref(claims[2]))


def test_a_share_without_consumed_capacity_takes_the_whole_gpu(shared: Node) -> None:
    state = shared.state()
    whole = shared.put(make_claim("whole", [_share_result("gpu-1")]))
    part = shared.put(make_claim("part", [_share_result("gpu-1", compute="1", memory="1Gi")]))
    state.prepare(_ref(whole))
    assert _env(shared, whole)["GPU_MEMORY_LIMIT"] == str(GIB)
    assert _env(shared, whole)["GPU_COMPUTE_SHARE"] == "100"
    with pytest.raises(DeviceConflict, match="gpu-1"):
        state.prepare(_ref(part))


def test_bad_consumed_capacity_fails_the_claim_and_nothing_stays_prepared(shared: Node) -> None:
    state = shared.state()
    bad = shared.put(make_claim("bad", [_share_result("gpu-0", memory="-5")]))
    with pytest.raises(
        ClaimError, match=r"claim default/bad \(.*\): device gpu-0: consumedCapacity\.memory: '-5'"
    ):
        state.prepare(_ref(bad))
    assert state.book.get(bad["metadata"]["uid"]) is None
    assert not list(shared.settings.kubelet.cdi_dir.glob("*.json"))


def test_shares_survive_a_restart(shared: Node) -> None:
    state = shared.state()
    a = shared.put(make_claim("a", [_share_result("gpu-0", compute="60")]))
    state.prepare(_ref(a))
    saved = CheckpointStore(shared.settings.checkpoint_path).load().claims[a["metadata"]["uid"]]
    assert saved.devices[0].consumed == {MEMORY: GIB, COMPUTE_SHARE: 60}
    again = shared.state()  # a restart: the checkpoint is all it knows
    b = shared.put(make_claim("b", [_share_result("gpu-0", compute="41", memory="0")]))
    with pytest.raises(DeviceConflict, match="computeShare: 60 is held"):
        again.prepare(_ref(b))


def test_exceed_consumable_share_tells_the_container_it_has_the_whole_gpu(shared: Node) -> None:
    state = shared.state(break_rules=frozenset({"exceed-consumable-share"}))
    a = shared.put(make_claim("a", [_share_result("gpu-0", memory="512Mi", compute="50")]))
    state.prepare(_ref(a))
    env = _env(shared, a)
    assert env["GPU_MEMORY_LIMIT"] == str(GIB) and env["GPU_COMPUTE_SHARE"] == "100"


def test_exclusive_gpus_get_no_share_env(node: Node) -> None:
    state = node.state()
    a = node.put(make_claim("a", [result("gpu", "gpu-0")]))
    state.prepare(_ref(a))
    assert not {"GPU_MEMORY_LIMIT", "GPU_COMPUTE_SHARE"} & set(_env(node, a))


def test_an_exclusive_holder_still_keeps_a_shared_gpu(shared: Node) -> None:
    """A result without a shareID (the suite allocates claims itself) holds the GPU alone."""
    state = shared.state()
    alone = shared.put(make_claim("alone", [result("gpu", "gpu-0")]))
    state.prepare(_ref(alone))
    share = shared.put(make_claim("share", [_share_result("gpu-0", compute="1", memory="1Gi")]))
    with pytest.raises(DeviceConflict, match="not shareable"):
        state.prepare(_ref(share))
