"""``conformance.json``: the report as the JSON object ``docs/report-schema.md`` names, and read back.

:func:`to_dict` writes every key; :func:`from_dict` and :func:`load` read one back (the counts
recomputed from the rules) and refuse another ``schema_version``, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conformance.catalogue import Rule
from conformance.report.model import SCHEMA_VERSION, Report, ReportError, assemble
from conformance.report.results import (
    RULE_OUTCOMES,
    TEST_OUTCOMES,
    RuleOutcome,
    RuleResult,
    RunInfo,
    TestOutcome,
    TestRecord,
)
from conformance.report.text import iso_utc, run_duration

__all__ = ["from_dict", "load", "to_dict"]


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
        "level": rule.level,
        "source": rule.source,
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
        "suite_version": run.suite_version,
        "suite_commit": run.suite_commit,
        "profile_sha256": run.profile_sha256,
        "feature_gates": dict(run.feature_gates),
        "capabilities": None if run.capabilities is None else list(run.capabilities),
        "strict": run.strict,
        "ok": report.ok,
        "verdict": report.verdict.to_dict(),
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
        level="SHOULD" if data.get("level") == "SHOULD" else "MUST",
        source=str(data.get("source", "")),
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
            # added within schema 1: absent from older reports
            suite_version=str(data.get("suite_version", "")),
            suite_commit=str(data.get("suite_commit", "")),
            profile_sha256=str(data.get("profile_sha256", "")),
            feature_gates={str(k): bool(v) for k, v in (data.get("feature_gates") or {}).items()},
            capabilities=None
            if data.get("capabilities") is None
            else tuple(str(c) for c in data["capabilities"]),
            strict=bool(data.get("strict", False)),
        )
        results = [_rule_from(r) for r in data["rules"]]
    except KeyError as e:
        raise ReportError(f"the key {e} is missing") from e
    except (TypeError, ValueError, AttributeError) as e:
        raise ReportError(f"a value has the wrong type: {e}") from e
    return assemble(run, results)


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
