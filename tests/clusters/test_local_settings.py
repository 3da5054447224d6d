"""Small pieces: versions, settings round trip, command placeholders, pod references, views."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from clusters.base import ContainerView, pod_key
from clusters.k3s import K3sSettings
from clusters.kind.settings import KindSettings
from clusters.local.daemon import settings_from_json, settings_to_json
from clusters.local.driverproc import default_driver_command, expand_command
from clusters.local.settings import LocalSettings, env_k8s_version, normalize_version, parse_node_kinds


@pytest.mark.parametrize(
    ("given", "expected"),
    [("v1.37.2", "1.37.2"), ("1.36", "1.36.3"), ("1.34.0", "1.34.0"), (" 1.35 ", "1.35.4")],
)
def test_versions_normalize(given: str, expected: str) -> None:
    assert normalize_version(given) == expected


@pytest.mark.parametrize("bad", ["1", "1.99", "latest", "1.37.x"])
def test_bad_versions_are_refused_with_the_value(bad: str) -> None:
    with pytest.raises(ValueError, match="is not of the form"):
        normalize_version(bad)


def test_every_backend_reads_the_version_variable_alike() -> None:
    """The local tier and the pod-cluster backends take ``DRAC_K8S_VERSION`` through one reader,
    which names the variable when its value is no version."""
    env = {"DRAC_K8S_VERSION": "v1.36"}
    assert LocalSettings.from_env(env).k8s_version == "1.36.3"
    assert KindSettings.from_env(env).k8s_version == K3sSettings.from_env(env).k8s_version == "1.36.3"
    assert env_k8s_version({"DRAC_K8S_VERSION": ""}) is None
    for backend in (LocalSettings, KindSettings, K3sSettings):
        with pytest.raises(
            ValueError, match="DRAC_K8S_VERSION: Kubernetes version 'latest' is not of the form"
        ):
            backend.from_env({"DRAC_K8S_VERSION": "latest"})


def test_settings_survive_the_trip_to_the_daemon() -> None:
    settings = dataclasses.replace(
        LocalSettings.from_env({"XDG_CACHE_HOME": "/c", "DRAC_BIN_DIR": "/b"}).with_version("1.36"),
        nodes=3,
        driver_command=("x", "--node", "{node}"),
        work_dir=Path("/w"),
    ).with_options(
        device_classes=Path("/d/classes.yaml"),
        example_driver_bin=Path("/x/plugin"),
        example_driver_version="0.3.0",
        node_kind="agent,kubelet",
    )
    assert settings.example_driver_version == "v0.3.0"
    assert [settings.node_kind(i) for i in range(3)] == ["agent", "kubelet", "kubelet"]
    assert settings.drivers_cache_root == Path("/c/dra-conformance/drivers")
    assert settings_from_json(settings_to_json(settings)) == settings
    plain = LocalSettings()
    assert settings_from_json(settings_to_json(plain)) == plain


def test_node_kinds_from_env_and_options() -> None:
    assert LocalSettings().node_kinds == ("agent",)
    assert LocalSettings.from_env({"DRAC_NODE_KIND": "Kubelet"}).node_kinds == ("kubelet",)
    assert parse_node_kinds(" agent , kubelet ") == ("agent", "kubelet")
    for bad in ("", "docker", "agent,,x"):
        with pytest.raises(ValueError, match="is not agent or kubelet"):
            parse_node_kinds(bad)


def test_driver_command_placeholders() -> None:
    command = expand_command(
        default_driver_command("gpu.example.com"),
        node="n1",
        root="/r/n1",
        kubeconfig="/k",
        driver="gpu.example.com",
    )
    assert command[:3] == [sys.executable, "-m", "driver"]  # this python, not one found on PATH
    assert "/r/n1/kubelet/plugins/gpu.example.com" in command
    assert command[command.index("--node-name") + 1] == "n1"
    assert not [arg for arg in command if "{" in arg]


def test_pod_references() -> None:
    assert pod_key("ns/p") == ("ns", "p")
    assert pod_key({"metadata": {"namespace": "ns", "name": "p"}}) == ("ns", "p")
    assert pod_key(SimpleNamespace(metadata=SimpleNamespace(namespace="ns", name="p"))) == ("ns", "p")
    with pytest.raises(ValueError, match="namespace/name"):
        pod_key("just-a-name")


def test_container_view_from_agent_json() -> None:
    view = ContainerView.from_dict(
        {
            "env": {"A": "1"},
            "device_nodes": [{"path": "/dev/x"}],
            "mounts": [{"hostPath": "/h", "containerPath": "/c"}],
            "cdi_devices": ["k8s.example.com/gpu=a"],
        }
    )
    assert view.env == {"A": "1"}
    assert view.cdi_devices == ["k8s.example.com/gpu=a"]
    assert ContainerView.from_dict({}) == ContainerView()


@pytest.mark.parametrize(
    ("work_dir", "message"),
    [
        ("/tmp/with space", "whitespace"),
        ("/tmp/" + "deep/" * 20, "too deep for driver gpu.dra-conformance.io: unix socket paths"),
        # fine for <driver>-reg.sock, too long for a rolling update's <driver>-<pod uid>-reg.sock
        ("/tmp/" + "d" * 30, r"-00000000-0000-0000-0000-000000000000-reg\.sock"),
    ],
)
def test_a_work_dir_that_would_break_paths_is_refused_up_front(work_dir: str, message: str) -> None:
    from clusters.errors import ClusterError
    from clusters.local.cluster import LocalCluster

    settings = dataclasses.replace(LocalSettings(), work_dir=Path(work_dir))
    with pytest.raises(ClusterError, match=message):
        LocalCluster(settings).start()
    assert not Path(work_dir).exists()


def test_the_default_work_dir_leaves_room_for_rolling_update_sockets() -> None:
    from clusters.local.cluster import LocalCluster

    LocalCluster(dataclasses.replace(LocalSettings(), nodes=10))._check_work_dir()  # /tmp/dXXXX/n9: fits


def test_device_class_file_is_read_with_the_driver_name(tmp_path: Path) -> None:
    from clusters.errors import NodeError
    from clusters.local.driverproc import manifests_from_file

    good = tmp_path / "classes.yaml"
    good.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: '{driver}'}\n"
        "spec: {selectors: [{cel: {expression: \"device.driver == '{driver}'\"}}]}\n---\n"
    )
    [doc] = manifests_from_file(good, "gpu.example.com")
    assert doc["metadata"]["name"] == "gpu.example.com"
    assert doc["spec"]["selectors"][0]["cel"]["expression"] == "device.driver == 'gpu.example.com'"
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: DeviceClass\n")
    with pytest.raises(NodeError, match="apiVersion"):
        manifests_from_file(bad, "x")
