"""Node leases: shared, exclusive, and every node at once (no cluster needed)."""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from pathlib import Path

from clusters.leases import NodeLeases

NODES = ["node-0", "node-1"]


def _hold(leases: NodeLeases, how: str, key: str, held: list[tuple[str, str, float, float]]) -> None:
    with getattr(leases, how)(NODES, key) as node:
        start = time.monotonic()
        time.sleep(0.2)
        held.append((how, node, start, time.monotonic()))


def test_every_waits_for_all_holders_and_keeps_everyone_out(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path, poll=0.01)
    held: list[tuple[str, str, float, float]] = []
    with leases.shared(NODES, "a") as first, leases.exclusive(NODES, "b") as second:
        assert {first, second} == set(NODES)
        taker = threading.Thread(target=_hold, args=(leases, "every", "c", held))
        taker.start()
        time.sleep(0.1)
        assert not held, "every() got the cluster while others held nodes"
        released = time.monotonic()
    taker.join(5)
    assert held and held[0][2] >= released
    assert not list(tmp_path.glob("*.want-*")), "want marks left behind"


def test_two_every_holders_take_turns_without_deadlock(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path, poll=0.01)
    held: list[tuple[str, str, float, float]] = []
    threads = [threading.Thread(target=_hold, args=(leases, "every", k, held)) for k in ("x", "y", "z")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(held) == 3, "an every() holder never got the cluster"
    spans = sorted((start, end) for _, _, start, end in held)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans)), spans


def test_others_wait_while_every_holds(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path, poll=0.01)
    held: list[tuple[str, str, float, float]] = []
    with leases.every(NODES, "k") as node:
        assert node in NODES
        others = [
            threading.Thread(target=_hold, args=(leases, how, how, held)) for how in ("shared", "exclusive")
        ]
        for t in others:
            t.start()
        time.sleep(0.15)
        assert not held, f"a node was taken while every() held the cluster: {held}"
        released = time.monotonic()
    for t in others:
        t.join(5)
    assert len(held) == 2 and all(start >= released for _, _, start, _ in held)


def test_every_first_in_a_fresh_session_makes_the_directory(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path / "leases", poll=0.01)
    with leases.every(NODES, "k") as node:  # the session's first lease: no directory yet
        assert node in NODES
    assert not list((tmp_path / "leases").glob("*.want-*")), "want marks left behind"


def _key_for(node: str) -> str:
    """A key that :meth:`NodeLeases.exclusive` marks ``node`` wanted for."""
    keys = (f"k{i}" for i in range(100))
    return next(k for k in keys if NODES[zlib.crc32(k.encode()) % len(NODES)] == node)


def test_exclusive_takes_whichever_node_empties_first(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path, poll=0.01)
    held: list[tuple[str, str, float, float]] = []
    key = _key_for("node-0")
    with leases.shared(["node-0"], "long"):
        with leases.shared(["node-1"], "short"):
            taker = threading.Thread(target=_hold, args=(leases, "exclusive", key, held))
            taker.start()
            time.sleep(0.1)
            assert not held, f"a node was taken alone while both were held: {held}"
            assert list(tmp_path.glob("node-node-0.want-*")), "the key's node is not marked wanted"
        taker.join(5)  # node-1 is free now, node-0 is still held
        assert [(how, node) for how, node, _, _ in held] == [("exclusive", "node-1")], held
    assert not list(tmp_path.glob("*.want-*")), "want marks left behind"


def test_exclusive_waits_while_a_reader_of_every_node_waits(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path, poll=0.01)
    held: list[tuple[str, str, float, float]] = []
    with leases.reading_every():
        taker = threading.Thread(target=_hold, args=(leases, "exclusive", "x", held))
        taker.start()
        time.sleep(0.1)
        assert not held, f"a node was taken alone while a reader of every node waited: {held}"
    taker.join(5)
    assert len(held) == 1
