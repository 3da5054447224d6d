"""``dra-conformance cluster up|status|down`` and an end-to-end claim on the cluster it starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.errors import ClusterError
from clusters.local import daemon
from clusters.local.attached import AttachedLocalCluster
from clusters.local.binaries import Binaries
from tests import kube
from tests.clusters.e2e import run_pod, running, still_running
from tests.manifests import GPU_POD_CONTAINER
from tests.procs import interruptible

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusters.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def state_dir(local_binaries: Binaries) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="drac-cli-") as tmp:
        yield Path(tmp)
        daemon.shutdown(Path(tmp))  # in case a test failed before 'down'


def test_status_without_a_cluster_says_so(tmp_path: Path) -> None:
    result = _cli("cluster", "status", "--state-dir", str(tmp_path / "none"))
    assert result.returncode == 1
    assert "no cluster running" in result.stderr


def test_up_status_claim_down(state_dir: Path, local_binaries: Binaries, tmp_path: Path) -> None:
    up = _cli(
        "cluster",
        "up",
        "--state-dir",
        str(state_dir),
        "--nodes",
        "2",
        "--bin-dir",
        str(local_binaries.directory),
    )
    assert up.returncode == 0, up.stderr
    exports = [line for line in up.stdout.splitlines() if line.startswith("export KUBECONFIG=")]
    assert len(exports) == 1, up.stdout
    kubeconfig = Path(exports[0].removeprefix("export KUBECONFIG="))
    assert kubeconfig.is_absolute() and kubeconfig.exists() and " " not in str(kubeconfig)

    status = _cli("cluster", "status", "--state-dir", str(state_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    for name in ("etcd", "kube-apiserver", "agent-node-0", "driver-node-1"):
        assert name in status.stdout

    again = _cli("cluster", "up", "--state-dir", str(state_dir))
    assert again.returncode == 0
    assert exports[0] in again.stdout.splitlines()

    # a control-plane component that exits is started again by the daemon, as a kubelet restarts
    # its static pods (the pod below needs kube-controller-manager to make its claim)
    before = daemon.read_state(state_dir)
    assert before is not None
    gone = before.control_plane["kube-controller-manager"]
    assert gone is not None
    os.kill(gone, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = daemon.read_state(state_dir)
        if now is not None and now.control_plane["kube-controller-manager"] not in (gone, None):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the daemon did not start kube-controller-manager again in 60 s")
    said = (state_dir / daemon.LOG_FILE).read_text()
    assert "kube-controller-manager exited (code -9); starting it again" in said, said[-2000:]

    cluster = AttachedLocalCluster(state_dir)
    state = cluster.state
    try:
        api = cluster.api_client()
        slices = kube.resource(api).list_resource_slice().items
        assert {s.spec.node_name for s in slices} == {"node-0", "node-1"}
        kube.core(api).create_namespace({"metadata": {"name": "e2e"}})
        pod = run_pod(api, "e2e")
        claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
        claim = kube.resource(api).read_namespaced_resource_claim(claim_name, "e2e")
        assert claim.status.allocation is not None
        assert [r.uid for r in claim.status.reserved_for] == [pod.metadata.uid]
        view = cluster.container_view("e2e/p1", GPU_POD_CONTAINER)
        assert len(view.cdi_devices) == 1
        assert any(k.startswith("GPU_DEVICE") for k in view.env)
    finally:
        cluster.stop()

    # a test run can use this cluster instead of starting its own, and leaves it running
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_inner.py").write_text(
        "def test_uses_the_running_cluster(dra_cluster, namespace):\n"
        f"    assert str(dra_cluster.kubeconfig) == {str(kubeconfig)!r}\n"
        "    assert dra_cluster.nodes() == ['node-0', 'node-1']\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--cluster-state-dir={state_dir}"],
        cwd=inner,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert daemon.read_state(state_dir) is not None, "the inner run stopped a cluster it did not start"

    # a request that breaks inside the daemon is answered with the error; the cluster stays up
    with pytest.raises(ClusterError, match="TypeError"):
        daemon.request(state_dir, "start_driver", node="node-0", command=5)
    with pytest.raises(ClusterError, match="unknown node 'node-9'"):
        daemon.request(state_dir, "restart_driver", node="node-9")
    assert all(daemon.request(state_dir, "status")["healthy"].values())

    down = _cli("cluster", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0
    assert not still_running(state.pids())
    assert not state.root.exists()
    assert "no cluster running" in _cli("cluster", "down", "--state-dir", str(state_dir)).stderr


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and running(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_ctrl_c_during_up_leaves_nothing(tmp_path: Path, local_binaries: Binaries) -> None:
    state = tmp_path / "state"
    with interruptible():
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "clusters.cli",
                "cluster",
                "up",
                "--state-dir",
                str(state),
                "--bin-dir",
                str(local_binaries.directory),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        log = state / "daemon.log"
        deadline = time.monotonic() + 60
        root = None
        while root is None and time.monotonic() < deadline:
            match = re.search(r"in (/\S+/d\w{4})\b", log.read_text() if log.exists() else "")
            root = match.group(1) if match else None
            time.sleep(0.05)
        assert root is not None, "the daemon never said where the cluster goes"
        up.send_signal(signal.SIGINT)
        _out, err = up.communicate(timeout=90)
        assert up.returncode == 130, err
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    deadline = time.monotonic() + 10
    while (_processes_mentioning(root) or _processes_mentioning(str(state))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_mentioning(root) == []
    assert _processes_mentioning(str(state)) == []
    assert daemon.read_state(state) is None


def test_up_with_broken_binaries_fails_clearly(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        (bin_dir / name).write_text('#!/bin/sh\necho "broken $0" >&2\nexit 3\n')
        (bin_dir / name).chmod(0o755)
    state = tmp_path / "state"
    up = _cli("cluster", "up", "--state-dir", str(state), "--bin-dir", str(bin_dir), timeout=120)
    assert up.returncode == 1
    assert "did not start" in up.stderr
    assert "export KUBECONFIG" not in up.stdout
    assert daemon.read_state(state) is None
    assert _processes_mentioning(str(state)) == []
