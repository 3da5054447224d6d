"""Fault policy: which NVML events make a device unhealthy, how badly, and for how long.

Pure decisions, no NVML and no threads (``driver.health`` watches NVML and keeps the faults):

- an XID in the ignored set (those applications cause: 13, 31, 43, 45, 68, 109 by default)
  is benign: no fault, or with informational taints an ``INFORMATIONAL`` one (taint effect
  ``None``: the device stays healthy and allocatable, and the slice says what happened);
  XID 79 ("fallen off the bus") means the GPU is lost; any other XID is a fault of the devices it
  names, ``NoExecute`` for :data:`NO_EXECUTE_XIDS` (running work cannot be
  trusted) else ``NoSchedule``, that clears after a hold time of quiet;
- a double-bit ECC error is a ``NoExecute`` fault of the whole GPU, lasting while the volatile
  uncorrected counter is non-zero (or a hold time when only the event tells);
- a lost GPU is a ``NoExecute`` fault of the whole GPU until it answers again.

A device's health is its worst fault (:func:`worst`); the severity is the taint effect its
ResourceSlice entry gets, and a device whose worst fault is ``INFORMATIONAL`` is healthy.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "ECC_DOUBLE_BIT",
    "GPU_LOST",
    "INFORMATIONAL",
    "NO_EXECUTE",
    "NO_EXECUTE_XIDS",
    "NO_SCHEDULE",
    "XID_FALLEN_OFF_BUS",
    "Fault",
    "benign_fault",
    "current",
    "ecc_fault",
    "lost_fault",
    "worst",
    "xid_fault",
    "xid_is_benign",
]

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
INFORMATIONAL = "None"
"""The taint effect of a benign fault (Kubernetes 1.35+): shown, affecting no scheduling or pod."""

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs caused by applications, not by the GPU: they do not make a device unhealthy."""

NO_EXECUTE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
"""XIDs after which running work cannot be trusted (ECC, row remapping, NVLink, bus, GSP): evict."""

XID_FALLEN_OFF_BUS = 79
"""The GPU has fallen off the bus: the same as GPU_IS_LOST, and healed the same way."""

GPU_LOST = "gpu-lost"
"""The reason of a lost GPU's fault."""
ECC_DOUBLE_BIT = "ecc-double-bit"
"""The reason of a double-bit ECC fault."""


@dataclass(frozen=True)
class Fault:
    """Why a device is unhealthy.

    ``reason`` is short and fits a label value (``xid-79``, ``ecc-double-bit``,
    ``gpu-lost``); ``message`` is for people; ``severity`` is the taint effect.
    """

    reason: str
    message: str
    severity: str
    since: float
    expires: float | None = None
    """When the fault clears by itself (XIDs), or None (cleared by a reset)."""


def xid_is_benign(xid: int, ignored: Collection[int]) -> bool:
    """Whether an XID leaves the device healthy (it is one of the ``ignored`` ones)."""
    return xid in ignored


def xid_fault(xid: int, where: str, now: float, hold_seconds: float) -> Fault:
    """The fault of a non-benign XID other than :data:`XID_FALLEN_OFF_BUS` (which is a lost GPU)."""
    severity = NO_EXECUTE if xid in NO_EXECUTE_XIDS else NO_SCHEDULE
    return Fault(f"xid-{xid}", f"XID {xid} on {where}", severity, now, now + hold_seconds)


def benign_fault(xid: int, where: str, now: float, hold_seconds: float) -> Fault:
    """A benign XID as an informational fault (the device stays healthy) for ``hold_seconds``."""
    message = f"XID {xid} on {where} (caused by an application; the device is healthy)"
    return Fault(f"xid-{xid}", message, INFORMATIONAL, now, now + hold_seconds)


def ecc_fault(gpu_uuid: str, since: float, expires: float | None) -> Fault:
    """A double-bit ECC error: the whole GPU, evict; ``expires`` None while the counter shows it."""
    return Fault(ECC_DOUBLE_BIT, f"double-bit ECC error on GPU {gpu_uuid}", NO_EXECUTE, since, expires)


def lost_fault(gpu_uuid: str, now: float) -> Fault:
    """A GPU that answers GPU_IS_LOST (or raised XID 79): the whole GPU, evict, until it is back."""
    return Fault(GPU_LOST, f"GPU {gpu_uuid} is lost (fallen off the bus)", NO_EXECUTE, now)


_RANK = {INFORMATIONAL: 0, NO_SCHEDULE: 1, NO_EXECUTE: 2}


def worst(faults: Iterable[Fault]) -> Fault | None:
    """The fault a device shows: ``NoExecute`` over ``NoSchedule`` over ``INFORMATIONAL``, then the
    oldest; None when none."""
    return max(faults, key=lambda f: (_RANK.get(f.severity, 1), -f.since), default=None)


def current(faults: Mapping[str, Fault], now: float) -> dict[str, Fault]:
    """The faults (by reason) that have not expired at ``now``."""
    return {r: f for r, f in faults.items() if f.expires is None or f.expires > now}
