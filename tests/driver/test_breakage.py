"""Rule-breaking switches: off by default; each one, turned on, breaks its rule.

Each switch has a scenario that checks every part of the rule it names; the same scenario
runs with the switch off (every check holds) and on (none holds), so a switch that stopped
working, or that broke nothing, fails here.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import io
import itertools
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid as uuidlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import pytest
import yaml

from draproto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from driver import access, plugin
from driver.__main__ import handle_signals
from driver.__main__ import main as driver_main
from driver.binding import ATTACH_FAILED, ATTACHED, Attacher, attach_on_demand
from driver.breakage import RULES, parse_rules
from driver.breaking import GRPC_SWITCHES, interceptors
from driver.breaking_cdi import CDI_SWITCHES, BreakingSpecStore, spec_store
from driver.breaking_slices import (
    SLICE_SWITCHES,
    TAINT_SWITCHES,
    BreakingSliceBuilder,
    slice_builder,
    taint_source,
)
from driver.cdi import SpecStore, validate
from driver.checkpoint import PreparedDevice
from driver.compatibility import MIG_GROUP, WHOLE_GPU_GROUP, group_by_mode
from driver.consumable import make_consumable
from driver.deviceclasses import DEVICE_TYPES, class_name
from driver.errors import CDIError, DeviceConflict, PrepareError, SettingsError, StoreConflict
from driver.health import HealthMonitor
from driver.healthstream import UNHEALTHY
from driver.inventory import NUMA_NODE, Inventory
from driver.licenses import with_license_seats
from driver.listattrs import SHARING_STRATEGIES, with_list_attributes
from driver.metrics import MetricsServer
from driver.nodealloc import NODE_ALLOCATABLE, with_host_memory_overhead
from driver.plugin import slices_left_to
from driver.settings import BREAK_RULES_ENV, access_options, from_args
from driver.slices import SlicePublisher
from driver.slicing import MAX_DEVICES_PER_SLICE, DeviceTaint, build_slices, taints_from_faults
from driver.state import ClaimRef
from tests.driver.drvkit import (
    DRIVER,
    NODE,
    Node,
    gpu,
    make_claim,
    make_pod,
    opaque,
    partition,
    prepare,
    result,
    unprepare,
)
from tests.polling import until

TS = {"apiVersion": "gpu.dra-conformance.io/v1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}


def broken(node: Node, rule: str) -> Node:
    node.settings = replace(node.settings, break_rules=parse_rules([rule]))
    return node


def test_off_by_default() -> None:
    assert from_args(["--node-name", "n"], {}).break_rules == frozenset()


def test_unknown_rule_is_refused() -> None:
    with pytest.raises(SettingsError, match="known rules"):
        parse_rules(["no-such-rule"])
    assert parse_rules(["no-health,", " ignore-config "]) == {
        "no-health",
        "ignore-config",
    }


def test_every_rule_is_documented() -> None:
    assert all(RULES.values())
    assert set(RULES) == {
        "non-idempotent-prepare", "drop-claim-from-batch", "invalid-cdi-spec", "leave-cdi-on-unprepare",
        "ignore-config", "oversized-slice", "wrong-pool-name", "no-health", "no-slices", "hide-device",
        "phantom-device", "no-republish", "stale-after-rewrite", "churn-slices", "wrong-slice-count",
        "orphan-slices",
        "same-pool-on-every-node",
        "subrequest-name", "refuse-admin-access", "keep-device-after-unprepare",
        "ignore-sharing-strategy", "qualified-request-names", "forget-unbatched-claims",
        "fault-on-wrong-device", "sticky-taint", "benign-faults-count", "health-without-message",
        "restamp-taints", "drop-informational-taints",
        "unserved-health-version",
        "forget-checkpoint", "leak-restored-claims", "refuse-reregister", "recreate-slices-on-start",
        "no-rewatch", "short-counter-set", "unprepare-with-first-pod", "skip-unreferenced-claims",
        "stale-claim-state", "device-status-not-ready",
        "ignore-extended-resource-claims",
        "keep-deleted-claims", "trust-corrupt-checkpoint", "config-to-whole-request", "claims-by-name",
        "exceed-consumable-share", "drop-share-id", "never-attach", "ignore-attach-failure",
        "metadata-to-every-container", "metadata-of-whole-claim", "metrics-broken",
        "compat-groups-missing", "scalar-list-attrs", "slices-any-node", "no-status-access",
        "no-node-allocatable",
        "drop-slices-on-update",
        "numa-node-missing",
        "prepare-foreign-results",
        "prepare-missing-claims", "prepare-unallocated-claims", "refuse-after-failed-registration",
        "whole-call-errors", "unserved-dra-version", "fail-unknown-unprepare",
        "cdi-id-of-another-device", "every-request-name", "refuse-concurrent-prepare",
        "prepare-other-driver-claims", "no-sigterm-handler", "index-as-string", "mistyped-device",
        "product-name-per-device", "misnamed-device-classes", "pod-only-reservations",
        "refuse-skipped-devices",
    }  # fmt: skip


def _spec_path(node: Node, claim: dict[str, Any]) -> Path:
    return node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json"


def _idempotent_prepare(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    uid = claim["metadata"]["uid"]
    first, second = prepare(node, claim).claims[uid], prepare(node, claim).claims[uid]
    return (first.error == "" and first == second,)


def _whole_batch_answered(node: Node) -> tuple[bool, ...]:
    node.serve()
    a = node.put(make_claim("a", [result("gpu", "gpu-0")]))
    b = node.put(make_claim("b", [result("gpu", "gpu-1")]))
    both = {a["metadata"]["uid"], b["metadata"]["uid"]}
    return set(prepare(node, a, b).claims) == both, set(unprepare(node, a, b).claims) == both


def _valid_cdi_spec(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    try:
        validate(json.loads(_spec_path(node, claim).read_text()))
    except CDIError:
        return (False,)
    return (True,)


def _cdi_removed_on_unprepare(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    prepare(node, claim)
    assert unprepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    return (not _spec_path(node, claim).exists(),)


def _config_applied(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], [opaque(TS)]))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    env = json.loads(_spec_path(node, claim).read_text())["devices"][0]["containerEdits"]["env"]
    return ("GPU_SHARING_STRATEGY=TimeSlicing" in env,)


def _slices_split(node: Node) -> tuple[bool, ...]:
    publisher = SlicePublisher(
        None,  # type: ignore[arg-type]  # desired() makes no API call
        driver_name=DRIVER,
        node_name=NODE,
        build=slice_builder(node.settings.breaks),  # as the driver's main does
        breaks=node.settings.breaks,
    )
    publisher.update(Inventory(devices={d.name: d for d in map(gpu, range(200))}))
    return (max(len(s["spec"]["devices"]) for s in publisher.desired()) <= MAX_DEVICES_PER_SLICE,)


class SliceStore:
    """The API server's ResourceSlices as a dict: what ``SlicePublisher.sync`` needs, no watch."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.deleted: builtins.list[str] = []
        """Names deleted, in order."""
        self._rv = itertools.count(1)

    def _put(self, body: dict[str, Any]) -> dict[str, Any]:
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(next(self._rv))}}
        self.objects[body["metadata"]["name"]] = stored
        return stored

    def node_uid(self, node_name: str) -> str:
        return "node-uid"

    def list(self, driver_name: str, node_name: str) -> tuple[builtins.list[dict[str, Any]], str]:
        return list(self.objects.values()), str(next(self._rv))

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"]["name"] in self.objects:
            raise StoreConflict(body["metadata"]["name"])
        return self._put(body)

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._put(body)

    def delete(self, name: str) -> None:
        self.deleted.append(name)
        self.objects.pop(name, None)

    def devices(self) -> builtins.list[str]:
        return [d["name"] for s in self.objects.values() for d in s["spec"].get("devices") or []]


