"""The conformance suite against the reference driver: the main job as it was and as it is, a broken
driver, and a kept cluster reused.

``run()`` makes complete ``conformance.run()`` runs of profile ``reference-gpu`` on the local tier
(binaries cached), in one session so that their ratios hold on any machine:

- ``before``: 2 nodes at ``-n 2``, the main job until 5 Dec 2026 (its profile said 2 nodes, and
  ``-n auto`` was one worker per CPU: 2 on CI's machines);
- ``now``: the profile's nodes at ``-n auto`` (two workers a node);
- ``broken``: as ``now``, the driver started with ``--testing-break-rule invalid-cdi-spec`` (CDI
  specs the node refuses, so no pod of it can start), the case vendors meet most;
  ``broken_over_clean`` is its wall time over ``now``'s (the waits that fail fast keep it near 1);
- ``kept``: two runs of one rule with ``--keep-cluster``; the second reuses the first's cluster,
  and ``kept_start_to_first_rule_s`` is its time from the start of the run to its first rule's start
  (``new_start_to_first_rule_s``: the first run's, on a new cluster).

Each run reports its wall time (cluster start to report) and the suite phase alone, the time the
tests of each area took (the sum of their durations, so the areas of one run add up to more than
its wall time when they ran in parallel), its slowest tests (``slowest_work``: less the wait for a
node lease and free devices, which ``before_work_s`` sums over the run), the rules that did not
pass with their outcome and the first line of their reason (``not_passed``: the reports go with
the bench's temporary directory), and the figures tests record (``measures``, ``"<rule> <name>"``,
the largest of a run: e.g. ``HEALTH-TAINT fault_to_taint_s``).
``suite_now_over_before`` is the ratio of the suite phases. ``cpu_s`` is the CPU time the run
cost, cluster processes included (:mod:`benchmarks.cpu`), with ``cpu_s_by_program``: on a 2-core
machine the wall time cannot be less than half of it, and load beside the run moves it least.
Env ``BENCH_SUITE_PROFILE`` picks another profile; ``BENCH_SUITE_BEFORE=0``,
``BENCH_SUITE_BROKEN=0`` and ``BENCH_SUITE_KEPT=0`` leave those runs out.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.cpu import CpuSampler
from conformance import SuiteConfig
from conformance import run as run_suite
from conformance.catalogue import AREAS
from conformance.profiles import load

BROKEN_SWITCH = "invalid-cdi-spec"
"""The switch of the broken-driver run."""

WAIT_MEASURES = frozenset({"lease_wait_s", "before_work_s"})
"""The figures every test records of its wait for a node lease (and free devices) before its work."""


def _work(test: Any) -> float:
    """A test's duration less its wait before its work (:data:`WAIT_MEASURES`)."""
    return round(float(test.duration_s) - float(test.measures.get("before_work_s", 0.0)), 1)


def _one(
    profile: str,
    workers: str,
    reports: Path,
    breaks: str = "",
    *,
    nodes: int | None = None,
    rules: str = "",
    keep: bool = False,
) -> dict[str, Any]:
    command = None
    if breaks:
        local = load(profile).local
        assert local is not None, f"profile {profile} has no local command"
        command = f"{local.command} --testing-break-rule {breaks}"
    config = SuiteConfig.build(
        profile,
        workers=workers,
        reports_dir=reports,
        driver_command=command,
        nodes=nodes,
        rules=rules,
        keep_cluster=keep,
    )
    began = time.time()
    started = time.monotonic()
    with CpuSampler() as cpu:
        report = run_suite(config)
    wall = time.monotonic() - started
    cpu_s = cpu.by_program()
    tests = [t for r in report.rules for t in r.tests]
    per_area: dict[str, float] = {}
    measures: dict[str, list[float]] = {}
    for result in report.rules:
        if result.outcome != "not-run":
            per_area[result.rule.area] = per_area.get(result.rule.area, 0.0) + result.duration_s
        for test in result.tests:
            for name, value in test.measures.items():
                if name not in WAIT_MEASURES:
                    measures.setdefault(f"{result.rule.id} {name}", []).append(value)
    suite = [t for t in tests if t.rule and not t.rule.startswith("PRE-")] or tests
    return {
        "workers": config.worker_count,
        "nodes": config.local_nodes,
        "breaks": breaks or None,
        "wall_s": round(wall, 1),
        # from the first test's start to the last one's end: the suite phase without the cluster
        "suite_s": round(max(t.started + t.duration_s for t in suite) - min(t.started for t in suite), 1),
        "start_to_first_rule_s": round(min(t.started for t in suite) - began, 1),
        "ok": report.ok,
        "cpu_s": round(sum(cpu_s.values()), 1),
        "cpu_s_by_program": cpu_s,
        "totals": {k: v for k, v in report.totals.items() if v},
        # the rules behind the totals other than passed (the reports are gone with the bench's tmp)
        "not_passed": {
            r.rule.id: f"{r.outcome}: {r.reason.splitlines()[0] if r.reason else ''}"[:200]
            for r in report.rules
            if r.outcome not in ("passed", "not-run")
        },
        "area_test_seconds": {a: round(per_area[a], 1) for a in AREAS if a in per_area},
        "slowest": sorted(((t.duration_s, t.rule) for r in report.rules for t in r.tests), reverse=True)[:5],
        # the same less the wait for a node lease and free devices: a test's own work
        "slowest_work": sorted(((_work(t), t.rule) for t in tests), reverse=True)[:5],
        "before_work_s": round(sum(t.measures.get("before_work_s", 0.0) for t in tests), 1),
        "measures": {k: round(max(v), 3) for k, v in sorted(measures.items())},
    }


def _kept(profile: str, reports: Path) -> dict[str, Any]:
    """Two one-rule runs with ``--keep-cluster``: a new cluster, then the same one reused."""
    from clusters.local import daemon, kept
    from clusters.local.settings import LocalSettings

    directory = kept.kept_dir(LocalSettings.from_env(os.environ))
    daemon.shutdown(directory)  # a cluster someone kept: not this bench's to measure
    try:
        new = _one(profile, "auto", reports, rules="SLICE-NAMES", keep=True)
        again = _one(profile, "auto", reports, rules="SLICE-NAMES", keep=True)
    finally:
        daemon.shutdown(directory)
    return {"new": new, "reused": again}


def _on(name: str) -> bool:
    return os.environ.get(name, "1") != "0"


def run() -> dict[str, Any]:
    """The runs of this module's doc; figures, not verdicts."""
    profile = os.environ.get("BENCH_SUITE_PROFILE", "reference-gpu")
    out: dict[str, Any] = {"profile": profile}
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        reports = Path(tmp)
        if _on("BENCH_SUITE_BEFORE"):
            out["before"] = _one(profile, "2", reports, nodes=2)
        out["now"] = now = _one(profile, "auto", reports)
        if _on("BENCH_SUITE_BROKEN"):
            out["broken"] = broken = _one(profile, "auto", reports, breaks=BROKEN_SWITCH)
            out["broken_over_clean"] = round(broken["wall_s"] / max(now["wall_s"], 0.1), 2)
        if _on("BENCH_SUITE_KEPT"):
            kept_runs = _kept(profile, reports)
            out["kept"] = kept_runs
            out["new_start_to_first_rule_s"] = kept_runs["new"]["start_to_first_rule_s"]
            out["kept_start_to_first_rule_s"] = kept_runs["reused"]["start_to_first_rule_s"]
    if "before" in out:
        out["suite_now_over_before"] = round(now["suite_s"] / max(out["before"]["suite_s"], 0.1), 2)
    return out
