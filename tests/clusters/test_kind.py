"""The kind backend against recorded fake ``kind``/``docker``/``helm``/``kubectl`` executables: the exact
commands and files it hands them, its config, and how it stops on bad input. The live run needs a
Docker engine and skips without one."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from clusters import tools
from clusters.engine import Engine, EngineSettings
from clusters.errors import DriverDeployError, ToolError
from clusters.kind import KindCluster, KindSettings
from clusters.kind.config import (
    CDI_PATCH,
    CGROUP_V1_PATCH,
    KNOWN_GATES,
    NO_COREDNS_PATCH,
    dra_gates_for,
    render,
)
from clusters.kind.settings import NODE_IMAGES, node_image
from clusters.local import features
from clusters.release import CHART_DIR, DOCKERFILE, FAKE_ROOT, DriverRelease
from tests.clusters.apistub import api_stub, write_kubeconfig
from tests.clusters.fakebin import FakeBin

WORKERS = ["drac-worker", "drac-worker2"]
NODES = ["drac-control-plane", *WORKERS]


def _slices(nodes: list[str], driver: str = "gpu.dra-conformance.io") -> str:
    items = [{"spec": {"driver": driver, "nodeName": n, "devices": []}} for n in nodes]
    return json.dumps({"items": items})


@pytest.fixture
def api() -> Iterator[str]:
    with api_stub() as url:
        yield url


def _fake(tmp_path: Path, api: str, *, existing: bool = False, slices: list[str] | None = None) -> FakeBin:
    fake = FakeBin(tmp_path / "bin")
    kubeconfig = write_kubeconfig(tmp_path / "kc-template", api).read_text()
    fake.on("docker", "version", stdout="27.3.1\n")
    fake.on("kind", "get", "clusters", stdout="drac\n" if existing else "other\n")
    fake.on("kind", "create", "cluster", write_after="--kubeconfig", write=kubeconfig)
    fake.on("kind", "export", "kubeconfig", write_after="--kubeconfig", write=kubeconfig)
    fake.on("kind", "get", "nodes", stdout="\n".join(NODES) + "\n")
    fake.on(
        "kubectl",
        "get",
        "resourceslices.resource.k8s.io",
        stdout=_slices(WORKERS if slices is None else slices),
    )
    return fake


def _settings(tmp_path: Path, **changes: object) -> KindSettings:
    # the user's engine only: a test never starts a private one (test_engine.py does that)
    engine = EngineSettings(mode="user", state_dir=tmp_path / "engine")
    base = KindSettings(name="drac", work_dir=tmp_path / "state", slices_timeout=2.0, engine=engine)
    return base.with_options(**changes)


# --- config ---------------------------------------------------------------------------------


def test_the_config_has_the_gates_cdi_and_the_nodes() -> None:
    text = render(
        workers=3, gates={"DRAAdminAccess": True}, image="img:1", runtime_config=["resource.k8s.io/v1beta2"]
    )
    config = yaml.safe_load(text)
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker", "worker"]
    assert all(n["image"] == "img:1" for n in config["nodes"])
    assert config["featureGates"] == {"DRAAdminAccess": True}
    assert config["runtimeConfig"] == {"resource.k8s.io/v1beta2": "true"}
    assert config["containerdConfigPatches"] == [CDI_PATCH]
    assert "enable_cdi = true" in CDI_PATCH
    assert config["kubeadmConfigPatches"] == [CGROUP_V1_PATCH]
    assert yaml.safe_load(CGROUP_V1_PATCH) == {"kind": "KubeletConfiguration", "failCgroupV1": False}
    no_dns = yaml.safe_load(render(workers=1, gates={}, coredns=False))["kubeadmConfigPatches"]
    assert no_dns == [CGROUP_V1_PATCH, NO_COREDNS_PATCH]
    assert yaml.safe_load(NO_COREDNS_PATCH)["skipPhases"] == ["preflight", "addon/coredns"]


def test_runtime_config_only_when_an_older_api_is_wanted() -> None:
    config = yaml.safe_load(render(workers=1, gates={}))
    assert "runtimeConfig" not in config and "featureGates" not in config


def test_gates_come_from_the_cached_binaries_else_the_table(tmp_path: Path) -> None:
    gates, source = dra_gates_for("1.37.2", tmp_path / "empty-cache")
    assert set(gates) == set(KNOWN_GATES["1.37"]) and "table" in source
    assert not set(gates) & features.KUBELET_LEFT_OFF  # a kubelet with one of them on fails to start
    gates, source = dra_gates_for("1.99.0", tmp_path / "empty-cache")
    assert gates == {} and "only GA DRA" in source


@pytest.mark.cluster
def test_the_gate_table_matches_what_the_binaries_say(local_binaries: object) -> None:
    """KNOWN_GATES is the local tier's reading of the 1.37 binaries, written down: keep them equal."""
    from clusters.local.settings import LocalSettings

    settings = LocalSettings.from_env(os.environ)
    if not settings.k8s_version.startswith("1.37."):
        pytest.skip(f"the table is for 1.37; this run uses {settings.k8s_version}")
    gates, source = dra_gates_for(settings.k8s_version, settings.binaries.cache_root)
    if "--help" not in source:
        pytest.skip(f"the 1.37 binaries are not in the cache ({source})")
    assert sorted(gates) == sorted(KNOWN_GATES["1.37"])