def _published(
    node: Node, gpus: int = 8, inventory: Inventory | None = None
) -> tuple[SlicePublisher, SliceStore]:
    """``inventory`` (default: ``gpus`` whole GPUs) published once, through the node's switches."""
    store = SliceStore()
    publisher = SlicePublisher(
        store,  # type: ignore[arg-type]  # sync() never watches
        driver_name=DRIVER,
        node_name=NODE,
        pool_name=node.settings.pool_name,  # as the driver's main does
        build=slice_builder(node.settings.breaks),  # as the driver's main does
        breaks=node.settings.breaks,
    )
    publisher.update(inventory or Inventory(devices={d.name: d for d in map(gpu, range(gpus))}))
    publisher.sync()
    return publisher, store


def _slices_published(node: Node) -> tuple[bool, ...]:
    _, store = _published(node)
    return (bool(store.objects),)


def _every_device_published(node: Node) -> tuple[bool, ...]:
    _, store = _published(node, 200)
    return (len(store.devices()) == 200,)


def _no_device_added(node: Node) -> tuple[bool, ...]:
    _, store = _published(node)
    return (len(store.devices()) == 8,)


def _slices_restored(node: Node) -> tuple[bool, ...]:
    deleted_by_someone, deleted = _published(node)
    deleted.objects.clear()
    deleted_by_someone.sync()
    edited_by_someone, edited = _published(node)
    (body,) = edited.objects.values()
    body["spec"]["devices"] = body["spec"]["devices"][:1]
    edited.replace(body)
    edited_by_someone.sync()
    return len(deleted.devices()) == 8, len(edited.devices()) == 8


def _deleted_after_rewrite_restored(node: Node) -> tuple[bool, ...]:
    """A slice deleted right after the driver restored it (edited by someone) comes back."""
    publisher, store = _published(node)
    (body,) = store.objects.values()
    body["spec"]["devices"] = body["spec"]["devices"][:1]
    store.replace(body)
    publisher.sync()
    assert len(store.devices()) == 8  # restored: a rewrite
    store.objects.clear()
    publisher.sync()
    return (len(store.devices()) == 8,)


def _slices_left_alone(node: Node) -> tuple[bool, ...]:
    publisher, _ = _published(node)
    generation = publisher.generation
    return (publisher.sync() is False and publisher.generation == generation,)


def _slice_count_right(node: Node) -> tuple[bool, ...]:
    _, store = _published(node, 300)
    counts = {s["spec"]["pool"]["resourceSliceCount"] for s in store.objects.values()}
    return (counts == {len(store.objects)} and len(store.objects) > 1,)


def _slices_owned_by_node(node: Node) -> tuple[bool, ...]:
    _, store = _published(node)
    return (
        all(
            [(o["kind"], o["name"], o["uid"]) for o in s["metadata"].get("ownerReferences") or []]
            == [("Node", NODE, "node-uid")]
            for s in store.objects.values()
        ),
    )


def _pool_of_its_own(node: Node) -> tuple[bool, ...]:
    """The node's slices name a pool of the node's own, which another node's cannot name too."""
    _, store = _published(node)
    return ({s["spec"]["pool"]["name"] for s in store.objects.values()} == {NODE},)


def _counters_within_their_sets(node: Node) -> tuple[bool, ...]:
    whole = replace(gpu(0), consumes_counters={"gpu-0-counter-set": {"memory": 80, "compute-slices": 7}})
    inventory = Inventory(
        devices={"gpu-0": whole}, counter_sets={"gpu-0-counter-set": {"memory": 80, "compute-slices": 7}}
    )
    _, store = _published(node, inventory=inventory)
    sets = {
        c["name"]: {k: int(v["value"]) for k, v in c["counters"].items()}
        for s in store.objects.values()
        for c in s["spec"].get("sharedCounters") or []
    }
    return (sets == {"gpu-0-counter-set": {"memory": 80, "compute-slices": 7}},)


def _groups_published(node: Node) -> tuple[bool, ...]:
    counters = {"memory-slice-0": 1, "compute-slices": 7}
    whole = replace(gpu(4), consumes_counters={"gpu-4-counter-set": counters})
    part = replace(partition(4, 0), consumes_counters={"gpu-4-counter-set": {"memory-slice-0": 1}})
    grouped = group_by_mode(
        Inventory(devices={d.name: d for d in (whole, part)}, counter_sets={"gpu-4-counter-set": counters})
    )
    _, store = _published(node, inventory=grouped)
    groups = {
        d["name"]: [tuple(use.get("compatibilityGroups") or ()) for use in d["consumesCounters"]]
        for s in store.objects.values()
        for d in s["spec"].get("devices") or []
    }
    return (groups.get(whole.name) == [(WHOLE_GPU_GROUP,)], groups.get(part.name) == [(MIG_GROUP,)])


def _list_attributes_published(node: Node) -> tuple[bool, ...]:
    listed = with_list_attributes(Inventory(devices={d.name: d for d in (gpu(0), gpu(1))}))
    _, store = _published(node, inventory=listed)
    found = [
        d["attributes"].get(SHARING_STRATEGIES)
        for s in store.objects.values()
        for d in s["spec"].get("devices") or []
    ]
    return (found == [{"strings": ["TimeSlicing", "MPS"]}] * 2,)


def _host_memory_overhead_published(node: Node) -> tuple[bool, ...]:
    declared = with_host_memory_overhead(
        Inventory(devices={d.name: d for d in (gpu(0), gpu(1))}), {"gpu": 2**28}
    )
    _, store = _published(node, inventory=declared)
    found = [d.get(NODE_ALLOCATABLE) for s in store.objects.values() for d in s["spec"].get("devices") or []]
    return (found == [{"memory": {"overhead": {"perPod": str(2**28)}}}] * 2,)


def _slice_policy_enforced(node: Node) -> tuple[bool, ...]:
    env = {BREAK_RULES_ENV: ",".join(node.settings.break_rules)}
    objects = list(yaml.safe_load_all(access.printed(access_options([], env))))
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    return (len(bindings) == 1 and bindings[0]["spec"]["validationActions"] == ["Deny"],)


