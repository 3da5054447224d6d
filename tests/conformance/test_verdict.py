"""The verdict (issue 26, "no silent passes"): CONFORMANT at named levels only when every rule in
scope ran and passed; INCOMPLETE, with the rules not checked and why, when some did not (a
narrowed run always); NOT CONFORMANT when a rule failed, known failures included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from conformance import profiles
from conformance.catalogue import CORE, CORE_SINCE, RULES, by_id, groups, is_core
from conformance.harness import PARTIAL_PROPERTY
from conformance.harness.capabilities import DRA_V1_MINOR
from conformance.plugin.records import record_of
from conformance.profiles import PROFILE_CAPABILITIES
from conformance.report import Report, TestRecord, build, load, verdict_lines, write
from conformance.runner import plan
from tests.conformance.reportkit import record, write_run

MUSTS = sum(r.level == "MUST" for r in RULES)
"""The rules a verdict counts (a strict run counts every rule)."""
GRPC_SKIP = "cluster backend 'external' cannot reach the driver's sockets on a node (grpc)"


def everything_passes(**skips: str) -> list[TestRecord]:
    """A record per catalogue rule: passed, or skipped with the reason ``skips`` gives it."""
    return [
        record(r.id, "skipped", reason=skips[r.id]) if r.id in skips else record(r.id, "passed")
        for r in RULES
    ]


def built(tmp_path: Path, records: list[TestRecord], **run: Any) -> Report:
    """The report of ``records`` in a run whose profile claims nothing (unless ``run`` says)."""
    changes: dict[str, Any] = {"capabilities": (), **run}
    return build(write_run(tmp_path, records, **changes))


def test_core_is_what_needs_nothing_on_every_cluster_the_suite_runs_on() -> None:
    assert f"1.{DRA_V1_MINOR}" == CORE_SINCE
    assert {r.id for r in CORE} == {r.id for r in RULES if not r.needs and r.since.startswith(CORE_SINCE)}
    assert all(groups(r) == ("core",) for r in CORE)
    assert "PRE-API" in {r.id for r in CORE} and not is_core(by_id("PRE-REGISTERED"))  # grpc
    assert not is_core(by_id("SHARE-MIXED"))  # needs nothing, but Kubernetes 1.35
    assert groups(by_id("SHARE-MIXED")) == ("Kubernetes 1.35",)
    assert groups(by_id("ALLOC-TAINT-NOSCHEDULE")) == ("taints", "DeviceTaintRule")


def test_every_rule_passed_is_conformant_at_every_level(tmp_path: Path) -> None:
    verdict = built(tmp_path, everything_passes(), capabilities=tuple(PROFILE_CAPABILITIES)).verdict
    assert verdict.state == "CONFORMANT"
    assert verdict.levels[0] == "core"
    assert set(verdict.levels) == {g for r in RULES if r.level == "MUST" for g in groups(r)}
    assert verdict.headline().startswith("CONFORMANT: core + grpc + ")
    assert (verdict.not_checked, verdict.not_claimed, verdict.failed) == ((), (), ())


def test_what_the_profile_does_not_claim_is_listed_apart_and_not_a_level(tmp_path: Path) -> None:
    why = "profile dgx-h100 does not claim partitionable"
    report = built(tmp_path, everything_passes(**{"SLICE-COUNTERS": why, "ALLOC-PARTITION": why}))
    verdict = report.verdict
    assert verdict.state == "CONFORMANT"
    assert "partitionable" not in verdict.levels and "core" in verdict.levels
    assert [u.rule for u in verdict.not_claimed] == ["SLICE-COUNTERS", "ALLOC-PARTITION"]
    assert verdict.headline().endswith("(2 rules not claimed by the profile)")
    assert verdict_lines(report)[-1] == (
        "  not claimed by the profile (partitionable): SLICE-COUNTERS, ALLOC-PARTITION"
    )


def test_a_rule_a_cluster_cannot_check_leaves_the_run_incomplete_with_why(tmp_path: Path) -> None:
    report = built(tmp_path, everything_passes(**{"REG-GETINFO": GRPC_SKIP}))
    verdict = report.verdict
    assert verdict.state == "INCOMPLETE"
    assert [(u.rule, u.outcome, u.reason) for u in verdict.not_checked] == [
        ("REG-GETINFO", "skipped", GRPC_SKIP)
    ]
    assert "grpc" not in verdict.levels and "core" in verdict.levels
    assert verdict_lines(report) == [
        f"Result: INCOMPLETE: 1 of {MUSTS} MUST rules not checked "
        f"(passed in full: {' + '.join(verdict.levels)})",
        f"  skipped (1): {GRPC_SKIP}: REG-GETINFO",
    ]


def test_a_core_rule_skipped_at_run_time_is_not_checked_and_core_is_no_level(tmp_path: Path) -> None:
    verdict = built(tmp_path, everything_passes(**{"ALLOC-ALL": "too few free devices"})).verdict
    assert verdict.state == "INCOMPLETE"
    assert "core" not in verdict.levels


def test_a_narrowed_run_is_incomplete_by_definition(tmp_path: Path) -> None:
    report = built(tmp_path, [record("REG-GETINFO", "passed")], selection=("REG-GETINFO",))
    verdict = report.verdict
    assert verdict.state == "INCOMPLETE" and verdict.narrowed
    assert len(verdict.not_checked) == MUSTS - 1
    assert {u.reason for u in verdict.not_checked} == {"not selected"}
    assert verdict.headline().startswith(
        f"INCOMPLETE: {MUSTS - 1} of {MUSTS} MUST rules not checked, the run was narrowed"
    )
    # even a selection of every rule that all passed: a narrowed run vouches for what it chose only
    everything = built(tmp_path, everything_passes(), selection=tuple(r.id for r in RULES)).verdict
    assert everything.state == "INCOMPLETE" and everything.not_checked == ()


def test_four_passed_and_the_rest_not_run_is_no_pass(tmp_path: Path) -> None:
    ids = ["PRE-API", "PRE-CLASSES", "PRE-SLICES", "PRE-NODES"]
    report = built(tmp_path, [record(i, "passed") for i in ids])
    assert report.ok  # no rule failed: the exit status stays 0
    lines = verdict_lines(report, limit=3)
    assert (
        lines[0]
        == f"Result: INCOMPLETE: {MUSTS - 4} of {MUSTS} MUST rules not checked (passed in full: none)"
    )
    assert lines[1].startswith(f"  not-run ({MUSTS - 4}): no test ran: PRE-REGISTERED, REG-GETINFO, ")
    assert len(lines) == 2


def test_the_terminal_lines_group_rules_by_reason_and_keep_to_a_limit(tmp_path: Path) -> None:
    names = ["GETINFO", "VERSIONS", "NOTIFY", "ONE-PER-CLAIM"]
    skips = {f"REG-{n}": f"reason {i}" for i, n in enumerate(names)}
    skips["REG-UNKNOWN-CLAIM"] = "reason 0"
    skips["REG-EMPTY"] = "reason 0"  # a SHOULD rule: not checked, and nothing incomplete for it
    lines = verdict_lines(built(tmp_path, everything_passes(**skips)), limit=2)
    assert lines[1:] == [
        "  skipped (2): reason 0: REG-GETINFO, REG-UNKNOWN-CLAIM",
        "  skipped (1): reason 1: REG-VERSIONS",
        "  ... 2 more rule(s) for other reasons (conformance.md lists them all)",
    ]


def test_a_failure_or_a_known_failure_is_not_conformant(tmp_path: Path) -> None:
    failed = built(tmp_path, [*everything_passes(), record("REG-BATCH", "failed", reason="boom")])
    assert failed.verdict.state == "NOT CONFORMANT" and not failed.ok
    assert failed.verdict.headline() == "NOT CONFORMANT: 1 rule(s) failed (REG-BATCH)"
    known = built(tmp_path, [*everything_passes(), record("REG-CONCURRENT", "xfailed", reason="issue 12")])
    assert known.ok  # a known failure does not change the exit status
    assert known.verdict.headline() == "NOT CONFORMANT: 1 known failure(s) (REG-CONCURRENT)"
    assert "grpc" not in known.verdict.levels


def test_a_report_that_did_not_record_the_claims_counts_every_skip_as_not_checked(tmp_path: Path) -> None:
    why = "profile dgx-h100 does not claim partitionable"
    skips = {"SLICE-COUNTERS": why, "ALLOC-PARTITION": why}
    verdict = built(tmp_path, everything_passes(**skips), capabilities=None).verdict
    assert verdict.state == "INCOMPLETE"
    assert [u.rule for u in verdict.not_checked] == ["SLICE-COUNTERS", "ALLOC-PARTITION"]


def test_the_json_carries_the_verdict_and_older_reports_still_load(tmp_path: Path) -> None:
    report = built(tmp_path, everything_passes(**{"REG-GETINFO": GRPC_SKIP}))
    write(report, tmp_path)
    data = json.loads((tmp_path / "conformance.json").read_text())
    assert data["verdict"]["state"] == "INCOMPLETE"
    assert data["verdict"]["not_checked"] == [
        {"rule": "REG-GETINFO", "outcome": "skipped", "reason": GRPC_SKIP}
    ]
    assert data["verdict"]["headline"] == report.verdict.headline()
    assert data["capabilities"] == []
    assert load(tmp_path) == report
    # a report written before the verdict: no verdict, no capabilities; it loads and is judged
    del data["verdict"], data["capabilities"]
    (tmp_path / "conformance.json").write_text(json.dumps(data))
    older = load(tmp_path)
    assert older.run.capabilities is None
    assert older.verdict.state == "INCOMPLETE"


@pytest.mark.parametrize("cluster", ["external", "local"])
def test_a_minimal_profile_reads_incomplete_with_its_list(tmp_path: Path, cluster: str) -> None:
    """A profile that claims nothing and gives no faults, one device per node: every rule the plan
    runs passes, and still the verdict is INCOMPLETE, naming each rule not checked and why."""
    minimal = profiles.parse(
        {
            "name": "minimal",
            "driver": "gpu.example.com",
            "deviceClasses": {"default": "gpu.example.com"},
            "devices": {"perNode": 1, "unique": "uuid"},
        },
        "minimal.yaml",
    )
    planned = plan(minimal, cluster, "1.37.2")
    records = [
        record(p.rule.id, "skipped", reason=p.skip) if p.skip else record(p.rule.id, "passed")
        for p in planned
    ]
    verdict = built(tmp_path, records).verdict
    assert verdict.state == "INCOMPLETE"
    # a rule that needs a capability the profile does not claim is out of its scope, whatever else
    # it lacks here (HEALTH-SERVICE needs grpc and health: the external tier skips it for grpc)
    unclaimed = {
        p.rule.id
        for p in planned
        if any(all(s.strip() in PROFILE_CAPABILITIES for s in n.split("|")) for n in p.rule.needs)
    }
    assert all(p.skip for p in planned if p.rule.id in unclaimed)
    assert {u.rule for u in verdict.not_claimed} == unclaimed
    assert {(u.rule, u.reason) for u in verdict.not_checked} == {
        (p.rule.id, p.skip)
        for p in planned
        if p.skip and p.rule.id not in unclaimed and p.rule.level == "MUST"
    }
    assert "core" in verdict.levels
    # ALLOC-TAINT-NOSCHEDULE passes through DeviceTaintRule: no level of a capability not claimed
    assert not set(verdict.levels) & set(PROFILE_CAPABILITIES)
    reasons = {u.reason for u in verdict.not_checked}
    assert any("needs 2" in r for r in reasons)  # devices>=2 on a one-device profile
    # the fault rules are SHOULD rules (HEALTH): not checked, and nothing incomplete for them
    assert not any("faults.inject" in r for r in reasons)
    if cluster == "external":
        assert GRPC_SKIP in reasons


PARTIAL = "which devices its container got (the pod ran) was not checked: cluster backend 'external' cannot"


def test_a_partial_pass_is_never_a_plain_pass(tmp_path: Path) -> None:
    """A test that could not look at part of its rule passes as ``partial``, with what it left out,
    in every format; the rule is not checked in full, so the run is INCOMPLETE."""
    records = [
        record(r.id, "partial", reason=PARTIAL) if r.id == "SHARE-MIXED" else record(r.id, "passed")
        for r in RULES
    ]
    report = built(tmp_path, records, capabilities=tuple(PROFILE_CAPABILITIES))
    result = next(r for r in report.rules if r.rule.id == "SHARE-MIXED")
    assert (result.outcome, result.reason) == ("partial", PARTIAL)
    assert report.totals["partial"] == 1 and report.totals["passed"] == len(RULES) - 1
    verdict = report.verdict
    assert verdict.state == "INCOMPLETE" and "Kubernetes 1.35" not in verdict.levels
    assert verdict_lines(report)[1] == f"  partial (1): {PARTIAL}: SHARE-MIXED"
    write(report, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "conformance.json").read_text())
    assert next(r for r in data["rules"] if r["id"] == "SHARE-MIXED")["outcome"] == "partial"
    assert load(tmp_path / "out" / "conformance.json").totals == report.totals
    assert "| SHARE-MIXED | partial |" in (tmp_path / "out" / "conformance.md").read_text()
    assert 'data-outcome="partial"' in (tmp_path / "out" / "index.html").read_text()


def test_a_test_that_says_partial_records_partial_only_when_it_passed() -> None:
    def phases(call_failed: bool) -> list[pytest.TestReport]:
        props = [("dra_rule", "SHARE-MIXED"), (PARTIAL_PROPERTY, PARTIAL)]
        made = []
        for when in ("setup", "call", "teardown"):
            failed = call_failed and when == "call"
            outcome: Literal["passed", "failed"] = "failed" if failed else "passed"
            location = ("test_sharing.py", 1, "test_x")
            made.append(
                pytest.TestReport(
                    "test_sharing.py::test_x",
                    location,
                    {},
                    outcome,
                    "boom" if failed else None,
                    when,
                    user_properties=props,
                )
            )
        return made

    passed = record_of(phases(call_failed=False))
    assert passed is not None and (passed.outcome, passed.reason) == ("partial", PARTIAL)
    failed = record_of(phases(call_failed=True))
    assert failed is not None and failed.outcome == "failed"
