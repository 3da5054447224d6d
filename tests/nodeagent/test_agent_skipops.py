"""Optional node operations (DRAOptionalNodeOperations): the node agent leaves out the calls that
every device of a driver in a claim skips, as the kubelet 1.37.2 does (claiminfo.go
computeDriverStates, manager.go prepareResources/unprepareResources); real gRPC to a plugin."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.checkpoint import Checkpoint
from nodeagent.errors import PrepareError
from nodeagent.manager import ClaimManager
from nodeagent.node import NodeHeartbeat
from nodeagent.plugins import PluginManager
from nodeagent.settings import Settings, parse_args
from nodeagent.skipops import ALL, PREPARE, UNPREPARE, driver_skips, skips
from tests.nodeagent.fake_kube import FakeKube
from tests.nodeagent.fake_plugin import FakePlugin

GPU = "gpu.example.com"
NIC = "nic.example.com"
BOTH = [PREPARE, UNPREPARE]


def _claim(*results: tuple[str, list[str]], uid: str = "u1") -> dict[str, Any]:
    """An allocated claim whose results are (driver, skipNodeOperations)."""
    entries = [
        {
            "request": "r",
            "driver": d,
            "pool": "p",
            "device": f"dev-{i}",
            **({"skipNodeOperations": ops} if ops else {}),
        }
        for i, (d, ops) in enumerate(results)
    ]
    return {
        "metadata": {"name": f"claim-{uid}", "namespace": "ns", "uid": uid},
        "status": {"allocation": {"devices": {"results": entries}}},
    }


@pytest.mark.parametrize(
    ("results", "want"),
    [
        # every result of the driver says *: both skipped, as "*"
        ([(GPU, [ALL]), (GPU, [ALL])], {GPU: [ALL]}),
        # * and both operations named: each operation counted with the *s, "*" itself not kept
        ([(GPU, [ALL]), (GPU, BOTH)], {GPU: BOTH}),
        # one device of the driver needs its prepare: nothing skipped for the driver
        ([(GPU, [ALL]), (GPU, [])], {}),
        # only the operation every result names
        ([(GPU, BOTH), (GPU, [UNPREPARE])], {GPU: [UNPREPARE]}),
        ([(GPU, [UNPREPARE]), (GPU, [ALL])], {GPU: [UNPREPARE]}),
        # per driver: the other driver's devices do not count
        ([(GPU, [ALL]), (NIC, [])], {GPU: [ALL]}),
        ([], {}),
    ],
)
def test_skipped_operations_per_driver_as_the_kubelet_computes_them(
    results: list[tuple[str, list[str]]], want: dict[str, list[str]]
) -> None:
    assert driver_skips(_claim(*results), enabled=True) == want


def test_with_the_gate_off_a_claim_that_skips_is_refused() -> None:
    with pytest.raises(PrepareError, match="ResourceClaim claim-u1: DRAOptionalNodeOperations feature gate"):
        driver_skips(_claim((GPU, [ALL])), enabled=False)
    assert driver_skips(_claim((GPU, [ALL]), (GPU, [])), enabled=False) == {}  # nothing skipped: taken
    assert skips([ALL], PREPARE) and skips([UNPREPARE], UNPREPARE) and not skips([UNPREPARE], PREPARE)


@pytest.fixture
def root() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(dir="/tmp", prefix="agt"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def gpu(root: Path) -> Iterator[tuple[PluginManager, FakePlugin]]:
    """The GPU driver's plugin registered with a plugin manager; the NIC driver is not registered."""
    plugins = PluginManager(Settings(node_name="node-a", root=root, poll_seconds=0.05))
    plugins.start()
    plugin = FakePlugin(root, GPU).start()
    assert plugins.wait_for(GPU, 30)
    yield plugins, plugin
    plugin.stop()
    plugins.stop()


