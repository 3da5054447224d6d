"""A fake NVML: simulated GPU machines seen through the real ``pynvml`` module.

``fakegpu.install("dgx-h100")`` plugs a fake C library into ``pynvml.nvmlLib``; from then on
every ``pynvml`` wrapper, struct and exception runs on a simulated machine (H200, H100, A100,
L4, T4, Jetson Orin, or any mix from a profile YAML). Faults are injected through the
returned :class:`FakeMachine` or, from another process, the ``fakegpu`` CLI on a shared state
directory. Profiles and their schema: :mod:`fakegpu._profiles` and ``fakegpu/profiles/README.md``.
"""

from __future__ import annotations

from ._errors import FakeGpuError, MigError, ProfileError, StateError, UnknownGpuError
from ._install import (
    DEFAULT_PROFILE,
    ENV_NODE_NAME,
    ENV_PROFILE,
    ENV_STATE_DIR,
    current,
    install,
    installed,
    uninstall,
)
from ._machine import ECC_KINDS, FakeMachine
from ._models import MODELS
from ._profiles import Profile, available_profiles, load_profile, parse_profile

__all__ = [
    "DEFAULT_PROFILE",
    "ECC_KINDS",
    "ENV_NODE_NAME",
    "ENV_PROFILE",
    "ENV_STATE_DIR",
    "MODELS",
    "FakeGpuError",
    "FakeMachine",
    "MigError",
    "Profile",
    "ProfileError",
    "StateError",
    "UnknownGpuError",
    "available_profiles",
    "current",
    "install",
    "installed",
    "load_profile",
    "parse_profile",
    "uninstall",
]
