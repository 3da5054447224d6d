"""A rule that judges every node gets the same verdict whatever runs beside it.

The case of issue 38: a driver that publishes one pool from two nodes failed SLICE-POOL when the
rule ran alone, and passed it in the full run, the other node's slices being gone just then while
another test restarted that node's driver. SLICE-POOL now holds every node shared
(``@reads_every_node``), so no test restarts a driver meanwhile, and judges once every node shows
its slices. The run alone is the ``same-pool-on-every-node`` case of ``test_selftest``; here the
rule runs beside RES-DRIVER-RESTART, held back (:mod:`tests.conformance.overlap`) until that test
has stopped its node's driver, where it used to read a cluster with one node bare. The leases of
``@reads_every_node`` are checked without a cluster first.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from clusters.leases import NodeLeases
from clusters.local.binaries import Binaries
from conformance.plugin.fixtures import _every_node_held
from driver.breakage import SHARED_POOL
from tests.conformance import overlap
from tests.conformance.suitekit import ClusterPool, quick_profile, run_suite

NODES = ["node-0", "node-1"]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout, for the suite run's processes to import the overlap plugin from."""


def _in_thread(take: Callable[[], AbstractContextManager[str]], got: list[float]) -> threading.Thread:
    """A thread that takes a lease, notes when, and lets it go."""

    def run() -> None:
        with take():
            got.append(time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_every_node_is_held_beside_shared_holders_and_never_beside_one_alone(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path, poll=0.01)
    # tests that share a node go on beside it
    with (
        leases.shared(NODES, "a"),
        leases.shared(NODES, "b"),
        _every_node_held(leases, NODES, "k", alone=False) as own,
    ):
        assert own in NODES
    got: list[float] = []
    with leases.exclusive(NODES, "restart") as restarted:
        taker = _in_thread(lambda: _every_node_held(leases, NODES, "k", alone=False), got)
        time.sleep(0.2)
        assert not got, f"every node held while {restarted} was held alone"
        released = time.monotonic()
    taker.join(5)
    assert got and got[0] >= released


def test_with_exclusive_its_own_node_is_held_alone_and_the_others_shared(tmp_path: Path) -> None:
    leases = NodeLeases(tmp_path, poll=0.01)
    with _every_node_held(leases, NODES, "k", alone=True) as own:
        (other,) = set(NODES) - {own}
        with leases.shared([other], "beside"):  # the other node is shared
            pass
        got: list[float] = []
        taker = _in_thread(lambda: leases.shared([own], "beside"), got)
        time.sleep(0.2)
        assert not got, f"{own} shared while it was held alone"
        released = time.monotonic()
    taker.join(5)
    assert got and got[0] >= released


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.selftest
@pytest.mark.timeout(900)
def test_one_pool_on_two_nodes_fails_beside_a_driver_restart(
    pytester: pytest.Pytester,
    local_binaries: Binaries,
    cluster_pool: ClusterPool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = tmp_path / "overlap.json"
    profile = quick_profile("reference-gpu", tmp_path)
    held = overlap.Overlap(rule="SLICE-POOL", driver="gpu.dra-conformance.io", record=record)
    monkeypatch.setenv(overlap.ENV, held.to_env())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    run = run_suite(
        pytester,
        local_binaries,
        profile,
        rules=["SLICE-POOL", "RES-DRIVER-RESTART"],
        breaks=["same-pool-on-every-node"],
        # 7 tests (5 of preflight) on 4 workers go round robin: the two rules on workers of their own
        workers=4,
        pool=cluster_pool,
        options=["-p", "tests.conformance.overlap"],
    )
    assert record.exists(), f"SLICE-POOL was never held back\n{run.explain()}"
    bare = json.loads(record.read_text())["bare"]
    assert bare, f"no node lost its slices while SLICE-POOL waited (no overlap)\n{run.explain()}"
    assert run.failed == {"SLICE-POOL"}, run.explain()
    reason = next(r.reason for r in run.report.rules if r.rule.id == "SLICE-POOL")
    assert f"pool {SHARED_POOL} is published by nodes ['node-0', 'node-1']" in reason, reason