def _status_access_granted(node: Node) -> tuple[bool, ...]:
    env = {BREAK_RULES_ENV: ",".join(node.settings.break_rules)}
    objects = list(yaml.safe_load_all(access.printed(access_options([], env))))
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    granted = [r for r in role["rules"] if r["resources"] == ["resourceclaims/driver"]]
    return (
        len(granted) == 1 and {"associated-node:patch", "associated-node:update"} <= set(granted[0]["verbs"]),
    )


def _slices_left_to_the_new_instance(node: Node) -> tuple[bool, ...]:
    old = replace(node.settings, pod_uid="0b7e6c1a-1111-2222-3333-444455556666")
    new = replace(node.settings, pod_uid="9f00aa11-1111-2222-3333-444455556666")
    old.kubelet.registry_dir.mkdir(parents=True, exist_ok=True)
    new.registration_socket.touch()  # the new instance registered beside the old one
    try:
        return (slices_left_to(old) == [new.registration_socket.name],)
    finally:
        new.registration_socket.unlink()


def _numa_node_published(node: Node) -> tuple[bool, ...]:
    placed = replace(gpu(0), attributes={"type": "gpu", NUMA_NODE: 1})
    _, store = _published(node, inventory=Inventory(devices={placed.name: placed}))
    found = [
        d["attributes"].get(NUMA_NODE) for s in store.objects.values() for d in s["spec"].get("devices") or []
    ]
    return (found == [{"int": 1}],)


def _allocated_pool_answered(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    (device,) = prepare(node, claim).claims[claim["metadata"]["uid"]].devices
    return (device.pool_name == NODE,)


def _health_reported(node: Node) -> tuple[bool, ...]:
    monitor = HealthMonitor.from_settings(node.inventory, node.settings)
    monitor.record_xid(gpu(0).uuid or "", 62)
    node.serve(health=monitor)
    # The first message is sent at once: with the switch off, wait for it as long as a loaded
    # machine may need; on, the stream must stay silent for 1.5 s (a negative window, kept short).
    timeout = 1.5 if node.settings.breaks("no-health") else 30
    stream = health_v1_pb2_grpc.DRAResourceHealthStub(node.channel()).NodeWatchResources(
        health_v1_pb2.NodeWatchResourcesRequest(), timeout=timeout
    )
    try:
        first = next(iter(stream))
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        streamed = False
    else:
        streamed = any(d.health == health_v1_pb2.UNHEALTHY for d in first.devices)
    return streamed, "gpu-0" in monitor.faults()


def _every_health_version_served(node: Node) -> tuple[bool, ...]:
    node.serve(health=HealthMonitor.from_settings(node.inventory, node.settings))
    stub = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(node.channel())
    stream: Any = stub.NodeWatchResources(health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=30)
    try:
        first = next(iter(stream))
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e
        return (False,)
    finally:
        stream.cancel()
    return (bool(first.devices),)


def _taint_added_once(node: Node) -> tuple[bool, ...]:
    monitor = HealthMonitor.from_settings(node.inventory, node.settings)
    monitor.record_ecc(gpu(0).uuid or "")
    taints = taint_source(node.settings.breaks, lambda: taints_from_faults(monitor.faults(), DRIVER))
    first = taints()
    monitor.record_ecc(gpu(1).uuid or "")  # another fault: the driver publishes every taint again
    again = taints()
    return (first["gpu-0"] == again["gpu-0"],)


def _fault_on_its_device(node: Node) -> tuple[bool, ...]:
    monitor = HealthMonitor.from_settings(node.inventory, node.settings)
    monitor.record_ecc(gpu(1).uuid or "")
    faults, health = monitor.faults(), monitor.snapshot()
    return "gpu-1" in faults, set(faults) == {"gpu-1"}, health["gpu-1"].status == "Unhealthy"


def _taint_removed_after_heal(node: Node) -> tuple[bool, ...]:
    publisher, store = _published(node)

    def tainted() -> set[str]:
        return {d["name"] for s in store.objects.values() for d in s["spec"]["devices"] if d.get("taints")}

    publisher.update(taints={"gpu-0": [DeviceTaint(f"{DRIVER}/unhealthy", "gpu-lost", "NoExecute")]})
    publisher.sync()
    assert tainted() == {"gpu-0"}
    publisher.update(taints={})
    publisher.sync()
    return (tainted() == set(),)


def _benign_xids_ignored(node: Node) -> tuple[bool, ...]:
    monitor = HealthMonitor.from_settings(node.inventory, node.settings)
    monitor.record_xid(gpu(0).uuid or "", 13)
    monitor.record_xid(gpu(1).uuid or "", 43)
    return "gpu-0" not in monitor.faults(), "gpu-1" not in monitor.faults()


def _benign_xids_shown(node: Node) -> tuple[bool, ...]:
    settings = replace(node.settings, health=replace(node.settings.health, informational_seconds=5.0))
    monitor = HealthMonitor.from_settings(node.inventory, settings)
    monitor.record_xid(gpu(0).uuid or "", 13)
    assert monitor.snapshot()["gpu-0"].status != UNHEALTHY
    fault = monitor.faults().get("gpu-0")
    return (fault is not None and fault.severity == "None",)


def _unhealthy_says_why(node: Node) -> tuple[bool, ...]:
    monitor = HealthMonitor.from_settings(node.inventory, node.settings)
    monitor.record_xid(gpu(0).uuid or "", 79)
    entry = monitor.snapshot()["gpu-0"]
    assert entry.status == UNHEALTHY, entry
    return (entry.message != "",)


def _parent_request_answered(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu/sub1", "gpu-0")]))
    (device,) = prepare(node, claim).claims[claim["metadata"]["uid"]].devices
    return (list(device.request_names) == ["gpu"],)


def _admin_access_granted(node: Node) -> tuple[bool, ...]:
    node.serve()
    user = node.put(make_claim("user", [result("gpu", "gpu-0")]))
    admin = node.put(make_claim("admin", [result("gpu", "gpu-0", adminAccess=True)]))
    assert prepare(node, user).claims[user["metadata"]["uid"]].error == ""
    answer = prepare(node, admin).claims[admin["metadata"]["uid"]]
    return (answer.error == "" and len(answer.devices) == 1,)


def _device_free_after_unprepare(node: Node) -> tuple[bool, ...]:
    node.serve()
    first = node.put(make_claim("first", [result("gpu", "gpu-0")]))
    assert prepare(node, first).claims[first["metadata"]["uid"]].error == ""
    assert unprepare(node, first).claims[first["metadata"]["uid"]].error == ""
    again = prepare(node, first).claims[first["metadata"]["uid"]]
    other = node.put(make_claim("other", [result("gpu", "gpu-0")]))
    unprepare(node, first)
    later = prepare(node, other).claims[other["metadata"]["uid"]]
    return again.error == "", later.error == ""


def _sharing_strategy_applied(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], [opaque(TS)]))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    env = json.loads(_spec_path(node, claim).read_text())["devices"][0]["containerEdits"]["env"]
    return ("GPU_SHARING_STRATEGY=TimeSlicing" in env,)


