"""What changed between two runs of one driver: the rules whose verdict changed, new failures first.

For a CI gate (fail when a change of the driver breaks a rule that held) and for a vendor who
proves a fix (``dra-conformance run --rerun-failed``, then compare the two runs). A rule that a
run did not select (``not-run``, "not selected") is not in that run: it is compared only when it
failed in the later run, which is then a new failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from conformance.errors import UsageError
from conformance.report.model import NOT_SELECTED, Report
from conformance.report.results import RuleOutcome, RuleResult

__all__ = ["Change", "ChangeKind", "Comparison", "compare"]

ChangeKind = Literal["new-failure", "fixed", "changed"]
"""``new-failure`` (failed now, not before), ``fixed`` (failed before, passes now), ``changed``
(any other verdict change)."""

_ORDER: dict[ChangeKind, int] = {"new-failure": 0, "fixed": 1, "changed": 2}


@dataclass(frozen=True)
class Change:
    """One rule whose verdict differs between the runs."""

    rule: str
    """The rule id."""
    kind: ChangeKind
    """What sort of change it is."""
    before: RuleOutcome | None
    """Its verdict in the earlier run; None when that run did not have it."""
    after: RuleOutcome
    """Its verdict in the later run."""
    reason: str
    """Why, as the later run says (a failure's message, a skip's reason)."""


@dataclass(frozen=True)
class Comparison:
    """The changes from one run to another."""

    before: Report
    """The earlier run (``RUN_A``)."""
    after: Report
    """The later run (``RUN_B``)."""
    changes: tuple[Change, ...]
    """New failures, then fixed rules, then other changes; catalogue order within each."""
    unchanged: int
    """Rules both runs have, with the same verdict."""
    not_compared: tuple[str, ...]
    """Rules one of the runs does not have (not selected, or not in its catalogue)."""

    @property
    def new_failures(self) -> tuple[Change, ...]:
        """The rules that fail in the later run and did not before."""
        return tuple(c for c in self.changes if c.kind == "new-failure")


def _present(results: tuple[RuleResult, ...]) -> dict[str, RuleResult]:
    return {r.rule.id: r for r in results if not (r.outcome == "not-run" and r.reason == NOT_SELECTED)}


def compare(before: Report, after: Report) -> Comparison:
    """The changes from ``before`` to ``after``.

    Raises :class:`~conformance.errors.UsageError` when the runs are of different drivers.
    """
    if before.run.driver != after.run.driver:
        raise UsageError(
            f"run {before.run.run_id} is of driver {before.run.driver} and run {after.run.run_id} of "
            f"driver {after.run.driver}: compare two runs of one driver"
        )
    old, new = _present(before.rules), _present(after.rules)
    order = [r.rule.id for r in after.rules] + [r.rule.id for r in before.rules]
    ids = list(dict.fromkeys(order))
    changes, unchanged, not_compared = [], 0, []
    for rule_id in ids:
        a, b = old.get(rule_id), new.get(rule_id)
        if b is None or (a is None and b.outcome != "failed"):
            if a is not None or b is not None:
                not_compared.append(rule_id)
            continue
        if a is not None and a.outcome == b.outcome:
            unchanged += 1
            continue
        was = a.outcome if a is not None else None
        kind: ChangeKind = "changed"
        if b.outcome == "failed":
            kind = "new-failure"
        elif was == "failed" and b.outcome == "passed":
            kind = "fixed"
        changes.append(Change(rule_id, kind, was, b.outcome, b.reason))
    position = {rule_id: i for i, rule_id in enumerate(ids)}
    changes.sort(key=lambda c: (_ORDER[c.kind], position[c.rule]))
    return Comparison(before, after, tuple(changes), unchanged, tuple(not_compared))
