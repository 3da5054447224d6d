"""Plugging a fake machine into the real ``pynvml`` module, and taking it out again.

The ``FAKEGPU_*`` env vars (and ``XDG_CACHE_HOME``) are read here and nowhere else (:func:`env_defaults`): the
defaults of :func:`install` and of the ``fakegpu`` CLI.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._lib import FakeNvmlLibrary
from ._machine import FakeMachine
from ._profiles import Profile

log = logging.getLogger(__name__)

ENV_PROFILE = "FAKEGPU_PROFILE"
ENV_STATE_DIR = "FAKEGPU_STATE_DIR"
ENV_NODE_NAME = "FAKEGPU_NODE_NAME"
DEFAULT_PROFILE = "dgx-h100"


@dataclass(frozen=True)
class EnvDefaults:
    """What the ``FAKEGPU_*`` env vars say; None where one is unset or empty."""

    profile: str | None = None
    """``FAKEGPU_PROFILE``: the profile name or YAML path (callers fall back to ``dgx-h100``)."""
    state_dir: str | None = None
    """``FAKEGPU_STATE_DIR``: the machine's state directory (else the machine lives in memory)."""
    node_name: str | None = None
    """``FAKEGPU_NODE_NAME``: the node name seeding the UUIDs."""
    cache_root: Path = Path.home() / ".cache" / "dra-conformance"
    """``$XDG_CACHE_HOME/dra-conformance`` (XDG: ``~/.cache``): where ``fakegpu lib`` keeps the C
    library it builds, beside the project's other builds."""


def env_defaults(environ: Mapping[str, str] | None = None) -> EnvDefaults:
    """The ``FAKEGPU_*`` env vars (of ``environ``, else of this process)."""
    env = os.environ if environ is None else environ
    cache_home = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return EnvDefaults(
        profile=env.get(ENV_PROFILE) or None,
        state_dir=env.get(ENV_STATE_DIR) or None,
        node_name=env.get(ENV_NODE_NAME) or None,
        cache_root=cache_home / "dra-conformance",
    )


class _Slot:
    """What is installed now, and what pynvml had before."""

    active: FakeNvmlLibrary | None = None
    saved: Any = None


_lock = threading.Lock()
_slot = _Slot()


def _pynvml() -> Any:
    import pynvml

    return pynvml


def install(
    machine: str | Path | Profile | FakeMachine | None = None,
    *,
    state_dir: str | Path | None = None,
    node_name: str | None = None,
) -> FakeMachine:
    """Make the real ``pynvml`` module see a fake machine; returns the machine.

    ``machine`` is a profile name (``"dgx-h100"``), a path to a profile YAML, a loaded
    :class:`Profile` or a :class:`FakeMachine`. With ``machine`` None the profile comes from
    ``FAKEGPU_PROFILE`` (default ``dgx-h100``); with ``state_dir``/``node_name`` None they come
    from ``FAKEGPU_STATE_DIR``/``FAKEGPU_NODE_NAME``. A state directory that already holds a
    machine is attached to, never reset (``state_dir`` and ``node_name`` are ignored when
    ``machine`` is already a FakeMachine). Installing again replaces the previous fake.
    Callers still call ``pynvml.nvmlInit()`` as on real hardware.
    """
    env = env_defaults()
    if machine is None:
        machine = env.profile or DEFAULT_PROFILE
    if state_dir is None:
        state_dir = env.state_dir
    if node_name is None:
        node_name = env.node_name
    if not isinstance(machine, FakeMachine):
        machine = FakeMachine(machine, state_dir=state_dir, node_name=node_name)
    pynvml = _pynvml()
    lib = FakeNvmlLibrary(machine)
    with _lock, pynvml.libLoadLock:
        if _slot.active is None:
            _slot.saved = pynvml.nvmlLib
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()
        _slot.active = lib
    log.debug("fakegpu installed: profile %s, state dir %s", machine.profile_name, machine.state_dir)
    return machine


def uninstall() -> None:
    """Give ``pynvml`` back the library it had before :func:`install` (a no-op when not installed)."""
    pynvml = _pynvml()
    with _lock, pynvml.libLoadLock:
        if _slot.active is None:
            return
        pynvml.nvmlLib = _slot.saved
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0
        _slot.active = None
        _slot.saved = None


def current() -> FakeMachine | None:
    """The installed machine, or None."""
    lib = _slot.active
    return lib.machine if lib is not None else None


@contextlib.contextmanager
def installed(
    machine: str | Path | Profile | FakeMachine | None = None,
    *,
    state_dir: str | Path | None = None,
    node_name: str | None = None,
) -> Iterator[FakeMachine]:
    """Context-manager form of :func:`install`: ``with fakegpu.installed("l4x4") as m: ...``."""
    m = install(machine, state_dir=state_dir, node_name=node_name)
    try:
        yield m
    finally:
        uninstall()