def _request_names_answered(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("first", "gpu-0"), result("second", "gpu-1")]))
    devices = prepare(node, claim).claims[claim["metadata"]["uid"]].devices
    return (
        {d.device_name: list(d.request_names) for d in devices} == {"gpu-0": ["first"], "gpu-1": ["second"]},
    )


def _other_claims_kept(node: Node) -> tuple[bool, ...]:
    node.serve()
    held = node.put(make_claim("held", [result("gpu", "gpu-0")]))
    fresh = node.put(make_claim("fresh", [result("gpu", "gpu-1")]))
    assert prepare(node, held).claims[held["metadata"]["uid"]].error == ""
    assert prepare(node, fresh).claims[fresh["metadata"]["uid"]].error == ""
    return (_spec_path(node, held).exists(),)


def _share_given(node: Node) -> tuple[bool, ...]:
    node.inventory = make_consumable(node.inventory)
    node.serve()
    half = {"memory": "512Mi", "computeShare": "50"}
    claim = node.put(
        make_claim(
            "c",
            [result("gpu", "gpu-0", shareID="11111111-0000-0000-0000-000000000000", consumedCapacity=half)],
        )
    )
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    env = json.loads(_spec_path(node, claim).read_text())["devices"][0]["containerEdits"]["env"]
    return (f"GPU_MEMORY_LIMIT={512 * 2**20}" in env, "GPU_COMPUTE_SHARE=50" in env)


def _share_id_answered(node: Node) -> tuple[bool, ...]:
    node.inventory = make_consumable(node.inventory)
    node.serve()
    share = "22222222-0000-0000-0000-000000000000"
    half = {"memory": "512Mi", "computeShare": "50"}
    claim = node.put(make_claim("c", [result("gpu", "gpu-0", shareID=share, consumedCapacity=half)]))
    answer = prepare(node, claim).claims[claim["metadata"]["uid"]]
    assert answer.error == "", answer.error
    return ([d.share_id for d in answer.devices] == [share],)


def _ref(claim: dict[str, Any]) -> ClaimRef:
    m = claim["metadata"]
    return ClaimRef(m["namespace"], m["uid"], m["name"])


def _claim_kept_across_restart(node: Node) -> tuple[bool, ...]:
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    node.state().prepare(_ref(claim))
    restarted = node.state()
    restarted.restore()
    return claim["metadata"]["uid"] in restarted.prepared(), _spec_path(node, claim).exists()


def _restored_claim_released(node: Node) -> tuple[bool, ...]:
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    node.state().prepare(_ref(claim))
    restarted = node.state()
    restarted.restore()
    restarted.unprepare(_ref(claim))
    other = node.put(make_claim("other", [result("gpu", "gpu-0")]))
    try:
        restarted.prepare(_ref(other))
    except DeviceConflict:
        return (False,)
    return (True,)


def _registers_again(node: Node) -> tuple[bool, ...]:
    node.serve()
    stub = registration_pb2_grpc.RegistrationStub(node.channel(node.settings.registration_socket))
    assert stub.GetInfo(registration_pb2.InfoRequest(), timeout=30).supported_versions
    stub.NotifyRegistrationStatus(registration_pb2.RegistrationStatus(plugin_registered=True), timeout=30)
    again = stub.GetInfo(registration_pb2.InfoRequest(), timeout=30)  # a restarted kubelet asks again
    return (bool(again.supported_versions),)


def _slices_kept_on_start(node: Node) -> tuple[bool, ...]:
    _, store = _published(node)
    restarted = SlicePublisher(
        store,  # type: ignore[arg-type]  # sync() never watches
        driver_name=DRIVER,
        node_name=NODE,
        build=slice_builder(node.settings.breaks),  # as the driver's main does
        breaks=node.settings.breaks,
    )
    restarted.update(Inventory(devices={d.name: d for d in map(gpu, range(8))}))
    restarted.sync()
    return (not store.deleted,)


class _RestartingStore(SliceStore):
    """A store whose watch breaks once (the API server restarts), then watches until interrupted."""

    def __init__(self) -> None:
        super().__init__()
        self.restart = threading.Event()
        self.watching = threading.Event()
        self._interrupted = threading.Event()
        self._broken = False

    def watch(self, driver_name: str, node_name: str, resource_version: str) -> Iterator[tuple[str, Any]]:
        self.watching.set()
        while not self._interrupted.wait(0.02):
            if self.restart.is_set() and not self._broken:
                self._broken = True
                raise ConnectionError("the API server went away")
        yield from ()

    def interrupt(self) -> None:
        self._interrupted.set()


def _slices_restored_after_api_restart(node: Node) -> tuple[bool, ...]:
    store = _RestartingStore()
    publisher = SlicePublisher(
        store,
        driver_name=DRIVER,
        node_name=NODE,
        build=slice_builder(node.settings.breaks),  # as the driver's main does
        breaks=node.settings.breaks,
        keep=True,
    )
    publisher.update(Inventory(devices={d.name: d for d in map(gpu, range(8))}))
    before = set(threading.enumerate())
    publisher.start()
    watch = [t for t in threading.enumerate() if t not in before and t.name == "slice-watch"]
    assert len(watch) == 1, watch
    try:
        # the watch set up first: its start lists the slices and asks for a pass, which would
        # otherwise restore them after the clear below, whatever the switch
        assert store.watching.wait(30), "the publisher never watched its slices"
        assert publisher.wait_synced(30)
        store.objects.clear()  # deleted while the API server was away
        store.restart.set()
        restarted = time.monotonic()
        # Restored (the watch was set up again), or the watch thread gave up and nothing came back
        # for the 3 s the rewatch would need: a loaded machine only delays the answer.
        until(
            lambda: (
                len(store.devices()) == 8 or (not watch[0].is_alive() and time.monotonic() - restarted >= 3)
            ),
            timeout=30,
            what="the slices restored or the watch given up",
        )
        return (len(store.devices()) == 8,)
    finally:
        publisher.stop()


def _shared(node: Node, uses: Sequence[str] = ("gpu",), pods: int = 1) -> dict[str, Any]:
    """A claim ``c`` reserved for ``pods`` pods whose container uses ``uses`` of it (entry ``gpu``)."""
    claim = make_claim("c", [result("gpu", "gpu-0")])
    made = [make_pod(f"p{i}", {"gpu": "c"}, uses) for i in range(pods)]
    for pod in made:
        node.pods.pods[("default", pod["metadata"]["name"])] = pod
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in made
    ]
    return node.put(claim)


