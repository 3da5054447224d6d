"""The report model: outcomes folded per rule, counts, the JSON file and its schema, the small writers."""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from conformance import report
from conformance.catalogue import AREAS, RULES
from conformance.report import (
    RULE_OUTCOMES,
    Report,
    ReportError,
    RuleOutcome,
    TestOutcome,
    build,
    clip,
    load,
    summary_table,
    write,
)
from tests.conformance.reportkit import RUN, mixed_records, record, write_run

DOCS = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"


def outcome_of(report_: Report, rule_id: str) -> tuple[str, str]:
    (result,) = (r for r in report_.rules if r.rule.id == rule_id)
    return result.outcome, result.reason


@pytest.mark.parametrize(
    ("tests", "outcome", "reason"),
    [
        (["passed"], "passed", ""),
        (["passed", "passed"], "passed", ""),
        (["passed", "failed"], "failed", "reason failed"),
        (["error", "passed"], "failed", "reason error"),
        (["xfailed", "failed"], "failed", "reason failed"),
        (["xpassed", "failed"], "failed", "reason failed"),
        (["xfailed", "xpassed"], "unexpected-pass", "reason xpassed"),
        (["xfailed", "passed"], "expected-failure", "reason xfailed"),
        (["skipped", "passed"], "passed", ""),
        (["skipped"], "skipped", "reason skipped"),
        ([], "not-run", "no test ran"),
    ],
)
def test_each_test_outcome_folds_into_the_rule_outcome(
    tmp_path: Path, tests: list[TestOutcome], outcome: RuleOutcome, reason: str
) -> None:
    records = [record("REG-BATCH", o, f"test_{i}", reason=f"reason {o}") for i, o in enumerate(tests)]
    built = build(write_run(tmp_path, records))
    assert outcome_of(built, "REG-BATCH") == (outcome, reason)
    assert built.totals[outcome] >= 1


def test_the_last_record_of_a_rerun_test_counts(tmp_path: Path) -> None:
    records = [record("SLICE-PRESENT", "failed", reason="flaky"), record("SLICE-PRESENT", "passed")]
    built = build(write_run(tmp_path, records))
    assert outcome_of(built, "SLICE-PRESENT") == ("passed", "")
    (result,) = (r for r in built.rules if r.rule.id == "SLICE-PRESENT")
    assert len(result.tests) == 1


def test_a_selection_tells_not_selected_from_no_test(tmp_path: Path) -> None:
    records = [record("REG-BATCH", "passed"), record("PRE-API", "passed")]
    built = build(write_run(tmp_path, records, selection=("REG-BATCH", "REG-EMPTY")))
    assert outcome_of(built, "REG-BATCH") == ("passed", "")
    assert outcome_of(built, "REG-EMPTY") == ("not-run", "no test ran")
    assert outcome_of(built, "SLICE-PRESENT") == ("not-run", "not selected")
    # preflight runs whatever was selected: what ran is reported
    assert outcome_of(built, "PRE-API") == ("passed", "")


def test_a_stopped_run_says_why_a_rule_did_not_run(tmp_path: Path) -> None:
    stopped = "PRE-SLICES: no slices from node-1 within 60 s"
    built = build(write_run(tmp_path, [record("PRE-SLICES", "failed")], stopped=stopped))
    outcome, reason = outcome_of(built, "ALLOC-ONE")
    assert outcome == "not-run"
    assert stopped in reason


def test_counts_per_area_and_in_total(tmp_path: Path) -> None:
    built = build(write_run(tmp_path, mixed_records()))
    assert list(built.areas) == list(AREAS)
    assert list(built.totals) == list(RULE_OUTCOMES)
    assert sum(built.totals.values()) == len(RULES) == len(built.rules)
    for outcome in RULE_OUTCOMES:
        assert built.totals[outcome] == sum(counts[outcome] for counts in built.areas.values())
    assert built.areas["REG"] == {
        "failed": 2,
        "unexpected-pass": 0,
        "expected-failure": 1,
        "advisory": 0,
        "partial": 0,
        "passed": 1,
        "skipped": 0,
        "not-run": 16,
    }
    assert built.areas["SLICE"]["unexpected-pass"] == 1
    assert built.areas["SLICE"]["skipped"] == 1


def test_ok_is_false_only_when_a_rule_failed(tmp_path: Path) -> None:
    assert not build(write_run(tmp_path / "a", mixed_records())).ok
    unexpected = [record("REG-FUZZ", "xpassed"), record("PRE-API", "passed")]
    assert build(write_run(tmp_path / "b", unexpected)).ok


def test_a_rule_set_can_be_given(tmp_path: Path) -> None:
    rules = [r for r in RULES if r.area == "HEALTH"]
    built = build(write_run(tmp_path, [record("HEALTH-RECOVER", "passed")]), rules)
    assert [r.rule.id for r in built.rules] == [r.id for r in rules]
    assert list(built.areas) == ["HEALTH"]


def test_records_of_unknown_rules_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="conformance.report"):
        build(write_run(tmp_path, [record("REG-NOPE", "passed")]))
    assert "REG-NOPE" in caplog.text


def test_a_run_dir_without_run_json_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"run\.json is missing"):
        build(tmp_path)
    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(ReportError, match="list"):
        build(tmp_path)


def test_json_round_trip(tmp_path: Path) -> None:
    built = build(write_run(tmp_path, mixed_records()))
    write(built, tmp_path)
    assert load(tmp_path / "conformance.json") == built
    assert load(tmp_path) == built  # a run directory works too
    data = json.loads((tmp_path / "conformance.json").read_text())
    assert data["started"] == "2025-05-01T12:00:00Z"
    assert data["duration_s"] == 754.5
    assert data["ok"] is False


