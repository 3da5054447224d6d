"""Which Linux capabilities this machine withholds from its processes, read from ``/proc``.

Docker gives a privileged container every capability it knows; runc then fails with ``unable to
apply caps: operation not permitted`` when the machine's bounding set lacks one (some VMs drop
``CAP_SYS_RESOURCE``). :func:`missing` reads the bounding set (``CapBnd`` of
``/proc/self/status``) and the highest capability the kernel knows (``/proc/sys/kernel/
cap_last_cap``), so the private engine's runtime wrapper is used only where a capability is really
missing.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CAPABILITIES", "bounding_set", "missing", "missing_here"]

CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)
"""Capability names by number (``include/uapi/linux/capability.h``)."""


def bounding_set(status: str) -> int:
    """The ``CapBnd`` mask of a ``/proc/<pid>/status`` text.

    Raises ``ValueError`` when the text has no ``CapBnd`` line (not a Linux status file).
    """
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "CapBnd":
            return int(value.strip(), 16)
    raise ValueError("no CapBnd line in the status text: is this /proc/self/status of Linux?")


def missing(mask: int, last_cap: int) -> tuple[str, ...]:
    """The names of the capabilities ``0..last_cap`` (those the kernel knows and a privileged
    container asks for) that the bounding set ``mask`` lacks."""
    top = min(last_cap, len(CAPABILITIES) - 1)
    return tuple(CAPABILITIES[bit] for bit in range(top + 1) if not mask & (1 << bit))


def missing_here(proc: Path = Path("/proc")) -> tuple[str, ...]:
    """:func:`missing` for this process, read from ``proc`` (a last capability the file does not
    give is taken as the highest name known here)."""
    mask = bounding_set((proc / "self" / "status").read_text())
    try:
        last = int((proc / "sys" / "kernel" / "cap_last_cap").read_text().strip())
    except (OSError, ValueError):
        last = len(CAPABILITIES) - 1
    return missing(mask, last)
