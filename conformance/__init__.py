"""The driver-agnostic DRA conformance suite (a pytest plugin)."""

from __future__ import annotations

__all__: list[str] = []
