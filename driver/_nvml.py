"""Small helpers around ``pynvml``: init/shutdown, optional calls, text, the MIG lock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pynvml

from driver.errors import DeviceError

__all__ = ["MIG_LOCK", "nvml", "optional", "text"]

_T = TypeVar("_T")

MIG_LOCK = threading.RLock()
"""Serialises MIG changes: NVML allows one at a time, and create-then-find must not interleave."""


@contextmanager
def nvml() -> Iterator[None]:
    """``nvmlInit`` / ``nvmlShutdown`` around a block; pynvml counts nested inits."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise DeviceError(f"cannot initialise NVML: {e}; is the NVIDIA driver (or fakegpu) installed?") from e
    try:
        yield
    finally:
        pynvml.nvmlShutdown()


_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)


def optional(call: Callable[..., _T], *args: Any) -> _T | None:
    """Call an NVML wrapper, answering None where the device does not support it (Jetson, T4)."""
    try:
        return call(*args)
    except _UNSUPPORTED:
        return None


def text(value: str | bytes) -> str:
    """An NVML string as ``str`` (pynvml answers ``bytes`` or ``str`` depending on its version)."""
    return value.decode() if isinstance(value, bytes) else value
