"""The lanes of the tests that hold one node alone: how many, which tests, and nodeids kept plain."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.catalogue.marks import (
    EXCLUSIVE_CLUSTER_MARK,
    EXCLUSIVE_MARK,
    READS_EVERY_NODE_MARK,
    RULE_MARK,
)
from conformance.config import SuiteConfig
from conformance.plugin.records import plain_nodeid
from conformance.plugin.state import Lanes


def test_lanes_are_one_per_worker_pair_and_at_most_one_per_local_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert SuiteConfig.build("reference-gpu").lanes == 4  # 4 nodes, 8 workers
    assert SuiteConfig.build("reference-gpu", workers="12").lanes == 4  # no two lanes on one node
    assert SuiteConfig.build("reference-gpu", workers="4").lanes == 2
    assert SuiteConfig.build("reference-gpu", workers="1").lanes == 1


class _Item:
    def __init__(self, nodeid: str, rule: str, *marks: str) -> None:
        self.nodeid = nodeid
        self.added: list[Any] = []
        self._marks = {RULE_MARK: getattr(pytest.mark, RULE_MARK)(rule).mark}
        self._marks.update({m: getattr(pytest.mark, m).mark for m in marks})

    def get_closest_marker(self, name: str) -> Any:
        return self._marks.get(name)

    def add_marker(self, mark: Any) -> None:
        self.added.append(mark)


def test_only_tests_that_hold_one_node_alone_go_in_lanes_round_robin() -> None:
    alone = [_Item(f"t.py::test_{i}", "RES-DRIVER-RESTART", EXCLUSIVE_MARK) for i in range(5)]
    shared = _Item("t.py::test_shared", "ALLOC-ONE")
    every = _Item("t.py::test_every", "SLICE-OWN-NODE", EXCLUSIVE_MARK, READS_EVERY_NODE_MARK)
    cluster = _Item("t.py::test_cluster", "RES-APISERVER", EXCLUSIVE_MARK, EXCLUSIVE_CLUSTER_MARK)
    Lanes(2).pytest_collection_modifyitems([shared, *alone, every, cluster])
    groups = [[m.mark.args[0] for m in it.added] for it in alone]
    assert groups == [["lane-0"], ["lane-1"], ["lane-0"], ["lane-1"], ["lane-0"]]
    assert not shared.added and not every.added and not cluster.added


def test_nodeids_lose_the_lane_xdist_appends() -> None:
    assert plain_nodeid("suite/test_res.py::test_restart@lane-3") == "suite/test_res.py::test_restart"
    assert plain_nodeid("suite/test_res.py::test_restart") == "suite/test_res.py::test_restart"
    assert plain_nodeid("t.py::test_x[a@lane-b]") == "t.py::test_x[a@lane-b]"  # not a lane: kept