def test_node_images_by_minor_and_override() -> None:
    assert node_image("1.37.2") == NODE_IMAGES["1.37"] and "@sha256:" in NODE_IMAGES["1.37"]
    for minor, image in NODE_IMAGES.items():  # each pinned by digest, to an image of its minor
        assert image.startswith(f"kindest/node:v{minor}.") and "@sha256:" in image, image
    with pytest.raises(ValueError, match="DRAC_KIND_NODE_IMAGE"):
        node_image("1.30.0")
    settings = KindSettings.from_env({"DRAC_KIND_NODE_IMAGE": "mine:1", "DRAC_KIND_NAME": "x"})
    assert settings.node_image == "mine:1" and settings.name == "x"
    with pytest.raises(ValueError, match="at least 1"):
        KindSettings().with_options(workers=0)


# --- lifecycle --------------------------------------------------------------------------------


def test_start_creates_loads_installs_and_stop_deletes(tmp_path: Path, api: str) -> None:
    fake = _fake(tmp_path, api)
    fake.on("docker", "save", stdout="the image's archive")
    release = DriverRelease(fake_profile="l4x4", device_kinds=("gpu", "mig"))
    cluster = KindCluster(_settings(tmp_path, release=release, k8s_version="1.37"), env=fake.env())
    cluster.start()
    assert cluster.nodes() == WORKERS
    kind = fake.argvs("kind")
    create = next(a for a in kind if a[:2] == ["create", "cluster"])
    config_file = create[create.index("--config") + 1]
    assert create[create.index("--name") + 1] == "drac"
    assert create[create.index("--image") + 1] == NODE_IMAGES["1.37"]
    assert create[create.index("--kubeconfig") + 1] == str(cluster.kubeconfig)
    config = yaml.safe_load(next(c for c in fake.calls("kind") if c.argv == create).files[config_file])
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    assert set(config["featureGates"]) == set(KNOWN_GATES["1.37"])
    docker = fake.argvs("docker")
    assert docker[0] == ["version", "--format", "{{.Server.Version}}"]
    assert [
        "build",
        "-f",
        str(DOCKERFILE),
        "-t",
        "dra-gpu-driver:0.1.0",
        str(DOCKERFILE.parents[2]),
    ] in docker
    imports = [c for c in fake.calls("docker") if c.argv[:2] == ["exec", "-i"]]
    assert sorted(c.argv[2] for c in imports) == sorted(NODES)  # every node, the control plane too
    assert all(c.argv[3:] == ["ctr", "-n", "k8s.io", "images", "import", "-"] for c in imports)
    assert {c.stdin for c in imports} == {len("the image's archive")}  # each node reads the one save
    saves = [a for a in docker if a[0] == "save"]
    assert saves == [["save", "dra-gpu-driver:0.1.0"]]  # saved once, for every node
    (helm,) = fake.calls("helm")
    assert helm.argv[:4] == ["upgrade", "--install", "dra-gpu-driver", str(CHART_DIR)]
    assert helm.argv[helm.argv.index("--namespace") + 1] == "dra-gpu-driver"
    assert "--create-namespace" in helm.argv and "--wait" in helm.argv
    values = yaml.safe_load(helm.files[helm.argv[helm.argv.index("--values") + 1]])
    assert values["backend"] == "fake" and values["fakeProfile"] == "l4x4"
    assert values["deviceKinds"] == ["gpu", "mig"] and values["fakeStateDir"] == f"{FAKE_ROOT}/gpus"
    assert values["image"] == {"repository": "dra-gpu-driver", "tag": "0.1.0", "pullPolicy": "Never"}
    cluster.stop()
    assert fake.argvs("kind")[-1] == ["delete", "cluster", "--name", "drac"]
    assert not cluster.kubeconfig.exists()


