"""The local tier: control-plane processes and node agents that play the kubelet."""

from __future__ import annotations

__all__: list[str] = []
