"""The fake driver root's device files: character device nodes with the real driver's numbers
where ``mknod`` is allowed, plain files and one warning where it is not."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

import fakegpu
from fakegpu import _driverroot, _libbuild


@pytest.fixture
def lib_dir(tmp_path: Path) -> Path:
    """Stand-ins for the built library: the device files do not need a real one."""
    d = tmp_path / "lib"
    d.mkdir()
    for name in (_libbuild.LIBRARY, _libbuild.BRIDGE):
        (d / name).write_bytes(b"")
    return d


def _can_mknod(where: Path) -> bool:
    probe = where / "probe"
    try:
        os.mknod(probe, stat.S_IFCHR | 0o600, os.makedev(_driverroot.NVIDIA_MAJOR, _driverroot.CTL_MINOR))
    except PermissionError:
        return False
    probe.unlink()
    return True


def _numbers(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    assert stat.S_ISCHR(st.st_mode), f"{path} is not a character device"
    return os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)


def test_device_nodes_carry_the_real_drivers_numbers(lib_dir: Path, tmp_path: Path) -> None:
    if not _can_mknod(tmp_path):
        pytest.skip("this process may not make device nodes (needs root or CAP_MKNOD); CI runs as root")
    machine = fakegpu.FakeMachine("dgx-h100-mig", state_dir=tmp_path / "gpus")
    warnings: list[str] = []
    root = fakegpu.make_driver_root(tmp_path / "driver", machine, lib_dir, warn=warnings.append)
    dev = root / "dev"
    assert warnings == []
    assert fakegpu.has_device_nodes(root)
    assert [_numbers(dev / f"nvidia{i}") for i in range(8)] == [(195, i, 0o666) for i in range(8)]
    assert _numbers(dev / "nvidiactl") == (195, 255, 0o666)
    assert _numbers(dev / "nvidia-modeset") == (195, 254, 0o666)
    assert _numbers(dev / "nvidia-uvm") == (_driverroot.UVM_MAJOR, 0, 0o666)
    assert _numbers(dev / "nvidia-uvm-tools") == (_driverroot.UVM_MAJOR, 1, 0o666)
    # MIG capabilities: the minors of proc/driver/nvidia/capabilities/mig/{config,monitor}
    caps = root / "proc" / "driver" / "nvidia" / "capabilities" / "mig"
    assert "DeviceFileMinor: 1" in (caps / "config").read_text()
    assert _numbers(dev / "nvidia-caps" / "nvidia-cap1") == (_driverroot.CAPS_MAJOR, 1, 0o444)
    assert _numbers(dev / "nvidia-caps" / "nvidia-cap2") == (_driverroot.CAPS_MAJOR, 2, 0o444)
    # made again over itself (a node restarted): the same nodes, no error
    fakegpu.make_driver_root(root, machine, lib_dir, warn=warnings.append)
    assert warnings == [] and _numbers(dev / "nvidia3") == (195, 3, 0o666)


def test_a_machine_without_mig_has_no_capability_nodes(lib_dir: Path, tmp_path: Path) -> None:
    machine = fakegpu.FakeMachine("l4x4", state_dir=tmp_path / "gpus")
    root = fakegpu.make_driver_root(tmp_path / "driver", machine, lib_dir, warn=lambda m: None)
    assert sorted(p.name for p in (root / "dev").glob("nvidia[0-9]*")) == [f"nvidia{i}" for i in range(4)]
    assert not (root / "dev" / "nvidia-caps").exists()


def test_refused_mknod_leaves_plain_files_and_one_line(
    lib_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def refuse(path: os.PathLike[str], mode: int = 0o600, device: int = 0) -> None:
        calls.append(Path(path))
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(_driverroot, "_mknod", refuse)
    machine = fakegpu.FakeMachine("dgx-h100-mig", state_dir=tmp_path / "gpus")
    warnings: list[str] = []
    root = fakegpu.make_driver_root(tmp_path / "driver", machine, lib_dir, warn=warnings.append)
    dev = root / "dev"
    assert len(calls) == 1, "after the first refusal no more mknod is tried"
    for name in ("nvidia0", "nvidia7", "nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"):
        assert (dev / name).is_file() and not (dev / name).is_char_device(), name
    assert (dev / "nvidia-caps" / "nvidia-cap1").is_file()
    assert not fakegpu.has_device_nodes(root)
    assert len(warnings) == 1
    line = warnings[0]
    assert "\n" not in line and str(dev) in line and "Operation not permitted" in line
    assert "NVIDIA's gpu-kubelet-plugin" in line and "root or with CAP_MKNOD" in line


def test_refused_mknod_is_logged_when_no_one_listens(
    lib_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(path: os.PathLike[str], mode: int = 0o600, device: int = 0) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(_driverroot, "_mknod", refuse)
    machine = fakegpu.FakeMachine("l4x4", state_dir=tmp_path / "gpus")
    fakegpu.make_driver_root(tmp_path / "driver", machine, lib_dir)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "CAP_MKNOD" in caplog.records[0].getMessage()


def test_mig_access_minors_follow_the_kernel_drivers_table() -> None:
    # lines of a real /proc/driver/nvidia-caps/mig-minors (quoted in NVIDIA's DRA driver, cdi.go)
    assert _driverroot.mig_access_minor(0, 0) == 3
    assert _driverroot.mig_access_minor(0, 0, 0) == 4
    assert _driverroot.mig_access_minor(0, 0, 2) == 6
    assert _driverroot.mig_access_minor(3, 3, 3) == 439
    assert _driverroot.mig_access_minor(6, 11, 5) == 918
    assert _driverroot.mig_access_minor(6, 11, 7) == 920


def test_mig_instances_have_capability_files_and_proc_devices_names_the_majors(
    lib_dir: Path, tmp_path: Path
) -> None:
    # dgx-h100-mig: GPU index 2 (minor 0 on a DGX) holds 3g.40gb at placements 0 and 4, GI ids 1
    # and 2, each with one compute instance (id 0)
    machine = fakegpu.FakeMachine("dgx-h100-mig", state_dir=tmp_path / "gpus")
    root = fakegpu.make_driver_root(tmp_path / "driver", machine, lib_dir, warn=lambda m: None)
    caps = root / "proc" / "driver" / "nvidia" / "capabilities"

    def access(path: str) -> str:
        return (caps / path / "access").read_text()

    assert access("gpu0/mig/gi1") == "DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    assert access("gpu0/mig/gi1/ci0").startswith("DeviceFileMinor: 13\n")
    assert access("gpu0/mig/gi2").startswith("DeviceFileMinor: 21\n")
    assert access("gpu0/mig/gi2/ci0").startswith("DeviceFileMinor: 22\n")
    # one GI and one CI file per MIG device: 2 + 4 + 6 + 14 instances of the profile
    assert len(list(caps.glob("gpu*/mig/gi*/access"))) == 26
    assert len(list(caps.glob("gpu*/mig/gi*/ci*/access"))) == 26
    # /proc/devices as the kernel prints it; NVIDIA's DRA driver (GetDeviceMajor) takes the major
    # of nvidia-caps with this regular expression, which needs the "Block devices:" section after
    devices = (root / "proc" / "devices").read_text()
    named = r"(?s)Character devices:.*?([0-9]+) {}\n.*Block devices:"
    assert [m.group(1) for m in re.finditer(named.format("nvidia-caps"), devices)] == [
        str(_driverroot.CAPS_MAJOR)
    ]
    assert [m.group(1) for m in re.finditer(named.format("nvidia-uvm"), devices)] == [
        str(_driverroot.UVM_MAJOR)
    ]
    # the root is a snapshot: made again after a GPU instance is gone, its files are gone too
    machine.destroy_gpu_instance(2, 1)
    fakegpu.make_driver_root(root, machine, lib_dir, warn=lambda m: None)
    assert not (caps / "gpu0" / "mig" / "gi1").exists()
    assert (caps / "gpu0" / "mig" / "gi2" / "ci0" / "access").is_file()


def test_a_machine_without_mig_has_no_capability_files(lib_dir: Path, tmp_path: Path) -> None:
    machine = fakegpu.FakeMachine("l4x4", state_dir=tmp_path / "gpus")
    root = fakegpu.make_driver_root(tmp_path / "driver", machine, lib_dir, warn=lambda m: None)
    assert not (root / "proc" / "driver" / "nvidia" / "capabilities").exists()
    assert "nvidia-caps" not in (root / "proc" / "devices").read_text()
