"""A node's pools count as published only when whole (every slice of the newest generation)."""

from __future__ import annotations

from typing import Any

from clusters.pools import whole_pools


def _slice(node: str, generation: int, count: int, pool: str = "p") -> dict[str, Any]:
    return {
        "spec": {
            "nodeName": node,
            "driver": "d",
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        }
    }


def test_a_pool_is_whole_when_its_newest_generation_has_every_slice() -> None:
    assert whole_pools([_slice("a", 1, 2), _slice("a", 1, 2), _slice("b", 1, 1)]) == {"a", "b"}


def test_a_pool_written_halfway_is_not_whole() -> None:
    assert whole_pools([_slice("a", 1, 3), _slice("a", 1, 3)]) == set()
    # the new generation's first slice beside the old ones: the new one decides
    assert whole_pools([_slice("a", 1, 2), _slice("a", 1, 2), _slice("a", 2, 2)]) == set()


def test_every_pool_of_a_node_must_be_whole() -> None:
    slices = [_slice("a", 1, 1, "x"), _slice("a", 1, 2, "y")]
    assert whole_pools(slices) == set()
    assert whole_pools([*slices, _slice("a", 1, 2, "y")]) == {"a"}
