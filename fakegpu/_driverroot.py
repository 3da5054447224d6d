"""A fake NVIDIA driver root: the files a GPU driver's tools look for, laid out as the real driver
lays them out, for a fake machine.

Drivers such as NVIDIA's DRA driver find the driver through a root directory
(``--host-driver-root`` / ``--container-driver-root``): ``dev/nvidia*`` device files,
``usr/bin/nvidia-smi``, ``usr/lib/<triplet>/libnvidia-ml.so.<version>`` and its siblings, and
``proc/driver/nvidia/``. :func:`make_driver_root` writes such a root for a machine: the fake
``libnvidia-ml.so.1`` (``fakegpu lib``) as the NVML library, stand-ins for the other libraries,
device files as plain files (no host device node is made, nothing is written outside the root)
and an ``nvidia-smi`` that prints the machine (``fakegpu show``) with its state directory.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import sys
from pathlib import Path

from . import _libbuild
from ._errors import StateError
from ._machine import FakeMachine
from ._models import MODELS

STAND_IN_LIBRARIES = (
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-allocator.so",
    "libnvidia-cfg.so",
    "libnvidia-nvvm.so",
    "libnvidia-opencl.so",
    "libnvidia-ptxjitcompiler.so",
)
"""Driver libraries the NVIDIA container toolkit's CDI generator mounts, as empty stand-ins."""

STAND_IN_BINARIES = (
    "nvidia-cdi-hook",
    "nvidia-ctk",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)

_MIG_CAPS = {"config": 1, "monitor": 2}
"""``proc/driver/nvidia/capabilities/mig/<name>``: DeviceFileMinor of each, as the driver has them."""


def _triplet() -> str:
    machine = platform.machine()
    return {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(machine, f"{machine}-linux-gnu")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_text(text)
    path.chmod(mode)


def _link(path: Path, target: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)


def make_driver_root(root: Path, machine: FakeMachine, lib_dir: Path | None = None) -> Path:
    """Write the fake driver root of ``machine`` at ``root`` (made if missing; our files in it are
    replaced); returns its absolute path. ``lib_dir``: a :func:`fakegpu._libbuild.library_dir`
    (built now when None). The machine must live in a state directory: the root's
    ``nvidia-smi`` and the library find it there."""
    if machine.state_dir is None:
        raise StateError(
            "a driver root needs a machine kept in a state directory (--state-dir / FAKEGPU_STATE_DIR): "
            "its nvidia-smi and libnvidia-ml.so.1 read the machine from there"
        )
    root = root.resolve()
    lib_dir = lib_dir or _libbuild.library_dir()
    state = machine.state
    version = state.driver_version
    libs = root / "usr" / "lib" / _triplet()
    libs.mkdir(parents=True, exist_ok=True)
    # the NVML library: the fake, named as the driver names it, with its bridge beside it
    real = libs / f"libnvidia-ml.so.{version}"
    for name, dest in ((_libbuild.LIBRARY, real), (_libbuild.BRIDGE, libs / _libbuild.BRIDGE)):
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        shutil.copy2(lib_dir / name, dest)
    _link(libs / "libnvidia-ml.so.1", real.name)
    _link(libs / "libnvidia-ml.so", "libnvidia-ml.so.1")
    for lib in STAND_IN_LIBRARIES:
        _write(libs / f"{lib}.{version}", "")
        _link(libs / f"{lib}.1", f"{lib}.{version}")
    env = {
        "FAKEGPU_STATE_DIR": str(machine.state_dir),
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),  # where this fakegpu is
    }
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    smi = (
        "#!/bin/sh\n# fakegpu's stand-in for nvidia-smi: the fake machine of this driver root\n"
        f'if [ "$1" = "-L" ]; then set -- --list; else set --; fi\n'
        f'exec env {exports} {shlex.quote(sys.executable)} -m fakegpu show "$@"\n'
    )
    _write(root / "usr" / "bin" / "nvidia-smi", smi, 0o755)
    for binary in STAND_IN_BINARIES:
        _write(root / "usr" / "bin" / binary, "#!/bin/sh\n# fakegpu stand-in: does nothing\nexit 0\n", 0o755)
    dev = root / "dev"
    for g in state.gpus:
        if not MODELS[g.model].identity_only:
            _write(dev / f"nvidia{g.minor}", "", 0o666)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        _write(dev / name, "", 0o666)
    proc = root / "proc" / "driver" / "nvidia"
    _write(
        proc / "version",
        f"NVRM version: NVIDIA UNIX {platform.machine()} Kernel Module  {version}  (fakegpu)\n"
        "GCC version:  fakegpu\n",
    )
    if any(MODELS[g.model].mig_capable for g in state.gpus):
        for name, minor in _MIG_CAPS.items():
            _write(
                proc / "capabilities" / "mig" / name,
                f"DeviceFileMinor: {minor}\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
            )
            _write(dev / "nvidia-caps" / f"nvidia-cap{minor}", "", 0o444)
    return root
