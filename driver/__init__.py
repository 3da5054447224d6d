"""The reference DRA driver for GPUs (runs on fake or real NVML)."""

from __future__ import annotations

__all__: list[str] = []