@pytest.mark.parametrize("why", ["wait-control-plane", "some other failure"])
def test_a_control_plane_too_slow_to_come_up_is_made_again_once(tmp_path: Path, api: str, why: str) -> None:
    """kubeadm giving up on the API server of a busy machine (CI) is worth one more try, from a
    deleted cluster; any other failure of kind's create is not."""
    fake = _fake(tmp_path, api)
    fake.first("kind", "create", "cluster", stderr=f"error execution phase {why}: ...\n", rc=1, times=1)
    cluster = KindCluster(_settings(tmp_path, k8s_version="1.37"), env=fake.env())

    def kind() -> list[list[str]]:
        return [a[:2] for a in fake.argvs("kind") if a[0] in ("create", "delete")]

    if why != "wait-control-plane":
        with pytest.raises(ToolError):
            cluster.start()
        assert kind()[:1] == [["create", "cluster"]] and kind().count(["create", "cluster"]) == 1
        return
    cluster.start()
    assert kind() == [["create", "cluster"], ["delete", "cluster"], ["create", "cluster"]]
    cluster.stop()


def test_an_existing_cluster_is_reused_and_left_running(tmp_path: Path, api: str) -> None:
    fake = _fake(tmp_path, api, existing=True)
    cluster = KindCluster(_settings(tmp_path), env=fake.env()).start()
    kind = fake.argvs("kind")
    assert not [a for a in kind if a[:2] == ["create", "cluster"]]
    assert ["export", "kubeconfig", "--name", "drac", "--kubeconfig", str(cluster.kubeconfig)] in kind
    cluster.stop()
    assert not [a for a in fake.argvs("kind") if a[0] == "delete"]


def test_keep_leaves_a_new_cluster(tmp_path: Path, api: str) -> None:
    fake = _fake(tmp_path, api)
    KindCluster(_settings(tmp_path, keep=True), env=fake.env()).start().stop()
    assert not [a for a in fake.argvs("kind") if a[0] == "delete"]


