"""Nodes of kind kubelet: the real kubelet beside the fake runtime (fakecri), isolated in its own user
and mount namespace. A claimed pod runs with the reference driver and what its container sees is
readable; a crashed kubelet comes back and keeps the pod; a ``run-seconds`` pod Succeeds; mixed
clusters work; and the host's sysctls and paths are as they were."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from clusters.errors import ClusterError
from clusters.local import kubeletnode
from clusters.local.binaries import Binaries
from clusters.local.cluster import LocalCluster
from clusters.local.settings import LocalSettings
from tests import kube, manifests
from tests.clusters.e2e import run_pod
from tests.polling import until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods")


def _host_state() -> dict[str, str]:
    state = {name: Path("/proc/sys", name).read_text().strip() for name in SYSCTLS}
    state.update({path: str(Path(path).exists()) for path in HOST_PATHS})
    return state


@pytest.fixture
def kubelet_settings(local_binaries: Binaries) -> LocalSettings:
    try:
        kubeletnode.check_user_namespaces()
    except ClusterError as e:
        pytest.skip(str(e))
    if shutil.which("go") is None:
        pytest.skip("nodes of kind kubelet build their fake runtime with Go")
    settings = LocalSettings(nodes=2, ready_timeout=120).with_options(node_kind="agent,kubelet")
    return settings.with_bin_dir(local_binaries.directory).with_version(local_binaries.version)


def _names(api: object, ns: str) -> set[str]:
    return {str(p.metadata.name) for p in kube.core(api).list_namespaced_pod(ns).items}


def _phase(api: object, ns: str, name: str) -> str:
    return str(kube.core(api).read_namespaced_pod(name, ns).status.phase)


def test_a_claimed_pod_on_a_kubelet_node_and_the_host_untouched(kubelet_settings: LocalSettings) -> None:
    before = _host_state()
    cluster = LocalCluster(kubelet_settings)
    with cluster.start():
        assert [cluster.local_nodes[n].kind for n in cluster.nodes()] == ["agent", "kubelet"]
        api = cluster.api_client()
        node = "node-1"
        ns = "kubelet-node"
        kube.core(api).create_namespace({"metadata": {"name": ns}})
        template, pod = manifests.gpu_pod(ns, "p1")
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        kube.resource(api).create_namespaced_resource_claim_template(ns, template)
        until(lambda: kube.core(api).list_namespaced_service_account(ns).items, what="default account")
        kube.core(api).create_namespaced_pod(ns, pod)
        until(lambda: _phase(api, ns, "p1") == "Running", timeout=90, what="p1 Running on the kubelet node")
        view = cluster.container_view(f"{ns}/p1", "main")
        assert view.cdi_devices, view
        assert view.env, view  # the reference driver's CDI edits include env vars
        # the real kubelet registered the driver and published its slices under its node
        slices = kube.resource(api).list_resource_slice(field_selector=f"spec.nodeName={node}").items
        assert slices
        # a crashed kubelet comes back; the runtime kept the container, the pod stays Running
        runtime = cluster.local_nodes[node].runtime
        assert runtime is not None
        runtime_pid = runtime.pid
        cluster.restart_kubelet(node, crash=True)
        assert runtime.alive() and runtime.pid == runtime_pid
        time.sleep(2)
        assert _phase(api, ns, "p1") == "Running"
        assert cluster.container_view(f"{ns}/p1", "main").cdi_devices == view.cdi_devices
        # and after a clean stop (SIGTERM) and start, the same
        cluster.stop_kubelet(node)
        cluster.restart_kubelet(node)
        assert runtime.pid == runtime_pid
        assert _phase(api, ns, "p1") == "Running"
        # run-seconds: the container exits 0, the pod Succeeds
        short = manifests.pod(
            ns,
            "p2",
            {"gpu": {"resourceClaimTemplateName": "one-gpu"}},
            annotations={"dra-conformance.io/run-seconds": "1"},
        )
        short["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        short["spec"]["restartPolicy"] = "Never"
        kube.core(api).create_namespaced_pod(ns, short)
        until(lambda: _phase(api, ns, "p2") == "Succeeded", timeout=90, what="p2 Succeeded")
        # the kubelet removes "<LogPath>*" with a container: the runtime must name a real log path, or
        # the kubelet would remove files of its working directory (the node root: its config)
        kube.core(api).delete_namespaced_pod("p2", ns, grace_period_seconds=0)
        until(lambda: "p2" not in _names(api, ns), timeout=60, what="p2 gone")
        root = cluster.local_nodes[node].root
        time.sleep(2)
        assert (root / "kubelet.yaml").exists() and (root / "kubelet.kubeconfig").exists()
        # an init container runs to completion before the app container starts
        init = manifests.pod(ns, "p4", {"gpu": {"resourceClaimTemplateName": "one-gpu"}})
        init["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        init["spec"]["initContainers"] = [{"name": "setup", "image": "registry.example/app:1"}]
        kube.core(api).create_namespaced_pod(ns, init)
        until(lambda: _phase(api, ns, "p4") == "Running", timeout=90, what="p4 (init container) Running")
        # the agent node beside it still runs claimed pods
        kube.core(api).create_namespace({"metadata": {"name": "beside"}})
        other = run_pod(api, "beside", "p3")
        assert other.spec.node_name in cluster.nodes()
    assert _host_state() == before, "a kubelet node changed the host"


def test_a_kubelet_whose_port_was_taken_starts_again_on_others(
    kubelet_settings: LocalSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A free port is released before the kubelet binds it; a cluster beside this one can take it
    first (CI lost a run so). The kubelet then exits with "address already in use", and the node
    starts it again on other ports instead of failing the cluster."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real = kubeletnode.write_kubelet_files
    ports: list[int] = []

    def first_port_taken(root: Path, **kwargs: Any) -> Path:
        if not ports:
            kwargs["port"] = taken.getsockname()[1]
        ports.append(kwargs["port"])
        return real(root, **kwargs)

    monkeypatch.setattr(kubeletnode, "write_kubelet_files", first_port_taken)
    settings = kubelet_settings.with_options(node_kind="kubelet", nodes=1)
    cluster = LocalCluster(settings)
    with taken, cluster.start():
        node = cluster.local_nodes["node-0"]
        assert node.kind == "kubelet"
        assert len(ports) == 2 and ports[1] != ports[0], ports
        assert f"port: {ports[1]}\n" in (node.root / "kubelet.yaml").read_text()
        assert "address already in use" in node.log_files["kubelet"].read_text()
