"""The Debian root file system of the kind node image, made with ``mmdebstrap`` and cached.

One ``rootfs.tar`` per package list: ``<cache>/dra-conformance/kind-node/rootfs/<digest>/`` with a
``stamp.json`` (the digest covers the suite, the variant and the packages, so a changed list makes
a new entry). ``mmdebstrap`` runs as root in a mount namespace of its own (``unshare --mount``): the
``/proc``, ``/sys`` and ``/dev`` it mounts into the new tree never show on the host. Debian's
packages come from the mirror ``mmdebstrap`` picks by default (or ``DRAC_DEBIAN_MIRROR``).

The packages are those of kind's own base image (``images/base/Dockerfile`` of kind) that the
suite needs, plus Debian's ``runc`` and CNI plugins (``containernetworking-plugins``): both work
with the containerd built from Go modules, and save two Go builds on 2 cores.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from clusters.errors import ToolError
from clusters.local.binaries import STAMP, fill_entry, once_cached, prune_others
from clusters.progress import Progress, to_log

__all__ = ["PACKAGES", "SUITE", "build_rootfs", "rootfs_digest"]

log = logging.getLogger(__name__)

SUITE = "bookworm"
"""The Debian release of the node image (that of the machines this project runs on)."""

PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "conntrack",
    "iptables",
    "nftables",
    "iproute2",
    "ethtool",
    "util-linux",
    "mount",
    "kmod",
    "libseccomp2",
    "procps",
    "bash",
    "ca-certificates",
    "socat",
    "jq",
    "runc",
    "containernetworking-plugins",
)
"""What ``mmdebstrap --variant=minbase`` adds."""

ROOTFS = "rootfs.tar"
"""The file of a cache entry."""


_say = to_log(log)


def rootfs_digest(suite: str = SUITE, packages: Sequence[str] = PACKAGES) -> str:
    """The cache key of a root file system: 16 hex digits of what makes it."""
    text = "\n".join(["minbase", suite, *sorted(packages)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_rootfs(
    cache_root: Path,
    *,
    suite: str = SUITE,
    packages: Sequence[str] = PACKAGES,
    mirror: str = "",
    progress: Progress = _say,
    what: str = "the node image's",
) -> Path:
    """The ``rootfs.tar`` of ``suite`` with ``packages``: from the cache under ``cache_root``
    (``.../kind-node/rootfs``), or made now (about a minute; needs root and ``mmdebstrap``).

    Raises :class:`ToolError` naming what to install, or the tail of ``mmdebstrap``'s log.
    """
    digest = rootfs_digest(suite, packages)
    entry = cache_root / digest
    target = entry / ROOTFS

    def cached() -> Path | None:
        return target if target.is_file() and (entry / STAMP).is_file() else None

    def debootstrap(tmp: Path) -> None:
        argv = [
            "unshare",
            "--mount",
            "--",
            "mmdebstrap",
            "--mode=root",
            "--variant=minbase",
            "--format=tar",
            f"--include={','.join(packages)}",
            suite,
            str(tmp / ROOTFS),
        ]
        if mirror:
            argv.append(mirror)
        progress(f"making {what} Debian {suite} base with mmdebstrap ({len(packages)} packages)")
        started = time.monotonic()
        log_file = tmp / "mmdebstrap.log"
        with log_file.open("wb") as out:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        if done.returncode != 0:
            tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-25:])
            raise ToolError(f"mmdebstrap exited {done.returncode} making the Debian base:\n{tail}")
        progress(f"  Debian base made in {time.monotonic() - started:.0f} s")

    def make() -> Path:
        if shutil.which("mmdebstrap") is None:
            raise ToolError(
                f"mmdebstrap is not on PATH to make {what} Debian base: apt-get install mmdebstrap"
            )
        if os.geteuid() != 0:
            raise ToolError(f"making {what} Debian base needs root (this process runs as uid {os.geteuid()})")
        stamp = {"suite": suite, "variant": "minbase", "packages": sorted(packages), "source": "mmdebstrap"}
        fill_entry(entry, digest, debootstrap, stamp)
        prune_others(entry)  # bases of older package lists
        return target

    lock = cache_root / f".{digest}.lock"
    return once_cached(cached, lock, f"waiting for another process making {entry}", progress, make)
