"""The conformance report of a run: one model, written as JSON, Markdown and one HTML page.

:func:`build` reads what the pytest plugin left in a run directory (``run.json``,
``records.jsonl``) and folds it into a :class:`Report`: one verdict per catalogue rule plus the
counts per area and in total. :func:`write` puts ``conformance.json`` (the machine-readable
report, schema in ``docs/report-schema.md``), ``conformance.md`` and ``index.html`` beside them;
:func:`load` reads ``conformance.json`` back. The renderers live in :mod:`conformance.report.markdown`
and :mod:`conformance.report.htmlpage`; the helpers they share (:func:`clip`, :func:`iso_utc`,
:func:`fmt_duration`, :data:`DISPLAY_ORDER`) live here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from conformance._files import write_atomic
from conformance.catalogue import AREAS, RULES, Rule
from conformance.errors import ConformanceError
from conformance.report.results import (
    RULE_OUTCOMES,
    TEST_OUTCOMES,
    RuleOutcome,
    RuleResult,
    RunInfo,
    TestOutcome,
    TestRecord,
    read_records,
    rule_results,
)

__all__ = [
    "DISPLAY_ORDER",
    "SCHEMA_VERSION",
    "Report",
    "ReportError",
    "build",
    "load",
    "summary_table",
    "write",
    "write_allure_environment",
]

log = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 1
"""The ``schema_version`` this module writes and the only one :func:`load` reads."""

DISPLAY_ORDER: tuple[RuleOutcome, ...] = (
    "passed",
    "failed",
    "skipped",
    "expected-failure",
    "unexpected-pass",
    "not-run",
)
"""The order of the outcome columns in every table a person reads (JSON keeps worst first)."""

NOT_SELECTED: Final = "not selected"
NO_TEST: Final = "no test ran"


class ReportError(ConformanceError):
    """A run directory or ``conformance.json`` that cannot be read as a report."""


@dataclass(frozen=True)
class Report:
    """The verdicts of one run, per rule, with the run's facts and the counts."""

    schema_version: int
    """The schema of ``conformance.json`` this report follows (:data:`SCHEMA_VERSION`)."""
    run: RunInfo
    """What was run, where and when."""
    rules: tuple[RuleResult, ...]
    """One verdict per rule, in catalogue order."""
    totals: dict[RuleOutcome, int]
    """Rules per outcome over all rules; every outcome is a key, worst first."""
    areas: dict[str, dict[RuleOutcome, int]]
    """Rules per outcome in each area (area id -> outcome -> count), in catalogue order."""

    @property
    def ok(self) -> bool:
        """True when no rule failed (an unexpected pass is reported, but is not a failure)."""
        return self.totals.get("failed", 0) == 0


def _counts(results: Sequence[RuleResult]) -> dict[RuleOutcome, int]:
    counts: dict[RuleOutcome, int] = dict.fromkeys(RULE_OUTCOMES, 0)
    for result in results:
        counts[result.outcome] += 1
    return counts


def _area_ids(rules: Sequence[Rule]) -> list[str]:
    """The areas of ``rules``: catalogue order first, then any other in order of appearance."""
    present = {r.area for r in rules}
    ordered = [a for a in AREAS if a in present]
    for rule in rules:
        if rule.area not in ordered:
            ordered.append(rule.area)
    return ordered


def _assemble(run: RunInfo, results: Sequence[RuleResult]) -> Report:
    rules = [r.rule for r in results]
    areas = {a: _counts([r for r in results if r.rule.area == a]) for a in _area_ids(rules)}
    return Report(SCHEMA_VERSION, run, tuple(results), _counts(results), areas)


def _read_run(path: Path) -> RunInfo:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(
            f"{path} is missing: a report is built from a run directory that the conformance "
            "plugin wrote (run.json, records.jsonl); name such a directory"
        ) from None
    except (OSError, ValueError) as e:
        raise ReportError(f"{path} cannot be read as JSON: {e}") from e
    if not isinstance(data, dict):
        raise ReportError(f"{path} holds {type(data).__name__}, not the run object the plugin writes")
    try:
        return RunInfo.from_dict(data)
    except TypeError as e:
        raise ReportError(f"{path} is not a run.json the plugin writes: {e}") from e


def build(run_dir: Path, rules: Sequence[Rule] = RULES) -> Report:
    """The report of the run in ``run_dir`` (its ``run.json`` and ``records.jsonl``).

    A rule with no record is ``not-run``: when ``run.selection`` is non-empty, with reason
    "not selected" if the selection left it out and "no test ran" if it was selected; when the
    run stopped early (``run.stopped``), a selected rule without a record says so. A rule left
    out of the selection that has records anyway (preflight always runs) keeps its verdict.
    Records for rule ids not in ``rules`` are logged and left out.

    Raises :class:`ReportError` when ``run.json`` is missing or unreadable.
    """
    run = _read_run(run_dir / "run.json")
    records = read_records(run_dir / "records.jsonl")
    known = {r.id for r in rules}
    strays = sorted({t.rule for t in records} - known)
    if strays:
        log.warning("records of rules not in the catalogue left out of the report: %s", ", ".join(strays))
    no_test = f"{NO_TEST}: the run stopped early ({run.stopped})" if run.stopped else NO_TEST
    results = rule_results(records, rules, not_run_reason=no_test)
    if run.selection:
        selected = set(run.selection)
        results = [
            RuleResult(r.rule, r.outcome, NOT_SELECTED, r.duration_s, r.tests)
            if r.outcome == "not-run" and r.rule.id not in selected
            else r
            for r in results
        ]
    return _assemble(run, results)


