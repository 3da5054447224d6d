"""State directories: attach without reset, env settings, atomic writes, two processes sharing a machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

import fakegpu

Install = Callable[..., fakegpu.FakeMachine]


def test_install_with_state_dir_attaches_and_never_resets(install: Install, tmp_path: Path) -> None:
    m = install("dgx-h100", state_dir=tmp_path, node_name="n1")
    assert not m.attached
    m.set_mig_mode(2, True)
    m.create_gpu_instance(2, "3g.40gb")
    m.inject_ecc(4, "double")
    fakegpu.uninstall()
    again = install("dgx-h100", state_dir=tmp_path, node_name="n1")
    assert again.attached
    h = pynvml.nvmlDeviceGetHandleByIndex(2)
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9) == 1
    h4 = pynvml.nvmlDeviceGetHandleByIndex(4)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h4, 1, 0) == 1
    assert again.snapshot()["node_name"] == "n1"


def test_state_dir_of_another_profile_is_refused(tmp_path: Path) -> None:
    fakegpu.FakeMachine("t4", state_dir=tmp_path)
    with pytest.raises(fakegpu.StateError, match=r"holds a 't4' machine, not 'l4x4'"):
        fakegpu.FakeMachine("l4x4", state_dir=tmp_path)


def test_install_reads_env_only_when_arguments_are_none(
    install: Install, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKEGPU_PROFILE", "l4x4")
    monkeypatch.setenv("FAKEGPU_STATE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("FAKEGPU_NODE_NAME", "from-env")
    m = install()
    assert (m.profile_name, m.state_dir, m.state.node_name) == ("l4x4", tmp_path / "env", "from-env")
    assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) == "NVIDIA L4"
    fakegpu.uninstall()
    m = install("t4", state_dir=tmp_path / "arg", node_name="from-arg")
    assert (m.profile_name, m.state_dir, m.state.node_name) == ("t4", tmp_path / "arg", "from-arg")


def test_attach_to_empty_dir_says_how_to_create(tmp_path: Path) -> None:
    with pytest.raises(fakegpu.StateError, match=r"no fake machine in .*fakegpu --state-dir"):
        fakegpu.FakeMachine.attach(tmp_path)


def test_corrupt_state_file_is_a_clear_error(tmp_path: Path) -> None:
    fakegpu.FakeMachine("t4", state_dir=tmp_path)
    (tmp_path / "machine.json").write_text("{not json")
    with pytest.raises(fakegpu.StateError, match="cannot read fake machine state"):
        fakegpu.FakeMachine.attach(tmp_path)


def test_crash_mid_write_keeps_the_previous_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = fakegpu.FakeMachine("dgx-h100", state_dir=tmp_path)
    m.inject_xid(0, 13)
    before = (tmp_path / "machine.json").read_bytes()

    def crash(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk on fire"):
        m.mark_lost(1)
    monkeypatch.undo()
    assert (tmp_path / "machine.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["machine.json", "machine.lock"]
    other = fakegpu.FakeMachine.attach(tmp_path)
    assert not other.state.gpus[1].lost
    assert not m.state.gpus[1].lost  # the failed change was dropped in memory too


def test_two_machines_on_one_dir_see_each_other(tmp_path: Path) -> None:
    a = fakegpu.FakeMachine("dgx-h200", state_dir=tmp_path)
    b = fakegpu.FakeMachine.attach(tmp_path)
    for i in range(5):
        a.inject_xid(0, i)
        assert (b.state.events[-1].gpu, b.state.events[-1].data) == (0, i)
        b.mark_lost(i) if i % 2 else b.heal(i)
        assert a.state.gpus[i].lost == bool(i % 2)


CHILD = textwrap.dedent(
    """
    import sys, pynvml, fakegpu
    fakegpu.install("dgx-h100", state_dir=sys.argv[1])
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    cap = pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9)
    print("mig", pynvml.nvmlDeviceGetMigMode(h), cap, flush=True)
    try:
        pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(3))
    except pynvml.NVMLError_GpuIsLost:
        print("gpu3 lost", flush=True)
    print("ready", flush=True)
    for _ in range(2):
        data = pynvml.nvmlEventSetWait(es, 20000)
        print("xid", data.eventData, flush=True)
    """
)


def test_two_processes_share_layout_faults_and_events(tmp_path: Path) -> None:
    m = fakegpu.FakeMachine("dgx-h100", state_dir=tmp_path)
    m.set_mig_mode(0, True)
    m.create_gpu_instance(0, "3g.40gb", 0)
    m.mark_lost(3)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split(maxsplit=1) == ["mig", "[1, 1] 1\n"]
        assert child.stdout.readline() == "gpu3 lost\n"
        assert child.stdout.readline() == "ready\n"
        m.inject_xid(0, 48)  # through the API
        cli = [sys.executable, "-m", "fakegpu", "--state-dir", str(tmp_path), "inject", "xid", "0", "94"]
        subprocess.run(cli, check=True, capture_output=True, timeout=60)  # through the CLI
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert out.splitlines() == ["xid 48", "xid 94"]


def test_state_file_is_json_with_a_format(tmp_path: Path) -> None:
    fakegpu.FakeMachine("t4", state_dir=tmp_path, node_name="n")
    data = json.loads((tmp_path / "machine.json").read_text())
    assert data["format"] == 1
    assert data["profile"] == "t4"
    assert data["gpus"][0]["uuid"].startswith("GPU-")


def test_attaching_under_another_node_name_warns_and_keeps_uuids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a = fakegpu.FakeMachine("t4", state_dir=tmp_path, node_name="node-a")
    b = fakegpu.FakeMachine("t4", state_dir=tmp_path, node_name="node-b")
    assert b.state.gpus[0].uuid == a.state.gpus[0].uuid
    assert "holds the machine of node 'node-a'" in caplog.text


RACER = textwrap.dedent(
    """
    import sys, pynvml, fakegpu
    fakegpu.install("dgx-h100", state_dir=sys.argv[1])
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    ids = []
    while True:
        try:
            gi = pynvml.nvmlDeviceCreateGpuInstance(h, 19)
        except pynvml.NVMLError_InsufficientResources:
            break
        ids.append(pynvml.nvmlGpuInstanceGetInfo(gi).id)
    print(" ".join(map(str, ids)))
    """
)


def test_processes_racing_for_mig_capacity_never_overfill(tmp_path: Path) -> None:
    m = fakegpu.FakeMachine("dgx-h100", state_dir=tmp_path)
    m.set_mig_mode(0, True)
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    ids = []
    for p in racers:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        ids += [int(x) for x in out.split()]
    assert sorted(ids) == [7, 8, 9, 10, 11, 12, 13]
    assert len(m.state.gpus[0].gpu_instances) == 7
