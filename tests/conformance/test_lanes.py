"""The lanes of the tests that hold one node alone: how many, which tests, and nodeids kept plain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue.marks import (
    EXCLUSIVE_CLUSTER_MARK,
    EXCLUSIVE_MARK,
    READS_EVERY_NODE_MARK,
    RULE_MARK,
)
from conformance.config import SuiteConfig
from conformance.plugin.lanes import COSTS_FILE, Lanes, expected_costs
from conformance.plugin.records import plain_nodeid
from conformance.report import TestRecord
from conformance.suite import SUITE_DIR


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


def test_the_longest_tests_go_first_each_to_the_lane_with_the_least() -> None:
    costs = {"a": 10.0, "b": 6.0, "c": 5.0, "d": 4.0}
    lanes = Lanes(2, costs).assign(["e", "d", "c", "b", "a"])
    # e, unknown, costs the median 5.5; a to 0; b to 1; e to 1 (6 < 10); c to 0; d to 1
    assert lanes == {"a": 0, "b": 1, "e": 1, "c": 0, "d": 1}
    loads = [sum(costs.get(n, 5.5) for n, lane in lanes.items() if lane == i) for i in (0, 1)]
    assert loads == [15.0, 15.5]


def _run(reports: Path, run_id: str, profile: str, records: dict[str, tuple[float, float]]) -> None:
    run = reports / run_id
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"profile": profile}))
    lines = [
        TestRecord(nodeid, "ALLOC-ONE", "passed", "", duration, 0.0, measures={"before_work_s": waited})
        for nodeid, (duration, waited) in records.items()
    ]
    (run / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in lines))
    (reports / "latest").unlink(missing_ok=True)
    (reports / "latest").symlink_to(run_id)


def test_the_previous_run_of_the_profile_says_how_long_each_test_works(tmp_path: Path) -> None:
    shipped = expected_costs(tmp_path, "reference-gpu")
    assert shipped["test_allocation.py::test_binding_failure"] > 5  # from the table: no run yet
    _run(tmp_path, "r1", "reference-gpu", {"test_allocation.py::test_binding_failure": (9.0, 4.0)})
    assert expected_costs(tmp_path, "reference-gpu")["test_allocation.py::test_binding_failure"] == 5.0
    _run(tmp_path, "r2", "example-gpu", {"test_allocation.py::test_binding_failure": (99.0, 0.0)})
    assert expected_costs(tmp_path, "reference-gpu") == shipped  # another profile's run: not read


def test_the_table_names_only_tests_that_exist() -> None:
    costs = json.loads(COSTS_FILE.read_text())
    assert len(costs) > 50
    missing = []
    for nodeid in costs:
        module, _, name = nodeid.partition("::")
        source = SUITE_DIR / module
        if not source.is_file() or f"def {name.split('[')[0]}(" not in source.read_text():
            missing.append(nodeid)
    assert not missing, f"{COSTS_FILE} names tests the suite lacks (tests.conformance.lane_costs): {missing}"
