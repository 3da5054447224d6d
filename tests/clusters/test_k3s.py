"""The k3s backend with a recorded container (testcontainers' part) and fake docker/helm/kubectl."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusters.errors import DriverDeployError, ToolError
from clusters.k3s import K3sCluster, K3sSettings, k3s_args, k3s_image
from clusters.kind.config import KNOWN_GATES
from tests.clusters.apistub import api_stub, write_kubeconfig
from tests.clusters.fakebin import FakeBin


class FakeContainer:
    """Records what the backend asks of testcontainers' K3SContainer."""

    def __init__(self, image: str, kubeconfig: str) -> None:
        self.image = image
        self.kubeconfig = kubeconfig
        self.command = ""
        self.events: list[str] = []

    def with_command(self, command: str) -> FakeContainer:
        self.command = command
        return self

    def start(self) -> FakeContainer:
        self.events.append("start")
        return self

    def stop(self) -> None:
        self.events.append("stop")

    def config_yaml(self) -> str:
        return self.kubeconfig

    def get_wrapped_container(self) -> Any:
        return type("Wrapped", (), {"id": "c0ffee"})()


@pytest.fixture
def api() -> Iterator[str]:
    with api_stub() as url:
        yield url


def _setup(tmp_path: Path, api: str, slices: bool = True) -> tuple[FakeBin, list[FakeContainer], K3sCluster]:
    fake = FakeBin(tmp_path / "bin", tools=("docker", "helm", "kubectl"))
    fake.on("docker", "version", stdout="27\n")
    fake.on("kubectl", "get", "nodes", stdout="node/k3s-abc\n")
    items = [{"spec": {"driver": "gpu.dra-conformance.io", "nodeName": "k3s-abc"}}] if slices else []
    fake.on("kubectl", "get", "resourceslices.resource.k8s.io", stdout=json.dumps({"items": items}))
    made: list[FakeContainer] = []
    kubeconfig = write_kubeconfig(tmp_path / "kc", api).read_text()

    def factory(image: str) -> FakeContainer:
        made.append(FakeContainer(image, kubeconfig))
        return made[-1]

    settings = K3sSettings(k8s_version="1.37.2", work_dir=tmp_path / "state", slices_timeout=2.0)
    return fake, made, K3sCluster(settings, env=fake.env(), factory=factory)


def test_image_and_args() -> None:
    assert k3s_image("1.37") == "rancher/k3s:v1.37.2-k3s1"
    args = k3s_args({"DRAFoo": True})
    assert args[:2] == ["server", "--disable=traefik"]
    for component in ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet"):
        assert f"--{component}-arg=feature-gates=DRAFoo=true" in args
    assert k3s_args({}) == ["server", "--disable=traefik"]
    assert K3sSettings.from_env({"DRAC_K3S_IMAGE": "mine"}).server_image == "mine"


def test_start_installs_the_driver_and_stop_removes_the_container(tmp_path: Path, api: str) -> None:
    fake, made, cluster = _setup(tmp_path, api)
    cluster.start()
    (container,) = made
    assert container.image == "rancher/k3s:v1.37.2-k3s1" and container.events == ["start"]
    for gate in KNOWN_GATES["1.37"]:
        assert f"{gate}=true" in container.command
    assert cluster.kubeconfig.read_text() == container.kubeconfig
    assert cluster.nodes() == ["k3s-abc"]
    imports = [a for a in fake.argvs("docker") if a[:2] == ["exec", "-i"]]
    assert imports == [["exec", "-i", "c0ffee", "ctr", "-n", "k8s.io", "images", "import", "-"]]
    (helm,) = fake.argvs("helm")
    assert helm[:3] == ["upgrade", "--install", "dra-gpu-driver"]
    assert cluster.info() == {
        "backend": "k3s",
        "kubeconfig": str(cluster.kubeconfig),
        "container": "c0ffee",
        "driver_namespace": "dra-gpu-driver",
        "driver_selector": "app.kubernetes.io/instance=dra-gpu-driver",
        "driver_container": "driver",
    }
    other = K3sCluster.attach(cluster.info(), env=fake.env())
    assert other.nodes() == ["k3s-abc"]
    other.stop()
    assert container.events == ["start"]  # an attached object leaves the container alone
    cluster.stop()
    assert container.events == ["start", "stop"] and not cluster.kubeconfig.exists()


def test_no_slices_stops_the_container_and_keeps_the_logs(tmp_path: Path, api: str) -> None:
    fake, made, cluster = _setup(tmp_path, api, slices=False)
    fake.on("docker", "logs", stdout="k3s said this\n")
    with pytest.raises(DriverDeployError, match="k3s-abc"):
        cluster.start()
    assert made[0].events == ["start", "stop"]
    assert (tmp_path / "state" / "logs" / "k3s.log").read_text() == "k3s said this\n"


def test_no_docker_engine_starts_nothing(tmp_path: Path, api: str) -> None:
    fake, made, cluster = _setup(tmp_path, api)
    fake.first("docker", "version", rc=1)
    with pytest.raises(ToolError, match="no Docker engine answers"):
        cluster.start()
    assert made == []


def test_the_kubelet_cannot_restart_alone(tmp_path: Path, api: str) -> None:
    _, _, cluster = _setup(tmp_path, api)
    assert "restart-kubelet" not in cluster.capabilities
    from clusters.errors import CapabilityMissing

    with pytest.raises(CapabilityMissing):
        cluster.restart_kubelet("k3s-abc")