def test_no_docker_engine_stops_before_anything_is_made(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin")
    fake.on(
        "docker",
        "version",
        rc=1,
        stderr="Cannot connect to the Docker daemon at unix:///var/run/docker.sock\n",
    )
    with pytest.raises(ToolError) as e:
        KindCluster(_settings(tmp_path), env=fake.env()).start()
    assert "no Docker engine answers" in str(e.value) and "Cannot connect" in str(e.value)
    assert fake.argvs("kind") == [] and fake.argvs("helm") == []


@pytest.mark.parametrize("missing", ["docker", "kubectl", "helm"])
def test_a_missing_tool_is_named(tmp_path: Path, missing: str) -> None:
    fake = FakeBin(tmp_path / "bin", tools=[t for t in ("kind", "docker", "helm", "kubectl") if t != missing])
    fake.on("docker", "version", stdout="27\n")
    with pytest.raises(ToolError, match=f"{missing} is not on PATH"):
        KindCluster(_settings(tmp_path), env=fake.env()).start()
    assert fake.argvs("kind") == []


def test_no_kind_and_no_build_names_the_fix(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=["docker", "helm", "kubectl"])
    fake.on("docker", "version", stdout="27\n")
    env = fake.env(DRAC_NO_BUILD="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    with pytest.raises(ToolError) as e:
        KindCluster(_settings(tmp_path), env=env).start()
    assert "kind is not on PATH" in str(e.value) and "DRAC_KIND" in str(e.value)


def test_a_driver_without_slices_stops_the_run_and_nothing_is_left(tmp_path: Path, api: str) -> None:
    fake = _fake(tmp_path, api, slices=["drac-worker"])
    fake.on("kubectl", "get", "pods", stdout="dra-gpu-driver-abc 0/1 CrashLoopBackOff\n")
    cluster = KindCluster(_settings(tmp_path), env=fake.env())
    with pytest.raises(DriverDeployError) as e:
        cluster.start()
    message = str(e.value)
    assert "drac-worker2" in message and "CrashLoopBackOff" in message
    kind = fake.argvs("kind")
    export = next(a for a in kind if a[:2] == ["export", "logs"])
    assert export[2] == str(tmp_path / "state" / "drac" / "logs" / "nodes")
    assert kind[-1] == ["delete", "cluster", "--name", "drac"]


def test_a_failed_chart_install_says_so_with_the_pods(tmp_path: Path, api: str) -> None:
    fake = _fake(tmp_path, api)
    fake.on("helm", "upgrade", rc=1, stderr="Error: context deadline exceeded\n")
    fake.on("kubectl", "get", "pods", stdout="dra-gpu-driver-xyz 0/1 ErrImageNeverPull\n")
    with pytest.raises(DriverDeployError) as e:
        KindCluster(_settings(tmp_path), env=fake.env()).start()
    assert "context deadline exceeded" in str(e.value) and "ErrImageNeverPull" in str(e.value)


def test_a_cluster_without_dra_is_refused_before_the_driver(tmp_path: Path) -> None:
    from clusters.errors import ClusterUnfit

    with api_stub(("v1beta1",), version="v1.31.0") as url:
        fake = _fake(tmp_path, url)
        with pytest.raises(ClusterUnfit, match=r"resource\.k8s\.io/v1"):
            KindCluster(_settings(tmp_path), env=fake.env()).start()
    assert fake.argvs("helm") == [] and not [a for a in fake.argvs("docker") if a[0] == "build"]


# --- what tests ask of a running cluster -------------------------------------------------------


def _running(tmp_path: Path, api: str) -> tuple[KindCluster, FakeBin]:
    fake = _fake(tmp_path, api, existing=True)
    pods = {
        "items": [{"metadata": {"name": "dra-gpu-driver-q7", "uid": "u1"}, "status": {"phase": "Running"}}]
    }
    fake.on("kubectl", "get", "pods", "spec.nodeName=drac-worker", stdout=json.dumps(pods))
    cluster = KindCluster(_settings(tmp_path, install_driver=False), env=fake.env()).start()
    return cluster, fake


def test_a_driver_crash_kills_its_container_in_the_node(
    tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash is SIGKILL, as on the local tier (``crictl stop --timeout 0``), not a pod deletion:
    the driver must not hear SIGTERM and clean up (RES-SLICES-SURVIVE-QUICK-RESTART)."""
    cluster, fake = _running(tmp_path, api)
    seen: list[str] = []

    def crash(self: object, node: str, kill: Callable[[str], object], **_: object) -> None:
        seen.append(node)
        kill("abc123")

    monkeypatch.setattr("clusters.incluster.InCluster.crash_driver", crash)
    cluster.restart_driver("drac-worker", crash=True)
    assert seen == ["drac-worker"]
    assert ["exec", "drac-worker", "crictl", "stop", "--timeout", "0", "abc123"] in fake.argvs("docker")
    assert not [a for a in fake.argvs("kubectl") if "delete" in a]


# --- live -------------------------------------------------------------------------------------


def _docker_engine_reason() -> str:
    try:
        tools.docker_engine(tools.find("docker"), timeout=10)
    except ToolError as e:
        return str(e)
    return ""


@pytest.mark.slow
def test_live_kind_cluster_runs_the_driver(tmp_path: Path) -> None:
    """The real thing: kind, Docker, helm and kubectl; a claimed pod on a worker. Needs a Docker engine."""
    reason = _docker_engine_reason()
    if reason:
        pytest.skip(f"no live kind run here: {reason}")
    name = f"drac-test-{os.getpid()}"
    with KindCluster(
        KindSettings.from_env(os.environ).with_options(name=name, work_dir=tmp_path)
    ).start() as cluster:
        assert cluster.nodes()


# --- an engine with a network of its own ------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nsenter") is None, reason="nsenter --net needs root")
def test_an_engine_apart_is_reached_through_a_relay(tmp_path: Path) -> None:
    """The kubeconfig kind wrote names a port of the engine's network; the backend relays it here and
    points the kubeconfig at the relay (this process's own namespace stands in for the engine's)."""
    import http.server
    import threading
    import urllib.request

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cluster = KindCluster(_settings(tmp_path), env={"PATH": os.environ.get("PATH", "")})
        cluster.state_dir.mkdir(parents=True)
        original = f"clusters:\n- cluster:\n    server: https://127.0.0.1:{server.server_port}\n"
        cluster.kubeconfig.write_text(original)
        engine = Engine(Path("/usr/bin/docker"), "unix:///x.sock", "20.10", netns_pid=os.getpid())
        cluster._reach_api(engine)
        relayed = cluster.kubeconfig.read_text()
        port = int(relayed.rsplit(":", 1)[1])
        assert (
            port != server.server_port and (cluster.state_dir / "kubeconfig.engine").read_text() == original
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            assert answer.status == 200
        cluster.stop()
        assert cluster._relay is None
    finally:
        server.shutdown()
        server.server_close()


def test_the_node_images_kubectl_serves_when_none_is_on_path(tmp_path: Path) -> None:
    from clusters.kind.cluster import find_tools

    fake = FakeBin(tmp_path / "bin", tools=["docker"])
    engine = Engine(fake.dir / "docker", "", "27")
    built = tmp_path / "kubectl"
    assert find_tools(engine, fake.env(), None, built).kubectl == built
    with pytest.raises(ToolError, match="kubectl is not on PATH"):
        find_tools(engine, fake.env(), None)
    with pytest.raises(ToolError, match="DRAC_KUBECTL"):  # one asked for by name is never replaced
        find_tools(engine, fake.env(DRAC_KUBECTL=str(tmp_path / "nope")), None, built)
