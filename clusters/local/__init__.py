"""The local tier: control-plane processes, plus per fake node a node agent and a driver.

The node agent is a program of its own (``nodeagent``, started as ``python -m nodeagent``);
this package uses only its directory layout (:mod:`nodeagent.layout`).

The names below are imported when first used (:func:`__getattr__`): ``import
clusters.local.settings`` (what the CLI and the runner read) loads the settings, not the whole
backend (its TLS, HTTP and process modules).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusters.local.attached import AttachedLocalCluster
    from clusters.local.binaries import Binaries, resolve
    from clusters.local.cluster import LocalCluster
    from clusters.local.controlplane import ControlPlane
    from clusters.local.settings import BinariesSettings, LocalSettings

__all__ = [
    "AttachedLocalCluster",
    "Binaries",
    "BinariesSettings",
    "ControlPlane",
    "LocalCluster",
    "LocalSettings",
    "resolve",
]

_LAZY: dict[str, str] = {
    "AttachedLocalCluster": "clusters.local.attached",
    "Binaries": "clusters.local.binaries",
    "resolve": "clusters.local.binaries",
    "LocalCluster": "clusters.local.cluster",
    "ControlPlane": "clusters.local.controlplane",
    "BinariesSettings": "clusters.local.settings",
    "LocalSettings": "clusters.local.settings",
}
"""Each public name: the module that defines it."""

if not TYPE_CHECKING:  # mypy sees the imports above, and no __getattr__ that would hide a typo

    def __getattr__(name: str) -> object:
        """A public name, imported from its module on first use (then cached in this module)."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
