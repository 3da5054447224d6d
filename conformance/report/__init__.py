"""The report of a run: records and verdicts, the model, and its renderings (JSON, Markdown, HTML, Allure)."""

from __future__ import annotations

from conformance.report.model import (
    SCHEMA_VERSION,
    Report,
    ReportError,
    build,
    clip,
    fmt_duration,
    load,
    summary_table,
    write,
    write_allure_environment,
)
from conformance.report.results import (
    RULE_OUTCOMES,
    TEST_OUTCOMES,
    RuleOutcome,
    RuleResult,
    RunInfo,
    TestOutcome,
    TestRecord,
    read_records,
)

__all__ = [
    "RULE_OUTCOMES",
    "SCHEMA_VERSION",
    "TEST_OUTCOMES",
    "Report",
    "ReportError",
    "RuleOutcome",
    "RuleResult",
    "RunInfo",
    "TestOutcome",
    "TestRecord",
    "build",
    "clip",
    "fmt_duration",
    "load",
    "read_records",
    "summary_table",
    "write",
    "write_allure_environment",
]
