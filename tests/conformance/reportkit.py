"""Run directories for the report's tests: a ``run.json`` and a ``records.jsonl`` in a folder."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from conformance.report import RunInfo, TestOutcome, TestRecord

STARTED = 1_746_100_800.0  # 2025-05-01T12:00:00Z

RUN = RunInfo(
    run_id="20250501-120000-dgx-h100",
    driver="gpu.dra-conformance.io",
    profile="dgx-h100",
    profile_path="conformance/profiles/dgx-h100.yaml",
    kubernetes_version="v1.34.1",
    tier="local",
    nodes=("node-0", "node-1"),
    started=STARTED,
    finished=STARTED + 754.5,
    known_failures={"REG-FUZZ": "hangs on a 10 000-claim batch (issue 12)", "SLICE-EDIT": "not restored"},
)

SCRIPT = "<script>window.pwned = 1</script>"
"""A diagnostic line that must reach the page as text, never run."""


def record(rule: str, outcome: TestOutcome, name: str = "", **fields: Any) -> TestRecord:
    """A record of a test of ``rule``; the node id is made from the rule unless ``name`` is given."""
    test = name or "test_" + rule.lower().replace("-", "_")
    nodeid = f"conformance/suite/test_{rule.partition('-')[0].lower()}.py::{test}"
    return TestRecord(nodeid=nodeid, rule=rule, outcome=outcome, duration_s=1.5, started=STARTED, **fields)


def write_run(run_dir: Path, records: Iterable[TestRecord], run: RunInfo = RUN, **changes: Any) -> Path:
    """``run_dir`` holding ``run`` (with ``changes``) and ``records``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(replace(run, **changes).to_json())
    (run_dir / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    return run_dir


def mixed_records() -> list[TestRecord]:
    """One run's records with every outcome, a failure with diagnostics, a rerun and a skip."""
    events = "\n".join(f"Warning FailedPrepareDynamicResources pod/p{i} <none> claim c{i}" for i in range(3))
    return [
        record("PRE-API", "passed"),
        record("PRE-SLICES", "passed"),
        record("REG-GETINFO", "passed"),
        record("REG-BATCH", "passed", "test_batch_good"),
        record(
            "REG-BATCH",
            "failed",
            "test_batch_one_bad",
            reason="assert 'claim-b' in response: the good claim was not prepared",
            longrepr="def test_batch_one_bad():\n>   assert 'claim-b' in response\nE   AssertionError",
            diagnostics={
                "events": events + "\n" + SCRIPT,
                "log driver-node-0": "prepare claim-b: ```boom```",
            },
        ),
        record("REG-EMPTY", "error", reason="fixture 'grpc_channel' failed: connection refused"),
        record("REG-FUZZ", "xfailed", reason="known failure: hangs on a 10 000-claim batch (issue 12)"),
        record("SLICE-EDIT", "xpassed", reason="known failure: not restored"),
        record("SLICE-COUNTERS", "skipped", reason="the profile does not claim partitionable"),
        # a rerun: the last record of a node id counts
        record("SLICE-PRESENT", "failed", reason="flaky"),
        record("SLICE-PRESENT", "passed"),
    ]
