"""A broken driver is judged in seconds, with the node's own words, not after every pod's timeout.

The reference driver with ``invalid-cdi-spec`` writes CDI specs the node refuses, so no pod of it
can start: the node says why within a second of the pod's start ("CDI device injection failed").
The pod tests must fail as soon as that has persisted for the grace period, quoting the node,
though the profile gives pods minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.local.binaries import Binaries
from tests.conformance.suitekit import quick_profile, run_suite

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

POD_TIMEOUT = 300
"""The pod timeout of the run: a test that waited for it would take minutes."""


def test_pod_tests_fail_fast_quoting_the_node(
    pytester: pytest.Pytester, local_binaries: Binaries, tmp_path: Path
) -> None:
    profile = quick_profile(
        "reference-gpu", tmp_path, timeouts={"slices": 20, "pod": POD_TIMEOUT, "unprepare": 30, "health": 20}
    )
    run = run_suite(
        pytester, local_binaries, profile, rules=["ALLOC-ONE", "ALLOC-COUNT"], breaks=["invalid-cdi-spec"]
    )
    assert run.failed == {"ALLOC-ONE", "ALLOC-COUNT"}, run.explain()
    for result in run.report.rules:
        if result.rule.id not in run.failed:
            continue
        assert "CDI device injection failed" in result.reason, result.reason
        assert "gave up after" in result.reason and "timed out" not in result.reason, result.reason
        # the grace period (signs.GRACE_SECONDS), the node's first retry and the test's own setup: far
        # below the pod timeout (bounded by it, not by a guess of how fast a loaded machine sets up)
        assert result.duration_s < POD_TIMEOUT / 2, f"{result.rule.id} took {result.duration_s:.1f} s"


def test_fail_fast_stops_after_the_first_area_with_a_failed_rule(
    pytester: pytest.Pytester, local_binaries: Binaries, tmp_path: Path
) -> None:
    """ALLOC comes before PREP: ALLOC-ONE fails, its area is done, so PREP-VIEW never starts."""
    profile = quick_profile("reference-gpu", tmp_path)
    run = run_suite(
        pytester,
        local_binaries,
        profile,
        rules=["ALLOC-ONE", "PREP-VIEW"],
        breaks=["invalid-cdi-spec"],
        options=["--dra-fail-fast"],
    )
    assert run.failed == {"ALLOC-ONE"}, run.explain()
    assert run.report.run.stopped.startswith("--fail-fast: area ALLOC has a failed rule (ALLOC-ONE: "), (
        run.report.run.stopped
    )
    view = next(r for r in run.report.rules if r.rule.id == "PREP-VIEW")
    assert view.outcome == "not-run" and "the run stopped early (--fail-fast" in view.reason, view.reason
