"""The local cluster daemon's state file (:mod:`clusters.local.state`): typed, written and read back
as it was; a file of another layout (an older version's) refused naming the file and the field, and
a kept cluster of such a version replaced, saying why."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.errors import ClusterStateError
from clusters.local import daemon, kept
from clusters.local.settings import LocalSettings
from clusters.local.state import DaemonState
from tests.clusters.statekit import made_up_state

OLD_KEYS = {
    "ready", "daemon_pid", "state_dir", "control_socket", "settings", "kubeconfig", "server", "root",
    "k8s_version", "binaries", "feature_gates", "runtime_config", "controllers", "control_plane",
    "nodes", "timings",
}  # fmt: skip
"""What the daemon wrote before its state was typed: the file keeps that layout."""


def test_a_state_reads_back_as_it_was_written_in_the_layout_of_before(tmp_path: Path) -> None:
    state = made_up_state(tmp_path, nodes=2)
    text = state.to_json()
    assert DaemonState.from_json(text, tmp_path / daemon.STATE_FILE) == state
    data = json.loads(text)
    assert set(data) == OLD_KEYS and data["ready"] is True
    assert data["nodes"]["node-1"] == {
        "root": str(tmp_path / "root" / "n1"),
        "kind": "agent",
        "agent_pid": 21,
        "runtime_pid": None,
        "driver_pid": 31,
        "driver_command": ["python", "-m", "driver", "--node", "node-1"],
    }
    assert state.pids() == [999_999_999, 11, 12, 20, 30, 21, 31]


def _broken(tmp_path: Path, change: str) -> str:
    data = json.loads(made_up_state(tmp_path).to_json())
    if change == "no settings":
        del data["settings"]
    elif change == "no node root":
        del data["nodes"]["node-0"]["root"]
    elif change == "pid as text":
        data["daemon_pid"] = "12"
    elif change == "old settings":
        del data["settings"]["binaries"]
    return json.dumps(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("no settings", "field 'settings' is missing"),
        ("no node root", "field 'nodes.node-0.root' is missing"),
        ("pid as text", "field 'daemon_pid' is '12', not an integer"),
        ("old settings", "field 'settings' holds no settings of this version (KeyError: 'binaries')"),
    ],
)
def test_a_state_of_another_layout_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, change: str, message: str
) -> None:
    path = tmp_path / daemon.STATE_FILE
    with pytest.raises(ClusterStateError) as refused:
        DaemonState.from_json(_broken(tmp_path, change), path)
    assert str(refused.value).startswith(f"{path}: {message} (not the state of this version")


def test_a_state_file_that_is_no_json_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterStateError, match=r"state\.json is not JSON"):
        DaemonState.from_json('{"ready": tr', tmp_path / "state.json")
    with pytest.raises(ClusterStateError, match=r"field '\(the whole file\)' is list, not an object"):
        DaemonState.from_json("[]", tmp_path / "state.json")


def test_read_state_skips_a_gone_daemons_file_of_any_layout_refuses_a_running_ones(tmp_path: Path) -> None:
    path = tmp_path / daemon.STATE_FILE
    assert daemon.read_state(tmp_path) is None  # no file
    path.write_text(made_up_state(tmp_path).to_json())
    assert daemon.read_state(tmp_path) is None  # its daemon is gone
    path.write_text('{"ready": true, "daemon_pid": 999999999}')
    assert daemon.read_state(tmp_path) is None
    path.write_text(made_up_state(tmp_path, daemon_pid=os.getpid()).to_json())
    found = daemon.read_state(tmp_path)
    assert found is not None and found.daemon_pid == os.getpid()
    path.write_text(json.dumps({"ready": True, "daemon_pid": os.getpid()}))
    with pytest.raises(ClusterStateError, match=r"state\.json: field 'state_dir' is missing"):
        daemon.read_state(tmp_path)


@pytest.fixture
def old_daemon() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for the daemon of an older version (SIGTERM stops it)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_kept_cluster_of_an_older_version_is_stopped_and_replaced_saying_why(
    tmp_path: Path, old_daemon: subprocess.Popen[bytes]
) -> None:
    settings = dataclasses.replace(LocalSettings(), state_dir=tmp_path / "cluster")
    directory = kept.kept_dir(settings)
    directory.mkdir()
    (directory / daemon.SETTINGS_FILE).write_text(daemon.settings_to_json(settings))
    older = json.loads(made_up_state(directory, daemon_pid=old_daemon.pid).to_json())
    del older["control_socket"]
    (directory / daemon.STATE_FILE).write_text(json.dumps(older))
    said: list[str] = []
    assert kept.reuse(settings, said.append) is None
    path = directory / daemon.STATE_FILE
    assert said == [
        f"not reusing the kept cluster in {directory}: {path}: field 'control_socket' is missing (not the "
        "state of this version of dra-conformance): starting a new one"
    ]
    assert old_daemon.wait(timeout=10) == -15  # stopped by its PID, with SIGTERM
    assert not directory.exists()
