"""The fake C library: an object whose attributes are NVML's C symbols, for ``pynvml.nvmlLib``.

Each symbol is a plain function (pynvml sets attributes such as ``restype`` on some) that
returns an int status like the C function. Python exceptions never escape: a bad argument
answers INVALID_ARGUMENT, a symbol the fake does not model answers NOT_SUPPORTED, and anything
else that goes wrong inside (an unreadable state directory, a bug) answers UNKNOWN, so pynvml
raises its own ``NVMLError_*`` classes exactly as on real hardware.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any

from . import _codes as c
from ._ctypes import Status
from ._errors import FakeGpuError, MigError
from ._machine import FakeMachine
from ._sym_device import DeviceSymbols
from ._sym_events import EventSymbols
from ._sym_mig import MigSymbols

log = logging.getLogger(__name__)

_NO_INIT_NEEDED = frozenset({"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlErrorString"})
_BAD_ARGUMENT = (TypeError, ValueError, AttributeError, OverflowError, IndexError, ctypes.ArgumentError)


class _Symbols(DeviceSymbols, MigSymbols, EventSymbols):
    """Every modelled symbol as a method named like the C function."""


def _wrap(name: str, method: Callable[..., Any], impl: _Symbols) -> Callable[..., Any]:
    needs_init = name not in _NO_INIT_NEEDED

    def symbol(*args: Any) -> Any:
        if needs_init and impl.initialized <= 0:
            return c.ERROR_UNINITIALIZED
        try:
            return method(*args)
        except (Status, MigError) as e:
            return e.code
        except _BAD_ARGUMENT as e:
            log.debug("fake %s%r: invalid argument: %s", name, args, e)
            return c.ERROR_INVALID_ARGUMENT
        except FakeGpuError as e:  # e.g. the state directory became unreadable
            log.warning("fake %s: %s", name, e)
            return c.ERROR_UNKNOWN
        except Exception:  # a bug in the fake: the caller gets an NVML error, never a crash
            log.exception("fake %s%r failed", name, args)
            return c.ERROR_UNKNOWN

    symbol.__name__ = symbol.__qualname__ = name
    return symbol


def _not_supported(name: str) -> Callable[..., int]:
    def symbol(*args: Any) -> int:
        return c.ERROR_NOT_SUPPORTED

    symbol.__name__ = symbol.__qualname__ = name
    return symbol


class FakeNvmlLibrary:
    """Stands in for the ``CDLL("libnvidia-ml.so.1")`` object pynvml loads."""

    def __init__(self, machine: FakeMachine) -> None:
        self.machine = machine
        self._impl = _Symbols(machine)
        for name in dir(_Symbols):
            if name.startswith("nvml"):
                setattr(self, name, _wrap(name, getattr(self._impl, name), self._impl))

    @property
    def init_count(self) -> int:
        """How many ``nvmlInit`` calls are not yet matched by ``nvmlShutdown``."""
        return self._impl.initialized

    @property
    def symbols(self) -> list[str]:
        """Names of the modelled symbols."""
        return sorted(n for n in vars(self) if n.startswith("nvml"))

    def __getattr__(self, name: str) -> Callable[..., int]:
        # only called for attributes not found normally: unmodelled NVML symbols
        if not name.startswith("nvml"):
            raise AttributeError(name)
        fn = _not_supported(name)
        setattr(self, name, fn)
        return fn