def _claim_kept_while_pods_use_it(node: Node) -> tuple[bool, ...]:
    state = node.state()
    claim = _shared(node, pods=2)
    try:
        state.prepare(_ref(claim))
        del node.pods.pods[("default", "p0")]  # the first pod goes; p1 still uses the claim
        # The switch looks twice a second: on, wait for it as long as a loaded machine may need;
        # off, the spec must stay for 2 s (a negative window, kept as it was).
        window = 30.0 if node.settings.breaks("unprepare-with-first-pod") else 2.0
        deadline = time.monotonic() + window
        while _spec_path(node, claim).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return (_spec_path(node, claim).exists(),)
    finally:
        state.stop()


def _unreferenced_claim_prepared(node: Node) -> tuple[bool, ...]:
    claim = _shared(node, uses=())
    devices = node.state().prepare(_ref(claim))
    return bool(devices), _spec_path(node, claim).exists()


def _prepared_again_after_unprepare(node: Node) -> tuple[bool, ...]:
    claim = _shared(node)
    state = node.state()
    state.prepare(_ref(claim))
    state.unprepare(_ref(claim))
    try:
        state.prepare(_ref(claim))
    except PrepareError:
        return (False,)
    return (True,)


def _device_status_ready(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0"), result("gpu", "gpu-1")]))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    written = (node.claims.get_claim("default", "c") or {})["status"]["devices"]
    return tuple([(c["type"], c["status"]) for c in e["conditions"]] == [("Ready", "True")] for e in written)


def _extended_resource_claim(name: str = "p-extended-resources-x7k") -> dict[str, Any]:
    """A claim as kube-scheduler makes it for a pod's extended resources (KEP-5004)."""
    claim = make_claim(name, [result("container-0-request-0", "gpu-0")])
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    return claim


def _extended_resource_claim_answered(node: Node) -> tuple[bool, ...]:
    node.serve()
    claim = node.put(_extended_resource_claim())
    answer = prepare(node, claim).claims[claim["metadata"]["uid"]]
    assert answer.error == ""
    return ([d.device_name for d in answer.devices] == ["gpu-0"],)


def _deleted_claim_unprepared_at_start(node: Node) -> tuple[bool, ...]:
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    node.state().prepare(_ref(claim))
    node.claims.delete("default", "c")  # deleted while the driver was down
    restarted = node.state()
    restarted.restore()
    return claim["metadata"]["uid"] not in restarted.prepared(), not _spec_path(node, claim).exists()


def _corrupt_checkpoint_set_aside(node: Node) -> tuple[bool, ...]:
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    node.state().prepare(_ref(claim))
    path = node.settings.checkpoint_path
    other = str(uuidlib.uuid4())
    path.write_text(path.read_text().replace(claim["metadata"]["uid"], other))  # parses; fails its checksum
    loaded = node.state()
    return other not in loaded.prepared(), bool(list(path.parent.glob(f"{path.name}.corrupt-*")))


def _subrequest_config_scoped(node: Node) -> tuple[bool, ...]:
    node.serve()
    configs = [opaque(TS, requests=["a/sub0", "b/sub0"])]
    claim = node.put(make_claim("c", [result("a/sub0", "gpu-0"), result("b/sub1", "gpu-1")], configs))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    devices = json.loads(_spec_path(node, claim).read_text())["devices"]
    uid = claim["metadata"]["uid"]
    envs = {d["name"].removeprefix(f"{uid}-"): d["containerEdits"]["env"] for d in devices}
    assert "GPU_SHARING_STRATEGY=TimeSlicing" in envs["gpu-0"]  # a/sub0: the subrequest it names
    return ("GPU_SHARING_STRATEGY=TimeSlicing" not in envs["gpu-1"],)


def _recreated_claim_prepared_as_new(node: Node) -> tuple[bool, ...]:
    state = node.state()
    old = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    state.prepare(_ref(old))
    node.claims.delete("default", "c")  # deleted without its unprepare
    new = node.put(make_claim("c", [result("gpu", "gpu-1")]))
    return ([d.device for d in state.prepare(_ref(new))] == ["gpu-1"],)


def _metadata_prepared(node: Node) -> tuple[list[PreparedDevice], str]:
    """A claim of requests a (gpu-0) and b (gpu-1, gpu-2) prepared with device metadata on; its
    devices, and the claim's UID."""
    node.settings = replace(node.settings, device_metadata=True)
    claim = node.put(make_claim("c", [result("a", "gpu-0"), result("b", "gpu-1"), result("b", "gpu-2")]))
    return node.state().prepare(_ref(claim)), claim["metadata"]["uid"]


def _metadata_only_where_used(node: Node) -> tuple[bool, ...]:
    devices, uid = _metadata_prepared(node)
    ids = {d.device: {i for i in d.cdi_ids if "/metadata=" in i} for d in devices}
    return ids["gpu-0"] == {f"{DRIVER}/metadata={uid}_a"}, ids["gpu-2"] == set()


def _metadata_of_its_request(node: Node) -> tuple[bool, ...]:
    _metadata_prepared(node)
    (path,) = node.settings.claims_dir.glob("*/metadata/b/metadata.json")
    first = json.JSONDecoder().raw_decode(path.read_text())[0]
    return ([d["name"] for d in first["requests"][0]["devices"]] == ["gpu-1", "gpu-2"],)


def _metrics_answered(node: Node) -> tuple[bool, ...]:
    server = MetricsServer(node.settings, "127.0.0.1:0", dict)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as answer:
            return (answer.status == 200,)
    except urllib.error.HTTPError:
        return (False,)
    finally:
        server.stop()


def _attach_conditions(node: Node, problem: str | None) -> dict[str, str]:
    """GPU 1 attached on demand, allocated to a claim; the attach conditions the attacher wrote
    when attaching fails for ``problem`` (None: it works)."""
    inventory = attach_on_demand(node.inventory, [1])
    attacher = Attacher(None, node.claims, node.settings, inventory, problem=lambda info: problem)
    bound = {"bindingConditions": [ATTACHED], "bindingFailureConditions": [ATTACH_FAILED]}
    claim = node.put(make_claim("c", [result("gpu", "gpu-1", **bound)]))
    attacher.handle(claim)
    entries = (node.claims.get_claim("default", "c") or {}).get("status", {}).get("devices") or []
    return {c["type"]: c["status"] for e in entries if e["device"] == "gpu-1" for c in e["conditions"]}


def _attached_for_the_claim(node: Node) -> tuple[bool, ...]:
    return (_attach_conditions(node, None) == {ATTACHED: "True", ATTACH_FAILED: "False"},)


def _attach_failure_reported(node: Node) -> tuple[bool, ...]:
    return (_attach_conditions(node, "fabric down") == {ATTACHED: "False", ATTACH_FAILED: "True"},)


def _only_own_results_prepared(node: Node) -> tuple[bool, ...]:
    """A claim of a GPU and a NIC of another driver: this driver prepares its GPU and leaves the NIC
    to its driver (the kubelet sends the whole claim to every driver it names)."""
    node.serve()
    nic = {"request": "nic", "driver": "nic.dra-conformance.io", "pool": NODE, "device": "nic-0"}
    claim = node.put(make_claim("c", [result("gpu", "gpu-0"), nic]))
    answer = prepare(node, claim).claims[claim["metadata"]["uid"]]
    return (answer.error == "" and [d.device_name for d in answer.devices] == ["gpu-0"],)


# --- to add to tests/driver/test_breakage.py (scenarios of the REG switches) ---
# imports to add at the top: from draproto import dra_v1_pb2, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
# (dra_v1_pb2_grpc too); and the six names to test_every_rule_is_documented's set.


def _missing_claim_refused(node: Node) -> tuple[bool, ...]:
    """A claim whose ResourceClaim does not exist is not answered prepared (REG-UNKNOWN-CLAIM)."""
    node.serve()
    ghost = make_claim("ghost", [result("gpu", "gpu-0")])  # never put: the API server has no such claim
    return (prepare(node, ghost).claims[ghost["metadata"]["uid"]].error != "",)


def _unallocated_claim_refused(node: Node) -> tuple[bool, ...]:
    """A claim that is not allocated is not answered prepared (REG-NOT-ALLOCATED)."""
    node.serve()
    claim = make_claim("c", [])
    del claim["status"]["allocation"]
    node.put(claim)
    return (prepare(node, claim).claims[claim["metadata"]["uid"]].error != "",)


def _registers_after_a_failure(node: Node) -> tuple[bool, ...]:
    """After a failure notice, the success notice of the kubelet's next try is accepted (REG-NOTIFY)."""
    node.serve()
    stub = registration_pb2_grpc.RegistrationStub(node.channel(node.settings.registration_socket))
    failed = registration_pb2.RegistrationStatus(plugin_registered=False, error="refused on purpose")
    with contextlib.suppress(grpc.RpcError):  # the kubelet ignores the answer to a failure notice
        stub.NotifyRegistrationStatus(failed, timeout=30)
    try:
        stub.NotifyRegistrationStatus(registration_pb2.RegistrationStatus(plugin_registered=True), timeout=30)
    except grpc.RpcError:
        return (False,)
    return (True,)


def _bad_claims_fail_alone(node: Node) -> tuple[bool, ...]:
    """A missing claim fails in its own entry beside a good one, and the failure notice is accepted
    without an error (REG-PER-CLAIM-ERRORS; whole-call-errors answers as kubeletplugin does)."""
    node.serve()
    good = node.put(make_claim("good", [result("gpu", "gpu-0")]))
    ghost = make_claim("ghost", [result("gpu", "gpu-1")])
    try:
        answer = prepare(node, good, ghost).claims
        per_claim = (
            answer[good["metadata"]["uid"]].error == "" and answer[ghost["metadata"]["uid"]].error != ""
        )
    except grpc.RpcError:
        per_claim = False
    stub = registration_pb2_grpc.RegistrationStub(node.channel(node.settings.registration_socket))
    failed = registration_pb2.RegistrationStatus(plugin_registered=False, error="refused on purpose")
    try:
        stub.NotifyRegistrationStatus(failed, timeout=30)
        accepted = True
    except grpc.RpcError:
        accepted = False
    return per_claim, accepted


def _first_version_served(node: Node) -> tuple[bool, ...]:
    """The first DRAPlugin version GetInfo lists, which the kubelet picks, is served (REG-VERSIONS)."""
    node.serve()
    stub = registration_pb2_grpc.RegistrationStub(node.channel(node.settings.registration_socket))
    versions = stub.GetInfo(registration_pb2.InfoRequest(), timeout=30).supported_versions
    first = next(v for v in versions if v.endswith(".DRAPlugin"))
    pb2, grpc_mod = (
        (dra_v1_pb2, dra_v1_pb2_grpc) if first == "v1.DRAPlugin" else (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc)
    )
    try:
        prepare(node, pb2=pb2, grpc_mod=grpc_mod)
    except grpc.RpcError:
        return (False,)
    return (True,)


def _unknown_claim_unprepared(node: Node) -> tuple[bool, ...]:
    """Unpreparing a claim the driver never prepared succeeds (REG-UNPREPARE-UNKNOWN)."""
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    return (unprepare(node, claim).claims[claim["metadata"]["uid"]].error == "",)


def _allocated_cdi_ids_answered(node: Node) -> tuple[bool, ...]:
    """Each device is answered with a CDI id its claim's spec defines for it (PREP-CDI-IDS, PREP-VIEW)."""
    node.serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    answer = prepare(node, claim).claims[claim["metadata"]["uid"]]
    spec = json.loads(_spec_path(node, claim).read_text())
    defined = {f"{spec['kind']}={d['name']}" for d in spec["devices"] if d["name"].endswith("-gpu-0")}
    ids = {i for d in answer.devices for i in d.cdi_device_ids}
    return (bool(ids) and ids <= defined,)


def _own_request_names_answered(node: Node) -> tuple[bool, ...]:
    """Each device of a claim of two requests names the request it was allocated for (PREP-REQUEST-NAMES)."""
    node.serve()
    claim = node.put(make_claim("c", [result("first", "gpu-0"), result("second", "gpu-1")]))
    answer = prepare(node, claim).claims[claim["metadata"]["uid"]]
    names = {d.device_name: list(d.request_names) for d in answer.devices}
    return (names == {"gpu-0": ["first"], "gpu-1": ["second"]},)


def _concurrent_prepares_served(node: Node) -> tuple[bool, ...]:
    """A prepare that arrives while another runs (its claim is slow to read) succeeds too
    (REG-CONCURRENT)."""
    node.serve()
    slow = node.put(make_claim("slow", [result("gpu", "gpu-0")]))
    other = node.put(make_claim("other", [result("gpu", "gpu-1")]))
    read = node.claims.get_claim
    entered = threading.Event()  # the first prepare is reading its claim (the switch's lock held)
    release = threading.Event()  # ...and may go on: set once the second prepare was answered

    def slowly(namespace: str, name: str) -> Any:
        if name == "slow" and not entered.is_set():
            entered.set()
            release.wait(30)
        return read(namespace, name)

    node.claims.get_claim = slowly  # type: ignore[method-assign]
    answers: list[Any] = []
    first = threading.Thread(target=lambda: answers.append(prepare(node, slow)))
    first.start()
    try:
        assert entered.wait(30), "the first prepare never read its claim"
        second = prepare(node, other).claims[other["metadata"]["uid"]]
    finally:
        release.set()
        first.join(30)
    assert not first.is_alive(), "the first prepare did not finish"
    return (second.error == "" and answers[0].claims[slow["metadata"]["uid"]].error == "",)


def _other_drivers_claim_not_prepared(node: Node) -> tuple[bool, ...]:
    """A claim whose results are all another driver's is answered with none of ours (REG-OTHER-DRIVER)."""
    node.serve()
    theirs = {"request": "gpu", "driver": "other.example.com", "pool": NODE, "device": "gpu-0"}
    claim = node.put(make_claim("c", [theirs]))
    return (not prepare(node, claim).claims[claim["metadata"]["uid"]].devices,)


def _podgroup_claim(name: str, device: str) -> dict[str, Any]:
    """A claim of ``device`` reserved for a PodGroup, not a pod (what the scheduler writes with
    DRAWorkloadResourceClaims on, and the kubelet then prepares for the group's pods)."""
    claim = make_claim(name, [result("gpu", device)])
    claim["status"]["reservedFor"] = [
        {
            "apiGroup": "scheduling.k8s.io",
            "resource": "podgroups",
            "name": "group",
            "uid": str(uuidlib.uuid4()),
        }
    ]
    return claim


def _podgroup_claim_prepared(node: Node) -> tuple[bool, ...]:
    """A claim reserved for a PodGroup is prepared like one reserved for a pod: the same device, a CDI
    id, no error (PREP-PODGROUP-CLAIM)."""
    node.serve()
    group = node.put(_podgroup_claim("group-claim", "gpu-0"))
    answer = prepare(node, group).claims[group["metadata"]["uid"]]
    return (
        answer.error == "",
        [d.device_name for d in answer.devices] == ["gpu-0"],
        bool([i for d in answer.devices for i in d.cdi_device_ids]),
    )


def _seat_prepared_beside_a_gpu(node: Node) -> tuple[bool, ...]:
    """A claim that holds a GPU and a license seat (whose slice skips node operations) is prepared as
    a whole, as the kubelet asks for it: the GPU with a CDI id, the seat with none (PREP-SKIP-OPS)."""
    node.inventory = with_license_seats(node.inventory)
    node.serve()
    claim = node.put(make_claim("with-seat", [result("gpu", "gpu-0"), result("seat", "gpu-0-license")]))
    answer = prepare(node, claim).claims[claim["metadata"]["uid"]]
    ids = {d.device_name: list(d.cdi_device_ids) for d in answer.devices}
    return (answer.error == "", bool(ids.get("gpu-0")), ids.get("gpu-0-license") == [])


def _sigterm_handled(node: Node) -> tuple[bool, ...]:
    """SIGTERM reaches the driver's handler, which stops it cleanly: its sockets and slices go
    (SLICE-GONE)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        handle_signals(node.settings, lambda signum, frame: None)
        return (signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL,)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _attributes_published(node: Node) -> list[dict[str, Any]]:
    """The attributes of four H100s as the node's slices publish them."""
    h100s = [
        replace(gpu(i), attributes={"type": "gpu", "index": i, "productName": "NVIDIA H100 80GB HBM3"})
        for i in range(4)
    ]
    _, store = _published(node, inventory=Inventory(devices={d.name: d for d in h100s}))
    return [d["attributes"] for s in store.objects.values() for d in s["spec"]["devices"]]


def _index_an_int(node: Node) -> tuple[bool, ...]:
    return (all(set(a["index"]) == {"int"} for a in _attributes_published(node)),)


def _every_gpu_of_type_gpu(node: Node) -> tuple[bool, ...]:
    return (all(a["type"] == {"string": "gpu"} for a in _attributes_published(node)),)


def _product_name_of_the_model(node: Node) -> tuple[bool, ...]:
    names = {a["productName"]["string"] for a in _attributes_published(node)}
    return (names == {"NVIDIA H100 80GB HBM3"},)


def _documented_class_names(node: Node) -> tuple[bool, ...]:
    """``device-classes`` prints the classes under their documented names (PRE-CLASSES)."""
    printed = io.StringIO()
    env = {BREAK_RULES_ENV: ",".join(sorted(node.settings.break_rules))}
    with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(printed):
        assert driver_main(["device-classes", "--driver-name", DRIVER]) == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(printed.getvalue())]
    return (names == [class_name(DRIVER, t) for t in DEVICE_TYPES],)