def test_an_unfinished_run_has_no_finish_time(tmp_path: Path) -> None:
    built = build(write_run(tmp_path, [], finished=0.0))
    write(built, tmp_path)
    data = json.loads((tmp_path / "conformance.json").read_text())
    assert (data["finished"], data["duration_s"]) == (None, 0.0)
    assert load(tmp_path) == built


def _documented_keys() -> dict[str, set[str]]:
    """The keys in the first column of each table of docs/report-schema.md, by section."""
    keys: dict[str, set[str]] = {}
    section = ""
    for line in DOCS.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:]
        elif m := re.match(r"\| `(\w+)` \|", line):
            keys.setdefault(section, set()).add(m.group(1))
    return keys


def test_the_schema_doc_names_every_key_and_no_other(tmp_path: Path) -> None:
    write(build(write_run(tmp_path, mixed_records())), tmp_path)
    data = json.loads((tmp_path / "conformance.json").read_text())
    rule = next(r for r in data["rules"] if r["tests"])
    documented = _documented_keys()
    assert set(data) == documented["Top level"]
    assert set(rule) == documented["A rule (`rules[]`)"]
    assert set(rule["tests"][0]) == documented["A test (`rules[].tests[]`)"]
    assert data["schema_version"] == report.SCHEMA_VERSION


def test_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    write(build(write_run(tmp_path, mixed_records())), tmp_path)
    path = tmp_path / "conformance.json"
    data = json.loads(path.read_text())
    data["schema_version"] = 2
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=r"conformance\.json: schema_version 2 is not one .* reads 1"):
        load(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{", "cannot be read as JSON"),
        ("[]", "holds list"),
        ('{"schema_version": 1}', "the key 'run_id' is missing"),
    ],
)
def test_a_bad_report_file_is_a_report_error(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "conformance.json"
    path.write_text(text)
    with pytest.raises(ReportError, match=match):
        load(path)
    with pytest.raises(ReportError, match="does not exist"):
        load(tmp_path / "nothing.json")


def test_a_bad_outcome_is_a_report_error(tmp_path: Path) -> None:
    write(build(write_run(tmp_path, mixed_records())), tmp_path)
    path = tmp_path / "conformance.json"
    path.write_text(path.read_text().replace('"outcome": "expected-failure"', '"outcome": "meh"'))
    with pytest.raises(ReportError, match="rule REG-FUZZ: outcome 'meh' is not one of"):
        load(path)


def test_write_replaces_files_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = build(write_run(tmp_path, mixed_records()))
    write(built, tmp_path)
    names = ("conformance.json", "conformance.md", "index.html")
    before = {n: (tmp_path / n).read_text() for n in names}
    assert all((tmp_path / n).stat().st_mode & 0o777 == 0o644 for n in names)

    def fail(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write(build(write_run(tmp_path, [])), tmp_path)
    assert {n: (tmp_path / n).read_text() for n in names} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "records.jsonl", "run.json"])


def test_summary_table(tmp_path: Path) -> None:
    table = summary_table(build(write_run(tmp_path, mixed_records())))
    lines = table.splitlines()
    assert lines[0].split() == [
        "area",
        "passed",
        "partial",
        "failed",
        "skipped",
        "expected-failure",
        "unexpected-pass",
        "advisory",
        "not-run",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line and not line.startswith("-")}
    assert list(rows)[1:] == [*AREAS, "total"]
    assert rows["REG"] == ["1", "0", "2", "0", "1", "0", "0", "16"]
    assert rows["total"] == ["4", "0", "2", "1", "1", "1", "0", str(len(RULES) - 9)]
    # numbers right-aligned under their headers: every line as long as the header
    assert {len(line) for line in lines} == {len(lines[0])}


def test_allure_environment(tmp_path: Path) -> None:
    run = replace(RUN, profile="dgx h100=café:x", suite_version="0.1.0", profile_sha256="ab" * 32)
    report.write_allure_environment(run, tmp_path / "allure-results")
    text = (tmp_path / "allure-results" / "environment.properties").read_text()
    assert text.isascii()
    assert text.splitlines() == [
        "Kubernetes=v1.34.1",
        "Tier=local",
        "Driver=gpu.dra-conformance.io",
        "Profile=dgx h100\\=caf\\u00e9\\:x",
        "Nodes=node-0, node-1",
        "Run=20250501-120000-dgx-h100",
        "Suite=0.1.0",
        f"Profile\\ SHA-256={'ab' * 32}",
    ]


def test_clip_keeps_both_ends_and_says_what_it_left_out() -> None:
    text = "\n".join(f"line {i}" for i in range(1000))
    clipped = clip(text, 30, 10_000)
    lines = clipped.splitlines()
    assert lines[0] == "line 0"
    assert lines[-1] == "line 999"
    assert len(lines) == 31
    assert "970 of 1000 lines" in clipped
    assert "conformance.json has the whole text" in clipped
    one_line = "x" * 5000 + "END"
    assert clip(one_line, 30, 300).endswith("END")
    assert len(clip(one_line, 30, 300)) < 450
    assert clip("short\ntext", 30, 300) == "short\ntext"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.42, "0.4 s"), (12.4, "12 s"), (185, "3 min 05 s"), (3720, "1 h 02 min")],
)
def test_fmt_duration(seconds: float, text: str) -> None:
    assert report.fmt_duration(seconds) == text
