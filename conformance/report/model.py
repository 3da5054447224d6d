"""The report model of a run: one verdict per catalogue rule, with the run's facts and the counts.

:func:`build` reads what the pytest plugin left in a run directory (``run.json``,
``records.jsonl``) and folds it into a :class:`Report`: one verdict per catalogue rule plus the
counts per area and in total. The model imports no renderer: :mod:`conformance.report.writing`
puts it on disk (JSON, Markdown, HTML), and the renderers import the model.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from conformance.catalogue import AREAS, RULES, Rule
from conformance.errors import ConformanceError
from conformance.report.results import (
    RULE_OUTCOMES,
    RuleOutcome,
    RuleResult,
    RunInfo,
    read_records,
    rule_results,
)
from conformance.report.verdict import Verdict, judge

__all__ = ["NOT_SELECTED", "SCHEMA_VERSION", "Report", "ReportError", "assemble", "build"]

log = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 1
"""The ``schema_version`` of the reports built here; the only one ``conformance.json`` is read in."""

NOT_SELECTED: Final = "not selected"
"""The reason of a rule the run left out (``--rules``, ``-m``, ``--skip``)."""
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

    @property
    def verdict(self) -> Verdict:
        """What the run shows: conformant at which levels, incomplete, or not conformant (computed
        from the rules, so a report of any age has one)."""
        return judge(self.run, self.rules)


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


def assemble(run: RunInfo, results: Sequence[RuleResult]) -> Report:
    """The report of ``results``: the counts per area (catalogue order first) and in total."""
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
    return assemble(run, results)