KEPT: dict[str, Callable[[Node], tuple[bool, ...]]] = {
    "non-idempotent-prepare": _idempotent_prepare,
    "drop-claim-from-batch": _whole_batch_answered,
    "invalid-cdi-spec": _valid_cdi_spec,
    "leave-cdi-on-unprepare": _cdi_removed_on_unprepare,
    "ignore-config": _config_applied,
    "oversized-slice": _slices_split,
    "wrong-pool-name": _allocated_pool_answered,
    "no-health": _health_reported,
    "fault-on-wrong-device": _fault_on_its_device,
    "sticky-taint": _taint_removed_after_heal,
    "restamp-taints": _taint_added_once,
    "benign-faults-count": _benign_xids_ignored,
    "drop-informational-taints": _benign_xids_shown,
    "health-without-message": _unhealthy_says_why,
    "unserved-health-version": _every_health_version_served,
    "no-slices": _slices_published,
    "hide-device": _every_device_published,
    "phantom-device": _no_device_added,
    "no-republish": _slices_restored,
    "stale-after-rewrite": _deleted_after_rewrite_restored,
    "churn-slices": _slices_left_alone,
    "wrong-slice-count": _slice_count_right,
    "orphan-slices": _slices_owned_by_node,
    "same-pool-on-every-node": _pool_of_its_own,
    "subrequest-name": _parent_request_answered,
    "refuse-admin-access": _admin_access_granted,
    "keep-device-after-unprepare": _device_free_after_unprepare,
    "ignore-sharing-strategy": _sharing_strategy_applied,
    "qualified-request-names": _request_names_answered,
    "forget-unbatched-claims": _other_claims_kept,
    "forget-checkpoint": _claim_kept_across_restart,
    "leak-restored-claims": _restored_claim_released,
    "refuse-reregister": _registers_again,
    "recreate-slices-on-start": _slices_kept_on_start,
    "no-rewatch": _slices_restored_after_api_restart,
    "short-counter-set": _counters_within_their_sets,
    "unprepare-with-first-pod": _claim_kept_while_pods_use_it,
    "skip-unreferenced-claims": _unreferenced_claim_prepared,
    "stale-claim-state": _prepared_again_after_unprepare,
    "device-status-not-ready": _device_status_ready,
    "ignore-extended-resource-claims": _extended_resource_claim_answered,
    "keep-deleted-claims": _deleted_claim_unprepared_at_start,
    "trust-corrupt-checkpoint": _corrupt_checkpoint_set_aside,
    "config-to-whole-request": _subrequest_config_scoped,
    "claims-by-name": _recreated_claim_prepared_as_new,
    "exceed-consumable-share": _share_given,
    "drop-share-id": _share_id_answered,
    "metadata-to-every-container": _metadata_only_where_used,
    "metadata-of-whole-claim": _metadata_of_its_request,
    "metrics-broken": _metrics_answered,
    "compat-groups-missing": _groups_published,
    "scalar-list-attrs": _list_attributes_published,
    "no-node-allocatable": _host_memory_overhead_published,
    "slices-any-node": _slice_policy_enforced,
    "no-status-access": _status_access_granted,
    "drop-slices-on-update": _slices_left_to_the_new_instance,
    "numa-node-missing": _numa_node_published,
    "never-attach": _attached_for_the_claim,
    "ignore-attach-failure": _attach_failure_reported,
    "prepare-foreign-results": _only_own_results_prepared,
    "prepare-missing-claims": _missing_claim_refused,
    "prepare-unallocated-claims": _unallocated_claim_refused,
    "refuse-after-failed-registration": _registers_after_a_failure,
    "whole-call-errors": _bad_claims_fail_alone,
    "unserved-dra-version": _first_version_served,
    "fail-unknown-unprepare": _unknown_claim_unprepared,
    "cdi-id-of-another-device": _allocated_cdi_ids_answered,
    "every-request-name": _own_request_names_answered,
    "refuse-concurrent-prepare": _concurrent_prepares_served,
    "prepare-other-driver-claims": _other_drivers_claim_not_prepared,
    "no-sigterm-handler": _sigterm_handled,
    "index-as-string": _index_an_int,
    "mistyped-device": _every_gpu_of_type_gpu,
    "product-name-per-device": _product_name_of_the_model,
    "misnamed-device-classes": _documented_class_names,
    "pod-only-reservations": _podgroup_claim_prepared,
    "refuse-skipped-devices": _seat_prepared_beside_a_gpu,
}
"""Per switch: the checks of the rule it breaks."""


