"""The local cluster's wait for its drivers to register: when it gives up it says what the sockets
answered instead; and with ``wait_registered`` off, a driver that never registers does not fail the
start (a suite judges registration itself); a companion NIC driver has published its slice once
the start returns."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

import pytest

from clusters.errors import NodeError
from clusters.local import cluster as cluster_module
from clusters.local.binaries import Binaries
from clusters.local.cluster import NIC_DRIVER, SLICES, LocalCluster
from clusters.local.driverproc import default_driver_command
from clusters.local.processes import ManagedProcess
from clusters.local.settings import LocalSettings

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(300)]

DRIVER = "gpu.dra-conformance.io"
OTHER = "other.dra-conformance.io"


def _settings(local_binaries: Binaries, command: list[str], **changes: object) -> LocalSettings:
    settings = LocalSettings(nodes=1, driver_name=DRIVER, driver_command=tuple(command), wait_slices=False)
    settings = settings.with_bin_dir(local_binaries.directory).with_version(local_binaries.version)
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]


def test_a_driver_registered_under_another_name_is_named_when_the_wait_gives_up(
    local_binaries: Binaries,
) -> None:
    command = [*default_driver_command(DRIVER), "--driver-name", OTHER]
    cluster = LocalCluster(_settings(local_binaries, command, ready_timeout=30.0))
    with pytest.raises(NodeError) as caught:
        cluster.start()
    message = str(caught.value)
    assert f"waiting for a registration socket of driver {DRIVER}" in message, message
    assert f"seen instead: {OTHER}-reg.sock answers {OTHER!r}" in message, message


def test_without_wait_registered_a_driver_that_never_registers_does_not_fail_the_start(
    local_binaries: Binaries,
) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    with LocalCluster(_settings(local_binaries, command, wait_registered=False)).start() as cluster:
        assert cluster.nodes() == ["node-0"]


class _LateNic(ManagedProcess):
    """A ManagedProcess whose NIC driver starts 3 s late (later than the driver under test registers)."""

    def __init__(self, name: str, argv: Sequence[str], *args: Any, **kwargs: Any) -> None:
        late = ["sh", "-c", 'sleep 3; exec "$@"', "sh", *argv] if name.startswith("nic-") else argv
        super().__init__(name, late, *args, **kwargs)


def test_the_companion_nic_driver_has_published_its_slice_when_the_start_returns(
    local_binaries: Binaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_module, "ManagedProcess", _LateNic)
    settings = _settings(local_binaries, default_driver_command(DRIVER), nic_driver=True)
    with LocalCluster(settings).start() as cluster:
        assert cluster.companion_drivers() == {NIC_DRIVER}
        listed = cluster.rest().send("GET", SLICES, query={"fieldSelector": f"spec.driver={NIC_DRIVER}"})
        assert [s["spec"]["nodeName"] for s in listed["items"]] == ["node-0"]


def test_a_driver_that_dies_at_start_stops_the_start_with_its_binary_cause_and_first_lines(
    local_binaries: Binaries, tmp_path: Any
) -> None:
    binary = tmp_path / "gpu-kubelet-plugin"
    binary.write_text(
        '#!/bin/sh\necho "I1205 12:00:00.000 main.go:1] starting"\n'
        'echo \'panic: could not parse "unknown" as version\'\necho\necho "goroutine 1 [running]:"\nexit 2\n'
    )
    binary.chmod(0o755)
    settings = _settings(local_binaries, ["env", "NODE_NAME={node}", str(binary)], wait_registered=False)
    with pytest.raises(NodeError) as caught:
        LocalCluster(settings).start()
    message = str(caught.value)
    assert f"the driver on node-0 ({binary}) exited with status 2" in message, message
    assert 'before it registered: panic: could not parse "unknown" as version' in message, message
    assert "  | I1205 12:00:00.000 main.go:1] starting" in message, message
    # found within the start check, not after a registration timeout
    seconds = float(message.split("status 2 ")[1].split(" s after", maxsplit=1)[0])
    assert seconds < cluster_module.DRIVER_START_CHECK, message