def test_a_driver_whose_devices_skip_both_is_never_called_nor_looked_up(
    root: Path, gpu: tuple[PluginManager, FakePlugin]
) -> None:
    plugins, plugin = gpu
    manager = ClaimManager("node-a", plugins, Checkpoint(root / "checkpoint.json"))
    claim = _claim((GPU, []), (NIC, [ALL]))  # NIC is not registered: a call would fail
    devices = manager.prepare_pod("ns", "pod-1", [claim])
    assert [d.driver for d in devices["u1"]] == [GPU]
    assert plugin.prepare_calls == [[("ns", "u1", "claim-u1")]]
    info = Checkpoint(root / "checkpoint.json").get("u1")  # what a restarted agent reads
    assert info is not None and info.skips == {NIC: [ALL]}
    manager.release_pod("pod-1", holds=lambda _: False)
    assert plugin.unprepare_calls == [[("ns", "u1", "claim-u1")]]
    assert manager.checkpoint.get("u1") is None


def test_a_skipped_prepare_still_owes_the_unprepare(
    root: Path, gpu: tuple[PluginManager, FakePlugin]
) -> None:
    plugins, plugin = gpu
    manager = ClaimManager("node-a", plugins, Checkpoint(root / "checkpoint.json"))
    # NodePrepareResources may only be skipped with NodeUnprepareResources (API validation), but
    # the kubelet computes each operation alone: here only the unprepare is skipped by all
    claim = _claim((GPU, [UNPREPARE]), (GPU, BOTH))
    assert [d.device for d in manager.prepare_pod("ns", "pod-1", [claim])["u1"]] == ["gpu-0"]
    assert plugin.prepare_calls == [[("ns", "u1", "claim-u1")]]
    manager.release_pod("pod-1", holds=lambda _: False)
    assert plugin.unprepare_calls == []
    assert manager.checkpoint.get("u1") is None


def test_an_orphan_whose_unprepare_is_skipped_is_forgotten_without_its_driver(root: Path) -> None:
    path = root / "checkpoint.json"
    plugins = PluginManager(Settings(node_name="node-a", root=root, poll_seconds=0.05))  # none registered
    first = ClaimManager("node-a", plugins, Checkpoint(path))
    assert first.prepare_pod("ns", "pod-1", [_claim((NIC, [ALL]))]) == {"u1": []}
    again = ClaimManager("node-a", plugins, Checkpoint(path))  # the agent restarted, the pod is gone
    again.sweep(live=set())
    assert again.checkpoint.get("u1") is None
    # one that owes its unprepare waits for its driver
    first.prepare_pod("ns", "pod-2", [_claim((NIC, [PREPARE]), uid="u2")])
    ClaimManager("node-a", plugins, Checkpoint(path)).sweep(live=set())
    assert Checkpoint(path).get("u2") is not None


def test_with_the_gate_off_the_pod_is_refused_before_any_call(
    root: Path, gpu: tuple[PluginManager, FakePlugin]
) -> None:
    plugins, plugin = gpu
    manager = ClaimManager(
        "node-a", plugins, Checkpoint(root / "checkpoint.json"), optional_node_operations=False
    )
    good, skipping = _claim((GPU, [])), _claim((GPU, [ALL]), uid="u2")
    with pytest.raises(PrepareError, match="feature gate is disabled on kubelet"):
        manager.prepare_pod("ns", "pod-1", [good, skipping])
    assert plugin.prepare_calls == [] and manager.checkpoint.claims() == []


@pytest.mark.parametrize(
    ("argv", "declared"),
    [
        ([], ["DRANodeAllocatableResources", "DRAOptionalNodeOperations"]),
        (["--no-optional-node-operations"], ["DRANodeAllocatableResources"]),
        (["--no-optional-node-operations", "--no-node-allocatable-resources"], None),
        (["--k8s-version", "1.36"], None),  # no such gates before 1.37
    ],
)
def test_the_node_declares_the_feature_where_the_gate_is_on(
    root: Path, argv: list[str], declared: list[str] | None
) -> None:
    settings, _ = parse_args(["--node-name", "node-a", "--root", str(root), *argv])
    kube = FakeKube()
    NodeHeartbeat(settings, kube).beat()
    node = kube.get_node("node-a")
    assert node is not None
    assert node["status"].get("declaredFeatures") == declared