def test_grpc_switches_wrap_the_plugin_only_when_on(node: Node) -> None:
    """The gRPC switches live in an interceptor around the plugin, which the plugin never reads."""
    assert not GRPC_SWITCHES - set(RULES)
    source = Path(plugin.__file__).read_text()
    assert not [rule for rule in GRPC_SWITCHES if f'breaks("{rule}")' in source]
    assert interceptors(node.settings, node.state()) == []
    assert interceptors(broken(node, "no-health").settings, node.state()) == []
    assert len(interceptors(broken(node, "drop-claim-from-batch").settings, node.state())) == 1


def test_slice_and_cdi_switches_wrap_the_writers_only_when_on(node: Node) -> None:
    """The switches that only distort the slices or CDI specs written live in wrappers around the
    slice builder, the taint source and the spec store, which the model driver's modules never read."""
    moved = SLICE_SWITCHES | TAINT_SWITCHES | CDI_SWITCHES
    assert not moved - set(RULES)
    for name in ("slices", "slicing", "cdi", "state"):
        source = Path(importlib.import_module(f"driver.{name}").__file__ or "").read_text()
        assert "breaks(" not in source or name in ("slices", "state"), name
        assert not [rule for rule in moved if f'"{rule}"' in source], name

    def taints() -> dict[str, list[DeviceTaint]]:
        return {}

    clean = node.settings.breaks
    assert slice_builder(clean) is build_slices
    assert taint_source(clean, taints) is taints
    assert type(spec_store(node.settings)) is SpecStore
    other = broken(node, "no-health").settings
    assert slice_builder(other.breaks) is build_slices and taint_source(other.breaks, taints) is taints
    assert type(spec_store(other)) is SpecStore
    assert isinstance(slice_builder(broken(node, "hide-device").settings.breaks), BreakingSliceBuilder)
    assert taint_source(broken(node, "restamp-taints").settings.breaks, taints) is not taints
    assert isinstance(spec_store(broken(node, "invalid-cdi-spec").settings), BreakingSpecStore)


