"""Prepare on a fakegpu machine: discovery and MIG partitions through the real pynvml path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import fakegpu
from draproto import dra_v1_pb2, dra_v1_pb2_grpc
from driver.devices import discover
from driver.state import ClaimRef, DeviceState
from tests.driver.drvkit import DRIVER, NODE, Node, make_claim, opaque, result

MIG_MPS = {
    "apiVersion": "gpu.dra-conformance.io/v1",
    "kind": "MigDeviceConfig",
    "sharing": {"strategy": "MPS"},
}


@pytest.fixture
def machine() -> Iterator[fakegpu.FakeMachine]:
    with fakegpu.installed("dgx-h100", node_name=NODE) as m:
        for gpu in range(m.gpu_count):
            m.set_mig_mode(gpu, True)
        yield m


def _prepare(node: Node, claim: dict[str, Any]) -> dra_v1_pb2.NodePrepareResourceResponse:
    meta = claim["metadata"]
    ref = dra_v1_pb2.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])
    stub = dra_v1_pb2_grpc.DRAPluginStub(node.channel())
    return stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]), timeout=10).claims[
        meta["uid"]
    ]


def _unprepare(node: Node, claim: dict[str, Any]) -> str:
    meta = claim["metadata"]
    ref = dra_v1_pb2.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])
    stub = dra_v1_pb2_grpc.DRAPluginStub(node.channel())
    response = stub.NodeUnprepareResources(dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref]), timeout=10)
    return str(response.claims[meta["uid"]].error)


def test_partition_claim_creates_a_mig_device_and_unprepare_removes_it(
    node: Node, machine: fakegpu.FakeMachine
) -> None:
    inventory = discover(["partitionable-mig"])
    state = DeviceState(node.settings, inventory, node.claims, boot_id="b")
    state.restore()
    node.serve(state)
    claim = node.put(make_claim("m", [result("mig", "gpu-2-part-3g40gb-4")], [opaque(MIG_MPS)]))
    response = _prepare(node, claim)
    assert response.error == ""
    (mig,) = discover(["mig"])
    assert mig.placement == inventory["gpu-2-part-3g40gb-4"].placement
    spec = json.loads(
        (node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json").read_text()
    )
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert env["GPU_DEVICE_GPU_2_PART_3G40GB_4"] == mig.uuid
    assert env["GPU_SHARING_STRATEGY"] == "MPS"
    assert _prepare(node, claim) == response  # idempotent: no second instance
    assert len(discover(["mig"])) == 1
    assert _unprepare(node, claim) == ""
    assert len(discover(["mig"])) == 0


def test_overlapping_partition_fails_with_claim_device_and_reason(
    node: Node, machine: fakegpu.FakeMachine
) -> None:
    inventory = discover(["partitionable-mig"])
    state = DeviceState(node.settings, inventory, node.claims, boot_id="b")
    node.serve(state)
    first = node.put(make_claim("a", [result("mig", "gpu-0-part-4g40gb-0")]))
    assert _prepare(node, first).error == ""
    second = node.put(make_claim("b", [result("mig", "gpu-0-part-1g10gb-2")]))
    error = _prepare(node, second).error
    assert "default/b" in error and "gpu-0-part-1g10gb-2" in error
    assert len(discover(["mig"])) == 1


def test_nvml_backend_names_the_mig_capability_nodes_of_a_partition(
    node: Node, machine: fakegpu.FakeMachine
) -> None:
    node.settings = replace(node.settings, backend=replace(node.settings.backend, kind="nvml"))
    inventory = discover(["partitionable-mig"])
    minor = inventory["gpu-3-part-3g40gb-4"].minor
    # a 3g instance at memory slice 4 gets GPU instance id 2
    minors = {f"gpu{minor}/gi2/access": 30, f"gpu{minor}/gi2/ci0/access": 31, f"gpu{minor}/gi1/access": 99}
    state = DeviceState(node.settings, inventory, node.claims, boot_id="b", mig_minors=lambda: minors)
    claim = node.put(make_claim("m", [result("mig", "gpu-3-part-3g40gb-4")]))
    state.prepare(ClaimRef("default", claim["metadata"]["uid"], "m"))
    spec = json.loads(
        (node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json").read_text()
    )
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == [f"/dev/nvidia{minor}", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31"]
