"""Whether a node's ResourceSlice pools are whole: every slice of a pool's newest generation there.

A driver writes a pool's slices one by one, so for a moment a node can have some of them (or the
old generation's and some of the new): counting its devices then comes up short. A pool is whole
when the slices of its newest ``pool.generation`` number its ``resourceSliceCount``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["whole_pools"]


def whole_pools(slices: Iterable[Mapping[str, Any]]) -> set[str]:
    """The nodes (``spec.nodeName``) of which every pool in ``slices`` (API JSON) is whole."""
    pools: dict[tuple[str, str, str], dict[int, list[int]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            continue
        pool = spec.get("pool") or {}
        key = (str(node), str(spec.get("driver")), str(pool.get("name")))
        generations = pools.setdefault(key, {})
        generations.setdefault(int(pool.get("generation") or 0), []).append(
            int(pool.get("resourceSliceCount") or 1)
        )
    nodes = {node for node, _driver, _pool in pools}
    for (node, _driver, _pool), generations in pools.items():
        counts = generations[max(generations)]
        if len(counts) < max(counts):
            nodes.discard(node)
    return nodes
