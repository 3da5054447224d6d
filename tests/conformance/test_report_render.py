"""conformance.md and index.html as text: what they say, what they escape, what they leave out."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conformance.catalogue import RULES, by_id
from conformance.report import Report, build, htmlpage, markdown
from tests.conformance.reportkit import SCRIPT, mixed_records, record, write_run


@pytest.fixture
def mixed(tmp_path: Path) -> Report:
    return build(write_run(tmp_path, mixed_records()))


def test_markdown_heading_names_the_run(mixed: Report) -> None:
    md = markdown.render(mixed)
    head = md.split("## Capability matrix")[0]
    assert head.startswith("# DRA driver conformance: gpu.dra-conformance.io\n")
    assert (
        "**Result: NOT CONFORMANT: 2 rule(s) failed (REG-EMPTY, REG-BATCH); 1 known failure(s) (REG-FUZZ)**"
        in head
    )
    for fact in (
        "dgx-h100",
        "v1.34.1",
        "| Tier | local |",
        "node-0, node-1",
        "2025-05-01T12:00:00Z",
        "12 min 34 s",
    ):
        assert fact in head


def test_markdown_matrix_counts(mixed: Report) -> None:
    md = markdown.render(mixed)
    assert (
        "| area |  | passed | partial | failed | skipped | expected-failure | unexpected-pass | advisory "
        "| not-run | total |" in md
    )
    assert "| REG | registration and the gRPC contract | 1 | 0 | 2 | 0 | 1 | 0 | 0 | 16 | 20 |" in md
    n = len(RULES)
    assert (
        f"| **total** | | **4** | **0** | **2** | **1** | **1** | **1** | **0** | **{n - 9}** | **{n}** |"
        in md
    )


def test_markdown_table_per_area(mixed: Report) -> None:
    md = markdown.render(mixed)
    headings = re.findall(r"^## (\w+): ", md, re.MULTILINE)
    assert headings == ["PRE", "REG", "SLICE", "ALLOC", "SHARE", "PREP", "HEALTH", "RES"]
    assert "| SLICE-COUNTERS | MUST | skipped | the profile does not claim partitionable | 1.5 s |" in md
    assert (
        "| REG-FUZZ | SHOULD | expected-failure | known failure: hangs on a 10 000-claim batch (issue 12) "
        "| 1.5 s |" in md
    )
    assert "| ALLOC-ONE | MUST | not-run | no test ran |  |" in md


def test_markdown_failures_carry_message_and_diagnostics(mixed: Report) -> None:
    md = markdown.render(mixed)
    failures = md.split("## Failures")[1]
    assert re.findall(r"^### (\S+)", failures, re.MULTILINE) == ["REG-EMPTY", "REG-BATCH"]
    assert f"> {by_id('REG-BATCH').sentence}" in failures
    assert "```text\ndef test_batch_one_bad():\n>   assert 'claim-b' in response" in failures
    assert "*events*\n\n```text\nWarning FailedPrepareDynamicResources pod/p0 <none> claim c0" in failures
    # a diagnostic holding a fence gets a longer one
    assert "````text\nprepare claim-b: ```boom```\n````" in failures
    assert "## Unexpected passes" in md
    assert "- SLICE-EDIT: known failure: not restored" in md


def test_markdown_clips_long_diagnostics_with_a_note(tmp_path: Path) -> None:
    log = "\n".join(f"log line {i}" for i in range(5000))
    failed = record("ALLOC-ONE", "failed", reason="pod Pending", diagnostics={"log driver-node-0": log})
    md = markdown.render(build(write_run(tmp_path, [failed])))
    assert "log line 0\n" in md
    assert "log line 4999\n" in md
    assert "log line 2500\n" not in md
    assert re.search(r"\[\.\.\. left out here: \d+ of 5000 lines, .*conformance\.json has the whole text", md)
    assert len(md) < 20_000


def test_markdown_cells_escape_pipes_and_angle_brackets(tmp_path: Path) -> None:
    failed = record("ALLOC-ONE", "failed", reason="phase | <none>\nsecond line")
    md = markdown.render(build(write_run(tmp_path, [failed])))
    assert "| ALLOC-ONE | MUST | failed | phase \\| &lt;none&gt;… |" in md


def test_a_run_with_no_failure_that_left_rules_alone_is_incomplete_not_a_pass(tmp_path: Path) -> None:
    built = build(write_run(tmp_path, [record("PRE-API", "passed")]))
    md = markdown.render(built)
    musts = sum(r.level == "MUST" for r in RULES)
    assert (
        f"**Result: INCOMPLETE: {musts - 1} of {musts} MUST rules not checked (passed in full: none)** "
        f"(1 passed, {len(RULES) - 1} not-run)." in md
    )
    assert "PASS" not in md and "## Failures" not in md
    assert f"## Not checked ({musts - 1})" in md
    assert "| PRE-CLASSES | not-run | no test ran |" in md
    page = htmlpage.render(built)
    assert f'<p class="verdict incomplete">INCOMPLETE: {musts - 1} of {musts} MUST rules not checked' in page
    assert f"<summary>{musts - 1} not checked</summary>" in page and "PASS" not in page


def test_a_run_that_checked_every_rule_in_scope_says_conformant_with_its_levels(tmp_path: Path) -> None:
    records = [record(r.id, "passed") for r in RULES if r.needs != ("partitionable",)]
    records += [
        record(r.id, "skipped", reason="profile dgx-h100 does not claim partitionable")
        for r in RULES
        if r.needs == ("partitionable",)
    ]
    built = build(write_run(tmp_path, records, capabilities=("health",)))
    md = markdown.render(built)
    assert "**Result: CONFORMANT: core + grpc + " in md
    assert f"(2 rules not claimed by the profile)** ({len(RULES) - 2} passed, 2 skipped)." in md
    assert "## Not claimed by the profile (2)" in md and "## Not checked" not in md
    assert "- SLICE-COUNTERS: profile dgx-h100 does not claim partitionable" in md
    page = htmlpage.render(built)
    assert '<p class="verdict pass">CONFORMANT: core + grpc + ' in page
    assert "Not claimed by the profile: SLICE-COUNTERS, ALLOC-PARTITION" in page


def test_html_shows_diagnostics_as_text_never_as_markup(mixed: Report) -> None:
    page = htmlpage.render(mixed)
    assert SCRIPT not in page
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in page
    assert "pod/p0 &lt;none&gt; claim c0" in page
    assert page.count("<script>") == 1  # ours


def test_html_escapes_every_field(tmp_path: Path) -> None:
    evil = '"><img src=x onerror=alert(1)>'
    built = build(
        write_run(
            tmp_path,
            [record("ALLOC-ONE", "failed", reason=evil, longrepr=evil, diagnostics={evil: evil})],
            driver=evil,
            profile=evil,
            nodes=(evil,),
            kubernetes_version=evil,
            tier=evil,
            run_id=evil,
        )
    )
    page = htmlpage.render(built)
    assert "<img" not in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script += data


def test_html_is_self_contained(mixed: Report) -> None:
    parser = _Tags()
    parser.feed(htmlpage.render(mixed))
    for tag, attrs in parser.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed"), tag
        assert "src" not in attrs, (tag, attrs)
        href = attrs.get("href") or ""
        assert not href or href.startswith("#"), href
    (csp,) = (
        a["content"]
        for t, a in parser.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp is not None
    assert "default-src 'none'" in csp
    # the page's one script is allowed by its hash, nothing else is
    digest = base64.b64encode(hashlib.sha256(parser.script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp


def test_html_rule_rows_and_details(mixed: Report) -> None:
    page = htmlpage.render(mixed)
    rows = re.findall(r'<details class="rule" id="rule-([\w-]+)" data-outcome="([\w-]+)">', page)
    assert len(rows) == len(RULES)
    assert dict(rows)["REG-BATCH"] == "failed"
    assert dict(rows)["SLICE-EDIT"] == "unexpected-pass"
    batch = page.split('id="rule-REG-BATCH"')[1].split('<details class="rule"')[0]
    assert '<details class="diag" data-name="events">' in batch
    assert "AssertionError" in batch
    fuzz = page.split('id="rule-REG-FUZZ"')[1].split('<details class="rule"')[0]
    assert "Known failure of the profile:</b> hangs on a 10 000-claim batch (issue 12)" in fuzz
    counters = page.split('id="rule-SLICE-COUNTERS"')[1].split('<details class="rule"')[0]
    assert "the profile does not claim partitionable" in counters
