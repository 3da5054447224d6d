"""``index.html``: the report as one self-contained page, to read on screen or to print.

No network: inline CSS and a few lines of inline JavaScript, allowed by a Content-Security-Policy
that names their hashes (so nothing else on the page could run even if escaping failed), and every
piece of text escaped with :func:`html.escape`. The page holds the run's facts, the capability
matrix coloured by outcome, buttons that filter the rules by outcome, and a ``<details>`` per
rule with its sentence, its tests and, for failures, the traceback and diagnostics (long ones
clipped; ``conformance.json`` keeps the whole text). Without JavaScript everything is shown;
printing opens the failed rules (a diagnostic prints open only when its reader opened it).
"""

from __future__ import annotations

import base64
import hashlib
from html import escape

from conformance.catalogue import AREAS
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

LONGREPR_LINES, LONGREPR_CHARS = 300, 30_000
DIAGNOSTIC_LINES, DIAGNOSTIC_CHARS = 400, 60_000

LABELS = {
    "passed": "passed",
    "partial": "partial",
    "failed": "failed",
    "skipped": "skipped",
    "expected-failure": "expected failure",
    "unexpected-pass": "unexpected pass",
    "advisory": "advisory",
    "not-run": "not run",
}

CSS = (
    """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg-soft: #f6f8fa;
  --passed: #1a7f37; --passed-bg: #dafbe1; --failed: #cf222e; --failed-bg: #ffebe9;
  --skipped: #0969da; --skipped-bg: #ddf4ff; --expected-failure: #8250df; --expected-failure-bg: #fbefff;
  --unexpected-pass: #9a6700; --unexpected-pass-bg: #fff8c5; --partial: #1b7c83; --partial-bg: #d8f3f6;
  --advisory: #bc4c00; --advisory-bg: #fff1e5; --not-run: #59636e; --not-run-bg: #eff2f5; }
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--fg); margin: 0 auto; max-width: 72rem; padding: 1.5rem; }
h1 { font-size: 1.6rem; margin: 0 0 .5rem; } h2 { font-size: 1.2rem; margin: 1.8rem 0 .5rem; }
code, pre, .id { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; }
.verdict { display: inline-block; font-weight: 600; padding: .3rem .8rem; border-radius: 6px; }
.verdict.pass { background: var(--passed-bg); color: var(--passed); }
.verdict.fail { background: var(--failed-bg); color: var(--failed); }
.verdict.incomplete { background: var(--skipped-bg); color: var(--skipped); }
.stopped { border-left: 4px solid var(--failed); background: var(--failed-bg); padding: .5rem .8rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: 1rem 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
table { border-collapse: collapse; }
th, td { border: 1px solid var(--line); padding: .25rem .6rem; text-align: left; vertical-align: top; }
.matrix td.n, .matrix th.n { text-align: right; min-width: 4.5rem; }
.matrix tfoot td { font-weight: 600; }
.matrix td.zero { color: #aab4be; }
.matrix a { color: inherit; }
"""
    + "".join(
        f".o-{o} {{ color: var(--{o}); }} .matrix td.n.o-{o}:not(.zero), .badge.o-{o} "
        f"{{ background: var(--{o}-bg); color: var(--{o}); }}\n"
        for o in DISPLAY_ORDER
    )
    + """
.badge { display: inline-block; padding: 0 .45rem; border-radius: 1rem; font-size: .85em;
  white-space: nowrap; }
.filters { display: none; gap: .4rem; flex-wrap: wrap; margin: 1rem 0; }
.js .filters { display: flex; }
.filters button { font: inherit; border: 1px solid var(--line); background: #fff; border-radius: 1rem;
  padding: .15rem .8rem; cursor: pointer; }
.filters button[aria-pressed="true"] { background: var(--fg); color: #fff; border-color: var(--fg); }
details.rule { border: 1px solid var(--line); border-radius: 6px; margin: .3rem 0; }
details.rule > summary { display: grid; grid-template-columns: 19rem 8.5rem minmax(0, 1fr) 5rem;
  gap: .6rem; padding: .35rem .6rem .35rem 1.5rem; cursor: pointer; list-style: none; position: relative; }
details.rule > summary::-webkit-details-marker { display: none; }
details.rule > summary::before { content: "\\25B8"; position: absolute; left: .5rem; top: .35rem;
  color: var(--muted); }
details.rule[open] > summary::before { content: "\\25BE"; }
details.rule > summary .reason { overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
  color: var(--muted); }
details.rule > summary .took { text-align: right; color: var(--muted); }
.body { padding: .2rem 1rem 1rem; border-top: 1px solid var(--line); background: var(--bg-soft); }
.sentence { font-style: italic; }
.meta { color: var(--muted); }
pre { background: #fff; border: 1px solid var(--line); padding: .5rem; overflow: auto; max-height: 30rem;
  white-space: pre-wrap; word-break: break-word; font-size: 12px; }
details.diag > summary { cursor: pointer; margin: .4rem 0; }
footer { margin-top: 2rem; color: var(--muted); font-size: .85em; }
@media print {
  @page { margin: 14mm; }
  body { max-width: none; padding: 0; font-size: 10pt; }
  .js .filters, .noprint { display: none; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  pre { max-height: none; overflow: visible; }
  details.rule { break-inside: avoid; border-radius: 0; }
  details.rule[open] { break-inside: auto; }
  tr { break-inside: avoid; }
  details.rule > summary::before { content: ""; }
  h2 { break-after: avoid; }
}
"""
)

