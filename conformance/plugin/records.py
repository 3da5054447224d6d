"""A test's record (:class:`~conformance.report.TestRecord`) from its setup, call and teardown reports.

The test of a SHOULD rule runs under a non-strict xfail marker whose reason starts with
:data:`ADVISORY` (:func:`advisory_reason`), so a failure of it is neither a failure in pytest's
exit status, JUnit or Allure (an expected failure, with the rule's source) nor in the record
(``advisory``, with the failure's message); when it passes, its record says ``passed``.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.catalogue import Rule
from conformance.harness import MEASURE_PREFIX, PARTIAL_PROPERTY
from conformance.report import TestRecord

__all__ = ["ADVISORY", "LANE_GROUP", "advisory_reason", "plain_nodeid", "record_of"]

ADVISORY = "advisory (SHOULD rule"
"""How the xfail reason of a SHOULD rule's test begins."""


LANE_GROUP = "lane-"
"""The xdist group name of a lane, with its number after it (``lane-0``)."""


def plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@lane-N`` xdist's ``--dist loadgroup`` appends to a grouped test's."""
    head, sep, group = nodeid.rpartition(f"@{LANE_GROUP}")
    return head if sep and group.isdigit() else nodeid


def advisory_reason(rule: Rule, known_failure: str | None = None) -> str:
    """The xfail reason of ``rule``'s tests, a SHOULD rule: a failure is an advisory; its source,
    and the profile's reason when the rule is one of its known failures."""
    known = f"; known failure: {known_failure}" if known_failure else ""
    return f"{ADVISORY} {rule.id}: fails no driver; source: {rule.source or '-'}){known}"


def record_of(phases: list[pytest.TestReport]) -> TestRecord | None:
    """One record from the setup, call and teardown reports of a test; None for a test of no rule."""
    props: dict[str, Any] = {
        str(p[0]): p[1] for r in phases for p in r.user_properties if isinstance(p, tuple) and len(p) == 2
    }
    rule = props.get("dra_rule")
    if not rule:
        return None
    outcome, reason, longrepr = "passed", "", ""
    for r in phases:
        wasxfail = getattr(r, "wasxfail", None)
        if wasxfail is not None and str(wasxfail).startswith(ADVISORY):
            if r.skipped:  # failed, in its call or its setup (e.g. a device left tainted before it)
                outcome, reason, longrepr = "advisory", _crash_message(r), str(r.longrepr)
        elif r.when == "call" and wasxfail is not None:
            outcome, reason = ("xfailed", wasxfail) if r.skipped else ("xpassed", wasxfail)
        elif r.skipped and outcome == "passed":
            outcome, reason = "skipped", _skip_reason(r)
        elif r.failed and outcome in ("passed", "xpassed"):
            outcome = "failed" if r.when == "call" else "error"
            reason, longrepr = _crash_message(r), str(r.longrepr)
    if outcome == "passed" and props.get(PARTIAL_PROPERTY):
        outcome, reason = "partial", str(props[PARTIAL_PROPERTY])
    return TestRecord(
        nodeid=plain_nodeid(phases[0].nodeid),
        rule=str(rule),
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        duration_s=round(sum(r.duration for r in phases), 3),
        started=float(getattr(phases[0], "start", 0.0)),
        longrepr=longrepr,
        diagnostics={str(k): str(v) for k, v in dict(props.get("dra_diagnostics") or {}).items()},
        measures={
            k.removeprefix(MEASURE_PREFIX): float(v) for k, v in props.items() if k.startswith(MEASURE_PREFIX)
        },
    )


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _crash_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or report.longrepr)
    return message.splitlines()[0][:500] if message else ""
