"""The report of a run: records and verdicts, the model, and its renderings (JSON, Markdown, HTML, Allure).

Layers inside, each importing only those above it: ``results`` (a record per test, a verdict per
rule), ``verdict`` (what the run shows: conformant at which levels, incomplete, or not),
``model`` (:class:`Report`, :func:`build`), ``text`` (what every rendering shares),
the renderings ``jsonfile`` (``conformance.json``, :func:`load`), ``markdown``, ``htmlpage`` and
``allure_env``, and ``writing`` (:func:`write`, the one caller of the renderers). pytest writes
``junit.xml`` itself (the plugin points ``--junitxml`` into the run directory). Beside them:
``provenance`` (the suite's version and commit a report names), ``manifest``
(``manifest.sha256`` over a run's files, its check, the run as one tarball) and ``compare``
(what changed between two runs).
"""

from __future__ import annotations

from conformance.report.allure_env import write_allure_environment
from conformance.report.compare import Change, Comparison, compare
from conformance.report.jsonfile import load
from conformance.report.manifest import (
    MANIFEST,
    Verification,
    archive_path,
    verify_manifest,
    write_archive,
    write_manifest,
)
from conformance.report.model import SCHEMA_VERSION, Report, ReportError, build
from conformance.report.provenance import suite_commit, suite_version
from conformance.report.results import (
    INTERRUPTED,
    RULE_OUTCOMES,
    TEST_OUTCOMES,
    RuleOutcome,
    RuleResult,
    RunInfo,
    TestOutcome,
    TestRecord,
    read_records,
    rule_results,
)
from conformance.report.text import clip, fmt_duration, summary_table, verdict_lines
from conformance.report.verdict import STATES, Unchecked, Verdict, VerdictState, judge
from conformance.report.writing import write

__all__ = [
    "INTERRUPTED",
    "MANIFEST",
    "RULE_OUTCOMES",
    "SCHEMA_VERSION",
    "STATES",
    "TEST_OUTCOMES",
    "Change",
    "Comparison",
    "Report",
    "ReportError",
    "RuleOutcome",
    "RuleResult",
    "RunInfo",
    "TestOutcome",
    "TestRecord",
    "Unchecked",
    "Verdict",
    "VerdictState",
    "Verification",
    "archive_path",
    "build",
    "clip",
    "compare",
    "fmt_duration",
    "judge",
    "load",
    "read_records",
    "rule_results",
    "suite_commit",
    "suite_version",
    "summary_table",
    "verdict_lines",
    "verify_manifest",
    "write",
    "write_allure_environment",
    "write_archive",
    "write_manifest",
]
