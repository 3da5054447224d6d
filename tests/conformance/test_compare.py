"""Comparing two runs of one driver: the rules whose verdict changed, new failures first; a rule a
run did not select is not compared unless it fails in the later run; different drivers refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance import report
from conformance.errors import UsageError
from conformance.report import Report, TestRecord
from tests.conformance.reportkit import record, write_run


def _report(run_dir: Path, records: list[TestRecord], **changes: Any) -> Report:
    return report.build(write_run(run_dir, records, **changes))


def test_new_failures_first_then_fixed_then_other_changes(tmp_path: Path) -> None:
    before = _report(
        tmp_path / "a",
        [
            record("PRE-API", "passed"),
            record("REG-GETINFO", "passed"),
            record("SLICE-EDIT", "failed", reason="not restored"),
            record("SLICE-PRESENT", "passed"),
            record("ALLOC-ONE", "passed"),
            record("RES-APISERVER", "failed", reason="still failing"),
        ],
        selection=(),
    )
    after = _report(
        tmp_path / "b",
        [
            record("PRE-API", "passed"),
            record("REG-GETINFO", "failed", reason="GetInfo answers 'other'\nmore"),
            record("SLICE-EDIT", "passed"),
            record("SLICE-PRESENT", "skipped", reason="the profile does not claim it"),
            record("ALLOC-ONE", "error", reason="fixture failed"),
            record("RES-APISERVER", "failed", reason="still failing"),
        ],
        run_id="later",
    )
    got = report.compare(before, after)
    assert [(c.rule, c.kind, c.before, c.after) for c in got.changes] == [
        ("REG-GETINFO", "new-failure", "passed", "failed"),
        ("ALLOC-ONE", "new-failure", "passed", "failed"),
        ("SLICE-EDIT", "fixed", "failed", "passed"),
        ("SLICE-PRESENT", "changed", "passed", "skipped"),
    ]
    assert [c.rule for c in got.new_failures] == ["REG-GETINFO", "ALLOC-ONE"]
    assert got.changes[0].reason.startswith("GetInfo answers 'other'")
    # PRE-API, RES-APISERVER, and every rule not-run in both
    assert got.unchanged == len(after.rules) - 4
    assert got.not_compared == ()
    assert report.compare(after, before).new_failures[0].rule == "SLICE-EDIT"


def test_a_rerun_of_some_rules_is_compared_on_those_alone(tmp_path: Path) -> None:
    full = _report(
        tmp_path / "full",
        [record("PRE-API", "passed"), record("REG-BATCH", "failed"), record("SLICE-EDIT", "passed")],
    )
    rerun = _report(
        tmp_path / "rerun",
        [record("PRE-API", "passed"), record("REG-BATCH", "passed")],
        selection=("PRE-API", "REG-BATCH"),
    )
    got = report.compare(full, rerun)
    assert [(c.rule, c.kind) for c in got.changes] == [("REG-BATCH", "fixed")]
    assert "SLICE-EDIT" in got.not_compared and got.unchanged == 1
    # a rule the earlier run left out that fails now is a new failure all the same
    later = _report(tmp_path / "later", [record("SLICE-EDIT", "failed")])
    got = report.compare(rerun, later)
    assert [(c.rule, c.kind, c.before) for c in got.new_failures] == [("SLICE-EDIT", "new-failure", None)]


def test_runs_of_different_drivers_are_refused(tmp_path: Path) -> None:
    mine = _report(tmp_path / "a", [record("PRE-API", "passed")])
    theirs = _report(tmp_path / "b", [record("PRE-API", "passed")], driver="gpu.other.io", run_id="theirs")
    with pytest.raises(
        UsageError, match=r"is of driver gpu\.dra-conformance\.io and run theirs of driver gpu\.other\.io"
    ):
        report.compare(mine, theirs)
