"""Lanes: the tests that hold one node alone, in xdist groups of about the same length.

Such tests wait for each other's node leases when any worker may take any of them: a worker whose
next test waits for a node alone holds the tests queued behind it. A lane per node queues them on
the lane instead (one worker runs a lane test after test, ``--dist loadgroup``), while the other
workers run the tests that share a node. The suite lasts as long as its longest lane, so tests go
to lanes by their expected time, longest first, each to the lane with the least so far.

A test's expected time is its own work (``duration_s`` less ``before_work_s``) in the previous run
of the same profile under the same reports directory (``<reports>/latest``), else in the table
:data:`COSTS_FILE` (a reference-gpu run of the local tier), else the median of the known ones.
Only the order changes with it, never a verdict; every process of a run reads the same files, so
xdist's workers collect the same groups.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue.marks import EXCLUSIVE_CLUSTER_MARK, EXCLUSIVE_MARK, READS_EVERY_NODE_MARK
from conformance.plugin.records import LANE_GROUP
from conformance.report.results import read_records

__all__ = ["COSTS_FILE", "Lanes", "costs_of", "expected_costs", "in_lane"]

log = logging.getLogger(__name__)

COSTS_FILE = Path(__file__).with_name("lane_costs.json")
"""Seconds of own work per test (nodeid under the suite dir) of a reference-gpu run of the local
tier (4 nodes, 2 cores). Written from a run's records by ``python -m tests.conformance.lane_costs
RUN_DIR``."""


def in_lane(item: Any) -> bool:
    """Whether a test holds one node alone (and no more): such tests run in lanes."""
    return (
        item.get_closest_marker(EXCLUSIVE_MARK) is not None
        and item.get_closest_marker(READS_EVERY_NODE_MARK) is None
        and item.get_closest_marker(EXCLUSIVE_CLUSTER_MARK) is None
    )


def costs_of(run_dir: Path) -> dict[str, float]:
    """Each test's own work in seconds in the run of ``run_dir`` (its ``records.jsonl``)."""
    out: dict[str, float] = {}
    for record in read_records(run_dir / "records.jsonl"):
        waited = float(record.measures.get("before_work_s", 0.0))
        out[record.nodeid] = round(max(record.duration_s - waited, 0.0), 1)
    return out


def expected_costs(reports_dir: Path, profile: str) -> dict[str, float]:
    """:data:`COSTS_FILE`, overridden by the previous run's figures when it ran ``profile``."""
    costs: dict[str, float] = {}
    try:
        costs.update({str(k): float(v) for k, v in json.loads(COSTS_FILE.read_text()).items()})
    except (OSError, ValueError, AttributeError) as e:
        log.warning("lanes: cannot read %s (%s); tests go to lanes in turn", COSTS_FILE, e)
    previous = reports_dir / "latest"
    try:
        ran = json.loads((previous / "run.json").read_text()).get("profile")
    except (OSError, ValueError, AttributeError):
        ran = None
    if ran == profile:
        costs.update(costs_of(previous))
    return costs


class Lanes:
    """Puts the tests that hold one node alone in ``count`` lanes: xdist groups (``lane-N``).

    Registered beside the run's own plugin for this hook, which must run before xdist's (xdist
    appends the group to the test's nodeid in its own).
    """

    def __init__(self, count: int, costs: Mapping[str, float] | None = None) -> None:
        self.count = count
        self.costs = dict(costs or {})

    def assign(self, nodeids: list[str]) -> dict[str, int]:
        """Each test's lane: the longest first, each to the lane with the least expected time so far
        (the first such lane); tests of equal time keep their order."""
        known = [self.costs[n] for n in nodeids if n in self.costs]
        default = statistics.median(known) if known else 1.0
        loads = [0.0] * self.count
        lanes: dict[str, int] = {}
        by_cost = sorted(range(len(nodeids)), key=lambda i: -self.costs.get(nodeids[i], default))
        for i in by_cost:
            lane = loads.index(min(loads))
            lanes[nodeids[i]] = lane
            loads[lane] += self.costs.get(nodeids[i], default)
        return lanes

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        if self.count < 1:
            return
        laned = [it for it in items if in_lane(it)]
        lanes = self.assign([it.nodeid for it in laned])
        for item in laned:
            item.add_marker(pytest.mark.xdist_group(f"{LANE_GROUP}{lanes[item.nodeid]}"))