SCRIPT = """
document.documentElement.classList.add("js");
const buttons = [...document.querySelectorAll(".filters button")];
function show(outcome) {
  for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.filter === outcome));
  for (const r of document.querySelectorAll("details.rule"))
    r.hidden = outcome !== "all" && r.dataset.outcome !== outcome;
  for (const s of document.querySelectorAll("section.area"))
    s.hidden = !s.querySelector("details.rule:not([hidden])");
}
for (const b of buttons) b.addEventListener("click", () => show(b.dataset.filter));
let openedForPrint = [];
addEventListener("beforeprint", () => {
  openedForPrint = [...document.querySelectorAll('details.rule[data-outcome="failed"]:not([open])')];
  for (const d of openedForPrint) d.open = true;
});
addEventListener("afterprint", () => {
  for (const d of openedForPrint) d.open = false;
  openedForPrint = [];
});
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _badge(outcome: str) -> str:
    return f'<span class="badge o-{_e(outcome)}">{_e(LABELS.get(outcome, outcome))}</span>'


def _title(area: str) -> str:
    return AREAS[area].title if area in AREAS else area


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _header(report: Report) -> str:
    run = report.run
    took = run_duration(run)
    found = report.verdict
    kind = {"CONFORMANT": "pass", "INCOMPLETE": "incomplete"}.get(found.state, "fail")
    verdict = f'<p class="verdict {kind}">{_e(found.headline())}</p>'
    if found.not_checked:
        items = "".join(
            f"<li><code>{_e(u.rule)}</code> {_e(u.outcome)}: {_e(_first_line(u.reason))}</li>"
            for u in found.not_checked
        )
        summary = f"<summary>{len(found.not_checked)} not checked</summary>"
        verdict += f'<details class="unchecked">{summary}<ul>{items}</ul></details>'
    if found.advisories:
        items = "".join(
            f"<li><code>{_e(u.rule)}</code>: {_e(_first_line(u.reason))}</li>" for u in found.advisories
        )
        summary = f"<summary>{len(found.advisories)} advisory(ies): SHOULD rules failed, no failure</summary>"
        verdict += f'<details class="advisories">{summary}<ul>{items}</ul></details>'
    if found.not_claimed:
        names = ", ".join(u.rule for u in found.not_claimed)
        verdict += f'<p class="unclaimed">Not claimed by the profile: {_e(names)}</p>'
    facts = [
        ("Driver", f"<code>{_e(run.driver)}</code>"),
        (
            "Profile",
            _e(run.profile) + (f" (<code>{_e(run.profile_path)}</code>)" if run.profile_path else ""),
        ),
        ("Profile SHA-256", f"<code>{_e(run.profile_sha256)}</code>" if run.profile_sha256 else "-"),
        ("Kubernetes", _e(run.kubernetes_version)),
        ("Feature gates", _e(gates_text(run))),
        ("Tier", _e(run.tier)),
        ("Nodes", _e(", ".join(run.nodes)) or "-"),
        (
            "Date",
            _e(iso_utc(run.started)) + (f", took {_e(fmt_duration(took))}" if took else ", did not finish"),
        ),
        ("Run", f"<code>{_e(run.run_id)}</code>"),
        ("Suite", _e(suite_text(run))),
        ("Selection", _e(", ".join(run.selection)) if run.selection else "every rule"),
    ]
    rows = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    stopped = f'<p class="stopped"><b>The run stopped early:</b> {_e(run.stopped)}</p>' if run.stopped else ""
    title = f"<h1>DRA driver conformance: {_e(run.driver)}</h1>"
    return f'<header>{title}{verdict}<dl class="facts">{rows}</dl>{stopped}</header>'


def _count_cell(outcome: str, n: int, area: str) -> str:
    zero = " zero" if n == 0 else ""
    return f'<td class="n o-{outcome}{zero}" data-area="{_e(area)}" data-outcome="{outcome}">{n}</td>'


def _matrix(report: Report) -> str:
    head = "".join(f'<th class="n o-{o}">{_e(LABELS[o])}</th>' for o in DISPLAY_ORDER)
    rows = []
    for area, counts in report.areas.items():
        cells = "".join(_count_cell(o, counts[o], area) for o in DISPLAY_ORDER)
        total = sum(counts.values())
        rows.append(
            f'<tr><th scope="row"><a href="#area-{_e(area)}">{_e(area)}</a></th><td>{_e(_title(area))}</td>'
            f'{cells}<td class="n" data-area="{_e(area)}" data-outcome="total">{total}</td></tr>'
        )
    totals = "".join(_count_cell(o, report.totals[o], "total") for o in DISPLAY_ORDER)
    all_rules = f'<td class="n" data-area="total" data-outcome="total">{len(report.rules)}</td>'
    foot = f"<tr><td>total</td><td></td>{totals}{all_rules}</tr>"
    head_row = f'<tr><th>area</th><th></th>{head}<th class="n">total</th></tr>'
    return (
        '<h2>Capability matrix</h2><table class="matrix">'
        f"<thead>{head_row}</thead><tbody>{''.join(rows)}</tbody><tfoot>{foot}</tfoot></table>"
    )


def _filters(report: Report) -> str:
    buttons = [
        f'<button type="button" data-filter="all" aria-pressed="true">all ({len(report.rules)})</button>'
    ]
    buttons += [
        f'<button type="button" data-filter="{o}" aria-pressed="false">'
        f"{_e(LABELS[o])} ({report.totals[o]})</button>"
        for o in DISPLAY_ORDER
    ]
    return f'<nav class="filters" aria-label="show rules by outcome">{"".join(buttons)}</nav>'


def _pre(text: str, max_lines: int, max_chars: int) -> str:
    return f"<pre>{_e(clip(text, max_lines, max_chars))}</pre>"


def _test_detail(test: TestRecord) -> str:
    parts = []
    if test.longrepr:
        parts.append(_pre(test.longrepr, LONGREPR_LINES, LONGREPR_CHARS))
    for name, text in test.diagnostics.items():
        n = len(text.splitlines())
        size = f"{n} line" if n == 1 else f"{n} lines"
        parts.append(
            f'<details class="diag" data-name="{_e(name)}"><summary>{_e(name)} '
            f'<span class="meta">({size})</span></summary>'
            f"{_pre(text, DIAGNOSTIC_LINES, DIAGNOSTIC_CHARS)}</details>"
        )
    if not parts:
        return ""
    return f"<h4><code>{_e(test.nodeid)}</code> {_badge(test.outcome)}</h4>{''.join(parts)}"


def _tests_table(tests: tuple[TestRecord, ...]) -> str:
    rows = "".join(
        f"<tr><td><code>{_e(t.nodeid)}</code></td><td>{_badge(t.outcome)}</td>"
        f'<td class="n">{_e(fmt_duration(t.duration_s))}</td><td>{_e(t.reason)}</td></tr>'
        for t in tests
    )
    head = "<tr><th>test</th><th>outcome</th><th>duration</th><th>reason</th></tr>"
    return f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>"


def _rule(result: RuleResult, known_failure: str) -> str:
    rule = result.rule
    took = fmt_duration(result.duration_s) if result.tests else ""
    first = result.reason.strip().splitlines()[0] if result.reason.strip() else ""
    needs = ", ".join(rule.needs) or "nothing"
    body = [
        f'<p class="sentence">{_e(rule.sentence)}</p>',
        f'<p class="meta">{_e(rule.level)}; needs: {_e(needs)}; since: {_e(rule.since)}; '
        f"tested upstream: {_e(rule.upstream)}</p>",
        f'<p class="meta">source: {_e(rule.source or "-")}</p>',
    ]
    if known_failure:
        body.append(f"<p><b>Known failure of the profile:</b> {_e(known_failure)}</p>")
    if result.tests:
        body.append(_tests_table(result.tests))  # each test's reason: skip, failure, known failure
    elif result.reason:
        body.append(f'<p class="reason-full"><b>Not run:</b> {_e(result.reason)}</p>')
    body += [_test_detail(t) for t in result.tests if t.outcome in ("failed", "error", "advisory")]
    return (
        f'<details class="rule" id="rule-{_e(rule.id)}" data-outcome="{_e(result.outcome)}">'
        f'<summary><span class="id">{_e(rule.id)}</span><span>{_badge(result.outcome)}</span>'
        f'<span class="reason">{_e(first)}</span><span class="took">{_e(took)}</span></summary>'
        f'<div class="body">{"".join(body)}</div></details>'
    )


def _areas(report: Report) -> str:
    sections = []
    for area in report.areas:
        rules = "".join(
            _rule(r, report.run.known_failures.get(r.rule.id, ""))
            for r in report.rules
            if r.rule.area == area
        )
        sections.append(
            f'<section class="area" id="area-{_e(area)}">'
            f"<h2>{_e(area)}: {_e(_title(area))}</h2>{rules}</section>"
        )
    return "".join(sections)


def render(report: Report) -> str:
    """The ``index.html`` text of ``report``: one page, nothing loaded from elsewhere."""
    csp = f"default-src 'none'; style-src {_csp_hash(CSS)}; script-src {_csp_hash(SCRIPT)}"
    run = report.run
    title = f"DRA conformance: {run.driver} ({run.profile}), {iso_utc(run.started)}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        f"{_header(report)}<main>{_matrix(report)}{_filters(report)}{_areas(report)}</main>"
        f"<footer>Report schema {report.schema_version}. The whole data, diagnostics unclipped: "
        "<code>conformance.json</code> beside this file.</footer>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )
