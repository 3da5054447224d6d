"""What a run produced: one record per test, and the per-rule verdicts built from them.

The pytest plugin writes a :class:`TestRecord` per test (controller side, also under xdist) as
one JSON line to ``<run dir>/records.jsonl``; :func:`rule_results` folds them into one
:class:`RuleResult` per catalogue rule. The report (:mod:`conformance.report`) renders these.

Outcomes of a test: ``passed``, ``partial`` (passed, but could not look at all its rule states: the
reason says what it left unchecked), ``failed``, ``error`` (setup or teardown failed), ``skipped``,
``xfailed`` (a known failure of the profile failed), ``xpassed`` (a known failure passed),
``advisory`` (the test of a SHOULD rule failed: advice, not a failure; not in a ``--strict`` run).
Outcomes of a rule (:data:`RULE_OUTCOMES`), worst first: ``failed`` (any test failed or errored),
``unexpected-pass`` (a known failure passed), ``expected-failure``, ``advisory`` (a SHOULD rule's
test failed), ``partial`` (no test failed,
one passed partially), ``passed`` (every test that ran passed), ``skipped`` (nothing ran; the
reason says why), ``not-run`` (not selected, or no test).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from conformance.catalogue import RULES, Rule

__all__ = [
    "RULE_OUTCOMES",
    "TEST_OUTCOMES",
    "RuleOutcome",
    "RuleResult",
    "RunInfo",
    "TestOutcome",
    "TestRecord",
    "read_records",
    "rule_results",
]

TestOutcome = Literal["passed", "partial", "failed", "error", "skipped", "xfailed", "xpassed", "advisory"]
RuleOutcome = Literal[
    "failed", "unexpected-pass", "expected-failure", "advisory", "partial", "passed", "skipped", "not-run"
]

TEST_OUTCOMES: tuple[TestOutcome, ...] = (
    "passed",
    "partial",
    "failed",
    "error",
    "skipped",
    "xfailed",
    "xpassed",
    "advisory",
)
"""Every test outcome."""
RULE_OUTCOMES: tuple[RuleOutcome, ...] = (
    "failed",
    "unexpected-pass",
    "expected-failure",
    "advisory",
    "partial",
    "passed",
    "skipped",
    "not-run",
)
"""Every rule outcome, worst first."""


@dataclass(frozen=True)
class TestRecord:
    """The result of one test (one parametrisation) of the suite."""

    __test__ = False  # not a pytest test class

    nodeid: str
    """pytest node id, e.g. ``conformance/suite/test_registration.py::test_getinfo``."""
    rule: str
    """The rule id the test checks."""
    outcome: TestOutcome
    """What happened."""
    reason: str = ""
    """Skip reason, failure message (short), or the known-failure reason."""
    duration_s: float = 0.0
    """Seconds of setup, call and teardown together."""
    started: float = 0.0
    """Unix time the test started."""
    longrepr: str = ""
    """The full failure text (traceback and assertion), empty unless failed or errored."""
    diagnostics: dict[str, str] = field(default_factory=dict)
    """What the cluster looked like at a failure, by name (``events``, ``claims``, ``slices``,
    ``pods``, ``log driver-node-0``, ...), as text."""
    measures: dict[str, float] = field(default_factory=dict)
    """Figures the test recorded (``Harness.measure``), e.g. ``fault_to_taint_s``."""

    def to_json(self) -> str:
        """One JSON line."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestRecord:
        """The inverse of :meth:`to_json` (after ``json.loads``); unknown keys are ignored."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


INTERRUPTED = "interrupted (Ctrl-C): the rules without a verdict did not run, or not to the end"
"""``RunInfo.stopped`` of a run a Ctrl-C (or SIGTERM) cut short."""


@dataclass(frozen=True)
class RunInfo:
    """What a run was: written once per run as ``<run dir>/run.json`` by the plugin."""

    run_id: str
    """The run's id (its directory name under ``reports/``)."""
    driver: str
    """The DRA driver name under test."""
    profile: str
    """The driver profile's name."""
    profile_path: str
    """Where the profile was read from."""
    kubernetes_version: str
    """The API server's version (``v1.37.2``)."""
    tier: str
    """The cluster backend: ``local``, ``kind``, ``k3s``, ``external``."""
    nodes: tuple[str, ...]
    """The nodes under test."""
    started: float
    """Unix time the run started."""
    finished: float = 0.0
    """Unix time the run finished (0 while it runs)."""
    selection: tuple[str, ...] = ()
    """The rule ids selected (empty: all)."""
    known_failures: dict[str, str] = field(default_factory=dict)
    """The profile's known failures, rule id -> reason."""
    stopped: str = ""
    """Why the run stopped early (a preflight failure, :data:`INTERRUPTED`), else empty."""
    suite_version: str = ""
    """The version of the dra-conformance that ran (empty in runs older than this field)."""
    suite_commit: str = ""
    """The git commit of the suite's checkout (``-dirty`` with local changes); empty when it did not
    run from one."""
    profile_sha256: str = ""
    """SHA-256 of the profile file's bytes (what ``sha256sum`` prints for it)."""
    feature_gates: dict[str, bool] = field(default_factory=dict)
    """The DRA feature gates the API server reports (its ``kubernetes_feature_enabled`` metric),
    by name; empty when it could not be read."""
    capabilities: tuple[str, ...] | None = None
    """The capabilities the profile claims; None in runs older than this field (their verdict then
    counts every skipped rule as not checked)."""
    strict: bool = False
    """The run counted SHOULD rules as MUST rules (``--strict``)."""

    def to_json(self) -> str:
        """The ``run.json`` text."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunInfo:
        """The inverse of :meth:`to_json` (after ``json.loads``); unknown keys are ignored."""
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["nodes"] = tuple(values.get("nodes", ()))
        values["selection"] = tuple(values.get("selection", ()))
        if values.get("capabilities") is not None:
            values["capabilities"] = tuple(values["capabilities"])
        return cls(**values)


def read_records(path: Path) -> list[TestRecord]:
    """The records of a ``records.jsonl`` file (missing file: none); a torn last line is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            out.append(TestRecord.from_dict(json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


@dataclass(frozen=True)
class RuleResult:
    """The verdict on one rule, from all its tests."""

    rule: Rule
    """The catalogue rule."""
    outcome: RuleOutcome
    """The verdict (see the module docstring)."""
    reason: str
    """Why: the first failure, the skip reason, the known-failure reason; empty when passed."""
    duration_s: float
    """Seconds its tests took, together."""
    tests: tuple[TestRecord, ...]
    """Its tests' records."""


def _verdict(tests: Sequence[TestRecord]) -> tuple[RuleOutcome, str]:
    by = {o: [t for t in tests if t.outcome == o] for o in TEST_OUTCOMES}
    if by["failed"] or by["error"]:
        first = (by["failed"] + by["error"])[0]
        return "failed", first.reason
    if by["xpassed"]:
        return "unexpected-pass", by["xpassed"][0].reason
    if by["xfailed"]:
        return "expected-failure", by["xfailed"][0].reason
    if by["advisory"]:
        return "advisory", by["advisory"][0].reason
    if by["partial"]:
        return "partial", by["partial"][0].reason
    if by["passed"]:
        return "passed", ""
    if by["skipped"]:
        return "skipped", by["skipped"][0].reason
    return "not-run", ""


def rule_results(
    records: Iterable[TestRecord], rules: Sequence[Rule] = RULES, not_run_reason: str = "not selected"
) -> list[RuleResult]:
    """One result per rule of ``rules`` (catalogue order); a rule without records is ``not-run``.

    When a test ran more than once (a rerun of the same node id), its last record counts.
    """
    last: dict[str, TestRecord] = {}
    for record in records:
        last[record.nodeid] = record
    per_rule: dict[str, list[TestRecord]] = {}
    for record in last.values():
        per_rule.setdefault(record.rule, []).append(record)
    out = []
    for rule in rules:
        tests = per_rule.get(rule.id, [])
        outcome, reason = _verdict(tests)
        if outcome == "not-run":
            reason = not_run_reason
        out.append(RuleResult(rule, outcome, reason, sum(t.duration_s for t in tests), tuple(tests)))
    return out
