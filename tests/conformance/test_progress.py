"""Progress of ``dra-conformance run``: a line per rule as it finishes (id, verdict, seconds), a line
per area, and with ``-q`` only the area lines; and the ``--fail-fast`` and ``-q`` options reach the
run's settings and pytest.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from conformance.config import SuiteConfig
from conformance.report import TestRecord
from conformance.runner import _Watcher, pytest_command


def _write(run_dir: Path, collected: list[tuple[str, str]], records: list[TestRecord]) -> None:
    tests = [{"nodeid": n, "rule": r} for n, r in collected]
    (run_dir / "collected.json").write_text(json.dumps({"narrowed": True, "tests": tests}))
    (run_dir / "records.jsonl").write_text("".join(r.to_json() + "\n" for r in records))


def _record(nodeid: str, rule: str, outcome: str, seconds: float, reason: str = "") -> TestRecord:
    return TestRecord(nodeid, rule, outcome, reason, seconds, time.time())  # type: ignore[arg-type]


COLLECTED = [
    ("t.py::test_getinfo", "REG-GETINFO"),
    ("t.py::test_fuzz[a]", "REG-FUZZ"),
    ("t.py::test_fuzz[b]", "REG-FUZZ"),
]


def _watch(tmp_path: Path, quiet: bool, records: list[TestRecord]) -> list[str]:
    lines: list[str] = []
    watcher = _Watcher(tmp_path, lines.append, live=False, quiet=quiet)
    since = time.time() - 10
    _write(tmp_path, COLLECTED, records[:1])
    watcher.poll(since)
    _write(tmp_path, COLLECTED, records)
    watcher.poll(since)
    watcher.poll(since)  # nothing new: no line twice
    return lines


def _records() -> list[TestRecord]:
    """Fresh records: the watcher shows only tests that started in the phase it follows."""
    return [
        _record("t.py::test_getinfo", "REG-GETINFO", "failed", 2.25, "GetInfo answered gpu.other.io\nmore"),
        _record("t.py::test_fuzz[a]", "REG-FUZZ", "passed", 1.0),
        _record("t.py::test_fuzz[b]", "REG-FUZZ", "passed", 0.5),
    ]


def test_a_line_per_rule_as_it_finishes_then_the_area(tmp_path: Path) -> None:
    lines = _watch(tmp_path, False, _records())
    assert [line.split()[:3] for line in lines] == [
        ["REG-GETINFO", "failed", "2.2"],  # alone first: its one test was done at the first poll
        ["REG-FUZZ", "passed", "1.5"],  # once both its tests were done
        ["REG", "registration", "and"],
    ]
    assert lines[0].endswith("s  GetInfo answered gpu.other.io"), lines[0]
    assert "1 failed, 2 passed" in lines[2]


def test_quiet_keeps_the_area_lines_only(tmp_path: Path) -> None:
    lines = _watch(tmp_path, True, _records())
    assert len(lines) == 1 and lines[0].startswith("  REG     registration"), lines


def test_fail_fast_and_quiet_reach_the_settings_and_pytest(tmp_path: Path) -> None:
    from conformance.cli import _parser

    args = _parser().parse_args(["run", "--profile", "reference-gpu", "--fail-fast", "-q"])
    assert args.fail_fast and args.quiet
    config = SuiteConfig.build("reference-gpu", fail_fast=True, quiet=True, reports_dir=tmp_path)
    assert "--dra-fail-fast" in pytest_command(config, state_dir=None)
    assert "--dra-fail-fast" not in pytest_command(SuiteConfig.build("reference-gpu"), state_dir=None)


def test_only_a_cluster_the_run_throws_away_is_disposable() -> None:
    """Its tests' empty namespaces are left to it; a kept or an external cluster has them deleted."""
    assert "--disposable-cluster" in pytest_command(SuiteConfig.build("reference-gpu"), state_dir=None)
    kept = SuiteConfig.build("reference-gpu", keep_cluster=True)
    assert "--disposable-cluster" not in pytest_command(kept, state_dir=None)
    external = SuiteConfig.build("reference-gpu", cluster="external", kubeconfig=__file__)
    assert "--disposable-cluster" not in pytest_command(external, state_dir=None)