def iso_utc(unix: float) -> str:
    """``unix`` time as ISO 8601 in UTC to the second (``2025-05-01T12:00:00Z``)."""
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def fmt_duration(seconds: float) -> str:
    """A duration for people: ``0.4 s``, ``12 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def run_duration(run: RunInfo) -> float:
    """Seconds from start to finish; 0.0 for a run that has not finished (or has no start)."""
    if run.finished and run.started:
        return max(0.0, run.finished - run.started)
    return 0.0


def clip(text: str, max_lines: int, max_chars: int) -> str:
    """``text`` cut to about ``max_lines`` lines and ``max_chars`` characters, with a note.

    Keeps the start and, at twice the length, the end (a log's end says most about a failure),
    with a line between them that says how much was left out and where the whole text is.
    """
    lines = text.splitlines()
    if len(lines) <= max_lines and len(text) <= max_chars:
        return text
    head_budget = max_chars // 3
    if len(lines) > max_lines:
        keep_head = max(1, max_lines // 3)
        head = "\n".join(lines[:keep_head])[:head_budget]
        tail = "\n".join(lines[keep_head - max_lines :])
        tail = tail[len(tail) - (max_chars - len(head)) :] if len(head) + len(tail) > max_chars else tail
    else:
        head, tail = text[:head_budget], text[len(text) - (max_chars - head_budget) :]
    lines_left = len(lines) - (head.count("\n") + tail.count("\n") + 2)
    what = f"{lines_left} of {len(lines)} lines, " if lines_left > 0 else ""
    chars = f"{len(text) - len(head) - len(tail)} of {len(text)} characters"
    note = f"[... left out here: {what}{chars}; conformance.json has the whole text ...]"
    return f"{head}\n{note}\n{tail}"


# -- conformance.json ----------------------------------------------------------------------------


def _test_dict(test: TestRecord) -> dict[str, Any]:
    return {
        "nodeid": test.nodeid,
        "outcome": test.outcome,
        "reason": test.reason,
        "duration_s": test.duration_s,
        "started_unix": test.started,
        "longrepr": test.longrepr,
        "diagnostics": dict(test.diagnostics),
        "measures": dict(test.measures),
    }


def _rule_dict(result: RuleResult) -> dict[str, Any]:
    rule = result.rule
    return {
        "id": rule.id,
        "area": rule.area,
        "sentence": rule.sentence,
        "needs": list(rule.needs),
        "since": rule.since,
        "upstream": rule.upstream,
        "outcome": result.outcome,
        "reason": result.reason,
        "duration_s": result.duration_s,
        "tests": [_test_dict(t) for t in result.tests],
    }


def to_dict(report: Report) -> dict[str, Any]:
    """The ``conformance.json`` object of ``report`` (see ``docs/report-schema.md``)."""
    run = report.run
    return {
        "schema_version": report.schema_version,
        "run_id": run.run_id,
        "driver": run.driver,
        "profile": run.profile,
        "profile_path": run.profile_path,
        "kubernetes_version": run.kubernetes_version,
        "tier": run.tier,
        "nodes": list(run.nodes),
        "started": iso_utc(run.started),
        "started_unix": run.started,
        "finished": iso_utc(run.finished) if run.finished else None,
        "finished_unix": run.finished,
        "duration_s": run_duration(run),
        "selection": list(run.selection),
        "known_failures": dict(run.known_failures),
        "stopped": run.stopped,
        "ok": report.ok,
        "totals": dict(report.totals),
        "areas": {area: dict(counts) for area, counts in report.areas.items()},
        "rules": [_rule_dict(r) for r in report.rules],
    }


def _outcome(value: object, allowed: Sequence[str], where: str) -> Any:
    if value not in allowed:
        raise ReportError(f"{where}: outcome {value!r} is not one of {', '.join(allowed)}")
    return value


def _test_from(data: Mapping[str, Any], rule_id: str) -> TestRecord:
    outcome: TestOutcome = _outcome(data["outcome"], TEST_OUTCOMES, f"test {data.get('nodeid')!r}")
    return TestRecord(
        nodeid=str(data["nodeid"]),
        rule=rule_id,
        outcome=outcome,
        reason=str(data["reason"]),
        duration_s=float(data["duration_s"]),
        started=float(data.get("started_unix", 0.0)),
        longrepr=str(data["longrepr"]),
        diagnostics={str(k): str(v) for k, v in data["diagnostics"].items()},
        measures={str(k): float(v) for k, v in (data.get("measures") or {}).items()},
    )


def _rule_from(data: Mapping[str, Any]) -> RuleResult:
    rule = Rule(
        id=str(data["id"]),
        area=str(data["area"]),
        sentence=str(data["sentence"]),
        needs=tuple(str(n) for n in data["needs"]),
        since=str(data.get("since", "-")),
        upstream=str(data.get("upstream", "-")),
    )
    outcome: RuleOutcome = _outcome(data["outcome"], RULE_OUTCOMES, f"rule {rule.id}")
    tests = tuple(_test_from(t, rule.id) for t in data["tests"])
    return RuleResult(rule, outcome, str(data["reason"]), float(data["duration_s"]), tests)


def from_dict(data: Mapping[str, Any]) -> Report:
    """The report of a ``conformance.json`` object; the counts are recomputed from the rules.

    Raises :class:`ReportError` for another ``schema_version`` or a missing or mistyped key.
    """
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportError(
            f"schema_version {version!r} is not one this dra-conformance reads (it reads "
            f"{SCHEMA_VERSION}); read it with the dra-conformance that wrote it, or build the "
            "report again from its run directory"
        )
    try:
        run = RunInfo(
            run_id=str(data["run_id"]),
            driver=str(data["driver"]),
            profile=str(data["profile"]),
            profile_path=str(data["profile_path"]),
            kubernetes_version=str(data["kubernetes_version"]),
            tier=str(data["tier"]),
            nodes=tuple(str(n) for n in data["nodes"]),
            started=float(data["started_unix"]),
            finished=float(data["finished_unix"]),
            selection=tuple(str(s) for s in data["selection"]),
            known_failures={str(k): str(v) for k, v in data["known_failures"].items()},
            stopped=str(data["stopped"]),
        )
        results = [_rule_from(r) for r in data["rules"]]
    except KeyError as e:
        raise ReportError(f"the key {e} is missing") from e
    except (TypeError, ValueError, AttributeError) as e:
        raise ReportError(f"a value has the wrong type: {e}") from e
    return _assemble(run, results)


def load(path: Path) -> Report:
    """The report in ``path``: a ``conformance.json`` file, or a run directory holding one.

    Raises :class:`ReportError` naming the file when it is missing, not JSON, of an unknown
    ``schema_version``, or not a report.
    """
    if path.is_dir():
        path = path / "conformance.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path} does not exist: write it with conformance.report.write()") from None
    except (OSError, ValueError) as e:
        raise ReportError(f"{path} cannot be read as JSON: {e}") from e
    if not isinstance(data, dict):
        raise ReportError(f"{path} holds {type(data).__name__}, not a conformance report object")
    try:
        return from_dict(data)
    except ReportError as e:
        raise ReportError(f"{path}: {e}") from e


# -- writing -------------------------------------------------------------------------------------


def write(report: Report, run_dir: Path) -> None:
    """Write ``conformance.json``, ``conformance.md`` and ``index.html`` into ``run_dir``."""
    # the renderers import this module for the model: import them here, not at the top
    from conformance.report import htmlpage as reporthtml
    from conformance.report import markdown as reportmd

    write_atomic(run_dir / "conformance.json", json.dumps(to_dict(report), indent=2) + "\n")
    write_atomic(run_dir / "conformance.md", reportmd.render(report))
    write_atomic(run_dir / "index.html", reporthtml.render(report))


def summary_table(report: Report) -> str:
    """A plain-text table: one row per area, a column per outcome, and a total row."""
    header = ["area", *DISPLAY_ORDER]
    rows = [[area, *(str(counts[o]) for o in DISPLAY_ORDER)] for area, counts in report.areas.items()]
    rows.append(["total", *(str(report.totals[o]) for o in DISPLAY_ORDER)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows[:-1]), rule, line(rows[-1])])


def _property_escape(text: str, key: bool = False) -> str:
    """Java ``.properties`` escaping (what Allure reads), ASCII only."""
    out = []
    for i, ch in enumerate(text):
        if ch in "\\=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ch in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[ch])
        elif ord(ch) > 0x7E or ord(ch) < 0x20:
            out.append("".join(f"\\u{unit:04x}" for unit in _utf16(ch)))
        else:
            out.append(ch)
    return "".join(out)


def _utf16(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def write_allure_environment(run: RunInfo, allure_dir: Path) -> None:
    """Write Allure's ``environment.properties`` (Kubernetes, tier, driver, profile, nodes)."""
    values = {
        "Kubernetes": run.kubernetes_version,
        "Tier": run.tier,
        "Driver": run.driver,
        "Profile": run.profile,
        "Nodes": ", ".join(run.nodes),
        "Run": run.run_id,
    }
    text = "".join(f"{_property_escape(k, key=True)}={_property_escape(v)}\n" for k, v in values.items())
    write_atomic(allure_dir / "environment.properties", text)
