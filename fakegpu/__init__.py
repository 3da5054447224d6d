"""A fake NVML: simulated GPU machines seen through the real ``pynvml`` module."""

from __future__ import annotations

__all__: list[str] = []
