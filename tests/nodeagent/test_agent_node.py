"""The node agent's Node, Lease, ResourceSlice cleanup, command line and threads."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent import Agent
from nodeagent.errors import KubeError
from nodeagent.node import NodeHeartbeat
from nodeagent.settings import Settings, parse_args
from nodeagent.slices import SliceJanitor
from tests.nodeagent.fake_kube import FakeKube, make_claim, make_pod
from tests.nodeagent.fake_plugin import FakePlugin
from tests.polling import until

NODE = "node-a"


@pytest.fixture
def root() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(dir="/tmp", prefix="agt"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _slice(name: str, driver: str, node: str = NODE) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"driver": driver, "nodeName": node}}


def test_command_line_matches_the_documented_interface(root: Path) -> None:
    settings, _ = parse_args(
        ["--kubeconfig", "/k", "--node-name", NODE, "--root", str(root), "--k8s-version", "v1.36.3"]
    )
    assert settings.k8s_version == (1, 36)
    assert settings.slice_grace_seconds == 30
    assert settings.layout.checkpoint_path == root / "agent" / "checkpoint.json"
    assert settings.layout.registry_dir == root / "kubelet" / "plugins_registry"
    with pytest.raises(SystemExit):
        parse_args(["--node-name", NODE, "--root", str(root), "--k8s-version", "latest"])


def test_node_is_created_ready_and_its_lease_renewed(root: Path) -> None:
    kube = FakeKube()
    hb = NodeHeartbeat(Settings(node_name=NODE, root=root, labels={"zone": "z1"}), kube)
    hb.beat()
    node = kube.get_node(NODE)
    assert node is not None
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert node["metadata"]["labels"]["zone"] == "z1"
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["status"]["allocatable"]["pods"] == "110"
    lease = kube.get_lease("kube-node-lease", NODE)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == NODE
    assert lease["metadata"]["ownerReferences"][0]["uid"] == f"node-uid-{NODE}"
    first = lease["spec"]["renewTime"]
    time.sleep(0.01)
    hb.beat()
    assert (kube.get_lease("kube-node-lease", NODE) or {})["spec"]["renewTime"] > first


def test_slices_wiped_at_start_and_after_a_grace_unless_the_driver_returns(root: Path) -> None:
    kube = FakeKube()
    kube.add_slices(_slice("a", "d1"), _slice("b", "d2"), _slice("c", "d1", node="other"))
    up = {"d1": False, "d2": False}
    janitor = SliceJanitor(
        Settings(node_name=NODE, root=root, slice_grace_seconds=0.5), kube, lambda d: up[d]
    )
    janitor.wipe_all()
    assert kube.slice_names() == ["c"]
    kube.add_slices(_slice("a2", "d1"), _slice("b2", "d2"))
    janitor.driver_gone("d1")
    janitor.driver_gone("d2")
    up["d2"] = True  # d2 comes back well within its grace period, even on a loaded machine
    janitor.driver_registered("d2")
    until(lambda: len(kube.slice_names()) == 2)  # d1's grace ran out
    time.sleep(0.3)  # past d2's (cancelled) deadline as well
    assert sorted(kube.slice_names()) == ["b2", "c"]
    janitor.stop()


def test_agent_runs_and_tears_down_a_pod_on_its_threads(root: Path) -> None:
    settings = Settings(
        node_name=NODE, root=root, poll_seconds=0.05, resync_seconds=0.2, slice_grace_seconds=0.3
    )
    kube = FakeKube()
    kube.add_slices(_slice("stale", "gpu.example.com"))
    agent = Agent(settings, kube)
    plugin = FakePlugin(root)
    try:
        agent.start()
        assert kube.slice_names() == []
        assert kube.get_node(NODE) is not None
        plugin.start()
        (settings.layout.cdi_dir / "gpu.json").write_text(
            '{"cdiVersion": "0.6.0", "kind": "example.com/gpu",'
            ' "devices": [{"name": "dev-u1", "containerEdits": {"env": ["A=1"]}}]}'
        )
        kube.add_claim(make_claim("c1", "u1", reserved_for=("pod-1",)))
        kube.add_pod(make_pod("p1", "pod-1", claims={"g": "c1"}, containers={"a": [("g", None)]}))
        until(lambda: kube.phase("p1") == "Running")
        kube.request_delete("default", "p1")
        until(lambda: kube.deleted_pods == [("default", "p1", "pod-1")])
        assert plugin.unprepare_calls == [[("default", "u1", "c1")]]
        kube.add_slices(_slice("mine", "gpu.example.com"))
        plugin.stop()
        until(lambda: kube.slice_names() == [])  # deleted after the grace period
    finally:
        plugin.stop()
        agent.stop()
        kube.close()
    assert kube.get_node(NODE) is not None  # the Node is the cluster's: it stays


def _running_agent(root: Path, kube: FakeKube, **settings: Any) -> Agent:
    base: dict[str, Any] = {"node_name": NODE, "root": root, "poll_seconds": 0.05}
    agent = Agent(Settings(**{**base, **settings}), kube)
    agent.start()
    return agent


def _pod_per_driver(agent: Agent, kube: FakeKube, pods: dict[str, FakePlugin]) -> None:
    """Once every plugin registered: per pod name, a claim on that plugin's driver and the pod."""
    until(lambda: all(agent.plugins.registered(plugin.driver) for plugin in pods.values()))
    for i, (pod, plugin) in enumerate(pods.items(), 1):
        kube.add_claim(make_claim(f"c{i}", f"u{i}", drivers=(plugin.driver,), reserved_for=(f"pod-{i}",)))
        kube.add_pod(make_pod(pod, f"pod-{i}", claims={"g": f"c{i}"}))


