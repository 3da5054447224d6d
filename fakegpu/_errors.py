"""Errors raised by fakegpu's Python API (never by the fake NVML symbols, which return codes).

Hierarchy::

    FakeGpuError                 root: catch this to catch everything below
    ├── ProfileError             a profile is unknown, malformed or describes an impossible layout
    ├── StateError               a state directory is unreadable or holds a different machine
    ├── UnknownGpuError          a GPU index or UUID names no GPU of the machine (also a LookupError)
    ├── FaultError               a fault request is malformed: bad XID, ECC kind or count (also a ValueError)
    ├── MigError                 a MIG request the machine refuses (carries the NVML return code)
    ├── LibraryError             ``fakegpu lib`` cannot build here: no cc, Python.h or libpython
    └── NvidiaSmiError           NVIDIA's nvidia-smi cannot be fetched (no apt-get, no network, wrong .deb)
"""

from __future__ import annotations


class FakeGpuError(Exception):
    """Root of every error fakegpu raises."""


class ProfileError(FakeGpuError):
    """A machine profile is unknown, malformed, or describes an impossible MIG layout."""


class StateError(FakeGpuError):
    """A state directory cannot be used: unreadable, corrupt, or holding another machine."""


class UnknownGpuError(FakeGpuError, LookupError):
    """A GPU reference (index or UUID) names no GPU of the machine."""


class FaultError(FakeGpuError, ValueError):
    """A fault to inject is malformed: a negative XID, an unknown ECC kind, a count below 1."""


class MigError(FakeGpuError):
    """A MIG operation was refused; ``code`` is the NVML return code the fake library answers."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class LibraryError(FakeGpuError):
    """The C library ``libnvidia-ml.so.1`` cannot be built: no C compiler, no Python headers, or a
    Python without a shared libpython; the message names the fix."""


class NvidiaSmiError(FakeGpuError):
    """NVIDIA's ``nvidia-smi`` cannot be fetched or is not there; the message names the fix."""
