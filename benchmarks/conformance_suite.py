"""The conformance suite against the reference driver: wall time at -n 1 and -n 2, per-area time.

``run()`` makes two complete ``conformance.run()`` runs of profile ``reference-gpu`` on the local
tier (binaries cached), one with one pytest worker and one with two, and reports each run's wall
time (cluster start to report, and the suite phase alone), the speedup of -n 2 over -n 1, and the
time the tests of each area took (the sum of their durations, so the areas of one run add up to
more than its wall time when they ran in parallel), and the figures tests record (``measures``,
``"<rule> <name>"``, the largest of a run: e.g. ``HEALTH-TAINT fault_to_taint_s``, the time from a
fault to its taint). Env ``BENCH_SUITE_PROFILE`` picks another profile, ``BENCH_SUITE_WORKERS``
other worker counts (``1,2``).

Beside the clean runs, one run at the largest worker count judges a broken driver: the same
profile with the driver started with ``--testing-break-rule invalid-cdi-spec`` (CDI specs the node
refuses, so no pod of it can start), the case vendors meet most. Its wall time next to the clean
run's, in the same session, is ``broken_over_clean``: how much longer a broken driver takes to be
judged (the waits that fail fast keep it near 1). ``BENCH_SUITE_BROKEN=0`` leaves it out.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from conformance import SuiteConfig
from conformance import run as run_suite
from conformance.catalogue import AREAS
from conformance.profiles import load

BROKEN_SWITCH = "invalid-cdi-spec"
"""The switch of the broken-driver run."""


def _one(profile: str, workers: str, reports: Path, breaks: str = "") -> dict[str, Any]:
    command = None
    if breaks:
        local = load(profile).local
        assert local is not None, f"profile {profile} has no local command"
        command = f"{local.command} --testing-break-rule {breaks}"
    config = SuiteConfig.build(profile, workers=workers, reports_dir=reports, driver_command=command)
    started = time.monotonic()
    report = run_suite(config)
    wall = time.monotonic() - started
    tests = [t for r in report.rules for t in r.tests]
    per_area: dict[str, float] = {}
    measures: dict[str, list[float]] = {}
    for result in report.rules:
        if result.outcome != "not-run":
            per_area[result.rule.area] = per_area.get(result.rule.area, 0.0) + result.duration_s
        for test in result.tests:
            for name, value in test.measures.items():
                measures.setdefault(f"{result.rule.id} {name}", []).append(value)
    return {
        "workers": workers,
        "breaks": breaks or None,
        "wall_s": round(wall, 1),
        # from the first test's start to the last one's end: the suite phase without the cluster
        "suite_s": round(max(t.started + t.duration_s for t in tests) - min(t.started for t in tests), 1),
        "ok": report.ok,
        "totals": {k: v for k, v in report.totals.items() if v},
        "area_test_seconds": {a: round(per_area[a], 1) for a in AREAS if a in per_area},
        "slowest": sorted(((t.duration_s, t.rule) for r in report.rules for t in r.tests), reverse=True)[:5],
        "measures": {k: round(max(v), 3) for k, v in sorted(measures.items())},
    }


def run() -> dict[str, Any]:
    """Run the suite once per worker count; figures, not verdicts."""
    profile = os.environ.get("BENCH_SUITE_PROFILE", "reference-gpu")
    counts = [w.strip() for w in os.environ.get("BENCH_SUITE_WORKERS", "1,2").split(",") if w.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        runs = [_one(profile, workers, Path(tmp)) for workers in counts]
        broken = None
        if os.environ.get("BENCH_SUITE_BROKEN", "1") != "0":
            broken = _one(profile, counts[-1], Path(tmp), breaks=BROKEN_SWITCH)
    out: dict[str, Any] = {"profile": profile, "runs": runs}
    if broken is not None:
        out["broken"] = broken
        out["broken_over_clean"] = round(broken["wall_s"] / max(runs[-1]["wall_s"], 0.1), 2)
    by = {r["workers"]: r for r in runs}
    if "1" in by and "2" in by:
        out["speedup_suite_n2_over_n1"] = round(by["1"]["suite_s"] / max(by["2"]["suite_s"], 0.1), 2)
        out["speedup_wall_n2_over_n1"] = round(by["1"]["wall_s"] / max(by["2"]["wall_s"], 0.1), 2)
    return out
