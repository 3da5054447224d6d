"""Opaque handle values the fake hands out, and how they decode.

A handle is a 64-bit non-NULL "pointer" that packs what it names, so any process (and any
install) decodes it without a table::

    bits 56-63  kind tag      bits 40-55  creation serial (MIG/GI/CI; detects stale handles)
    bits 24-39  GPU index     bits 12-23  GPU-instance id      bits 0-11  compute-instance id
"""

from __future__ import annotations

DEVICE = 0xD1
MIG_DEVICE = 0xD2
GPU_INSTANCE = 0xD3
COMPUTE_INSTANCE = 0xD4
EVENT_SET = 0xD5


def encode(kind: int, gpu: int = 0, gi: int = 0, ci: int = 0, serial: int = 0) -> int:
    """Pack a handle value."""
    return (
        (kind << 56)
        | ((serial & 0xFFFF) << 40)
        | ((gpu & 0xFFFF) << 24)
        | ((gi & 0xFFF) << 12)
        | (ci & 0xFFF)
    )


def kind(h: int) -> int:
    """The kind tag of a handle value."""
    return h >> 56


def gpu(h: int) -> int:
    """The GPU index in a handle value."""
    return (h >> 24) & 0xFFFF


def gi(h: int) -> int:
    """The GPU-instance id in a handle value."""
    return (h >> 12) & 0xFFF


def ci(h: int) -> int:
    """The compute-instance id in a handle value."""
    return h & 0xFFF


def serial(h: int) -> int:
    """The (truncated) creation serial in a handle value."""
    return (h >> 40) & 0xFFFF
