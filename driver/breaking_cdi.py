"""The rule-breaking switch that distorts the CDI specs written, as a wrapper around the spec store.

``driver.cdi.SpecStore`` writes one valid CDI spec per claim; ``spec_store(settings)`` is that
store unless ``invalid-cdi-spec`` is on, and then a ``BreakingSpecStore`` whose specs carry an env
entry that is not ``KEY=VALUE`` (and are not validated). ``driver.__main__`` hands it to
``DeviceState``: a driver run without the switch has no wrapper at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from driver.cdi import CDIDevice, SpecStore
from driver.settings import Settings

__all__ = ["BROKEN_ENTRY", "CDI_SWITCHES", "BreakingSpecStore", "spec_store"]

BROKEN_ENTRY = "GPU_BROKEN_ENTRY"
"""The env entry of every CDI device under ``invalid-cdi-spec``: no ``=``."""

CDI_SWITCHES = frozenset({"invalid-cdi-spec"})
"""The switches this wrapper implements."""


def spec_store(settings: Settings) -> SpecStore:
    """The claims' CDI spec store, wrapped only when a switch of ``CDI_SWITCHES`` is on."""
    cls = BreakingSpecStore if settings.breaks("invalid-cdi-spec") else SpecStore
    return cls(settings.kubelet.cdi_dir, settings.driver_name, nvml=settings.backend.kind == "nvml")


class BreakingSpecStore(SpecStore):
    """Writes specs that break the CDI rules: each device's env ends in ``BROKEN_ENTRY``."""

    def build(self, claim_uid: str, devices: Sequence[CDIDevice]) -> dict[str, Any]:
        spec = self.compose(claim_uid, devices)
        for entry in spec["devices"]:
            entry["containerEdits"]["env"].append(BROKEN_ENTRY)
        return spec
