"""Binding conditions (KEP-5007): which GPUs are attached on demand, what the slices and the claims say."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

import fakegpu
from driver.binding import ATTACH_FAILED, ATTACHED, Attacher, attach_on_demand, fabric_problem
from driver.checkpoint import PreparedDevice
from driver.consumable import make_consumable
from driver.devices import discover
from driver.devicestatus import entry
from driver.errors import SettingsError
from driver.settings import from_args
from driver.slicing import build_slices, device_body
from tests.driver.drvkit import DRIVER, NODE, Node, make_claim, result

WHEN = datetime(2026, 12, 4, 5, 6, 7, tzinfo=UTC)
BOUND = {"bindingConditions": [ATTACHED], "bindingFailureConditions": [ATTACH_FAILED]}


def _conditions(node: Node, name: str = "c") -> dict[str, dict[str, str]]:
    """Per device of the claim's status.devices: condition type -> status."""
    claim = node.claims.get_claim("default", name) or {}
    return {
        e["device"]: {c["type"]: c["status"] for c in e["conditions"]}
        for e in (claim.get("status") or {}).get("devices") or []
    }


def _attacher(node: Node, problems: dict[str, str] | None = None) -> tuple[Attacher, list[str]]:
    asked: list[str] = []

    def problem(info: Any) -> str | None:
        asked.append(info.name)
        return (problems or {}).get(info.name)

    inventory = attach_on_demand(node.inventory, [1])
    return Attacher(None, node.claims, node.settings, inventory, problem=problem, clock=lambda: WHEN), asked


def test_only_the_named_whole_gpus_carry_binding_conditions(node: Node) -> None:
    inventory = attach_on_demand(node.inventory, [1])
    bodies = {d.name: device_body(d) for d in inventory}
    assert bodies["gpu-1"]["bindingConditions"] == [ATTACHED]
    assert bodies["gpu-1"]["bindingFailureConditions"] == [ATTACH_FAILED]
    assert not any("bindingConditions" in b for name, b in bodies.items() if name != "gpu-1")
    assert attach_on_demand(node.inventory, []) is node.inventory


def test_gpus_attached_on_demand_come_last_in_the_slice(node: Node) -> None:
    """kube-scheduler's allocator takes the first devices that fit in slice order: a claim gets a GPU
    that is ready at once while one is free, not one its pod waits in PreBind for (5 s a look)."""
    inventory = attach_on_demand(node.inventory, [1])
    slices = build_slices(inventory, driver_name=DRIVER, node_name=NODE, generation=1)
    names = [d["name"] for s in slices for d in s["spec"].get("devices", [])]
    assert names[-1] == "gpu-1"
    assert names[:-1] == [d.name for d in inventory if d.name != "gpu-1"]  # the rest in their order


def test_a_gpu_that_cannot_be_attached_alone_is_refused_by_name(node: Node) -> None:
    with pytest.raises(SettingsError, match=r"--attach-on-demand 9: no whole exclusive GPU with index 9"):
        attach_on_demand(node.inventory, [9])
    shared = make_consumable(node.inventory, [1])
    with pytest.raises(SettingsError, match="index 1"):
        attach_on_demand(shared, [1])


def test_settings_refuse_a_gpu_shared_by_capacity() -> None:
    base = ["--node-name", "n", "--attach-on-demand", "1-2"]
    assert from_args(base, {}).backend.attached_gpus == {1, 2}
    with pytest.raises(SettingsError, match="shared by capacity"):
        from_args([*base, "--gpu-sharing", "consumable", "--consumable-gpus", "2-3"], {})
    with pytest.raises(SettingsError, match="shared by capacity"):
        from_args([*base, "--gpu-sharing", "consumable"], {})


def test_the_attacher_answers_each_allocation_once(node: Node) -> None:
    attacher, asked = _attacher(node)
    claim = node.put(make_claim("c", [result("gpu", "gpu-1", **BOUND), result("gpu", "gpu-0")]))
    attacher.handle(claim)
    assert _conditions(node) == {"gpu-1": {ATTACHED: "True", ATTACH_FAILED: "False"}}
    attacher.handle(claim)  # the same allocation seen again (its own write, a relist)
    assert asked == ["gpu-1"]
    # deallocated and allocated afresh: a new allocation, attached again
    again = dict(claim)
    again["status"] = {
        **claim["status"],
        "allocation": {**claim["status"]["allocation"], "allocationTimestamp": "x"},
    }
    attacher.handle(again)
    assert asked == ["gpu-1", "gpu-1"]


