"""Rule-breaking switches: off by default, each one breaks its rule and nothing else."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from drvkit import DRIVER, Node, make_claim, opaque, result

from draproto import dra_v1_pb2, dra_v1_pb2_grpc, health_v1_pb2, health_v1_pb2_grpc
from driver.breakage import RULES, parse_rules
from driver.cdi import validate
from driver.errors import CDIError, SettingsError
from driver.healthstream import HEALTHY, DeviceHealth, StaticHealth
from driver.settings import from_args

TS = {"apiVersion": "gpu.dra-conformance.io/v1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}


def _claim(c: dict) -> dra_v1_pb2.Claim:
    m = c["metadata"]
    return dra_v1_pb2.Claim(namespace=m["namespace"], uid=m["uid"], name=m["name"])


def prepare(node: Node, *claims: dict) -> dra_v1_pb2.NodePrepareResourcesResponse:
    stub = dra_v1_pb2_grpc.DRAPluginStub(node.channel())
    return stub.NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=[_claim(c) for c in claims])
    )


def unprepare(node: Node, *claims: dict) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
    stub = dra_v1_pb2_grpc.DRAPluginStub(node.channel())
    return stub.NodeUnprepareResources(
        dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[_claim(c) for c in claims])
    )


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
        "ignore-config", "oversized-slice", "wrong-pool-name", "no-health",
    }  # fmt: skip


def test_non_idempotent_prepare(node: Node) -> None:
    broken(node, "non-idempotent-prepare").serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    uid = claim["metadata"]["uid"]
    assert prepare(node, claim).claims[uid].error == ""
    assert "already prepared" in prepare(node, claim).claims[uid].error


def test_drop_claim_from_batch(node: Node) -> None:
    broken(node, "drop-claim-from-batch").serve()
    a = node.put(make_claim("a", [result("gpu", "gpu-0")]))
    b = node.put(make_claim("b", [result("gpu", "gpu-1")]))
    assert set(prepare(node, a, b).claims) == {a["metadata"]["uid"]}
    assert set(prepare(node, b).claims) == {b["metadata"]["uid"]}


def test_invalid_cdi_spec(node: Node) -> None:
    broken(node, "invalid-cdi-spec").serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    spec = json.loads(
        (node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json").read_text()
    )
    with pytest.raises(CDIError):
        validate(spec)


def test_leave_cdi_on_unprepare(node: Node) -> None:
    broken(node, "leave-cdi-on-unprepare").serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    prepare(node, claim)
    assert unprepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    assert (node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json").exists()


def test_ignore_config(node: Node) -> None:
    broken(node, "ignore-config").serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")], [opaque(TS), opaque({"kind": "Nonsense"})]))
    assert prepare(node, claim).claims[claim["metadata"]["uid"]].error == ""
    spec = json.loads(
        (node.settings.kubelet.cdi_dir / f"{DRIVER}-{claim['metadata']['uid']}.json").read_text()
    )
    assert not any("SHARING" in e for e in spec["devices"][0]["containerEdits"]["env"])


def test_wrong_pool_name(node: Node) -> None:
    broken(node, "wrong-pool-name").serve()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    (device,) = prepare(node, claim).claims[claim["metadata"]["uid"]].devices
    assert device.pool_name != node.settings.pool_name


def test_no_health_keeps_the_stream_silent(node: Node) -> None:
    broken(node, "no-health").serve(health=StaticHealth({"gpu-0": DeviceHealth(HEALTHY)}))
    stream = health_v1_pb2_grpc.DRAResourceHealthStub(node.channel()).NodeWatchResources(
        health_v1_pb2.NodeWatchResourcesRequest(), timeout=1.5
    )
    with pytest.raises(Exception) as err:
        next(stream)
    assert "DEADLINE_EXCEEDED" in str(err.value)
