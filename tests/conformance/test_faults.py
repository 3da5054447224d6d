"""Fault commands filled in for a device and run, the values a backend gives them, the need for a
healable fault; the health stream read as the kubelet reads it."""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusters import Cluster
from clusters.errors import CapabilityMissing
from clusters.local.attached import AttachedLocalCluster
from conformance.catalogue import by_id
from conformance.harness import (
    Environment,
    FaultCommandFailed,
    FaultCommands,
    HealthStream,
    WaitTimeout,
    choose_version,
    missing,
)
from conformance.profiles import load
from draproto import health_v1_pb2_grpc
from driver.healthstream import HEALTHY, UNHEALTHY, DeviceHealth, HealthServiceV1, StaticHealth
from tests.clusters.statekit import made_up_state

DRIVER = "gpu.dra-conformance.io"


class Remote(Cluster):
    """A backend that knows a node's name and kubeconfig only."""

    backend = "remote"

    @property
    def kubeconfig(self) -> Path:
        return Path("/etc/kube config")

    def nodes(self) -> list[str]:
        return ["n0"]

    def stop(self) -> None:
        pass


class Local(Remote):
    """A backend that also knows the node's root dir (as the local tier)."""

    backend = "local"

    def node_values(self, node: str) -> dict[str, str]:
        return {**super().node_values(node), "root": f"/tmp/roots/{node}"}


def _device(name: str = "gpu-3", **attributes: Any) -> dict[str, Any]:
    attrs = {"uuid": "GPU-3", "index": 3, **attributes}
    return {
        "name": name,
        "attributes": {k: ({"int": v} if isinstance(v, int) else {"string": v}) for k, v in attrs.items()},
    }


def test_a_fault_is_filled_in_then_becomes_words_of_the_inject_command() -> None:
    """reference-l4: its faults name the device by its unique attribute, the UUID."""
    commands = FaultCommands(Local(), load("reference-l4"), "n0")
    argv = commands.command("inject", _device(), "ecc {unique} double")
    fakegpu = [sys.executable, "-m", "fakegpu", "--state-dir", "/tmp/roots/n0/gpus"]
    assert argv == [*fakegpu, "inject", "ecc", "GPU-3", "double"]
    assert commands.command("heal", _device()) == [*fakegpu, "heal", "GPU-3"]


def test_device_values_and_attributes_stay_one_word() -> None:
    commands = FaultCommands(Local(), load("reference-mig"), "n0")
    assert commands.fault("xid {attr:index} 48", _device()) == "xid 3 48"
    values = commands.values(_device("gpu-3-part-1g10gb-0"))
    assert values["unique"] == "gpu-3-part-1g10gb-0"  # reference-mig: unique is the name
    assert values["node"] == "n0" and values["driver"] == DRIVER
    assert values["kubeconfig"] == "/etc/kube config"
    spaced = commands.fault("tool {kubeconfig} {attr:uuid}", _device(uuid="GPU 3"))
    assert spaced == "tool '/etc/kube config' 'GPU 3'"


def test_a_placeholder_the_backend_cannot_fill_is_a_missing_capability() -> None:
    commands = FaultCommands(Remote(), load("reference-gpu"), "n0")
    with pytest.raises(
        CapabilityMissing, match=r"'remote' cannot fill \{root\} in the profile's faults.inject"
    ):
        commands.command("inject", _device(), "lost {unique}")


def test_a_device_without_the_attribute_fails_naming_it() -> None:
    commands = FaultCommands(Local(), load("reference-mig"), "n0")
    with pytest.raises(FaultCommandFailed, match="gpu-3 of n0 has no attribute 'parentUUID'"):
        commands.fault("lost {attr:parentUUID}", _device())


def test_a_failing_command_fails_with_its_output() -> None:
    commands = FaultCommands(Local(), load("reference-gpu"), "n0")
    commands.run([sys.executable, "-c", "pass"])
    with pytest.raises(FaultCommandFailed, match=r"exited 3: .* output: broken GPU"):
        commands.run([sys.executable, "-c", "import sys; print('broken GPU'); sys.exit(3)"])
    with pytest.raises(FaultCommandFailed, match=r"did not finish in 0 s"):
        commands.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)
    with pytest.raises(FaultCommandFailed, match="could not start"):
        commands.run(["/no/such/tool"])


