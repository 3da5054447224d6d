"""Device status (KEP-4817): the entries written after prepare, removed on unprepare, never fatal."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from draproto.rest import Rest, rest_error
from driver.checkpoint import ClaimRecord, PreparedDevice
from driver.claims import ApiClaimSource, MemoryClaimSource, apply_body
from driver.devicestatus import entries, entry
from driver.errors import ClaimError
from driver.inventory import Inventory
from driver.state import ClaimRef
from tests.driver.drvkit import DRIVER, NODE, Node, gpu, inventory, make_claim, partition, result

WHEN = datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=UTC)
PCI = "0000:3b:00.0"


def _inventory() -> Inventory:
    attributes = {"type": "gpu", "productName": "H100", "resource.kubernetes.io/pciBusID": PCI}
    attributed = replace(gpu(0), attributes=attributes)
    devices = {**inventory().devices, attributed.name: attributed}
    return Inventory(devices=devices)


def _ref(claim: dict[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])


def _devices(claim: dict[str, Any] | Any) -> list[dict[str, Any]]:
    return list((claim.get("status") or {}).get("devices") or [])


def test_a_gpu_entry_names_the_device_and_says_it_is_ready() -> None:
    device = PreparedDevice(
        request_names=["gpu"], pool=NODE, device="gpu-0", cdi_ids=["k8s.x/gpu=u-gpu-0"],
        uuid=gpu(0).uuid or "",
    )  # fmt: skip
    written = entry(device, _inventory(), DRIVER, WHEN)
    assert written == {
        "driver": DRIVER,
        "pool": NODE,
        "device": "gpu-0",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Prepared",
                "message": "prepared for the claim's containers (CDI devices: k8s.x/gpu=u-gpu-0)",
                "lastTransitionTime": "2026-03-04T05:06:07Z",
            }
        ],
        "data": {"type": "gpu", "uuid": gpu(0).uuid, "productName": "H100", "pciBusID": PCI},
    }
    assert len(json.dumps(written["data"])) < 10 * 1024  # the API's limit on data


def test_a_partition_entry_has_the_uuid_of_its_mig_device_and_its_parent() -> None:
    info = partition(4, 0)
    device = PreparedDevice(
        request_names=["mig"], pool=NODE, device=info.name, cdi_ids=[], kind="partition",
        uuid="MIG-1234", partition_uuid="MIG-1234", share_id="11111111-0000-0000-0000-000000000000",
    )  # fmt: skip
    written = entry(device, inventory(), DRIVER, WHEN)
    assert written["shareID"] == "11111111-0000-0000-0000-000000000000"
    assert written["data"] == {"type": "mig", "uuid": "MIG-1234", "parentUUID": info.parent_uuid,
                               "profile": "3g.71gb"}  # fmt: skip


def test_every_device_of_a_claim_gets_an_entry() -> None:
    devices = [
        PreparedDevice(request_names=["gpu"], pool=NODE, device=f"gpu-{i}", cdi_ids=[]) for i in range(2)
    ]
    record = ClaimRecord(uid="u", namespace="ns", name="c", devices=devices)
    assert [e["device"] for e in entries(record, inventory(), DRIVER, WHEN)] == ["gpu-0", "gpu-1"]


def test_the_apply_body_names_the_claim_and_its_uid() -> None:
    assert apply_body("ns", "c", "u", []) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ns", "name": "c", "uid": "u"},
        "status": {"devices": []},
    }


def test_prepare_writes_the_entries_and_unprepare_removes_only_the_drivers(node: Node) -> None:
    state = node.state()
    theirs = {"driver": "nic.example.com", "pool": "x", "device": "eth0"}
    claim = make_claim("c", [result("gpu", "gpu-1"), result("gpu", "gpu-2")])
    claim["status"]["devices"] = [theirs]
    node.put(claim)
    state.prepare(_ref(claim))
    written = _devices(node.claims.get_claim("default", "c"))
    assert written[0] == theirs
    assert [(e["driver"], e["pool"], e["device"]) for e in written[1:]] == [
        (DRIVER, NODE, "gpu-1"),
        (DRIVER, NODE, "gpu-2"),
    ]
    assert all(e["conditions"][0]["type"] == "Ready" for e in written[1:])
    assert written[1]["data"]["uuid"] == node.inventory["gpu-1"].uuid

    state.unprepare(_ref(claim))
    assert _devices(node.claims.get_claim("default", "c")) == [theirs]
    assert node.claims.applied[-1] == ("default", "c", DRIVER, [])


def test_a_prepare_answered_from_the_checkpoint_writes_nothing(node: Node) -> None:
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    state.prepare(_ref(claim))
    state.prepare(_ref(claim))
    node.state().prepare(_ref(claim))  # after a restart, too
    assert len(node.claims.applied) == 1


def test_an_unprepared_claim_that_is_gone_counts_as_done(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    state.prepare(_ref(claim))
    node.claims.delete("default", "c")
    with caplog.at_level(logging.INFO, logger="driver.devicestatus"):
        state.unprepare(_ref(claim))
    assert "claim gone" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


class _Refusing(MemoryClaimSource):
    def apply_device_status(self, *args: Any) -> Any:
        raise ClaimError("cannot apply status.devices of ResourceClaim default/c: 403 Forbidden")


def test_a_failed_status_write_fails_neither_prepare_nor_unprepare(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.claims = _Refusing()
    state = node.state()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    with caplog.at_level(logging.WARNING, logger="driver.devicestatus"):
        (device,) = state.prepare(_ref(claim))
        state.unprepare(_ref(claim))
    assert device.device == "gpu-0"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "cannot write the claim's status.devices",
        "cannot remove the claim's status.devices",
    ]
    assert all(getattr(r, "claim", None) == claim["metadata"]["uid"] for r in warnings)
    assert "403 Forbidden" in getattr(warnings[0], "error", "")


def test_a_status_the_api_server_drops_is_a_warning(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    class Dropping(MemoryClaimSource):
        def apply_device_status(self, namespace: str, name: str, *args: Any) -> Any:
            return self.get_claim(namespace, name)  # answered, without the field

    node.claims = Dropping()
    claim = node.put(make_claim("c", [result("gpu", "gpu-0")]))
    with caplog.at_level(logging.WARNING, logger="driver.devicestatus"):
        node.state().prepare(_ref(claim))
    assert "DRAResourceClaimDeviceStatus" in caplog.text


class _Rest:
    """Stands in for :class:`~draproto.rest.Rest`: records the status applies (PATCH) and replaces
    (PUT), answers or refuses (``replaced``: the status codes of the replaces to come, 200 once
    they run out)."""

    def __init__(self, status: int = 200, message: str = "", replaced: Sequence[int] = ()) -> None:
        self.status = status
        self.message = message
        self.replaced = list(replaced)
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.replaces: list[dict[str, Any]] = []
        self.answer: dict[str, Any] | None = None
        """What an apply answers (None: the body applied)."""

    def send(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "PUT":
            self.replaces.append(kwargs["body"])
            status = self.replaced.pop(0) if self.replaced else 200
            if status != 200:
                raise rest_error("refused", status, message="the object has been modified")
            return dict(kwargs["body"])
        self.calls.append((method, path, kwargs))
        if self.status != 200:
            raise rest_error("refused", self.status, message=self.message)
        return self.answer if self.answer is not None else dict(kwargs["body"])


def _api_source(rest: _Rest, claim: dict[str, Any] | None = None) -> ApiClaimSource:
    source = ApiClaimSource(cast(Rest, rest))
    source.get_claim = lambda namespace, name: claim  # type: ignore[method-assign]
    return source


def test_the_api_source_applies_the_status_subresource_as_the_driver() -> None:
    rest = _Rest()
    devices = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
    answer = _api_source(rest).apply_device_status("ns", "c", "u", DRIVER, devices)
    assert answer is not None and _devices(answer) == devices
    ((method, path, kwargs),) = rest.calls
    assert (method, path) == ("PATCH", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status")
    assert kwargs["body"] == apply_body("ns", "c", "u", devices)
    assert kwargs["query"] == {"fieldManager": DRIVER, "force": "true"}
    assert kwargs["content_type"] == "application/apply-patch+yaml"
    assert kwargs["timeout"] > 0


# what kube-apiserver 1.37 answers an apply whose UID is not the claim's
RECREATED = (
    'ResourceClaim.resource.k8s.io "c" is invalid: metadata.uid: Invalid value: "u": field is immutable'
)


@pytest.mark.parametrize(
    ("status", "message"),
    [(404, "not found"), (422, RECREATED), (409, "Precondition failed: UID in precondition")],
)
def test_the_api_source_counts_a_claim_gone_or_recreated_as_gone(status: int, message: str) -> None:
    source = _api_source(_Rest(status, message))
    assert source.apply_device_status("ns", "c", "u", DRIVER, []) is None


def test_the_api_source_names_the_claim_and_the_reason_of_a_refusal() -> None:
    invalid = "status.devices[0]: must be an allocated device in the claim"
    with pytest.raises(ClaimError, match=r"ResourceClaim ns/c: 422 status.devices\[0\]: must be an"):
        _api_source(_Rest(422, invalid)).apply_device_status("ns", "c", "u", DRIVER, [])


# kube-apiserver 1.37.2's answer to any patch of the status of a claim whose allocation has an opaque
# config stored as JSON with whitespace
ALLOCATION_CHANGED = (
    'ResourceClaim.resource.k8s.io "c" is invalid: status.allocation: Invalid value: null: '
    "field cannot be modified once set"
)


def test_a_status_the_api_server_cannot_patch_is_replaced_keeping_other_drivers_entries() -> None:
    theirs = {"driver": "nic.example.com", "pool": "x", "device": "eth0"}
    stale = {"driver": DRIVER, "pool": NODE, "device": "gpu-7"}
    claim = make_claim("c", [result("gpu", "gpu-0")], namespace="ns", uid="u")
    claim["status"]["devices"] = [theirs, stale]
    rest = _Rest(422, ALLOCATION_CHANGED, replaced=[409])  # a conflict first: tried again
    mine = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
    answer = _api_source(rest, claim).apply_device_status("ns", "c", "u", DRIVER, mine)
    assert answer is not None and _devices(answer) == [theirs, *mine]
    assert len(rest.replaces) == 2
    assert rest.replaces[-1]["status"]["allocation"] == claim["status"]["allocation"]
    assert rest.replaces[-1]["metadata"] == claim["metadata"]  # its resourceVersion, if any


def test_a_replace_of_a_claim_gone_or_recreated_meanwhile_counts_as_gone() -> None:
    rest = _Rest(422, ALLOCATION_CHANGED)
    assert _api_source(rest, None).apply_device_status("ns", "c", "u", DRIVER, []) is None
    other = make_claim("c", [result("gpu", "gpu-0")], namespace="ns", uid="v")
    assert _api_source(rest, other).apply_device_status("ns", "c", "u", DRIVER, []) is None
    assert rest.replaces == []


def test_a_replace_that_keeps_conflicting_gives_up_naming_the_claim() -> None:
    claim = make_claim("c", [result("gpu", "gpu-0")], namespace="ns", uid="u")
    rest = _Rest(422, ALLOCATION_CHANGED, replaced=[409, 409, 409])
    with pytest.raises(ClaimError, match="ResourceClaim ns/c: it changed 3 times"):
        _api_source(rest, claim).apply_device_status("ns", "c", "u", DRIVER, [])


def test_entries_an_apply_cannot_remove_are_replaced() -> None:
    # written by a replace, they belong to the driver's update, which an apply leaves alone
    claim = make_claim("c", [result("gpu", "gpu-0")], namespace="ns", uid="u")
    claim["status"]["devices"] = [{"driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
    rest = _Rest()
    rest.answer = claim
    answer = _api_source(rest, claim).apply_device_status("ns", "c", "u", DRIVER, [])
    assert answer is not None and _devices(answer) == []
    assert len(rest.calls) == 1 and len(rest.replaces) == 1
