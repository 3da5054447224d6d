"""``conformance.md``: the report as Markdown, for a pull request, a ticket or a terminal.

A heading with the verdict and the run's facts, the capability matrix (area x outcome counts), the
rules not checked and those the profile does not claim, a table per area,
then every failed rule with its message and diagnostics in fenced blocks (long ones clipped; the
whole text stays in ``conformance.json``) and the unexpected passes.
"""

from __future__ import annotations

import re

from conformance.catalogue import AREAS, by_id
from conformance.report.model import Report
from conformance.report.results import RuleResult, TestRecord
from conformance.report.text import (
    DISPLAY_ORDER,
    clip,
    fmt_duration,
    gates_text,
    iso_utc,
    run_duration,
    suite_text,
)

__all__ = ["render"]

LONGREPR_LINES, LONGREPR_CHARS = 80, 8000
DIAGNOSTIC_LINES, DIAGNOSTIC_CHARS = 60, 6000
CELL_CHARS = 160


def _text(text: str) -> str:
    """Prose that Markdown must not read as HTML (``<none>`` in kubectl output) or a table edge."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _cell(text: str) -> str:
    """One table cell: the first line, cut to :data:`CELL_CHARS`."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if len(first) > CELL_CHARS or "\n" in text.strip():
        first = first[: CELL_CHARS - 1].rstrip() + "…"
    return _text(first)


def _fenced(text: str) -> str:
    """``text`` in a fenced block whose fence is longer than any backtick run in it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _verdict(report: Report) -> str:
    counts = ", ".join(f"{n} {o}" for o in DISPLAY_ORDER if (n := report.totals[o]))
    return f"**Result: {_text(report.verdict.headline())}** ({counts})."


def _verdict_lists(report: Report) -> list[str]:
    """What keeps the run from CONFORMANT (rules not checked, and why), and what the profile does
    not claim; nothing for a run that checked every rule in scope."""
    verdict = report.verdict
    out: list[str] = []
    if verdict.not_checked:
        out += ["", f"## Not checked ({len(verdict.not_checked)})", ""]
        out += ["These rules neither passed nor failed: the run cannot vouch for them.", ""]
        out += ["| rule | outcome | why |", "|---|---|---|"]
        out += [f"| {u.rule} | {u.outcome} | {_cell(u.reason)} |" for u in verdict.not_checked]
    if verdict.advisories:
        out += ["", f"## Advisories ({len(verdict.advisories)})", ""]
        out += ["SHOULD rules the driver does not follow: advice, not failures (`--strict` counts them).", ""]
        out += ["| rule | why | source |", "|---|---|---|"]
        out += [
            f"| {u.rule} | {_cell(u.reason)} | {_cell(by_id(u.rule).source)} |" for u in verdict.advisories
        ]
    if verdict.not_claimed:
        out += ["", f"## Not claimed by the profile ({len(verdict.not_claimed)})", ""]
        out += [f"- {u.rule}: {_cell(u.reason)}" for u in verdict.not_claimed]
    return out


def _heading(report: Report) -> list[str]:
    run = report.run
    took = run_duration(run)
    date = iso_utc(run.started) + (f", took {fmt_duration(took)}" if took else ", did not finish")
    facts = [
        ("Driver", f"`{run.driver}`"),
        ("Profile", _text(run.profile) + (f" (`{run.profile_path}`)" if run.profile_path else "")),
        ("Profile SHA-256", f"`{run.profile_sha256}`" if run.profile_sha256 else "-"),
        ("Kubernetes", _text(run.kubernetes_version)),
        ("Feature gates", _text(gates_text(run))),
        ("Tier", _text(run.tier)),
        ("Nodes", _text(", ".join(run.nodes)) or "-"),
        ("Date", date),
        ("Run", f"`{run.run_id}`"),
        ("Suite", _text(suite_text(run))),
        ("Selection", _text(", ".join(run.selection)) if run.selection else "every rule"),
    ]
    out = [f"# DRA driver conformance: {_text(run.driver)}", "", _verdict(report), "", "| | |", "|---|---|"]
    out += [f"| {name} | {value} |" for name, value in facts]
    if run.stopped:
        out += ["", f"> **The run stopped early:** {_text(run.stopped)}"]
    return out


def _matrix(report: Report) -> list[str]:
    head = ["area", "", *DISPLAY_ORDER, "total"]
    out = [
        "## Capability matrix",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * 2 + "--:|" * (len(head) - 2),
    ]
    for area, counts in report.areas.items():
        title = AREAS[area].title if area in AREAS else ""
        cells = [str(counts[o]) for o in DISPLAY_ORDER]
        out.append(f"| {area} | {_text(title)} | {' | '.join(cells)} | {sum(counts.values())} |")
    totals = [f"**{report.totals[o]}**" for o in DISPLAY_ORDER]
    out.append(f"| **total** | | {' | '.join(totals)} | **{len(report.rules)}** |")
    return out


def _area_tables(report: Report) -> list[str]:
    out: list[str] = []
    for area in report.areas:
        title = AREAS[area].title if area in AREAS else area
        out += [
            "",
            f"## {area}: {_text(title)}",
            "",
            "| rule | level | outcome | reason | duration |",
            "|---|---|---|---|--:|",
        ]
        for result in (r for r in report.rules if r.rule.area == area):
            took = fmt_duration(result.duration_s) if result.tests else ""
            rule = result.rule
            out.append(f"| {rule.id} | {rule.level} | {result.outcome} | {_cell(result.reason)} | {took} |")
    return out


def _failed_test(test: TestRecord) -> list[str]:
    out = ["", f"**`{test.nodeid}`** ({test.outcome}, {fmt_duration(test.duration_s)}): {_cell(test.reason)}"]
    if test.longrepr:
        out += ["", _fenced(clip(test.longrepr, LONGREPR_LINES, LONGREPR_CHARS))]
    for name, text in test.diagnostics.items():
        out += [
            "",
            f"*{_text(name)}*",
            "",
            _fenced(clip(text, DIAGNOSTIC_LINES, DIAGNOSTIC_CHARS) or "(empty)"),
        ]
    return out


def _failure(result: RuleResult) -> list[str]:
    out = ["", f"### {result.rule.id}", "", f"> {_text(result.rule.sentence)}"]
    for test in result.tests:
        if test.outcome in ("failed", "error"):
            out += _failed_test(test)
    return out


def _failures(report: Report) -> list[str]:
    failed = [r for r in report.rules if r.outcome == "failed"]
    unexpected = [r for r in report.rules if r.outcome == "unexpected-pass"]
    out: list[str] = []
    if failed:
        out += ["", "## Failures"]
        for result in failed:
            out += _failure(result)
    if unexpected:
        out += ["", "## Unexpected passes", ""]
        out += ["These rules are known failures of the profile, yet their tests passed: take them off"]
        out += ["the profile's known failures.", ""]
        for result in unexpected:
            known = report.run.known_failures.get(result.rule.id, result.reason)
            out.append(f"- {result.rule.id}: known failure: {_cell(known)}")
    return out


def render(report: Report) -> str:
    """The ``conformance.md`` text of ``report``."""
    lines = [
        *_heading(report),
        "",
        *_matrix(report),
        *_verdict_lists(report),
        *_area_tables(report),
        *_failures(report),
    ]
    return "\n".join(lines) + "\n"
