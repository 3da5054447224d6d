"""A fake NVIDIA driver root: the files a GPU driver's tools look for, laid out as the real driver
lays them out, for a fake machine.

Drivers such as NVIDIA's DRA driver find the driver through a root directory
(``--host-driver-root`` / ``--container-driver-root``): ``dev/nvidia*`` device files,
``usr/bin/nvidia-smi``, ``usr/lib/<triplet>/libnvidia-ml.so.<version>`` and its siblings, and
``proc/driver/nvidia/``. :func:`make_driver_root` writes such a root for a machine: the fake
``libnvidia-ml.so.1`` (``fakegpu lib``) as the NVML library, stand-ins for the other libraries,
the device files and an ``nvidia-smi`` that prints the machine (``fakegpu show``) with its state
directory. Nothing is written outside the root.

Device files are character device nodes with the numbers the real driver gives them where the
process may make them (root, or CAP_MKNOD): NVIDIA's CDI generator (the container toolkit's
``nvcdi``, in NVIDIA's DRA driver) keeps only paths that are character devices and reads their
major and minor from them, so with plain files its device edits come out empty and it prepares
nothing. Nothing ever opens these nodes (no kernel driver is behind them). Where ``mknod`` is
refused they are plain files, and one warning says what that breaks and how to fix it.
"""

from __future__ import annotations

import logging
import os
import platform
import shlex
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from . import _libbuild
from ._errors import StateError
from ._machine import FakeMachine
from ._models import MODELS

log = logging.getLogger(__name__)

NVIDIA_MAJOR = 195
"""The major of ``nvidia<N>`` (minor N), ``nvidiactl`` (255) and ``nvidia-modeset`` (254): fixed,
registered for the NVIDIA driver in the kernel's devices.txt."""

CTL_MINOR = 255
MODESET_MINOR = 254

UVM_MAJOR = 510
"""The major of ``nvidia-uvm`` (minor 0) and ``nvidia-uvm-tools`` (minor 1). The real
``nvidia-uvm`` module asks the kernel for a free major at load time (see ``/proc/devices``), so it
differs between hosts; 510 is the one commonly seen on hosts with a recent driver. A driver reads
it from the node it is given, never assumes it."""

CAPS_MAJOR = 511
"""The major of ``nvidia-caps/nvidia-cap<N>`` (MIG capabilities; N is the ``DeviceFileMinor`` of
``proc/driver/nvidia/capabilities/mig/*``): dynamic as well (``nvidia-caps`` in
``/proc/devices``); 511 as commonly seen beside a uvm major of 510."""

NO_DEVICE_NODES = (
    "fakegpu: cannot make character device nodes in {dev} ({error}): dev/nvidia* are plain files, so "
    "a driver whose CDI generator needs device nodes (NVIDIA's gpu-kubelet-plugin) prepares nothing "
    "(empty device edits); run as root or with CAP_MKNOD to get them"
)
"""The one line said when device nodes cannot be made (``{dev}``, ``{error}`` filled in)."""

_mknod = os.mknod
"""The seam where device nodes are made (tests replace it to see the fallback)."""

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

MIG_GI_PER_GPU = 15
"""GPU-instance ids a GPU has capability files for (0-14), as ``/proc/driver/nvidia-caps/mig-minors``
lists them."""

MIG_CI_PER_GI = 8
"""Compute-instance ids per GPU instance (0-7) in the same table."""

MIG_ACCESS_MODE = 0o444
"""``DeviceFileMode`` of a GPU or compute instance's ``access`` file (292)."""


