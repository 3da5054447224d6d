"""A vendor's driver on kind and k3s (:class:`clusters.release.VendorRelease`), against recorded fake
``kind``/``docker``/``helm``/``kubectl``: the exact commands of a chart install and of a manifests
install, in order; the driver pods found by the vendor's selector; what stops a start."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusters.errors import DriverDeployError, ToolError
from clusters.k3s import K3sCluster, K3sSettings
from clusters.kind import KindCluster, KindSettings
from clusters.release import DriverPods, HelmChart, Release, VendorRelease
from tests.clusters.apistub import api_stub, write_kubeconfig
from tests.clusters.fakebin import FakeBin

DRIVER = "gpu.acme.example"
WORKERS = ["drac-worker", "drac-worker2"]
NODES = ["drac-control-plane", *WORKERS]
PODS = DriverPods("acme-system", "app.kubernetes.io/name=acme-driver", "plugin")


@pytest.fixture
def api() -> Iterator[str]:
    with api_stub() as url:
        yield url


def _slices(nodes: list[str], driver: str = DRIVER) -> str:
    return json.dumps({"items": [{"spec": {"driver": driver, "nodeName": n}} for n in nodes]})


def _kind(
    tmp_path: Path,
    api: str,
    release: Release,
    *,
    tools: tuple[str, ...] = ("kind", "docker", "helm", "kubectl"),
) -> tuple[FakeBin, KindCluster]:
    fake = FakeBin(tmp_path / "bin", tools=tools)
    kubeconfig = write_kubeconfig(tmp_path / "kc-template", api).read_text()
    fake.on("docker", "version", stdout="27.3.1\n")
    fake.on("kind", "get", "clusters", stdout="other\n")
    fake.on("kind", "create", "cluster", write_after="--kubeconfig", write=kubeconfig)
    fake.on("kind", "get", "nodes", stdout="\n".join(NODES) + "\n")
    fake.on("kubectl", "get", "resourceslices.resource.k8s.io", stdout=_slices(WORKERS))
    settings = KindSettings(name="drac", work_dir=tmp_path / "state", slices_timeout=2.0, release=release)
    return fake, KindCluster(settings, env=fake.env())


def _chart(tmp_path: Path, **changes: Any) -> HelmChart:
    values_file = tmp_path / "profile" / "values-kind.yaml"
    values_file.parent.mkdir(parents=True, exist_ok=True)
    values_file.write_text("kubeletPlugin: {priorityClassName: ''}\n")
    fields: dict[str, Any] = {
        "chart": "acme/acme-driver",
        "release": "acme",
        "namespace": "acme-system",
        "version": "1.2.3",
        "repo": "https://charts.acme.example",
        "values": {"gpus": {"simulated": True}},
        "values_files": (values_file,),
        **changes,
    }
    return HelmChart(**fields)


def test_a_chart_install_adds_the_repo_loads_the_images_installs_and_waits(tmp_path: Path, api: str) -> None:
    chart = _chart(tmp_path)
    release = VendorRelease(DRIVER, PODS, chart=chart, images=("acme-driver:dev", "acme-init:dev"))
    fake, cluster = _kind(tmp_path, api, release)
    cluster.start()
    calls = [(c.tool, c.argv[2:] if c.tool == "kubectl" else c.argv) for c in fake.calls()]
    steps = [
        (tool, argv[:2])
        for tool, argv in calls
        if argv[:1] == ["save"] or tool == "helm" or argv[:2] == ["get", "resourceslices.resource.k8s.io"]
    ]
    saves = [("docker", ["save", image]) for image in ("acme-driver:dev", "acme-init:dev")]  # once each
    assert steps == [
        *saves,
        ("helm", ["repo", "add"]),
        ("helm", ["upgrade", "--install"]),
        ("kubectl", ["get", "resourceslices.resource.k8s.io"]),
    ]
    assert not [a for t, a in calls if t == "docker" and a[0] == "build"]  # no reference image built
    imports = [a for t, a in calls if t == "docker" and a[:2] == ["exec", "-i"]]
    assert sorted(a[2] for a in imports) == sorted(NODES * 2)
    helm = fake.calls("helm")
    assert helm[0].argv == ["repo", "add", "acme", "https://charts.acme.example", "--force-update"]
    upgrade = helm[1].argv
    inline = upgrade[upgrade.index("--values", upgrade.index("--values") + 1) + 1]
    assert upgrade == [
        "upgrade", "--install", "acme", "acme/acme-driver", "--version", "1.2.3",
        "--namespace", "acme-system", "--create-namespace", "--kubeconfig", str(cluster.kubeconfig),
        "--values", str(chart.values_files[0]), "--values", inline,
        "--wait", "--timeout", "300s",
    ]  # fmt: skip
    assert yaml.safe_load(helm[1].files[inline]) == {"gpus": {"simulated": True}}
    assert not Path(inline).exists()  # the inline values' file is gone after the install


def test_a_local_chart_without_repo_version_or_values_is_installed_as_it_is(tmp_path: Path, api: str) -> None:
    local = tmp_path / "charts" / "acme-driver"
    local.mkdir(parents=True)
    chart = HelmChart(chart=str(local), release="acme-driver", namespace="acme")
    fake, cluster = _kind(tmp_path, api, VendorRelease(DRIVER, PODS, chart=chart))
    cluster.start()
    (upgrade,) = fake.argvs("helm")
    assert upgrade == [
        "upgrade", "--install", "acme-driver", str(local), "--namespace", "acme",
        "--create-namespace", "--kubeconfig", str(cluster.kubeconfig), "--wait", "--timeout", "300s",
    ]  # fmt: skip
    assert not [a for a in fake.argvs("docker") if a[0] == "save"]  # no images named: none loaded


def test_manifests_are_applied_in_order_on_k3s_without_helm(tmp_path: Path, api: str) -> None:
    manifests = (tmp_path / "rbac.yaml", tmp_path / "daemonset.yaml")
    for m in manifests:
        m.write_text("kind: List\n")
    release = VendorRelease(DRIVER, PODS, manifests=manifests, images=("acme-driver:dev",))
    fake = FakeBin(tmp_path / "bin", tools=("docker", "kubectl"))  # no helm: manifests need none
    fake.on("docker", "version", stdout="27\n")
    fake.on("kubectl", "get", "nodes", stdout="node/k3s-abc\n")
    fake.on("kubectl", "get", "resourceslices.resource.k8s.io", stdout=_slices(["k3s-abc"]))
    kubeconfig = write_kubeconfig(tmp_path / "kc", api).read_text()
    container = type(
        "Container",
        (),
        {
            "with_command": lambda self, c: self,
            "start": lambda self: self,
            "stop": lambda self: None,
            "config_yaml": lambda self: kubeconfig,
            "get_wrapped_container": lambda self: type("W", (), {"id": "c0ffee"})(),
        },
    )
    settings = K3sSettings(
        k8s_version="1.37.2", work_dir=tmp_path / "state", slices_timeout=2.0, release=release
    )
    cluster = K3sCluster(settings, env=fake.env(), factory=lambda image: container()).start()
    kubectl = [a[2:] for a in fake.argvs("kubectl")]
    applies = [a for a in kubectl if a[0] == "apply"]
    assert applies == [["apply", "-f", str(manifests[0])], ["apply", "-f", str(manifests[1])]]
    waits = [i for i, a in enumerate(kubectl) if a[:2] == ["get", "resourceslices.resource.k8s.io"]]
    assert waits and kubectl.index(applies[-1]) < waits[0]  # applied, then the slices waited for
    assert [a for a in fake.argvs("docker") if a[:2] == ["exec", "-i"]] == [
        ["exec", "-i", "c0ffee", "ctr", "-n", "k8s.io", "images", "import", "-"]
    ]
    assert cluster.info()["driver_selector"] == PODS.selector


def test_a_manifest_that_does_not_apply_names_the_file_and_the_pods(tmp_path: Path, api: str) -> None:
    manifest = tmp_path / "daemonset.yaml"
    manifest.write_text("kind: DaemonSet\n")
    fake, cluster = _kind(tmp_path, api, VendorRelease(DRIVER, PODS, manifests=(manifest,)))
    fake.first("kubectl", "apply", rc=1)
    fake.on("kubectl", "get", "pods", stdout="acme-driver-x 0/1 ImagePullBackOff\n")
    with pytest.raises(DriverDeployError) as e:
        cluster.start()
    assert f"manifest {manifest} did not apply" in str(e.value) and "ImagePullBackOff" in str(e.value)
    assert ["get", "pods", "-n", "acme-system", "-o", "wide"] in [a[2:] for a in fake.argvs("kubectl")]


def test_no_slices_of_the_vendor_driver_names_it_the_nodes_and_the_pods(tmp_path: Path, api: str) -> None:
    release = VendorRelease(DRIVER, PODS, chart=_chart(tmp_path))
    fake, cluster = _kind(tmp_path, api, release)
    fake.first("kubectl", "get", "resourceslices.resource.k8s.io", stdout=_slices(WORKERS[:1]))
    fake.on("kubectl", "get", "pods", stdout="acme-driver-y 0/1 CrashLoopBackOff\n")
    with pytest.raises(DriverDeployError) as e:
        cluster.start()
    message = str(e.value)
    assert f"driver {DRIVER} published no ResourceSlice for node(s) drac-worker2" in message
    assert "CrashLoopBackOff" in message


def test_a_missing_values_file_stops_before_anything_is_made(tmp_path: Path, api: str) -> None:
    chart = _chart(tmp_path, values_files=(tmp_path / "gone.yaml",))
    fake, cluster = _kind(tmp_path, api, VendorRelease(DRIVER, PODS, chart=chart))
    with pytest.raises(DriverDeployError, match=r"gone.yaml does not exist: the driver profile's install"):
        cluster.start()
    assert fake.argvs("kind") == [] and fake.argvs("helm") == []


def test_a_release_installs_a_chart_or_manifests_one_of_them(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a chart or manifests"):
        VendorRelease(DRIVER, PODS)
    with pytest.raises(ValueError, match="a chart or manifests"):
        VendorRelease(DRIVER, PODS, chart=_chart(tmp_path), manifests=(tmp_path / "m.yaml",))


# --- the driver pods of a started cluster, by the vendor's selector -----------------------------


def _running(tmp_path: Path, api: str, pods: DriverPods) -> tuple[FakeBin, KindCluster]:
    release = VendorRelease(DRIVER, pods, manifests=(tmp_path / "unused.yaml",))
    fake, _ = _kind(tmp_path, api, release)
    fake.first("kind", "get", "clusters", stdout="drac\n")
    fake.on(
        "kind",
        "export",
        "kubeconfig",
        write_after="--kubeconfig",
        write=(tmp_path / "kc-template").read_text(),
    )
    one = {"items": [{"metadata": {"name": "acme-driver-q7", "uid": "u1"}, "status": {"phase": "Running"}}]}
    fake.on("kubectl", "get", "pods", "spec.nodeName=drac-worker", stdout=json.dumps(one))
    settings = KindSettings(name="drac", work_dir=tmp_path / "state", release=release, install_driver=False)
    return fake, KindCluster(settings, env=fake.env()).start()


def test_the_driver_pod_of_a_node_is_found_by_the_selector_and_exec_names_the_container(
    tmp_path: Path, api: str
) -> None:
    fake, cluster = _running(tmp_path, api, PODS)
    argv = cluster.on_node("drac-worker", ["cat", "/etc/hostname"])
    assert argv[argv.index("exec") :] == [
        "exec", "-n", "acme-system", "acme-driver-q7", "-c", "plugin", "--", "cat", "/etc/hostname",
    ]  # fmt: skip
    lookup = next(a for a in fake.argvs("kubectl") if "pods" in a and "-l" in a)
    assert lookup[2:] == [
        "get", "pods", "-n", "acme-system", "-l", "app.kubernetes.io/name=acme-driver",
        "--field-selector", "spec.nodeName=drac-worker", "-o", "json",
    ]  # fmt: skip


def test_without_a_container_exec_goes_to_the_pods_default_one(tmp_path: Path, api: str) -> None:
    _, cluster = _running(tmp_path, api, DriverPods("acme-system", "app=acme"))
    argv = cluster.on_node("drac-worker", ["true"])
    assert argv[argv.index("exec") :] == ["exec", "-n", "acme-system", "acme-driver-q7", "--", "true"]


def test_an_attached_cluster_finds_the_pods_its_info_names(tmp_path: Path, api: str) -> None:
    fake, cluster = _running(tmp_path, api, PODS)
    info = cluster.info()
    assert DriverPods.from_info(info) == PODS
    other = KindCluster.attach(info, env=fake.env())  # its settings know only the reference driver
    argv = other.on_node("drac-worker", ["true"])
    assert argv[argv.index("exec") :] == [
        "exec", "-n", "acme-system", "acme-driver-q7", "-c", "plugin", "--", "true",
    ]  # fmt: skip
    assert DriverPods.from_info({"backend": "kind"}) is None


# --- parts made here from a Go module: {src:NAME} and {image:NAME} ------------------------------


def test_a_release_of_parts_made_here_is_filled_by_name(tmp_path: Path) -> None:
    chart = _chart(tmp_path, chart="{src:acme-plugin}/deployments/helm/acme", version="", repo="")
    release = VendorRelease(DRIVER, PODS, chart=chart, images=("{image:acme-plugin}", "other:1"))
    assert release.builds_here and not release.chart.local  # type: ignore[union-attr]
    release.check()  # nothing to find on disk before it is filled
    asked: list[str] = []
    filled = release.filled(
        lambda name: asked.append(f"src {name}") or tmp_path / "mod",  # type: ignore[func-returns-value]
        lambda name: asked.append(f"image {name}") or f"{name}:local",  # type: ignore[func-returns-value]
    )
    assert filled.chart is not None and filled.chart.chart == f"{tmp_path}/mod/deployments/helm/acme"
    assert filled.chart.local and filled.images == ("acme-plugin:local", "other:1")
    assert asked == ["src acme-plugin", "image acme-plugin"] and not filled.builds_here
    assert not VendorRelease(DRIVER, PODS, chart=_chart(tmp_path)).builds_here


def test_k3s_refuses_parts_only_kind_makes_before_anything_is_made(tmp_path: Path, api: str) -> None:
    chart = _chart(tmp_path, chart="{src:acme-plugin}/chart", version="", repo="")
    release = VendorRelease(DRIVER, PODS, chart=chart, images=("{image:acme-plugin}",))
    fake = FakeBin(tmp_path / "bin", tools=("docker", "helm", "kubectl"))
    fake.on("docker", "version", stdout="27.3.1\n")
    settings = K3sSettings(k8s_version="1.37.2", work_dir=tmp_path / "state", release=release)
    cluster = K3sCluster(settings, env=fake.env(), factory=lambda image: pytest.fail("a container was made"))
    with pytest.raises(ToolError, match=r"only the kind tier makes here: run it with --cluster kind"):
        cluster.start()
    assert fake.argvs("helm") == []
