"""A fake NVML: simulated GPU machines seen through the real ``pynvml`` module.

``fakegpu.install("dgx-h100")`` plugs a fake C library into ``pynvml.nvmlLib``; from then on
every ``pynvml`` wrapper, struct and exception runs on a simulated machine (H200, H100, A100,
L4, T4, Jetson Orin, or any mix from a profile YAML)::

    import pynvml, fakegpu

    with fakegpu.installed("dgx-h100", state_dir="/tmp/node1", node_name="node1") as machine:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceGetName(h)            # 'NVIDIA H100 80GB HBM3'
        machine.inject_xid(0, 48)              # delivered once to each event set watching GPU 0
        machine.mark_lost(3)                   # GPU 3 now answers GPU_IS_LOST

Any other NVML client, in C, Go (go-nvml, go-nvlib) or pynvml without :func:`install`, sees the
same machines through a drop-in ``libnvidia-ml.so.1``: ``fakegpu lib`` (:func:`library_dir`)
prints the directory to put on ``LD_LIBRARY_PATH``, and the ``FAKEGPU_*`` env vars choose the
machine; ``fakegpu root DIR`` (:func:`make_driver_root`) lays out a fake driver root around it.

Faults and MIG changes can also come from another process through the ``fakegpu`` CLI on the
same state directory (``fakegpu --state-dir /tmp/node1 inject xid 0 48``). Profiles and their
schema: ``fakegpu/profiles/README.md`` and :mod:`fakegpu._profiles`. Errors of this API derive
from :class:`FakeGpuError`; the fake library itself never raises, it returns NVML codes.
"""

from __future__ import annotations

from ._driverroot import has_device_nodes, make_driver_root
from ._errors import (
    FakeGpuError,
    FaultError,
    LibraryError,
    MigError,
    NvidiaSmiError,
    ProfileError,
    StateError,
    UnknownGpuError,
)
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
from ._libbuild import library_dir
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
    "FaultError",
    "LibraryError",
    "MigError",
    "NvidiaSmiError",
    "Profile",
    "ProfileError",
    "StateError",
    "UnknownGpuError",
    "available_profiles",
    "current",
    "has_device_nodes",
    "install",
    "installed",
    "library_dir",
    "load_profile",
    "make_driver_root",
    "parse_profile",
    "uninstall",
]