def test_health_version_prefers_v1() -> None:
    assert choose_version(["v1.DRAPlugin", "v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"]) == (
        "v1.DRAResourceHealth"
    )
    assert choose_version(["v1alpha1.DRAResourceHealth"]) == "v1alpha1.DRAResourceHealth"
    assert choose_version(["v1.DRAPlugin"]) is None


@pytest.fixture
def served() -> Iterator[tuple[str, StaticHealth, threading.Event]]:
    """A health stream served on a unix socket by the reference driver's service, over states set
    by hand; (socket, states, stop)."""
    states = StaticHealth({"gpu-0": DeviceHealth(HEALTHY), "gpu-1": DeviceHealth(HEALTHY)})
    stopping = threading.Event()
    with tempfile.TemporaryDirectory(prefix="drac-h-") as root:
        socket = f"{root}/dra.sock"
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
            HealthServiceV1(states, "n0", stopping, resend_seconds=60), server
        )
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        try:
            yield socket, states, stopping
        finally:
            stopping.set()
            server.stop(0)


def test_the_stream_wakes_a_waiter_on_each_message(served: tuple[str, StaticHealth, threading.Event]) -> None:
    socket, states, _ = served
    with HealthStream(socket, "v1.DRAResourceHealth") as stream:
        first, report = stream.wait("a listing", lambda r: r if r.devices else None, 30)
        assert report.health("n0", "gpu-0") == "Healthy" and report.health("n0", "gpu-9") == "absent"
        states.set("gpu-1", UNHEALTHY, "XID 48")
        index, report = stream.wait(
            "gpu-1 Unhealthy", lambda r: r if r.unhealthy("n0") else None, 30, after=first + 1
        )
        assert report.unhealthy("n0") == ["gpu-1"] and report.unhealthy() == ["n0/gpu-1"]
        assert (
            stream.never(
                "gpu-0 unhealthy", lambda r: r.health("n0", "gpu-0") == "Unhealthy", 0.2, after=index
            )
            is None
        )
        with pytest.raises(WaitTimeout, match=r"timed out after 0 s waiting for gpu-0 Unhealthy on the v1"):
            stream.wait("gpu-0 Unhealthy", lambda r: r.health("n0", "gpu-0") == "Unhealthy", 0.2)


def test_a_stream_that_ends_says_so(served: tuple[str, StaticHealth, threading.Event]) -> None:
    socket, _, stopping = served
    with HealthStream(socket, "v1.DRAResourceHealth") as stream:
        stream.wait("a listing", lambda r: r if r.devices else None, 30)
        stopping.set()  # the driver ends every stream
        with pytest.raises(WaitTimeout, match="the driver ended the stream while waiting for more"):
            stream.wait("more", lambda r: None, 30)


def test_a_missing_service_fails_the_wait() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="drac-h-") as root,
        HealthStream(f"{root}/none.sock", "v1alpha1.DRAResourceHealth") as stream,
        pytest.raises(WaitTimeout, match=r"the stream failed: StatusCode\.UNAVAILABLE"),
    ):
        stream.wait("a listing", lambda r: r, 30)


def test_fault_rules_need_a_healable_fault() -> None:
    profile = load("reference-gpu")
    env = Environment(profile, "local", frozenset({"grpc"}), 37, "v1.37.2", ("DeviceTaintRule",))
    assert missing(by_id("HEALTH-RECOVER"), env) is None
    unhealable = replace(profile, faults=replace(profile.faults, healable=()))
    reason = missing(by_id("HEALTH-RECOVER"), replace(env, profile=unhealable))
    assert reason == (
        "profile reference-gpu does not say how to make a device unhealthy and heal it "
        "(faults.inject, heal, healable)"
    )


def test_the_local_tier_gives_the_node_root(tmp_path: Path) -> None:
    state = made_up_state(tmp_path)
    cluster = AttachedLocalCluster(tmp_path, state)
    assert cluster.node_values("node-0") == {
        "node": "node-0",
        "kubeconfig": str(tmp_path / "root" / "kubeconfig"),
        "root": str(tmp_path / "root" / "n0"),
    }