@pytest.mark.parametrize(
    "module",
    [
        "slices", "state", "planning", "preparing", "materialize", "health", "binding", "devicemetadata",
        "devicestatus", "metrics", "__main__",
    ],
)  # fmt: skip
def test_a_module_reads_its_switches_in_one_seam(module: str) -> None:
    """Where a switch must sit inside the model driver, its module asks for it in one block (the
    ``<Module>Breakage`` seam, or one marked line), so a reader sees at a glance where it deviates."""
    lines = Path(importlib.import_module(f"driver.{module}").__file__ or "").read_text().splitlines()
    asked = [n for n, line in enumerate(lines) if "breaks(" in line]
    assert asked and asked == list(range(asked[0], asked[0] + len(asked))), asked
    assert "the seam" in "\n".join(lines[max(0, asked[0] - 20) : asked[0]]).lower()


def test_every_switch_has_a_scenario() -> None:
    assert set(KEPT) == set(RULES)


@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_switch_breaks_its_rule_and_only_when_on(node: Node, rule: str, on: bool) -> None:
    checks = KEPT[rule](broken(node, rule) if on else node)
    if on:
        assert not any(checks), f"{rule} is on, yet the rule still holds: {checks}"
    else:
        assert all(checks), f"{rule} is off, yet the rule is broken: {checks}"


def test_ignore_config_ignores_invalid_configs_too(node: Node) -> None:
    broken(node, "ignore-config").serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], [opaque({"kind": "Nonsense"})]))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""


def test_ignore_sharing_strategy_still_refuses_invalid_configs(node: Node) -> None:
    broken(node, "ignore-sharing-strategy").serve()
    bad = {**TS, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}}
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], [opaque(bad)]))
    assert "interval" in prepare(node, claim).claims[claim["metadata"]["uid"]].error


def test_switches_leave_other_rules_alone(node: Node) -> None:
    # same-pool-on-every-node renames the pool the claims below are allocated from
    kept = {"non-idempotent-prepare", "same-pool-on-every-node"}
    node.settings = replace(node.settings, break_rules=frozenset(RULES) - kept)
    assert all(_idempotent_prepare(node))


def test_ignore_extended_resource_claims_answers_a_users_claim(node: Node) -> None:
    broken(node, "ignore-extended-resource-claims").serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    assert [d.device_name for d in prepare(node, claim).claims[claim["metadata"]["uid"]].devices] == ["gpu-0"]


def test_pod_only_reservations_refuses_only_claims_reserved_for_no_pod(node: Node) -> None:
    """With the switch on, a PodGroup's claim is refused, saying why; a pod's claim and a claim with no
    ``reservedFor`` (what the suite's direct calls prepare) are prepared as before."""
    broken(node, "pod-only-reservations").serve()
    group = node.put(_podgroup_claim("group-claim", "gpu-0"))
    error = prepare(node, group).claims[group["metadata"]["uid"]].error
    assert "reserved for no pod" in error and "scheduling.k8s.io/podgroups group" in error, error
    pods = node.put(make_claim("pod-claim", [result("gpu", "gpu-1")]))
    unreserved = make_claim("unreserved", [result("gpu", "gpu-2")])
    del unreserved["status"]["reservedFor"]
    node.put(unreserved)
    for claim in (pods, unreserved):
        answer = prepare(node, claim).claims[claim["metadata"]["uid"]]
        assert answer.error == "" and [d.device_name for d in answer.devices] != [], answer
