"""A node's pools count as published only when whole (every slice of the newest generation)."""

from __future__ import annotations

from typing import Any

from clusters.pools import PoolsSettled, whole_pools


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


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _versioned(node: str, generation: int, count: int, version: str) -> dict[str, Any]:
    body = _slice(node, generation, count)
    body["metadata"] = {"name": f"{node}-0", "resourceVersion": version}
    return body


def test_pools_that_never_get_whole_count_once_they_stop_changing() -> None:
    clock = _Clock()
    settled = PoolsSettled(["a"], settle=5, clock=clock)
    short = [_versioned("a", 1, 2, "1")]  # one slice of two, and the second never comes
    assert not settled(short)
    clock.now = 4
    assert not settled(short)
    clock.now = 5
    assert settled(short)
    changed = [_versioned("a", 1, 2, "2")]
    assert not settled(changed)  # a change starts the wait anew


def test_whole_pools_count_at_once_and_a_node_without_slices_never() -> None:
    clock = _Clock()
    assert PoolsSettled(["a"], clock=clock)([_versioned("a", 1, 1, "1")])
    settled = PoolsSettled(["a", "b"], settle=5, clock=clock)
    assert not settled([_versioned("a", 1, 1, "1")])
    clock.now = 60
    assert not settled([_versioned("a", 1, 1, "1")])
