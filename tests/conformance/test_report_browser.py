"""index.html in a real browser (headless Chromium through Playwright): matrix, filter, details.

Needs Debian's Chromium at /usr/bin/chromium (``.ci/run`` installs it) and the ``playwright``
package (the ``dev`` extra); Playwright's own browser download is not used.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.catalogue import RULES
from conformance.report import Report, build, write
from tests.conformance.reportkit import SCRIPT, mixed_records, write_run

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install -e '.[dev]'"
)


@pytest.fixture
def written(tmp_path: Path) -> tuple[Report, Path]:
    run_dir = write_run(tmp_path / "run", mixed_records())
    built = build(run_dir)
    write(built, run_dir)
    return built, run_dir / "index.html"


@pytest.fixture
def page(tmp_path: Path) -> Iterator[object]:
    profile = tmp_path / "chromium-profile"  # a fresh --user-data-dir
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), args=FLAGS, headless=True
        )
        try:
            context.set_default_timeout(15_000)
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.timeout(120)
def test_the_page_in_a_browser(written: tuple[Report, Path], page: Any) -> None:
    built, index = written
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("dialog", lambda d: problems.append(f"dialog {d.message}"))
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else problems.append(r.url))
    page.goto(index.as_uri())

    # the matrix shows the report's counts
    shown = page.eval_on_selector_all(
        ".matrix td[data-outcome]",
        "cells => cells.map(c => [c.dataset.area, c.dataset.outcome, c.textContent])",
    )
    expected: set[tuple[str, str, str]] = {
        (a, o, str(n)) for a, counts in built.areas.items() for o, n in counts.items()
    }
    expected |= {("total", o, str(n)) for o, n in built.totals.items()}
    expected |= {(a, "total", str(sum(c.values()))) for a, c in built.areas.items()}
    expected.add(("total", "total", str(len(RULES))))
    assert {tuple(cell) for cell in shown} == expected
    assert page.locator('.matrix td[data-area="REG"][data-outcome="failed"]').inner_text() == "2"

    # every rule is shown until a filter is clicked; then only that outcome's rules
    rules = page.locator("details.rule")
    assert rules.count() == len(RULES)
    assert page.locator("details.rule:visible").count() == len(RULES)
    page.click('.filters button[data-filter="failed"]')
    visible = page.eval_on_selector_all(
        "details.rule", "rs => rs.filter(r => r.checkVisibility()).map(r => r.id)"
    )
    assert visible == ["rule-REG-EMPTY", "rule-REG-BATCH"]
    assert page.locator('.filters button[data-filter="failed"]').get_attribute("aria-pressed") == "true"
    assert not page.locator("#area-PRE").is_visible()  # an area with nothing to show goes too
    page.click('.filters button[data-filter="skipped"]')
    assert page.locator("details.rule:visible").count() == 1
    page.click('.filters button[data-filter="failed"]')

    # a failure's details open on a click and hold the diagnostic, as text
    batch = page.locator("#rule-REG-BATCH")
    events = batch.locator('details.diag[data-name="events"] pre')
    assert not events.is_visible()
    batch.locator("summary").first.click()
    assert batch.locator("pre").first.inner_text().startswith("def test_batch_one_bad():")
    batch.locator('details.diag[data-name="events"] > summary').click()
    text = events.inner_text()
    assert "Warning FailedPrepareDynamicResources pod/p1 <none> claim c1" in text
    assert SCRIPT in text
    assert page.evaluate("window.pwned") is None

    # printed: no buttons
    page.emulate_media(media="print")
    assert not page.locator(".filters").is_visible()
    assert problems == []