def test_a_hanging_plugin_does_not_hold_up_other_pods(root: Path) -> None:
    kube = FakeKube()
    agent = _running_agent(
        root,
        kube,
        resync_seconds=0.2,
        grpc_timeout_seconds=1.0,
        retry_initial_seconds=0.1,
        retry_max_seconds=0.2,
    )
    stuck = FakePlugin(root, driver="stuck.example.com")
    fine = FakePlugin(root, driver="fine.example.com")
    try:
        stuck.start().hang.set()
        fine.start().fixed_devices = [{"request_names": [], "pool": "p", "device": "d", "cdi": []}]
        _pod_per_driver(agent, kube, {"stuck": stuck, "fine": fine})
        until(lambda: kube.phase("fine") == "Running")
        until(lambda: any("DEADLINE_EXCEEDED" in e["message"] for e in kube.events))
        assert kube.phase("stuck") == "Pending"
        stuck.hang.clear()
        until(lambda: kube.phase("stuck") == "Running")
    finally:
        stuck.stop()
        fine.stop()
        agent.stop()
        kube.close()


def test_a_plugin_answering_garbage_gives_an_event_and_other_pods_run(root: Path) -> None:
    kube = FakeKube()
    agent = _running_agent(root, kube, resync_seconds=0.2, retry_max_seconds=0.2)
    bad = FakePlugin(root, driver="bad.example.com")
    bad.garbage = b"\xff\xfe not a protobuf message"
    fine = FakePlugin(root, driver="fine.example.com")
    fine.fixed_devices = [{"request_names": [], "pool": "p", "device": "d", "cdi": []}]
    try:
        bad.start()
        fine.start()
        _pod_per_driver(agent, kube, {"bad": bad, "fine": fine})
        until(lambda: kube.phase("fine") == "Running")
        until(lambda: any(e["involvedObject"]["name"] == "bad" for e in kube.events))
        event = next(e for e in kube.events if e["involvedObject"]["name"] == "bad")
        assert event["reason"] == "FailedPrepareDynamicResources" and event["type"] == "Warning"
        assert "bad.example.com" in event["message"] and "default/c1" in event["message"], event
        assert kube.phase("bad") == "Pending"
        # the agent keeps serving: a claim that vanishes is named in an event too
        kube.add_claim(make_claim("c3", "u3", drivers=("fine.example.com",), reserved_for=("pod-3",)))
        kube.remove_claim("default", "c3")
        kube.add_pod(make_pod("orphan", "pod-3", claims={"g": "c3"}))
        until(lambda: any("default/c3 not found" in e["message"] for e in kube.events))
    finally:
        bad.stop()
        fine.stop()
        agent.stop()
        kube.close()


def test_watch_events_drive_the_pods_without_a_resync(root: Path) -> None:
    kube = FakeKube()
    agent = _running_agent(root, kube, resync_seconds=3600)
    plugin = FakePlugin(root, "gpu.example.com").start()
    try:
        assert agent.plugins.wait_for("gpu.example.com", 10)
        kube.add_claim(make_claim("c1", "u1", reserved_for=("pod-1",)))
        kube.add_pod(make_pod("p1", "pod-1", claims={"g": "c1"}))
        until(lambda: kube.phase("p1") == "Running")
        kube.request_delete("default", "p1")  # the MODIFIED event (deletionTimestamp) tears it down
        until(lambda: kube.deleted_pods == [("default", "p1", "pod-1")])
        assert kube.calls["list_pods"] == 1  # one list, then the watch carried everything
    finally:
        plugin.stop()
        agent.stop()
        kube.close()


def test_a_watch_from_a_compacted_version_is_gone_and_the_agent_relists(root: Path) -> None:
    kube = FakeKube()

    def others_write_and_history_is_compacted() -> None:  # between the first list and its watch
        kube.add_claim(make_claim("elsewhere", "u-x"))
        kube.compact()

    kube.before_next("watch_pods", others_write_and_history_is_compacted)
    agent = _running_agent(root, kube, resync_seconds=3600)
    try:
        until(lambda: kube.calls["list_pods"] >= 2, what="a relist after 410 Gone")
        kube.add_pod(make_pod("p1", "pod-1"))  # no claims: runs as soon as the agent sees it
        until(lambda: kube.phase("p1") == "Running")
    finally:
        agent.stop()
        kube.close()


def test_a_node_created_by_someone_else_meanwhile_is_taken_over(root: Path) -> None:
    kube = FakeKube()
    theirs = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "their-uid"}}
    kube.before_next("create_node", lambda: kube.put_node(theirs))  # after our get, before our create
    hb = NodeHeartbeat(Settings(node_name=NODE, root=root), kube)
    hb.beat()  # create answers 409: the node is read back and made Ready
    assert hb.node_uid == "their-uid"
    node = kube.get_node(NODE)
    assert node is not None
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"


def test_a_lease_written_by_someone_else_meanwhile_conflicts_and_the_next_beat_renews(root: Path) -> None:
    kube = FakeKube()
    hb = NodeHeartbeat(Settings(node_name=NODE, root=root), kube)
    hb.beat()
    kube.before_next("update_lease", lambda: kube.touch_lease("kube-node-lease", NODE))
    with pytest.raises(KubeError) as err:
        hb.beat()  # the heartbeat loop logs this and tries again on the next beat
    assert err.value.status == 409
    before = (kube.get_lease("kube-node-lease", NODE) or {})["metadata"]["resourceVersion"]
    hb.beat()
    assert (kube.get_lease("kube-node-lease", NODE) or {})["metadata"]["resourceVersion"] != before
