"""The node agent's claim-info checkpoint, request matching and work queue."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from nodeagent.checkpoint import Checkpoint, ClaimInfo
from nodeagent.draclient import PreparedDevice, cdi_ids
from nodeagent.workqueue import WorkQueue


def _info() -> ClaimInfo:
    return ClaimInfo(
        uid="u1",
        namespace="ns",
        name="c1",
        drivers=["d"],
        devices=[
            PreparedDevice("d", "p", "gpu-0", ("a",), ("v/c=0",)),
            PreparedDevice("d", "p", "gpu-1", ("b",), ("v/c=1",)),
            PreparedDevice("d", "p", "gpu-2", (), ("v/c=2",)),
            PreparedDevice("d", "p", "gpu-3", ("gpu",), ("v/c=3",), share_id="s1"),
        ],
        pods={"pod1"},
    )


def test_cdi_ids_follow_the_referenced_request() -> None:
    info = _info()
    assert cdi_ids(info.devices, "a") == ["v/c=0", "v/c=2"]  # empty request_names serves every request
    assert cdi_ids(info.devices, None) == ["v/c=0", "v/c=1", "v/c=2", "v/c=3"]
    # exact string match: a firstAvailable sub-request name does not match its parent
    assert cdi_ids(info.devices, "gpu/sub0") == ["v/c=2"]


def test_checkpoint_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "agent" / "checkpoint.json"
    cp = Checkpoint(path)
    cp.put(_info())
    cp.add_pod("u1", "pod2")
    again = Checkpoint(path)
    info = again.get("u1")
    assert info is not None
    assert info.pods == {"pod1", "pod2"}
    assert info.devices == _info().devices
    assert json.loads(path.read_text())["version"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.json"]  # no temp files left
    again.remove_pod("u1", "pod1")
    again.delete("u1")
    assert Checkpoint(path).claims() == []


def test_corrupt_checkpoint_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text("{")
    assert Checkpoint(path).claims() == []


def test_workqueue_hands_a_key_to_one_worker_and_rereads_it() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(timeout=1) == "a"
    q.add("a")  # while processing: marked dirty, not handed out twice
    assert q.get(timeout=0.1) is None
    q.done("a")
    assert q.get(timeout=1) == "a"
    q.done("a")


def test_workqueue_delays_and_keeps_the_earliest_due_time() -> None:
    q: WorkQueue[str] = WorkQueue()
    start = time.monotonic()
    q.add("late", 0.3)
    q.add("late", 0.1)
    added = time.monotonic()
    q.add("late", 5)
    # the earliest due time is kept, read from the queue: however late this thread runs
    assert start + 0.1 <= q._due["late"] <= added + 0.1
    assert q.get(timeout=10) == "late"
    assert time.monotonic() - start > 0.05  # not handed out before it was due


def test_workqueue_shutdown_wakes_getters() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    q.shutdown()
    t.join(timeout=2)
    assert got == [None]


def test_calls_for_one_claim_never_overlap_even_after_it_was_forgotten(tmp_path: Path) -> None:
    from typing import Any, cast

    from nodeagent.manager import ClaimManager

    manager = ClaimManager("n", cast(Any, None), Checkpoint(tmp_path / "checkpoint.json"))
    entered = threading.Event()

    def other() -> None:
        with manager._locked(["u1"]):
            entered.set()

    with manager._locked(["u1"]):
        manager._forget("u1")  # unprepared while someone holds the claim
        t = threading.Thread(target=other)
        t.start()
        assert not entered.wait(0.3), "a second caller got in while the claim was held"
    t.join(5)
    assert entered.is_set()
