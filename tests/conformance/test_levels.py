"""MUST and SHOULD (issue 38): each rule says how binding it is and what makes it so; the verdict
counts MUST rules, a failed SHOULD is an advisory in every report format, and ``--strict`` counts
SHOULD rules as MUST rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance import profiles
from conformance.catalogue import LEVELS, RULES, Rule
from conformance.errors import ProfileError
from conformance.plugin.records import ADVISORY, advisory_reason, record_of
from conformance.profiles import PROFILE_CAPABILITIES
from conformance.report import Report, TestRecord, build, verdict_lines, write
from conformance.runner import plan, plan_lines
from tests.conformance.reportkit import record, write_run

SHOULD = next(r for r in RULES if r.level == "SHOULD")
MUST = next(r for r in RULES if r.level == "MUST" and not r.needs)
WHY = "the driver answered a gRPC error for the whole call"


def everything_passes(*changed: TestRecord) -> list[TestRecord]:
    by_rule = {r.rule: r for r in changed}
    return [by_rule.get(r.id) or record(r.id, "passed") for r in RULES]


def built(tmp_path: Path, records: list[TestRecord], **run: Any) -> Report:
    changes: dict[str, Any] = {"capabilities": tuple(PROFILE_CAPABILITIES), **run}
    return build(write_run(tmp_path, records, **changes))


def test_every_rule_has_a_level_and_a_source() -> None:
    assert {r.level for r in RULES} == set(LEVELS)
    missing = [r.id for r in RULES if not r.source.strip()]
    assert not missing, f"rules without a source: {missing}"


def test_a_failed_should_rule_is_an_advisory_and_no_failure(tmp_path: Path) -> None:
    report = built(tmp_path, everything_passes(record(SHOULD.id, "advisory", reason=WHY)))
    verdict = report.verdict
    assert verdict.state == "CONFORMANT" and report.ok
    assert [(u.rule, u.outcome, u.reason) for u in verdict.advisories] == [(SHOULD.id, "advisory", WHY)]
    assert f"1 advisory(ies), SHOULD rules failed ({SHOULD.id})" in verdict.headline()
    assert f"  advisory {SHOULD.id} (SHOULD, fails no driver): {WHY}" in verdict_lines(report)
    assert verdict.total == sum(r.level == "MUST" for r in RULES)
    write(report, tmp_path / "out")
    md = (tmp_path / "out" / "conformance.md").read_text()
    assert "## Advisories (1)" in md and f"| {SHOULD.id} | {WHY} |" in md
    html = (tmp_path / "out" / "index.html").read_text()
    assert "1 advisory(ies): SHOULD rules failed" in html and 'data-outcome="advisory"' in html
    data = json.loads((tmp_path / "out" / "conformance.json").read_text())
    assert data["verdict"]["advisories"] == [{"rule": SHOULD.id, "outcome": "advisory", "reason": WHY}]
    assert data["verdict"]["state"] == "CONFORMANT" and data["totals"]["advisory"] == 1
    rule = next(r for r in data["rules"] if r["id"] == SHOULD.id)
    assert (rule["level"], rule["source"]) == ("SHOULD", SHOULD.source)


def test_a_should_rule_not_checked_leaves_the_run_complete(tmp_path: Path) -> None:
    verdict = built(tmp_path, everything_passes(record(SHOULD.id, "skipped", reason="no faults"))).verdict
    assert verdict.state == "CONFORMANT"


def test_strict_counts_should_rules_as_must_rules(tmp_path: Path) -> None:
    failed = built(tmp_path / "a", everything_passes(record(SHOULD.id, "failed", reason=WHY)), strict=True)
    assert failed.verdict.state == "NOT CONFORMANT" and not failed.ok
    assert failed.verdict.total == len(RULES) and "of" not in failed.verdict.headline().split(":")[0]
    skipped = built(tmp_path / "b", everything_passes(record(SHOULD.id, "skipped", reason="no")), strict=True)
    assert skipped.verdict.state == "INCOMPLETE"
    assert skipped.verdict.headline().startswith(f"INCOMPLETE: 1 of {len(RULES)} rules not checked")


def test_a_failed_must_rule_is_still_a_failure(tmp_path: Path) -> None:
    report = built(tmp_path, everything_passes(record(MUST.id, "failed", reason=WHY)))
    assert report.verdict.state == "NOT CONFORMANT" and not report.ok
    assert report.verdict.advisories == ()


def _phases(rule: Rule, wasxfail: str | None, call_failed: bool) -> list[pytest.TestReport]:
    made = []
    for when in ("setup", "call", "teardown"):
        failed = call_failed and when == "call"
        report = pytest.TestReport(
            "test_x.py::test_x",
            ("test_x.py", 1, "test_x"),
            {},
            "skipped" if failed and wasxfail else ("failed" if failed else "passed"),
            "AssertionError: the claim was reported prepared" if failed else None,
            when,
            user_properties=[("dra_rule", rule.id)],
        )
        if when == "call" and wasxfail is not None:
            report.wasxfail = wasxfail
        made.append(report)
    return made


def test_the_record_of_a_should_rule_test_is_advisory_or_passed() -> None:
    reason = advisory_reason(SHOULD)
    assert reason.startswith(ADVISORY) and SHOULD.source in reason
    failed = record_of(_phases(SHOULD, reason, call_failed=True))
    assert failed is not None and failed.outcome == "advisory"
    assert "reported prepared" in failed.reason and failed.longrepr
    passed = record_of(_phases(SHOULD, reason, call_failed=False))
    assert passed is not None and passed.outcome == "passed"
    known = record_of(_phases(MUST, "known failure: x", call_failed=True))
    assert known is not None and known.outcome == "xfailed"
    assert "known failure: because" in advisory_reason(SHOULD, "because")


def _profile_with(tmp_path: Path, known: dict[str, str]) -> Path:
    source = profiles.load("reference-gpu")
    assert source.path is not None
    text = source.path.read_text()
    text = text.split("\nknownFailures:")[0]
    lines = "".join(f"  {rule}: {why}\n" for rule, why in known.items())
    path = tmp_path / "p.yaml"
    classes = source.path.parent
    path.write_text(text.replace("file: ", f"file: {classes}/") + "\nknownFailures:\n" + lines)
    return path


def test_a_known_failure_of_no_rule_is_refused_with_the_closest_ids(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"knownFailures: 'REG-NOTIFI' .*closest: REG-NOTIFY"):
        profiles.load(_profile_with(tmp_path, {"REG-NOTIFI": "typo"}))


def test_a_known_failure_of_a_should_rule_is_planned_as_an_advisory(tmp_path: Path) -> None:
    profile = profiles.load(_profile_with(tmp_path, {SHOULD.id: "our reason", MUST.id: "theirs"}))
    lines = "\n".join(plan_lines(plan(profile, "local", "v1.37.2")))
    assert f"known failure of a SHOULD rule (an advisory) (1): our reason: {SHOULD.id}" in lines
    assert f"known failure (1): theirs: {MUST.id}" in lines


def test_a_strict_run_lists_a_should_rules_known_failure_as_a_failure(tmp_path: Path) -> None:
    known = record(SHOULD.id, "xfailed", reason="known failure: the helper's whole-call error")
    report = built(tmp_path, everything_passes(known), strict=True)
    assert report.verdict.state == "NOT CONFORMANT" and report.verdict.advisories == ()
    assert report.verdict.headline() == f"NOT CONFORMANT: 1 known failure(s) ({SHOULD.id})"
    assert (
        f"  expected-failure (1): known failure: the helper's whole-call error: {SHOULD.id}"
        in verdict_lines(report)
    )


def test_a_should_rule_test_that_fails_in_its_setup_is_an_advisory_too() -> None:
    setup = pytest.TestReport(
        "test_x.py::test_x",
        ("test_x.py", 1, "test_x"),
        {},
        "skipped",
        "RuntimeError: the device is still tainted",
        "setup",
        user_properties=[("dra_rule", SHOULD.id)],
    )
    setup.wasxfail = advisory_reason(SHOULD)
    teardown = pytest.TestReport(
        "test_x.py::test_x", ("test_x.py", 1, "test_x"), {}, "passed", None, "teardown", user_properties=[]
    )
    found = record_of([setup, teardown])
    assert found is not None and found.outcome == "advisory" and "still tainted" in found.reason
