"""The kubelet plugin over real gRPC on unix sockets: registration, both DRA versions, health."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import grpc
import pytest

import draproto
from draproto import (
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    registration_pb2,
    registration_pb2_grpc,
)
from driver.claims import MemoryClaimSource
from driver.healthstream import HEALTHY, UNHEALTHY, DeviceHealth, StaticHealth
from driver.settings import HealthSettings
from tests.driver.drvkit import DRIVER, NODE, Node, make_claim, prepare, result, unprepare


def test_get_info_names_the_driver_endpoint_and_versions(node: Node) -> None:
    node.serve(health=StaticHealth())
    stub = registration_pb2_grpc.RegistrationStub(node.channel(node.settings.registration_socket))
    info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=5)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(node.settings.dra_socket)
    assert list(info.supported_versions) == [
        draproto.DRA_V1, draproto.DRA_V1BETA1, draproto.HEALTH_V1, draproto.HEALTH_V1ALPHA1,
    ]  # fmt: skip
    assert node.settings.registration_socket.name == f"{DRIVER}-reg.sock"


def test_health_off_is_not_advertised_nor_served(node: Node) -> None:
    node.settings = replace(node.settings, health=HealthSettings(enabled=False))
    node.serve(health=StaticHealth())
    stub = registration_pb2_grpc.RegistrationStub(node.channel(node.settings.registration_socket))
    info = stub.GetInfo(registration_pb2.InfoRequest(), timeout=5)
    assert list(info.supported_versions) == [draproto.DRA_V1, draproto.DRA_V1BETA1]
    with pytest.raises(grpc.RpcError) as err:
        next(iter(health_v1_pb2_grpc.DRAResourceHealthStub(node.channel()).NodeWatchResources(
            health_v1_pb2.NodeWatchResourcesRequest(), timeout=5)))  # fmt: skip
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_notify_registration_status_sets_registered(node: Node) -> None:
    server = node.serve()
    stub = registration_pb2_grpc.RegistrationStub(node.channel(node.settings.registration_socket))
    stub.NotifyRegistrationStatus(registration_pb2.RegistrationStatus(plugin_registered=True), timeout=5)
    assert server.registered.is_set()
    stub.NotifyRegistrationStatus(
        registration_pb2.RegistrationStatus(plugin_registered=False, error="x"), timeout=5
    )
    assert not server.registered.is_set()


def test_prepare_answers_devices_with_cdi_ids_and_spec_on_disk(node: Node) -> None:
    node.serve()
    claim = node.put(make_claim("c1", [result("gpu", "gpu-0")]))
    uid = claim["metadata"]["uid"]
    response = prepare(node, claim)
    entry = response.claims[uid]
    assert entry.error == ""
    (device,) = entry.devices
    assert list(device.request_names) == ["gpu"]
    assert device.pool_name == NODE
    assert device.device_name == "gpu-0"
    assert list(device.cdi_device_ids) == [f"k8s.{DRIVER}/gpu={uid}-gpu-0"]
    assert not device.HasField("share_id")
    spec = json.loads((node.settings.kubelet.cdi_dir / f"{DRIVER}-{uid}.json").read_text())
    assert spec["devices"][0]["name"] == f"{uid}-gpu-0"


def test_first_available_result_answers_the_parent_request(node: Node) -> None:
    node.serve()
    claim = node.put(make_claim("c1", [result("gpu/sub0", "gpu-1")]))
    (device,) = prepare(node, claim).claims[claim["metadata"]["uid"]].devices
    assert list(device.request_names) == ["gpu"]


def test_share_id_is_answered_in_v1_and_absent_in_v1beta1(node: Node) -> None:
    node.serve()
    share = "0b1c2d3e-aaaa-bbbb-cccc-000000000001"
    claim = node.put(make_claim("c1", [result("gpu", "gpu-0", shareID=share)]))
    (v1,) = prepare(node, claim).claims[claim["metadata"]["uid"]].devices
    assert v1.share_id == share
    (beta,) = (
        prepare(node, claim, pb2=dra_v1beta1_pb2, grpc_mod=dra_v1beta1_pb2_grpc)
        .claims[claim["metadata"]["uid"]]
        .devices
    )
    assert beta.device_name == "gpu-0"
    assert list(beta.cdi_device_ids) == list(v1.cdi_device_ids)


def test_batch_answers_every_claim_with_per_claim_errors(node: Node) -> None:
    node.serve()
    good = node.put(make_claim("good", [result("gpu", "gpu-0")]))
    missing = make_claim("missing", [result("gpu", "gpu-1")])  # never stored in the API
    wrong_pool = node.put(make_claim("wp", [{**result("gpu", "gpu-2"), "pool": "other-node"}]))
    no_device = node.put(make_claim("nd", [result("gpu", "gpu-99")]))
    response = prepare(node, good, missing, wrong_pool, no_device)
    uids = {c["metadata"]["uid"] for c in (good, missing, wrong_pool, no_device)}
    assert set(response.claims) == uids
    assert response.claims[good["metadata"]["uid"]].error == ""
    assert "not found" in response.claims[missing["metadata"]["uid"]].error
    assert "default/missing" in response.claims[missing["metadata"]["uid"]].error
    assert "other-node" in response.claims[wrong_pool["metadata"]["uid"]].error
    err = response.claims[no_device["metadata"]["uid"]].error
    assert "gpu-99" in err and "default/nd" in err


def test_a_driver_bug_fails_only_its_claim(node: Node) -> None:
    class Flaky(MemoryClaimSource):
        def get_claim(self, namespace: str, name: str) -> Any:
            if name == "bad":
                raise RuntimeError("boom")
            return super().get_claim(namespace, name)

    node.claims = Flaky()
    node.serve()
    good = node.put(make_claim("good", [result("gpu", "gpu-0")]))
    bad = node.put(make_claim("bad", [result("gpu", "gpu-1")]))
    response = prepare(node, good, bad)
    assert response.claims[good["metadata"]["uid"]].error == ""
    err = response.claims[bad["metadata"]["uid"]].error
    assert "default/bad" in err and "internal driver error" in err and "boom" in err


def test_prepare_and_unprepare_are_idempotent(node: Node) -> None:
    node.serve()
    claim = node.put(make_claim("c1", [result("gpu", "gpu-0")]))
    uid = claim["metadata"]["uid"]
    first = prepare(node, claim).claims[uid]
    second = prepare(node, claim).claims[uid]
    assert first == second
    spec = node.settings.kubelet.cdi_dir / f"{DRIVER}-{uid}.json"
    assert spec.exists()
    assert unprepare(node, claim).claims[uid].error == ""
    assert not spec.exists()
    assert unprepare(node, claim).claims[uid].error == ""


def test_unprepare_of_an_unknown_claim_succeeds(node: Node) -> None:
    node.serve()
    claim = make_claim("ghost", [result("gpu", "gpu-0")])
    assert unprepare(node, claim).claims[claim["metadata"]["uid"]].error == ""


def test_v1beta1_prepare_matches_v1(node: Node) -> None:
    node.serve()
    claim = node.put(make_claim("c1", [result("gpu", "gpu-3")]))
    uid = claim["metadata"]["uid"]
    beta = prepare(node, claim, pb2=dra_v1beta1_pb2, grpc_mod=dra_v1beta1_pb2_grpc).claims[uid]
    v1 = prepare(node, claim).claims[uid]
    assert [(d.device_name, list(d.cdi_device_ids)) for d in beta.devices] == [
        (d.device_name, list(d.cdi_device_ids)) for d in v1.devices
    ]
    assert unprepare(node, claim, pb2=dra_v1beta1_pb2, grpc_mod=dra_v1beta1_pb2_grpc).claims[uid].error == ""


def test_concurrent_prepares_of_distinct_and_same_claims(node: Node) -> None:
    node.serve()
    claims = [node.put(make_claim(f"c{i}", [result("gpu", f"gpu-{i}")])) for i in range(4)]
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda c: prepare(node, c), claims + claims))
    for claim, response in zip(claims + claims, responses, strict=True):
        assert response.claims[claim["metadata"]["uid"]].error == ""
    assert len(list(node.settings.kubelet.cdi_dir.iterdir())) == 4


def test_two_claims_racing_for_one_device_get_one_refusal(node: Node) -> None:
    node.serve()
    a = node.put(make_claim("a", [result("gpu", "gpu-0")]))
    b = node.put(make_claim("b", [result("gpu", "gpu-0")]))
    barrier = threading.Barrier(2)

    def go(claim: dict[str, Any]) -> str:
        barrier.wait()
        return str(prepare(node, claim).claims[claim["metadata"]["uid"]].error)

    with ThreadPoolExecutor(2) as pool:
        errors = list(pool.map(go, [a, b]))
    assert sorted(bool(e) for e in errors) == [False, True]
    assert "already prepared" in next(e for e in errors if e)


def test_stop_removes_sockets(node: Node) -> None:
    server = node.serve()
    assert node.settings.registration_socket.exists() and node.settings.dra_socket.exists()
    server.stop(0)
    assert not node.settings.registration_socket.exists()
    assert not node.settings.dra_socket.exists()


@pytest.mark.parametrize(
    ("pb2", "grpc_mod"),
    [(health_v1_pb2, health_v1_pb2_grpc), (health_v1alpha1_pb2, health_v1alpha1_pb2_grpc)],
)
def test_health_stream_sends_full_list_then_changes(node: Node, pb2, grpc_mod) -> None:  # type: ignore[no-untyped-def]
    health = StaticHealth({"gpu-0": DeviceHealth(HEALTHY), "gpu-1": DeviceHealth(HEALTHY)})
    node.serve(health=health)
    stream = grpc_mod.DRAResourceHealthStub(node.channel()).NodeWatchResources(
        pb2.NodeWatchResourcesRequest(), timeout=10
    )
    first = next(stream)
    assert {(d.device.pool_name, d.device.device_name, d.health) for d in first.devices} == {
        (NODE, "gpu-0", pb2.HEALTHY), (NODE, "gpu-1", pb2.HEALTHY),
    }  # fmt: skip
    health.set("gpu-1", UNHEALTHY, "XID 79")
    second = next(stream)
    by_name = {d.device.device_name: d for d in second.devices}
    assert by_name["gpu-1"].health == pb2.UNHEALTHY
    assert by_name["gpu-1"].message == "XID 79"
    assert by_name["gpu-1"].last_updated_time > 0
    stream.cancel()


def test_health_stream_ends_when_the_server_stops(node: Node) -> None:
    server = node.serve(health=StaticHealth({"gpu-0": DeviceHealth(HEALTHY)}))
    stream = iter(
        health_v1_pb2_grpc.DRAResourceHealthStub(node.channel()).NodeWatchResources(
            health_v1_pb2.NodeWatchResourcesRequest(), timeout=10
        )
    )
    next(stream)
    server.stop(0.5)
    with pytest.raises((grpc.RpcError, StopIteration)):
        next(stream)


def test_health_stream_resends_the_full_list_without_a_change(node: Node) -> None:
    """The kubelet turns a device Unknown when no report arrives within its timeout (30 s)."""
    node.settings = replace(node.settings, health=HealthSettings(resend_seconds=0.3))
    node.serve(health=StaticHealth({"gpu-0": DeviceHealth(HEALTHY, updated=1.0)}))
    servicer = health_v1_pb2_grpc.DRAResourceHealthStub(node.channel())
    # Before the call: the server sends the first message once the call arrives, then the resend
    # no sooner than resend_seconds (0.3 s) after that, however late either thread runs.
    started = time.monotonic()
    call = servicer.NodeWatchResources(health_v1_pb2.NodeWatchResourcesRequest(), timeout=30)
    stream = iter(call)
    first = next(stream)
    assert first.devices[0].last_updated_time > 1  # determined now, not at the last change
    second = next(stream)  # no change happened: this is the periodic resend
    assert time.monotonic() - started >= 0.3
    assert [d.device.device_name for d in second.devices] == ["gpu-0"]
    call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves RpcContext.cancel bare
