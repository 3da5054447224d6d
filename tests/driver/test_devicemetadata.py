"""Device metadata (KEP-5304): a file per request, mounted only where the request is used."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from driver.devicemetadata import API_VERSIONS, POD_CLAIM_NAME_ANNOTATION, container_path
from driver.state import ClaimRef
from tests.driver.drvkit import DRIVER, NODE, Node, make_claim, result

KIND = f"{DRIVER}/metadata"


def _on(node: Node) -> Node:
    node.settings = replace(node.settings, device_metadata=True)
    return node


def _ref(claim: dict[str, Any]) -> ClaimRef:
    m = claim["metadata"]
    return ClaimRef(namespace=m["namespace"], uid=m["uid"], name=m["name"])


def _two_requests(node: Node, **meta: Any) -> dict[str, Any]:
    claim = make_claim("c", [result("a", "gpu-0"), result("b/sub1", "gpu-1"), result("b/sub1", "gpu-2")])
    claim["metadata"].update(meta)
    return node.put(claim)


def _specs(node: Node) -> dict[str, dict[str, Any]]:
    """The metadata specs on the node by device id (kind=name)."""
    out = {}
    for path in node.settings.kubelet.cdi_dir.glob(f"{DRIVER}_metadata_*.json"):
        spec = json.loads(path.read_text())
        for device in spec["devices"]:
            out[f"{spec['kind']}={device['name']}"] = device
    return out


def _stream(path: str) -> list[dict[str, Any]]:
    decoder, text, objects = json.JSONDecoder(), Path(path).read_text(), []
    at = 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        obj, at = decoder.raw_decode(text, at)
        objects.append(obj)
    return objects


def test_each_request_gets_its_file_on_its_first_device(node: Node) -> None:
    _on(node)
    claim = _two_requests(node)
    uid = claim["metadata"]["uid"]
    devices = node.state().prepare(_ref(claim))
    ids = {d.device: [i for i in d.cdi_ids if i.startswith(KIND)] for d in devices}
    assert ids == {"gpu-0": [f"{KIND}={uid}_a"], "gpu-1": [f"{KIND}={uid}_b"], "gpu-2": []}
    specs = _specs(node)
    assert set(specs) == {f"{KIND}={uid}_a", f"{KIND}={uid}_b"}
    (mount,) = specs[f"{KIND}={uid}_b"]["containerEdits"]["mounts"]
    assert mount["containerPath"] == container_path(DRIVER, "c", "b", None)
    assert mount["containerPath"].endswith(f"/resourceclaims/c/b/{DRIVER}-metadata.json")
    assert "ro" in mount["options"]
    objects = _stream(mount["hostPath"])
    assert [o["apiVersion"] for o in objects] == list(API_VERSIONS)
    first = objects[0]
    assert first["kind"] == "DeviceMetadata"
    assert first["metadata"] == {"name": "c", "namespace": "default", "uid": uid, "generation": 1}
    (request,) = first["requests"]
    assert request["name"] == "b"  # as containers reference it (the helper writes b/sub1)
    assert [(d["driver"], d["pool"], d["name"]) for d in request["devices"]] == [
        (DRIVER, NODE, "gpu-1"),
        (DRIVER, NODE, "gpu-2"),
    ]
    assert request["devices"][0]["attributes"]["type"] == {"string": "gpu"}


def test_a_claim_from_a_template_is_found_by_the_pods_name_for_it(node: Node) -> None:
    _on(node)
    claim = _two_requests(node, annotations={POD_CLAIM_NAME_ANNOTATION: "gpus"})
    node.state().prepare(_ref(claim))
    (mount,) = _specs(node)[f"{KIND}={claim['metadata']['uid']}_a"]["containerEdits"]["mounts"]
    assert mount["containerPath"].endswith(f"/resourceclaimtemplates/gpus/a/{DRIVER}-metadata.json")
    assert _stream(mount["hostPath"])[0]["podClaimName"] == "gpus"


def test_unprepare_removes_them_and_a_reboot_brings_them_back(node: Node) -> None:
    _on(node)
    claim = _two_requests(node)
    state = node.state()
    state.prepare(_ref(claim))
    for path in node.settings.kubelet.cdi_dir.glob("*.json"):  # a tmpfs after a reboot
        path.unlink()
    node.boot_id = "boot-2"
    restarted = node.state()
    restarted.restore()
    assert len(_specs(node)) == 2
    restarted.unprepare(_ref(claim))
    assert _specs(node) == {}
    assert not list(node.settings.claims_dir.glob("*/metadata"))


def test_off_by_default(node: Node) -> None:
    claim = _two_requests(node)
    devices = node.state().prepare(_ref(claim))
    assert not any(i.startswith(KIND) for d in devices for i in d.cdi_ids)
    assert _specs(node) == {}


def test_orphaned_metadata_specs_are_removed_at_start(node: Node) -> None:
    _on(node)
    claim = _two_requests(node)
    node.state().prepare(_ref(claim))
    node.settings.checkpoint_path.unlink()  # the claims are forgotten: their files are orphans
    node.state().restore()
    assert _specs(node) == {}
