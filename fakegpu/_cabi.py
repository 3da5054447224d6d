"""What the C library ``libnvidia-ml.so.1`` (``fakegpu lib``) calls: one :func:`dispatch` per call.

The C side passes each modelled call as its index in :data:`fakegpu._csyms.SIGNATURES` and the
raw argument values (integers and addresses); :func:`dispatch` lays the right ctypes object
over each address and calls the same symbol code the pynvml path runs
(:class:`fakegpu._lib.FakeNvmlLibrary`), so there is one machine model for Python, C and Go
callers. The machine comes from the ``FAKEGPU_*`` env vars at ``nvmlInit`` (and again after the
last ``nvmlShutdown``). A machine that cannot be had (an unknown profile, an unreadable state
directory) answers ``nvmlInit`` with ``NVML_ERROR_DRIVER_NOT_LOADED`` and one line on stderr that
names the cause and the fix.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import _codes as c
from ._cstructs import STRUCTS, VERSIONED
from ._csyms import SIGNATURES, table_digest
from ._errors import FakeGpuError, ProfileError
from ._install import DEFAULT_PROFILE, ENV_PROFILE, ENV_STATE_DIR, env_defaults
from ._lib import FakeNvmlLibrary
from ._machine import FakeMachine
from ._store import STATE_FILE

log = logging.getLogger(__name__)

_INIT = frozenset({"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags"})

_SCALARS: dict[str, type[Any]] = {
    "u32": ctypes.c_uint,
    "i32": ctypes.c_int,
    "u64": ctypes.c_ulonglong,
    "h": ctypes.c_void_p,
}

Raw = Sequence[int]
Convert = Callable[[Raw], Any]


class _VersionMismatch(Exception):
    """A versioned struct whose version word names no layout the fake knows."""


def _ctype(name: str) -> type[Any]:
    return _SCALARS.get(name) or STRUCTS[name]


def _arg(tokens: Sequence[str], i: int) -> Convert:
    """How to turn raw value ``i`` into what the symbol code takes."""
    token = tokens[i]
    if token in ("h", "u", "U"):  # the C compiler already truncated or widened it
        return lambda raw: raw[i]
    if token == "s":
        return lambda raw: ctypes.string_at(raw[i]) if raw[i] else None
    if token == "b":  # the next argument is the buffer's length
        return lambda raw: (ctypes.c_char * raw[i + 1]).from_address(raw[i]) if raw[i] else None
    kind, _, name = token.partition(":")
    if kind == "o":
        out = _ctype(name)
        return lambda raw: out.from_address(raw[i]) if raw[i] else None
    if kind == "a":
        ptr = ctypes.POINTER(_ctype(name))
        return lambda raw: ctypes.cast(raw[i], ptr) if raw[i] else None
    if kind == "v":
        layouts = VERSIONED[name]

        def versioned(raw: Raw) -> Any:
            if not raw[i]:
                return None
            layout = layouts.get(ctypes.c_uint.from_address(raw[i]).value)
            if layout is None:
                raise _VersionMismatch
            return layout.from_address(raw[i])

        return versioned
    raise ValueError(f"unknown argument token {token!r}")


def _converter(tokens: Sequence[str]) -> Callable[[Raw], list[Any]]:
    steps = [_arg(tokens, i) for i in range(len(tokens))]
    return lambda raw: [step(raw) for step in steps]


_CALLS: list[tuple[str, Callable[[Raw], list[Any]]]] = [
    (name, _converter(tokens)) for name, tokens in SIGNATURES.items()
]


class _Process:
    """The fake library of this process, made at the first ``nvmlInit``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lib: FakeNvmlLibrary | None = None
        self.symbols: dict[str, Callable[..., int]] = {}


_process = _Process()


def _say(message: str) -> None:
    """One line on stderr (what a C or Go caller's user sees), also logged."""
    log.debug("%s", message)
    try:
        sys.stderr.write(f"fakegpu: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # no usable stderr in the host process
        pass


def _machine() -> FakeMachine:
    env = env_defaults()
    state_dir = env.state_dir
    if state_dir and not env.profile and (Path(state_dir) / STATE_FILE).exists():
        return FakeMachine.attach(state_dir)
    return FakeMachine(env.profile or DEFAULT_PROFILE, state_dir=state_dir, node_name=env.node_name)


def _init(name: str, args: list[Any]) -> int:
    with _process.lock:
        lib = _process.lib
        if lib is None or lib.init_count <= 0:
            try:
                machine = _machine()
            except ProfileError as e:
                _say(
                    f"{name}: {e} ({ENV_PROFILE}={env_defaults().profile or '(unset)'}); set {ENV_PROFILE} "
                    "to a shipped profile (`fakegpu profiles`) or to a profile YAML's path"
                )
                return c.ERROR_DRIVER_NOT_LOADED
            except FakeGpuError as e:
                _say(
                    f"{name}: {e} ({ENV_STATE_DIR}={env_defaults().state_dir or '(unset)'}); set "
                    f"{ENV_STATE_DIR} to a directory this process can read and write, or unset it"
                )
                return c.ERROR_DRIVER_NOT_LOADED
            lib = FakeNvmlLibrary(machine)
            _process.lib = lib
            _process.symbols = {n: getattr(lib, n) for n in SIGNATURES}
        symbol: Callable[..., int] = _process.symbols[name]
    return symbol(*args)


def attach(digest: str) -> str | None:
    """Called once by the C library: None when it was built from this fakegpu, else why not."""
    if digest != table_digest():
        return (
            f"the C library was built from another fakegpu (symbol table {digest}, this fakegpu "
            f"{table_digest()}): run `fakegpu lib` again and use the directory it prints"
        )
    return None


def dispatch(index: int, a0: int, a1: int, a2: int, a3: int, a4: int, a5: int) -> int:  # noqa: PLR0917 - the C side passes six raw values
    """Run modelled call ``index`` on raw arguments; returns the NVML status. Never raises."""
    try:
        name, convert = _CALLS[index]
        raw = (a0, a1, a2, a3, a4, a5)
        try:
            args = convert(raw)
        except _VersionMismatch:
            return c.ERROR_ARGUMENT_VERSION_MISMATCH
        if name in _INIT:
            return _init(name, args)
        symbol = _process.symbols.get(name)
        if symbol is None:
            return c.ERROR_UNINITIALIZED
        return symbol(*args)
    except Exception:  # a bug here must not take down the host process
        log.exception("fakegpu C call %d failed", index)
        return c.ERROR_UNKNOWN
