"""A kept local cluster (``run --keep-cluster``): found again by the next run, reused when it fits,
replaced, saying why, when it does not; real daemons, real control planes."""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.local import daemon, kept
from clusters.local.attached import AttachedLocalCluster
from clusters.local.binaries import Binaries
from clusters.local.driverproc import default_driver_command
from clusters.local.settings import LocalSettings


@pytest.fixture
def state_home(tmp_path: Path) -> Iterator[Path]:
    """Where the kept cluster's state dir goes; its cluster is stopped at the end."""
    try:
        yield tmp_path
    finally:
        daemon.shutdown(kept.kept_dir(_settings(tmp_path)))


def _settings(state_home: Path, binaries: Binaries | None = None) -> LocalSettings:
    settings = dataclasses.replace(LocalSettings(), state_dir=state_home / "cluster", wait_slices=False)
    if binaries is not None:
        settings = settings.with_bin_dir(binaries.directory).with_version(binaries.version)
    return settings


def test_differences_name_what_the_kept_cluster_was_made_with() -> None:
    kept_settings = LocalSettings(nodes=2).with_version("1.36.4")
    wanted = dataclasses.replace(LocalSettings(nodes=4).with_version("1.37.2"), driver_command=("other",))
    assert kept.differences(kept_settings, wanted) == ["k8s_version '1.36.4' -> '1.37.2'", "nodes 2 -> 4"]
    assert kept.differences(kept_settings, dataclasses.replace(kept_settings, ready_timeout=1.0)) == []


def test_the_kept_dir_is_beside_the_state_dir_of_cluster_up(tmp_path: Path) -> None:
    assert kept.kept_dir(_settings(tmp_path)) == tmp_path / "kept"


def test_no_kept_cluster_means_a_new_one_silently(tmp_path: Path) -> None:
    said: list[str] = []
    assert kept.reuse(_settings(tmp_path), said.append) is None
    assert said == []


def test_a_kept_cluster_whose_daemon_died_is_not_reused_and_says_so(tmp_path: Path) -> None:
    directory = kept.kept_dir(_settings(tmp_path))
    directory.mkdir()
    (directory / daemon.SETTINGS_FILE).write_text(daemon.settings_to_json(_settings(tmp_path)))
    (directory / daemon.STATE_FILE).write_text('{"ready": true, "daemon_pid": 999999999}')
    said: list[str] = []
    assert kept.reuse(_settings(tmp_path), said.append) is None
    assert said == [
        f"the kept cluster in {directory} is not running (its daemon is gone): starting a new one"
    ]
    assert not directory.exists()  # nothing stale is left for the new one to trip over


def _driver_pids(directory: Path) -> dict[str, int]:
    state = daemon.read_state(directory)
    assert state is not None
    return {name: node.driver_pid for name, node in state.nodes.items() if node.driver_pid is not None}


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_kept_cluster_is_reused_with_new_drivers_then_replaced_when_it_does_not_fit(
    state_home: Path, local_binaries: Binaries
) -> None:
    """Same settings, drivers never noted: the same control plane, every driver a new process (a new
    driver pod), saying why; another node count: one line says so, and the kept cluster is stopped."""
    settings = _settings(state_home, local_binaries)
    directory = kept.kept_dir(settings)
    first = daemon.launch(settings, directory)
    before = AttachedLocalCluster(directory, first).status()["healthy"]

    said: list[str] = []
    again = kept.reuse(settings, said.append)
    assert again is not None, said
    assert said == ["replacing the kept cluster's drivers: nothing noted of them at their start"]
    assert again.daemon_pid == first.daemon_pid and again.kubeconfig == first.kubeconfig
    state = daemon.read_state(directory)
    assert state is not None
    assert state.control_plane == first.control_plane  # the same processes
    drivers = _driver_pids(directory)
    assert all(pid != first.nodes[name].driver_pid for name, pid in drivers.items()), drivers
    assert again.nodes == state.nodes  # what reuse returns names the new drivers
    assert AttachedLocalCluster(directory, state).status()["healthy"] == before  # every process up

    other = dataclasses.replace(settings, nodes=2)
    said.clear()
    assert kept.reuse(other, said.append) is None
    assert said == [f"not reusing the kept cluster in {directory}: nodes 1 -> 2: starting a new one"]
    assert daemon.read_state(directory) is None and not directory.exists()


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_drivers_as_noted_are_kept_and_replaced_once_a_run_changed_them(
    state_home: Path, local_binaries: Binaries
) -> None:
    """Noted after preflight and untouched: the same driver processes serve the next run, nothing said.
    Restarted, a fake GPU left faulty, or another command: replaced, with why in one line. A dead
    control-plane process: the cluster is not reused."""
    settings = dataclasses.replace(_settings(state_home, local_binaries), wait_slices=True)
    directory = kept.kept_dir(settings)
    daemon.launch(settings, directory)
    kept.note_drivers(settings)  # as after a preflight that passed
    noted = _driver_pids(directory)
    said: list[str] = []
    assert kept.reuse(settings, said.append) is not None
    assert said == [] and _driver_pids(directory) == noted

    AttachedLocalCluster(directory).restart_driver("node-0")
    assert kept.reuse(settings, said.append) is not None
    assert said == [
        "replacing the kept cluster's drivers: the driver on node-0 is another process than the one "
        "noted (restarted by the run before)"
    ]
    assert _driver_pids(directory) != noted

    kept.note_drivers(settings)
    said.clear()
    state = daemon.read_state(directory)
    assert state is not None
    machine = state.nodes["node-0"].root / "gpus" / "machine.json"
    machine.write_text(machine.read_text().replace('"lost":false', '"lost":true', 1))
    assert kept.reuse(settings, said.append) is not None
    assert said == [
        "replacing the kept cluster's drivers: the driver on node-0 left its checkpoint, CDI specs or "
        "fake GPUs other than at its start"
    ]

    kept.note_drivers(settings)
    said.clear()
    command = (*default_driver_command(settings.driver_name), "--no-health")
    assert kept.reuse(dataclasses.replace(settings, driver_command=command), said.append) is not None
    assert said == ["replacing the kept cluster's drivers: another driver command"]

    state = daemon.read_state(directory)
    assert state is not None
    scheduler = state.control_plane["kube-scheduler"]
    assert scheduler is not None
    os.kill(scheduler, signal.SIGKILL)
    said.clear()
    assert kept.reuse(settings, said.append) is None
    assert len(said) == 1 and said[0].startswith(f"not reusing the kept cluster in {directory}: ")
    assert "not running: kube-scheduler: starting a new one" in said[0]
    assert not directory.exists()
