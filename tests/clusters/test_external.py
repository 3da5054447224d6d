"""ExternalCluster: the profile's commands give it abilities; a missing one is a skip with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusters.errors import CapabilityMissing, ClusterStateError
from clusters.external import ExternalCluster
from clusters.incluster import parse_specs, parse_view
from tests.clusters.fakebin import FakeBin


def _kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kc"
    path.write_text("apiVersion: v1\nkind: Config\n")
    return path


def test_commands_give_capabilities(tmp_path: Path) -> None:
    bare = ExternalCluster(_kubeconfig(tmp_path))
    assert bare.capabilities == frozenset()
    with pytest.raises(CapabilityMissing, match=r"no external\.restartDriver command"):
        bare.restart_driver("n1")
    with pytest.raises(CapabilityMissing, match=r"external\.cdiSpecs"):
        bare.container_view("ns/p", "ctr")
    full = ExternalCluster(
        _kubeconfig(tmp_path), commands={"restartDriver": "a", "restartKubelet": "b", "cdiSpecs": "c"}
    )
    assert full.capabilities == {"restart-driver", "restart-kubelet", "view"}
    with pytest.raises(ValueError, match="unknown external command"):
        ExternalCluster(_kubeconfig(tmp_path), commands={"reboot": "x"})
    with pytest.raises(ClusterStateError, match="does not exist"):
        ExternalCluster(tmp_path / "nope")


def test_restart_commands_get_their_placeholders(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("ssh",))
    kubeconfig = _kubeconfig(tmp_path)
    cluster = ExternalCluster(
        kubeconfig,
        driver="gpu.example.com",
        commands={
            "restartDriver": f"{fake.dir}/ssh {{node}} restart-driver --{{mode}} --driver {{driver}}",
            "restartKubelet": f"{fake.dir}/ssh {{node}} 'systemctl restart kubelet' {{kubeconfig}}",
        },
        env=fake.env(),
    )
    cluster.restart_driver("gpu-7", crash=True)
    cluster.restart_kubelet("gpu-7")
    assert fake.argvs("ssh") == [
        ["gpu-7", "restart-driver", "--crash", "--driver", "gpu.example.com"],
        ["gpu-7", "systemctl restart kubelet", str(kubeconfig)],
    ]


def test_container_view_through_kubectl_and_the_cdi_command(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=("kubectl", "specs"))
    spec = {
        "kind": "k8s.gpu.example.com/gpu",
        "devices": [{"name": "d0", "containerEdits": {"env": ["A=1"]}}],
    }
    fake.on("specs", stdout=json.dumps(spec) + "\n" + json.dumps({**spec, "devices": []}))
    fake.on("kubectl", "get", "pod", stdout="gpu-7")
    fake.on("kubectl", "exec", "env", stdout="A=1\nB=2\n")
    cluster = ExternalCluster(
        _kubeconfig(tmp_path), commands={"cdiSpecs": f"{fake.dir}/specs {{node}}"}, env=fake.env()
    )
    view = cluster.container_view("ns/p", "ctr")
    assert view.cdi_devices == ["k8s.gpu.example.com/gpu=d0"] and view.env == {"A": "1", "B": "2"}
    assert fake.argvs("specs") == [["gpu-7"]]


def test_parse_specs_reads_every_way_specs_are_printed() -> None:
    one = {"kind": "a/b", "devices": [{"name": "x"}]}
    assert parse_specs(json.dumps(one) + json.dumps(one)) == [one, one]
    assert parse_specs("kind: a/b\ndevices: []\n---\nkind: c/d\n") == [
        {"kind": "a/b", "devices": []},
        {"kind": "c/d"},
    ]
    sep = "--- dra-conformance cdi spec ---"
    assert parse_specs(f"{sep}\n{json.dumps(one)}\n{sep}\nnot: [valid\n") == [one]


def test_parse_view_needs_every_edit_to_show() -> None:
    specs = [
        {
            "kind": "v/c",
            "devices": [
                {"name": "both", "containerEdits": {"env": ["X=1"], "deviceNodes": [{"path": "/dev/card0"}]}},
                {"name": "env-differs", "containerEdits": {"env": ["X=2"]}},
                {"name": "node-missing", "containerEdits": {"deviceNodes": [{"path": "/dev/card9"}]}},
                {"name": "no-edits", "containerEdits": {}},
            ],
        }
    ]
    dev = (
        "total 0\ncrw-rw---- 1 root video 226, 0 Dec  1 10:00 card0\n"
        "drwxr-xr-x 2 root root 40 Dec  1 10:00 pts\n"
    )
    view = parse_view("X=1\n", dev, "", specs)
    assert view.cdi_devices == ["v/c=both"]
    assert view.device_nodes == [{"path": "/dev/card0", "type": "c", "major": 226, "minor": 0}]
