"""Whether a node's ResourceSlice pools are whole: every slice of a pool's newest generation there.

A driver writes a pool's slices one by one, so for a moment a node can have some of them (or the
old generation's and some of the new): counting its devices then comes up short. A pool is whole
when the slices of its newest ``pool.generation`` number its ``resourceSliceCount``.

A broken driver may never make its pool whole (a slice the API server refuses, a wrong count):
:class:`PoolsSettled` then gives up waiting once every node has slices and nothing has changed
for a while, so that the checks of counts and pools judge the driver, not a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["SETTLE_SECONDS", "PoolsSettled", "whole_pools"]

SETTLE_SECONDS = 5.0
"""How long the slices of nodes whose pools are not whole must stay unchanged to count as settled."""


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


class PoolsSettled:
    """Asked with the current slices, says whether ``nodes``' pools are published: whole, or present
    on every node and unchanged for ``settle`` seconds (a driver that never makes them whole)."""

    def __init__(
        self,
        nodes: Iterable[str],
        settle: float = SETTLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nodes = set(nodes)
        self._settle = settle
        self._clock = clock
        self._seen: tuple[tuple[str, str], ...] = ()
        self._since = 0.0

    def __call__(self, slices: Iterable[Mapping[str, Any]]) -> bool:
        items = list(slices)
        if self.nodes <= whole_pools(items):
            return True
        present = {(i.get("spec") or {}).get("nodeName") for i in items}
        seen = tuple(
            sorted(
                (
                    str((i.get("metadata") or {}).get("name")),
                    str((i.get("metadata") or {}).get("resourceVersion")),
                )
                for i in items
            )
        )
        now = self._clock()
        if seen != self._seen:
            self._seen, self._since = seen, now
            return False
        return self.nodes <= present and now - self._since >= self._settle
