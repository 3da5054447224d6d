"""Cluster backends behind one interface: local, kind, k3s, external."""

from __future__ import annotations

__all__: list[str] = []