def mig_access_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The ``nvidia-caps`` minor of ``gpu<gpu_minor>/gi<gi>/access`` (``ci`` None) or
    ``gpu<gpu_minor>/gi<gi>/ci<ci>/access``, as the kernel driver numbers them in
    ``/proc/driver/nvidia-caps/mig-minors``: 1 and 2 are ``config`` and ``monitor``, then per GPU
    15 GPU instances, each its own ``access`` and 8 compute instances (``gpu0/gi0/access`` 3,
    ``gpu0/gi0/ci0/access`` 4, ``gpu0/gi1/access`` 12, ``gpu3/gi3/ci3/access`` 439)."""
    per_gi = 1 + MIG_CI_PER_GI
    base = 1 + len(_MIG_CAPS) + gpu_minor * MIG_GI_PER_GPU * per_gi + gi * per_gi
    return base if ci is None else base + 1 + ci


def _mig_access_files(machine: FakeMachine) -> list[tuple[str, int]]:
    """``(path under proc/driver/nvidia/capabilities/, DeviceFileMinor)`` of each MIG instance the
    machine has now: ``gpu<minor>/mig/gi<G>/access`` and ``gpu<minor>/mig/gi<G>/ci<C>/access``."""
    files = []
    for g in machine.state.gpus:
        for gi in g.gpu_instances:
            files.append((f"gpu{g.minor}/mig/gi{gi.id}/access", mig_access_minor(g.minor, gi.id)))
            for ci in gi.compute_instances:
                files.append(
                    (f"gpu{g.minor}/mig/gi{gi.id}/ci{ci.id}/access", mig_access_minor(g.minor, gi.id, ci.id))
                )
    return files


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


def _device_node(path: Path, major: int, minor: int, mode: int) -> OSError | None:
    """Make ``path`` a character device ``major:minor`` (kept when it already is one); ``None``
    when done, else why ``mknod`` was refused (the path is then left absent)."""
    rdev = os.makedev(major, minor)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = path.lstat()
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev:
            path.chmod(mode)
            return None
        path.unlink()
    try:
        _mknod(path, stat.S_IFCHR | mode, rdev)
    except PermissionError as e:  # EPERM: no CAP_MKNOD (not root, a user namespace, a rootless container)
        return e
    path.chmod(mode)  # mknod applies the umask
    return None


def _device_nodes(machine: FakeMachine) -> list[tuple[str, int, int, int]]:
    """``(path under dev/, major, minor, mode)`` of every device file the machine has."""
    state = machine.state
    nodes = [
        (f"nvidia{g.minor}", NVIDIA_MAJOR, g.minor, 0o666)
        for g in state.gpus
        if not MODELS[g.model].identity_only
    ]
    nodes += [
        ("nvidiactl", NVIDIA_MAJOR, CTL_MINOR, 0o666),
        ("nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR, 0o666),
        ("nvidia-uvm", UVM_MAJOR, 0, 0o666),
        ("nvidia-uvm-tools", UVM_MAJOR, 1, 0o666),
    ]
    if any(MODELS[g.model].mig_capable for g in state.gpus):
        nodes += [
            (f"nvidia-caps/nvidia-cap{minor}", CAPS_MAJOR, minor, 0o444) for minor in _MIG_CAPS.values()
        ]
    return nodes


def has_device_nodes(root: Path) -> bool:
    """Whether the driver root at ``root`` has its device files as character device nodes."""
    return (root / "dev" / "nvidiactl").is_char_device()


def make_driver_root(
    root: Path,
    machine: FakeMachine,
    lib_dir: Path | None = None,
    warn: Callable[[str], None] | None = None,
) -> Path:
    """Write the fake driver root of ``machine`` at ``root`` (made if missing; our files in it are
    replaced); returns its absolute path. ``lib_dir``: a :func:`fakegpu._libbuild.library_dir`
    (built now when None). The machine must live in a state directory: the root's
    ``nvidia-smi`` and the library find it there. Device files are character device nodes where
    ``mknod`` is allowed, else plain files and one call of ``warn`` (default: a logged warning)
    with :data:`NO_DEVICE_NODES`: see :func:`has_device_nodes`."""
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
    refused: OSError | None = None
    for name, major, minor, mode in _device_nodes(machine):
        if refused is None:
            refused = _device_node(dev / name, major, minor, mode)
        if refused is not None:
            _write(dev / name, "", mode)
    if refused is not None:
        (warn or log.warning)(NO_DEVICE_NODES.format(dev=dev, error=refused.strerror or refused))
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
        # the MIG instances present now (a driver that creates or destroys one later does not
        # see its file change: the root is a snapshot); stale ones from an earlier root go first
        for old in list((proc / "capabilities").glob("gpu*")):
            shutil.rmtree(old)
        for path, minor in _mig_access_files(machine):
            _write(
                proc / "capabilities" / path,
                f"DeviceFileMinor: {minor}\nDeviceFileMode: {MIG_ACCESS_MODE}\nDeviceFileModify: 1\n",
            )
    # what the host's /proc/devices says of the driver: the majors of the device nodes above (those
    # of nvidia-uvm and nvidia-caps are dynamic, so a driver reads them there, never assumes them)
    majors = [(NVIDIA_MAJOR, "nvidia-frontend"), (UVM_MAJOR, "nvidia-uvm")]
    if any(MODELS[g.model].mig_capable for g in state.gpus):
        majors.append((CAPS_MAJOR, "nvidia-caps"))
    # (both sections, as the kernel prints them: NVIDIA's DRA driver, GetDeviceMajor, reads the
    # character one only up to "Block devices:")
    chars = "".join(f"{m:3d} {n}\n" for m, n in majors)
    _write(root / "proc" / "devices", f"Character devices:\n{chars}\nBlock devices:\n")
    return root