def test_the_attacher_leaves_other_pools_drivers_and_plain_devices_alone(node: Node) -> None:
    attacher, asked = _attacher(node)
    other_pool = {"request": "gpu", "driver": DRIVER, "pool": "elsewhere", "device": "gpu-1", **BOUND}
    other_driver = {"request": "gpu", "driver": "nic.example.com", "pool": NODE, "device": "gpu-1", **BOUND}
    for results in ([other_pool], [other_driver], [result("gpu", "gpu-1")]):
        attacher.handle(node.put(make_claim("c", results)))
    assert asked == [] and _conditions(node) == {}


def test_a_failed_attach_says_why(node: Node) -> None:
    attacher, _ = _attacher(node, {"gpu-1": "fabric down"})
    attacher.handle(node.put(make_claim("c", [result("gpu", "gpu-1", **BOUND)])))
    claim = node.claims.get_claim("default", "c") or {}
    (written,) = claim["status"]["devices"]
    failed = next(c for c in written["conditions"] if c["type"] == ATTACH_FAILED)
    assert failed["status"] == "True" and failed["reason"] == "AttachFailed"
    assert "fabric down" in failed["message"]


def _prepared(device: str) -> PreparedDevice:
    return PreparedDevice(request_names=["gpu"], pool=NODE, device=device, cdi_ids=["k8s.x/gpu=u"])


def test_the_prepared_entry_keeps_the_device_attached(node: Node) -> None:
    inventory = attach_on_demand(node.inventory, [1])
    written = entry(_prepared("gpu-1"), inventory, DRIVER, WHEN)
    assert {c["type"]: c["status"] for c in written["conditions"]} == {
        "Ready": "True",
        ATTACHED: "True",
        ATTACH_FAILED: "False",
    }
    plain = entry(_prepared("gpu-0"), inventory, DRIVER, WHEN)
    assert [c["type"] for c in plain["conditions"]] == ["Ready"]


def test_fabric_problem_reads_the_fabric_registration_through_nvml() -> None:
    with fakegpu.installed("dgx-h100", node_name=NODE) as machine:
        gpu2 = attach_on_demand(discover({"gpu"}), [2])["gpu-2"]
        assert fabric_problem(gpu2) is None
        machine.fail_fabric(2)
        problem = fabric_problem(gpu2) or ""
        assert "fabric registration" in problem and gpu2.uuid and gpu2.uuid in problem
        machine.heal(2)
        assert fabric_problem(gpu2) is None
    with fakegpu.installed("l4x4", node_name=NODE):  # no NVSwitch: nothing to attach through
        assert fabric_problem(discover({"gpu"})["gpu-0"]) is None


class _ScriptedRest:
    """A Rest that answers the claim list and plays one scripted watch per call, recording queries."""

    def __init__(self, watches: list[list[tuple[str, dict[str, Any]]]]) -> None:
        self.watches = watches
        self.lists = 0
        self.queries: list[dict[str, str]] = []

    def send(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.lists += 1
        return {"metadata": {"resourceVersion": "10"}, "items": [{"metadata": {"name": "listed"}}]}

    def watch(self, path: str, query: dict[str, str], timeout: int, **_: Any) -> Any:
        self.queries.append(dict(query))
        yield from self.watches.pop(0)


def _claim_event(name: str, version: str) -> tuple[str, dict[str, Any]]:
    return "MODIFIED", {"metadata": {"name": name, "resourceVersion": version}}


def test_the_claim_watch_goes_on_where_it_ended_and_lists_again_only_when_told(node: Node) -> None:
    rest = _ScriptedRest([
        [_claim_event("a", "11"), ("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
        [_claim_event("b", "16")],
        [("ERROR", {"code": 410, "message": "too old resource version"})],
    ])  # fmt: skip
    attacher = Attacher(rest, node.claims, node.settings, node.inventory)  # type: ignore[arg-type]
    seen: list[str] = []
    attacher.handle = lambda claim: seen.append(claim["metadata"]["name"])  # type: ignore[method-assign]
    version = attacher.follow("")
    assert (version, seen, rest.lists) == ("15", ["listed", "a"], 1)
    version = attacher.follow(version)  # the watch ended after its timeout: no list again
    assert (version, seen, rest.lists) == ("16", ["listed", "a", "b"], 1)
    assert attacher.follow(version) == ""  # the server forgot the version: the next pass lists
    assert [q["resourceVersion"] for q in rest.queries] == ["10", "15", "16"]
