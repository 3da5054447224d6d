"""What a container of a kind or k3s cluster saw (:meth:`clusters.incluster.InCluster.container_view`)
when it can no longer be exec'd: an init container that ran ``sh -c env`` and exited (SHARE-INIT and
ALLOC-EXTENDED-INIT on a live kind cluster), seen through its log. With a recorded fake ``kubectl``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusters.errors import DriverDeployError, ToolError
from clusters.incluster import InCluster, parse_view
from clusters.release import DriverPods
from tests.clusters.fakebin import FakeBin

SPECS = [
    {
        "kind": "gpu.example.com/gpu",
        "devices": [
            {"name": "c1-gpu0", "containerEdits": {"env": ["GPU_DEVICE_0=GPU-a"]}},
            {"name": "c1-gpu1", "containerEdits": {"env": ["GPU_DEVICE_1=GPU-b"]}},
            {"name": "c1-node", "containerEdits": {"deviceNodes": [{"path": "/dev/x"}]}},
        ],
    }
]


def _incluster(tmp_path: Path, fake: FakeBin) -> InCluster:
    return InCluster(tmp_path / "kubeconfig", DriverPods("drivers", "app=d"), kubectl=fake.dir / "kubectl")


def test_an_exited_init_container_is_seen_through_its_log(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=["kubectl"])
    fake.on(
        "kubectl", "exec", rc=1, stderr='error: unable to upgrade connection: container not found ("init")\n'
    )
    fake.on("kubectl", "logs", stdout="GPU_DEVICE_0=GPU-a\nHOME=/root\n")
    view = _incluster(tmp_path, fake).container_view("t/p", "init", SPECS)
    assert view.cdi_devices == ["gpu.example.com/gpu=c1-gpu0"]  # the node-only device is not judged
    assert view.env["GPU_DEVICE_0"] == "GPU-a" and view.device_nodes == []
    (logs,) = [a for a in fake.argvs("kubectl") if "logs" in a]
    assert logs[logs.index("logs") :] == ["logs", "-n", "t", "p", "-c", "init"]


def test_another_exec_failure_is_not_taken_for_an_exited_container(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=["kubectl"])
    fake.on("kubectl", "exec", rc=1, stderr='error: pods "p" not found\n')
    with pytest.raises(ToolError, match="not found"):
        _incluster(tmp_path, fake).container_view("t/p", "app", SPECS)
    assert not [a for a in fake.argvs("kubectl") if "logs" in a]


def test_parse_view_without_device_nodes_counts_env_alone() -> None:
    assert parse_view("GPU_DEVICE_1=GPU-b\n", "", "", SPECS).cdi_devices == ["gpu.example.com/gpu=c1-gpu1"]
    env_only = parse_view("GPU_DEVICE_1=GPU-b\n", "", "", SPECS, nodes_seen=False)
    assert env_only.cdi_devices == ["gpu.example.com/gpu=c1-gpu1"]
    assert parse_view("", "", "", SPECS, nodes_seen=False).cdi_devices == []


class _Scripted(InCluster):
    """An InCluster whose kubectl answers from a script: the driver pod's states, one per call."""

    def __init__(self, tmp_path: Path, states: list[tuple[str, int, bool]]) -> None:
        super().__init__(
            tmp_path / "kc", DriverPods("drivers", "app=d", "driver"), kubectl=tmp_path / "kubectl"
        )
        self.states = states
        self.calls: list[tuple[str, ...]] = []

    def kubectl(self, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        self.calls.append(args)
        if "--field-selector" in args:
            return json.dumps(
                {"items": [{"metadata": {"name": "d-1", "uid": "u"}, "status": {"phase": "Running"}}]}
            )
        cid, restarts, ready = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        state: dict[str, object] = {"running": {}} if cid else {"waiting": {}}
        status = {
            "name": "driver",
            "containerID": cid,
            "restartCount": restarts,
            "ready": ready,
            "state": state,
        }
        return json.dumps({"status": {"containerStatuses": [{"name": "sidecar"}, status]}})


def test_a_crash_kills_the_container_and_waits_for_it_to_run_again_in_the_same_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("clusters.incluster.time.sleep", lambda _: None)
    cluster = _Scripted(
        tmp_path,
        [
            ("containerd://abc", 0, True),
            ("", 0, False),
            ("containerd://def", 1, False),
            ("containerd://def", 1, True),
        ],
    )
    killed: list[str] = []
    cluster.crash_driver("n1", killed.append)
    assert killed == ["abc"] and cluster.states == [("containerd://def", 1, True)]
    assert not [c for c in cluster.calls if "delete" in c]  # the pod stays: a crash, not a deletion


def test_a_crashed_driver_that_does_not_come_back_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("clusters.incluster.time.sleep", lambda _: None)
    cluster = _Scripted(tmp_path, [("containerd://abc", 0, True), ("", 0, False)])
    with pytest.raises(DriverDeployError, match="not running and ready again"):
        cluster.crash_driver("n1", lambda _: None, timeout=0.0)


def test_an_exec_whose_output_kubectl_lost_is_tried_again(tmp_path: Path) -> None:
    fake = FakeBin(tmp_path / "bin", tools=["kubectl"])
    fake.first("kubectl", "exec", rc=1)  # replaced below by a rule with stderr
    fake = FakeBin(tmp_path / "bin2", tools=["kubectl"])
    fake.on(
        "kubectl",
        "exec",
        "env",
        rc=1,
        stderr="E1205 websocket.go:296] Unknown stream id 1, discarding message\n",
    )
    with pytest.raises(ToolError, match="Unknown stream id"):
        _incluster(tmp_path, fake).container_view("t/p", "ctr", SPECS)
    assert len([a for a in fake.argvs("kubectl") if "exec" in a]) == 3  # tried, then given up
