"""Prepare and unprepare logic: configs, sharing, partitions, checkpoint, restart recovery."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from driver.checkpoint import PREPARE_COMPLETED, PREPARE_STARTED, CheckpointStore, ClaimRecord, PreparedDevice
from driver.errors import ClaimError, DeviceConflict, PrepareError
from driver.state import ClaimRef
from tests.driver.drvkit import DRIVER, Node, make_claim, opaque, result


def ref(claim: dict[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])


def spec_of(node: Node, claim: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json").read_text()
    )
    return spec


def env_of(node: Node, claim: dict[str, Any], index: int = 0) -> dict[str, str]:
    entries = spec_of(node, claim)["devices"][index]["containerEdits"]["env"]
    return dict(e.split("=", 1) for e in entries)


TS_LONG = {
    "apiVersion": "gpu.dra-conformance.io/v1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
}
MPS = {
    "apiVersion": "gpu.dra-conformance.io/v1",
    "kind": "GpuConfig",
    "sharing": {
        "strategy": "MPS",
        "mpsConfig": {"defaultActiveThreadPercentage": 40, "defaultPinnedDeviceMemoryLimit": "1Gi"},
    },
}


def test_prepare_writes_env_mount_and_device_info(node: Node) -> None:
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-2")]))
    (device,) = state.prepare(ref(claim))
    uid = claim["metadata"]["uid"]
    env = env_of(node, claim)
    assert env["GPU_DEVICE_GPU_2"] == node.inventory["gpu-2"].uuid
    assert "GPU_SHARING_STRATEGY" not in env
    edits = spec_of(node, claim)["devices"][0]["containerEdits"]
    assert "deviceNodes" not in edits  # fake backend: no device nodes that do not exist
    (mount,) = edits["mounts"]
    assert mount["containerPath"] == "/var/run/dra-gpu/gpu-2.json"
    info = json.loads(Path(mount["hostPath"]).read_text())
    assert info["claim"]["uid"] == uid and info["uuid"] == node.inventory["gpu-2"].uuid
    assert device.cdi_ids == [f"k8s.{DRIVER}/gpu={uid}-gpu-2"]


def test_claim_config_wins_over_class_config(node: Node) -> None:
    state = node.state()
    configs = [opaque(MPS, source="FromClass"), opaque(TS_LONG, source="FromClaim")]
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], list(reversed(configs))))
    state.prepare(ref(claim))
    env = env_of(node, claim)
    assert env["GPU_SHARING_STRATEGY"] == "TimeSlicing"
    assert env["GPU_TIMESLICE_INTERVAL"] == "Long"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env


def test_mps_config_shows_in_env(node: Node) -> None:
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], [opaque(MPS)]))
    state.prepare(ref(claim))
    env = env_of(node, claim)
    assert env["GPU_SHARING_STRATEGY"] == "MPS"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].endswith("=1024M")


def test_config_for_one_request_only(node: Node) -> None:
    state = node.state()
    claim = node.put(
        make_claim("c", [result("a", "gpu-0"), result("b/sub1", "gpu-1")], [opaque(TS_LONG, requests=["b"])])
    )
    state.prepare(ref(claim))
    assert "GPU_SHARING_STRATEGY" not in env_of(node, claim, 0)
    assert env_of(node, claim, 1)["GPU_SHARING_STRATEGY"] == "TimeSlicing"


def test_invalid_config_is_a_per_claim_error_naming_the_field(node: Node) -> None:
    state = node.state()
    bad = {**TS_LONG, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}}
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], [opaque(bad)]))
    with pytest.raises(PrepareError) as err:
        state.prepare(ref(claim))
    assert "sharing.timeSlicingConfig.interval" in str(err.value)
    assert "default/c" in str(err.value)
    assert state.prepared() == {}
    assert not list(node.settings.kubelet.cdi_dir.glob("*.json"))


def test_gpu_config_naming_a_partition_request_is_refused(node: Node) -> None:
    state = node.state()
    claim = node.put(
        make_claim("c", [result("mig", "gpu-4-part-3g71gb-0")], [opaque(TS_LONG, requests=["mig"])])
    )
    with pytest.raises(PrepareError, match="MigDeviceConfig") as err:
        state.prepare(ref(claim))
    assert "gpu-4-part-3g71gb-0" in str(err.value) and "default/c" in str(err.value)


def test_claim_wide_gpu_config_leaves_mig_devices_of_the_claim_alone(node: Node) -> None:
    state = node.state()
    claim = node.put(
        make_claim("c", [result("gpu", "gpu-0"), result("mig", "gpu-4-part-3g71gb-0")], [opaque(TS_LONG)])
    )
    state.prepare(ref(claim))
    assert env_of(node, claim, 0)["GPU_TIMESLICE_INTERVAL"] == "Long"
    assert "GPU_SHARING_STRATEGY" not in env_of(node, claim, 1)


def test_device_held_by_another_claim_is_refused_unless_both_share(node: Node) -> None:
    state = node.state()
    a = node.put(make_claim("a", [result("gpu", "gpu-0")]))
    b = node.put(make_claim("b", [result("gpu", "gpu-0")]))
    state.prepare(ref(a))
    with pytest.raises(DeviceConflict, match="gpu-0"):
        state.prepare(ref(b))
    state.unprepare(ref(a))
    shared_a = node.put(make_claim("sa", [result("gpu", "gpu-1")], [opaque(TS_LONG)]))
    shared_b = node.put(make_claim("sb", [result("gpu", "gpu-1")], [opaque(TS_LONG)]))
    state.prepare(ref(shared_a))
    state.prepare(ref(shared_b))


def test_consumable_capacity_shares_prepare_side_by_side(node: Node) -> None:
    state = node.state()
    a = node.put(make_claim("a", [result("gpu", "gpu-0", shareID="11111111-0000-0000-0000-000000000000")]))
    b = node.put(make_claim("b", [result("gpu", "gpu-0", shareID="22222222-0000-0000-0000-000000000000")]))
    (da,) = state.prepare(ref(a))
    (db,) = state.prepare(ref(b))
    assert da.share_id != db.share_id
    assert da.cdi_ids != db.cdi_ids


def test_claim_errors(node: Node) -> None:
    state = node.state()
    claim = make_claim("c", [result("gpu", "gpu-0")])
    with pytest.raises(ClaimError, match="not found"):
        state.prepare(ref(claim))
    node.put({**claim, "metadata": {**claim["metadata"], "uid": "other"}})
    with pytest.raises(ClaimError, match="re-created"):
        state.prepare(ref(claim))
    node.put({**claim, "status": {}})
    with pytest.raises(ClaimError, match="not allocated"):
        state.prepare(ref(claim))
    node.put(
        make_claim("c", [{**result("gpu", "gpu-0"), "driver": "other.io"}], uid=claim["metadata"]["uid"])
    )
    with pytest.raises(ClaimError, match="no device of driver"):
        state.prepare(ref(claim))


def test_other_drivers_results_are_left_alone(node: Node) -> None:
    state = node.state()
    other = {"request": "nic", "driver": "nic.example.com", "pool": "x", "device": "eth0"}
    claim = node.put(make_claim("c", [result("gpu", "gpu-0"), other]))
    devices = state.prepare(ref(claim))
    assert [d.device for d in devices] == ["gpu-0"]


def test_partition_is_created_on_prepare_and_destroyed_on_unprepare(node: Node) -> None:
    state = node.state()
    claim = node.put(make_claim("c", [result("mig", "gpu-4-part-3g71gb-4")]))
    (device,) = state.prepare(ref(claim))
    mig_uuid = node.partitioner.live["gpu-4-part-3g71gb-4"]
    assert device.uuid == mig_uuid
    assert env_of(node, claim)["GPU_DEVICE_GPU_4_PART_3G71GB_4"] == mig_uuid
    state.unprepare(ref(claim))
    assert node.partitioner.live == {}


def test_a_shared_partition_stays_until_its_last_claim_is_unprepared(node: Node) -> None:
    state = node.state()
    shared = {"apiVersion": DRIVER + "/v1", "kind": "MigDeviceConfig", "sharing": {"strategy": "TimeSlicing"}}
    a = node.put(make_claim("a", [result("m", "gpu-4-part-3g71gb-4")], [opaque(shared)]))
    b = node.put(make_claim("b", [result("m", "gpu-4-part-3g71gb-4")], [opaque(shared)]))
    (dev_a,) = state.prepare(ref(a))
    (dev_b,) = state.prepare(ref(b))
    assert dev_a.uuid == dev_b.uuid == node.partitioner.live["gpu-4-part-3g71gb-4"]
    state.unprepare(ref(a))
    assert "gpu-4-part-3g71gb-4" in node.partitioner.live  # b still runs on it
    state.unprepare(ref(b))
    assert node.partitioner.live == {}


def test_a_crashed_prepare_keeps_a_partition_another_claim_holds(node: Node) -> None:
    shared = {"apiVersion": DRIVER + "/v1", "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}}
    a = node.put(make_claim("a", [result("m", "gpu-4-part-3g71gb-0")], [opaque(shared)]))
    b = node.put(make_claim("b", [result("m", "gpu-4-part-3g71gb-0")], [opaque(shared)]))
    state = node.state()
    state.prepare(ref(a))
    state.prepare(ref(b))
    checkpoint = CheckpointStore(node.settings.checkpoint_path)
    saved = checkpoint.load()
    saved.claims[b["metadata"]["uid"]].state = "PrepareStarted"  # b's prepare was cut short
    checkpoint.save(saved)
    node.state().restore()
    assert "gpu-4-part-3g71gb-0" in node.partitioner.live


def test_partition_failure_undoes_and_reports(node: Node) -> None:
    state = node.state()
    node.partitioner.fail = "overlaps an existing GPU instance"
    claim = node.put(make_claim("c", [result("gpu", "gpu-0"), result("mig", "gpu-4-part-3g71gb-0")]))
    with pytest.raises(PrepareError) as err:
        state.prepare(ref(claim))
    assert "gpu-4-part-3g71gb-0" in str(err.value) and "overlaps" in str(err.value)
    assert state.prepared() == {}
    assert not list(node.settings.kubelet.cdi_dir.glob("*.json"))
    node.partitioner.fail = None
    state.prepare(ref(claim))  # the kubelet's retry succeeds


def test_checkpoint_records_completed_claims(node: Node) -> None:
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    state.prepare(ref(claim))
    saved = CheckpointStore(node.settings.checkpoint_path).load()
    record = saved.claims[claim["metadata"]["uid"]]
    assert record.state == PREPARE_COMPLETED
    assert saved.boot_id == node.boot_id
    assert record.devices[0].device == "gpu-0"


def test_restart_answers_prepare_from_the_checkpoint(node: Node) -> None:
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    first = node.state().prepare(ref(claim))
    restarted = node.state()
    restarted.restore()
    node.claims.delete("default", "c")  # the API is not asked again
    assert restarted.prepare(ref(claim)) == first
    restarted.unprepare(ref(claim))
    assert restarted.prepared() == {}


def test_restart_unprepares_claims_deleted_or_re_created_while_down(node: Node) -> None:
    kept = node.put(make_claim("kept", [result("gpu", "gpu-0")]))
    deleted = node.put(make_claim("deleted", [result("gpu", "gpu-1")]))
    recreated = node.put(make_claim("recreated", [result("m", "gpu-4-part-3g71gb-0")]))
    state = node.state()
    for claim in (kept, deleted, recreated):
        state.prepare(ref(claim))
    node.claims.delete("default", "deleted")
    node.put(make_claim("recreated", [result("gpu", "gpu-2")]))  # same name, a new UID
    restarted = node.state()
    restarted.restore()
    uid = kept["metadata"]["uid"]
    assert set(restarted.prepared()) == {uid}
    assert set(CheckpointStore(node.settings.checkpoint_path).load().claims) == {uid}
    assert [p.name for p in node.settings.kubelet.cdi_dir.iterdir()] == [f"{DRIVER}-{uid}.json"]
    assert node.partitioner.live == {}
    again = node.put(make_claim("again", [result("gpu", "gpu-1")]))
    restarted.prepare(ref(again))  # the deleted claim's device is free


def test_restart_keeps_every_claim_when_the_api_cannot_say(node: Node) -> None:
    claims = [node.put(make_claim(name, [result("gpu", f"gpu-{i}")])) for i, name in enumerate("ab")]
    state = node.state()
    for claim in claims:
        state.prepare(ref(claim))
    node.claims.delete("default", "b")
    asked: list[str] = []

    def unreachable(namespace: str, name: str) -> None:
        asked.append(name)
        raise ClaimError(f"cannot read ResourceClaim {namespace}/{name}: connection refused")

    node.claims.get_claim = unreachable  # type: ignore[method-assign]
    restarted = node.state()
    restarted.restore()
    assert set(restarted.prepared()) == {c["metadata"]["uid"] for c in claims}
    assert len(asked) == 1  # asked once, then no more


def test_restart_cleans_up_a_partial_prepare(node: Node) -> None:
    uid = "1d2e3f40-0000-0000-0000-000000000000"
    store = CheckpointStore(node.settings.checkpoint_path)
    from driver.checkpoint import Checkpoint

    partial = ClaimRecord(
        uid=uid, namespace="default", name="c", state=PREPARE_STARTED,
        devices=[PreparedDevice(request_names=["m"], pool="node-a", device="gpu-4-part-3g71gb-0", cdi_ids=[],
                                kind="partition")],
    )  # fmt: skip
    store.save(Checkpoint(boot_id=node.boot_id, claims={uid: partial}))
    node.partitioner.live["gpu-4-part-3g71gb-0"] = "MIG-left-over"
    stray = node.settings.kubelet.cdi_dir / f"{DRIVER}-{uid}.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    orphan = node.settings.kubelet.cdi_dir / f"{DRIVER}-orphan.json"
    orphan.write_text("{}")
    state = node.state()
    state.restore()
    assert state.prepared() == {}
    assert node.partitioner.live == {}
    assert not stray.exists() and not orphan.exists()
    assert store.load().claims == {}


def test_reboot_rewrites_lost_cdi_specs(node: Node) -> None:
    claim = node.put(make_claim("c", [result("gpu", "gpu-0"), result("m", "gpu-4-part-3g71gb-0")]))
    node.state().prepare(ref(claim))
    before = spec_of(node, claim)
    # a reboot: the tmpfs CDI dir is empty and MIG partitions are gone
    for path in node.settings.kubelet.cdi_dir.iterdir():
        path.unlink()
    node.partitioner.live.clear()
    node.boot_id = "boot-2"
    state = node.state()
    state.restore()
    after = spec_of(node, claim)
    assert [d["name"] for d in after["devices"]] == [d["name"] for d in before["devices"]]
    assert "gpu-4-part-3g71gb-0" in node.partitioner.live
    assert CheckpointStore(node.settings.checkpoint_path).load().boot_id == "boot-2"


def test_partition_that_failed_to_come_back_after_a_reboot_is_made_on_the_next_prepare(node: Node) -> None:
    claim = node.put(make_claim("c", [result("m", "gpu-4-part-3g71gb-0")]))
    node.state().prepare(ref(claim))
    old_uuid = node.partitioner.live["gpu-4-part-3g71gb-0"]
    for path in node.settings.kubelet.cdi_dir.iterdir():
        path.unlink()
    node.partitioner.live.clear()
    node.boot_id = "boot-2"
    node.partitioner.fail = "GPU busy"
    state = node.state()
    state.restore()  # logs the failure; the kubelet's next prepare tries again
    node.partitioner.fail = None
    (device,) = state.prepare(ref(claim))
    new_uuid = node.partitioner.live["gpu-4-part-3g71gb-0"]
    assert new_uuid != old_uuid
    assert device.uuid == new_uuid
    assert env_of(node, claim)["GPU_DEVICE_GPU_4_PART_3G71GB_0"] == new_uuid
    (saved,) = CheckpointStore(node.settings.checkpoint_path).load().claims[claim["metadata"]["uid"]].devices
    assert saved.partition_uuid == new_uuid


def test_prepare_rewrites_a_spec_deleted_behind_its_back(node: Node) -> None:
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    state.prepare(ref(claim))
    path = node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json"
    path.unlink()
    state.prepare(ref(claim))
    assert path.exists()


def test_nvml_backend_adds_device_nodes(node: Node) -> None:
    node.settings = replace(node.settings, backend=replace(node.settings.backend, kind="nvml"))
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-3")]))
    state.prepare(ref(claim))
    nodes = [n["path"] for n in spec_of(node, claim)["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia3"]


def test_admin_access_reaches_a_device_in_use(node: Node) -> None:
    state = node.state()
    user = node.put(make_claim("user", [result("gpu", "gpu-0")]))
    admin = node.put(make_claim("admin", [result("gpu", "gpu-0", adminAccess=True)]))
    state.prepare(ref(user))
    (device,) = state.prepare(ref(admin))
    assert device.admin_access


def test_claim_locks_do_not_pile_up(node: Node) -> None:
    state = node.state()
    for i in range(5):
        claim = node.put(make_claim(f"c{i}", [result("gpu", "gpu-0")]))
        state.prepare(ref(claim))
        state.unprepare(ref(claim))
    assert state.book.locked_claims() == set()
