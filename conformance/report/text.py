"""What every rendering of a report shares: times, durations, clipped text, the outcome order, the summary."""

from __future__ import annotations

from datetime import UTC, datetime

from conformance.report.model import Report
from conformance.report.results import RuleOutcome, RunInfo

__all__ = [
    "DISPLAY_ORDER",
    "clip",
    "fmt_duration",
    "gates_text",
    "iso_utc",
    "run_duration",
    "suite_text",
    "summary_table",
    "verdict_lines",
]

DISPLAY_ORDER: tuple[RuleOutcome, ...] = (
    "passed",
    "partial",
    "failed",
    "skipped",
    "expected-failure",
    "unexpected-pass",
    "advisory",
    "not-run",
)
"""The order of the outcome columns in every table a person reads (JSON keeps worst first)."""


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


def suite_text(run: RunInfo) -> str:
    """The suite that ran, for people: ``dra-conformance 0.1.0, commit 1680188e...`` (``-`` when the
    run predates these fields)."""
    if not run.suite_version:
        return "-"
    return f"dra-conformance {run.suite_version}" + (
        f", commit {run.suite_commit}" if run.suite_commit else ""
    )


def gates_text(run: RunInfo) -> str:
    """The DRA feature gates of the cluster, for people: ``on: A, B; off: C`` (``-`` when unknown)."""
    on = sorted(name for name, value in run.feature_gates.items() if value)
    off = sorted(name for name, value in run.feature_gates.items() if not value)
    parts = ([f"on: {', '.join(on)}"] if on else []) + ([f"off: {', '.join(off)}"] if off else [])
    return "; ".join(parts) or "-"


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


def verdict_lines(report: Report, limit: int = 0) -> list[str]:
    """The verdict for a terminal: ``Result: <headline>``, then a line per rule not checked (or
    failed) with why, and the rules the profile does not claim (``limit``: see
    :meth:`~conformance.report.verdict.Verdict.lines`)."""
    lines = report.verdict.lines(limit)
    return [f"Result: {lines[0]}", *lines[1:]]
