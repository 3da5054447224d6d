"""The pytest plugin's fixtures: the session cluster, namespaces, node leases, restarts, xdist sharing."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from pathlib import Path

import pytest

from clusters.base import Cluster
from clusters.errors import CapabilityMissing
from clusters.local.attached import AttachedLocalCluster
from clusters.local.binaries import Binaries
from clusters.local.settings import LocalSettings
from clusters.local.state import DaemonState
from clusters.pytest_plugin import ClusterSession, _holds_nothing
from tests import kube
from tests.clusters.e2e import run_pod, still_running
from tests.manifests import GPU_POD_CONTAINER, gpu_pod
from tests.polling import until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

pytest_plugins = ["pytester"]


def test_namespace_fixture_gives_a_usable_namespace(dra_cluster: Cluster, namespace: str) -> None:

    core = kube.core(dra_cluster.api_client())
    assert core.read_namespace(namespace).status.phase == "Active"
    assert core.read_namespaced_service_account("default", namespace).metadata.name == "default"


def test_a_namespace_is_left_to_a_disposable_cluster_only_when_it_holds_nothing(
    dra_cluster: Cluster, namespace: str
) -> None:
    """An empty namespace is left to a cluster that goes away with the run; one with a pod (or a
    claim) that is not on its way out is deleted as always, so nothing a test left keeps running or
    holding a device."""
    rest = dra_cluster.rest()
    assert _holds_nothing(rest, namespace)
    pod = run_pod(dra_cluster.api_client(), namespace)
    assert not _holds_nothing(rest, namespace), "a running pod and its claim"
    # a pod being deleted (its finalizer holds it) is no leftover: deleting the namespace asks again
    path = f"/api/v1/namespaces/{namespace}/pods/{pod.metadata.name}"
    rest.send(
        "PATCH",
        path,
        body={"metadata": {"finalizers": ["example.com/hold"]}},
        content_type="application/merge-patch+json",
    )
    rest.send("DELETE", path)
    assert rest.send("GET", path)["metadata"]["deletionTimestamp"]
    assert _holds_nothing(rest, namespace), "only a pod being deleted, and the claim it owns"
    rest.send(
        "PATCH", path, body={"metadata": {"finalizers": None}}, content_type="application/merge-patch+json"
    )
    owned = ClusterSession(LocalSettings(), Path("/nowhere"), True, 1)
    assert owned.disposable, "a cluster this session starts stops with it"
    attached = dataclasses.replace(owned, external=Path("/state"))
    assert not attached.disposable, "a cluster someone else started outlives the run"
    assert dataclasses.replace(attached, discarded=True).disposable, "--disposable-cluster"


def test_claim_survives_driver_and_kubelet_restarts(
    dra_cluster: Cluster, namespace: str, node_lease: str
) -> None:

    api = dra_cluster.api_client()
    pod = run_pod(api, namespace)
    node = pod.spec.node_name
    assert node in dra_cluster.nodes()
    before = dra_cluster.container_view(pod, GPU_POD_CONTAINER)
    assert before.cdi_devices
    if node != node_lease:
        pytest.skip(f"pod landed on {node}, the leased node is {node_lease}")
    dra_cluster.restart_driver(node)
    dra_cluster.restart_kubelet(node)
    if isinstance(dra_cluster, AttachedLocalCluster):
        dra_cluster.restart_driver(node, crash=True)
        dra_cluster.restart_kubelet(node, crash=True)
        # start_driver replaces the driver with a given command line (here: the same one)
        command = dra_cluster.state.nodes[node].driver_command
        old_pid = AttachedLocalCluster(dra_cluster.state_dir).state.nodes[node].driver_pid
        dra_cluster.start_driver(node, command)
        fresh = AttachedLocalCluster(dra_cluster.state_dir)
        assert fresh.state.nodes[node].driver_pid != old_pid
        assert fresh.status()["healthy"][f"driver-{node}"]
    slices = kube.resource(api).list_resource_slice(field_selector=f"spec.nodeName={node}").items
    assert slices, f"no ResourceSlices for {node} after the restarts"
    core = kube.core(api)
    assert core.read_namespaced_pod(pod.metadata.name, namespace).status.phase == "Running"
    assert dra_cluster.container_view(pod, GPU_POD_CONTAINER).cdi_devices == before.cdi_devices
    core.delete_namespaced_pod(pod.metadata.name, namespace)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not core.list_namespaced_pod(namespace).items:
            break
        time.sleep(0.25)
    assert not core.list_namespaced_pod(namespace).items, "pod stuck after delete"


def test_pod_created_while_the_kubelet_is_stopped_runs_once_it_is_back(
    dra_cluster: Cluster, namespace: str, node_lease: str
) -> None:
    api = dra_cluster.api_client()
    core = kube.core(api)
    template, pod = gpu_pod(namespace, "while-down")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_lease}
    kube.resource(api).create_namespaced_resource_claim_template(namespace, template)
    dra_cluster.stop_kubelet(node_lease)
    try:
        core.create_namespaced_pod(namespace, pod)
        until(
            lambda: core.read_namespaced_pod("while-down", namespace).spec.node_name == node_lease,
            60,
            "the pod scheduled while the kubelet is down",
            interval=0.2,
        )
        assert core.read_namespaced_pod("while-down", namespace).status.phase == "Pending"
    finally:
        dra_cluster.restart_kubelet(node_lease)
    until(
        lambda: core.read_namespaced_pod("while-down", namespace).status.phase == "Running",
        60,
        "the pod Running once the kubelet is back",
        interval=0.2,
    )
    core.delete_namespaced_pod("while-down", namespace)
    until(lambda: not core.list_namespaced_pod(namespace).items, 60, "the pod gone", interval=0.25)


def test_missing_capability_names_backend_and_capability() -> None:
    class Bare(Cluster):
        backend = "bare"

        @property
        def kubeconfig(self) -> Path:
            return Path("/dev/null")

        def nodes(self) -> list[str]:
            return []

        def stop(self) -> None:
            pass

    with pytest.raises(CapabilityMissing, match="'bare' cannot restart the kubelet"):
        Bare().restart_kubelet("n0")
    with pytest.raises(CapabilityMissing, match="'bare' cannot stop the kubelet"):
        Bare().stop_kubelet("n0")


def test_xdist_workers_share_one_cluster_that_stops_with_the_run(
    pytester: pytest.Pytester, local_binaries: Binaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        """
        import json, os, time
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_uses_cluster(dra_cluster, namespace, node_lease, i):
            held = [time.time()]
            time.sleep(0.5)  # hold the node a while: another worker must wait for it
            held.append(time.time())
            out = os.environ["DRAC_TEST_OUT"]
            with open(os.path.join(out, f"{i}.json"), "w") as f:
                json.dump(
                    {
                        "kubeconfig": str(dra_cluster.kubeconfig),
                        "state": dra_cluster.state.to_data(),
                        "namespace": namespace,
                        "lease": [node_lease, *held],
                    },
                    f,
                )
        """
    )
    out = pytester.path / "out"
    out.mkdir()
    monkeypatch.setenv("DRAC_TEST_OUT", str(out))
    # pytester points HOME elsewhere: name the binaries, or the run would look for its own
    monkeypatch.setenv("DRAC_BIN_DIR", str(local_binaries.directory))
    monkeypatch.setenv("DRAC_NO_BUILD", "1")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--cluster-nodes", "1")
    result.assert_outcomes(passed=4)
    seen = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert len({s["kubeconfig"] for s in seen}) == 1, "workers started more than one cluster"
    assert len({s["namespace"] for s in seen}) == 4, "tests shared a namespace"
    # one node: its lease is exclusive, so the tests held it one after another
    spans = sorted((start, end) for node, start, end in (s["lease"] for s in seen) if node == "node-0")
    assert len(spans) == 4
    assert all(prev_end <= start for (_, prev_end), (start, _) in itertools.pairwise(spans)), spans
    state = DaemonState.from_json(json.dumps(seen[0]["state"]), out / "0.json")
    alive = still_running(state.pids())  # exited children may wait a moment to be reaped
    assert not alive, f"processes left after the run: {alive}"
    assert not state.root.exists()


def test_a_crashed_run_leaves_nothing_behind(
    pytester: pytest.Pytester, local_binaries: Binaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal
    import subprocess
    import sys

    out = pytester.path / "state.json"
    pytester.makepyfile(
        f"""
        import json, time

        def test_hangs(dra_cluster):
            with open({str(out)!r}, "w") as f:
                f.write(dra_cluster.state.to_json())
            time.sleep(600)
        """
    )
    monkeypatch.setenv("DRAC_BIN_DIR", str(local_binaries.directory))
    monkeypatch.setenv("DRAC_NO_BUILD", "1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(pytester.path)],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert out.exists(), "the inner run never got its cluster"
        time.sleep(0.2)  # let the writer finish
        state = DaemonState.from_json(out.read_text(), out)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    alive = still_running(state.pids(), timeout=30)
    assert not alive, f"processes outlived the crashed run: {alive}"
    leftovers = [p for p in (state.root, state.state_dir) if p.exists()]
    assert not leftovers, f"files outlived the crashed run: {leftovers}"
