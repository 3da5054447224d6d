"""The node agent resolves CDI device ids the way a container runtime does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent import cdi
from nodeagent.errors import CDIError


def _spec(kind: str = "example.com/gpu", **extra: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "containerEdits": {"env": ["SPEC_LEVEL=1", "SHARED=spec"]},
        "devices": [
            {
                "name": "gpu0",
                "containerEdits": {
                    "env": ["GPU=0", "SHARED=gpu0"],
                    "deviceNodes": [{"path": "/dev/fake0", "type": "c", "permissions": "rw"}],
                    "mounts": [{"hostPath": "/tmp/h0", "containerPath": "/data"}],
                },
            },
            {"name": "gpu1", "containerEdits": {"env": ["GPU=1"]}},
        ],
    }
    spec.update(extra)
    return spec


def test_spec_and_device_edits_merge_in_order(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(_spec()))
    edits = cdi.resolve(["example.com/gpu=gpu0", "example.com/gpu=gpu1"], [tmp_path])
    assert edits.env == {"SPEC_LEVEL": "1", "SHARED": "gpu0", "GPU": "1"}
    assert edits.device_nodes == [{"path": "/dev/fake0", "type": "c", "permissions": "rw"}]
    assert edits.mounts == [{"hostPath": "/tmp/h0", "containerPath": "/data"}]
    assert edits.to_json()["cdi_devices"] == ["example.com/gpu=gpu0", "example.com/gpu=gpu1"]


def test_yaml_specs_are_read(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: vendor.io/acc\ndevices:\n- name: x\n  containerEdits:\n    env: [A=b]\n"
    )
    assert cdi.resolve(["vendor.io/acc=x"], [tmp_path]).env == {"A": "b"}


def test_no_ids_needs_no_specs(tmp_path: Path) -> None:
    assert cdi.resolve([], [tmp_path / "missing"]).to_json() == {
        "env": {},
        "device_nodes": [],
        "mounts": [],
        "cdi_devices": [],
        "net_devices": [],
        "hooks": [],
        "additional_gids": [],
        "intel_rdt": None,
    }


def test_every_cdi_edit_reaches_the_view(tmp_path: Path) -> None:
    """netDevices (CDI 1.1), hooks, additionalGids and intelRdt merge as a runtime merges them, and
    the ContainerView a test reads carries them."""
    from clusters.base import ContainerView

    spec = {
        "cdiVersion": "1.1.0",
        "kind": "example.com/net",
        "containerEdits": {
            "additionalGids": [44],
            "hooks": [{"hookName": "createRuntime", "path": "/bin/a"}],
        },
        "devices": [
            {
                "name": "nic0",
                "containerEdits": {
                    "netDevices": [{"hostInterfaceName": "eth1", "name": "net0"}],
                    "additionalGids": [44, 1000],
                    "intelRdt": {"closID": "old"},
                },
            },
            {
                "name": "nic1",
                "containerEdits": {
                    "netDevices": [{"hostInterfaceName": "eth2", "name": "net0"}],
                    "hooks": [{"hookName": "poststart", "path": "/bin/b", "args": ["b", "1"]}],
                    "intelRdt": {"closID": "new", "l3CacheSchema": "L3:0=ff"},
                },
            },
        ],
    }
    (tmp_path / "net.json").write_text(json.dumps(spec))
    edits = cdi.resolve(["example.com/net=nic0", "example.com/net=nic1"], [tmp_path])
    view = ContainerView.from_dict(json.loads(json.dumps(edits.to_json())))
    assert view.net_devices == [{"hostInterfaceName": "eth2", "name": "net0"}]  # one name in the container
    assert view.hooks == [
        {"hookName": "createRuntime", "path": "/bin/a"},
        {"hookName": "poststart", "path": "/bin/b", "args": ["b", "1"]},
    ]
    assert view.additional_gids == [44, 1000]
    assert view.intel_rdt == {"closID": "new", "l3CacheSchema": "L3:0=ff"}


def test_malformed_spec_is_named_and_others_still_resolve(tmp_path: Path) -> None:
    (tmp_path / "good.json").write_text(json.dumps(_spec()))
    (tmp_path / "bad.json").write_text("{not json")
    assert cdi.resolve(["example.com/gpu=gpu1"], [tmp_path]).env["GPU"] == "1"
    with pytest.raises(CDIError, match=r"other.com/x=y not found.*bad\.json"):
        cdi.resolve(["other.com/x=y"], [tmp_path])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cdiVersion": "9.9.9"}, "cdiVersion"),
        ({"kind": "nokind"}, "vendor/class"),
        ({"devices": [{"name": "-bad", "containerEdits": {"env": ["A=1"]}}]}, "invalid device name"),
        ({"devices": [{"name": "d", "containerEdits": {"env": ["NOEQUALS"]}}]}, "KEY=VALUE"),
        ({"devices": [{"name": "d", "containerEdits": {"mounts": [{"hostPath": "/x"}]}}]}, "containerPath"),
        ({"devices": [{"name": "d", "containerEdits": {}}]}, "no containerEdits"),
    ],
)
def test_spec_rules_are_checked(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cdi.parse_spec(Path("x.json"), json.dumps({**_spec(), **change}))


def test_a_device_defined_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(_spec()))
    (tmp_path / "b.json").write_text(json.dumps(_spec()))
    with pytest.raises(CDIError, match="more than one spec"):
        cdi.resolve(["example.com/gpu=gpu0"], [tmp_path])


def test_unqualified_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CDIError, match="not a qualified CDI device name"):
        cdi.resolve(["gpu0"], [tmp_path])
