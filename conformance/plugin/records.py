"""A test's record (:class:`~conformance.report.TestRecord`) from its setup, call and teardown reports."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.harness import MEASURE_PREFIX, PARTIAL_PROPERTY
from conformance.report import TestRecord

__all__ = ["record_of"]


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
        if r.when == "call" and wasxfail is not None:
            outcome, reason = ("xfailed", wasxfail) if r.skipped else ("xpassed", wasxfail)
        elif r.skipped and outcome == "passed":
            outcome, reason = "skipped", _skip_reason(r)
        elif r.failed and outcome in ("passed", "xpassed"):
            outcome = "failed" if r.when == "call" else "error"
            reason, longrepr = _crash_message(r), str(r.longrepr)
    if outcome == "passed" and props.get(PARTIAL_PROPERTY):
        outcome, reason = "partial", str(props[PARTIAL_PROPERTY])
    return TestRecord(
        nodeid=phases[0].nodeid,
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
