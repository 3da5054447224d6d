"""The DRA driver conformance suite: rules, driver profiles, the pytest plugin, runs and reports.

Three ways in: ``dra-conformance run --profile NAME`` (:mod:`conformance.cli`), ``pytest --pyargs
conformance.suite --dra-profile NAME`` (:mod:`conformance.plugin`), and from Python::

    import conformance
    report = conformance.run(conformance.SuiteConfig.build("reference-gpu"))
    assert report.ok, conformance.summary_table(report)
"""

from __future__ import annotations

from conformance.catalogue import AREAS, RULES, Area, Rule, exclusive, exclusive_cluster, rule
from conformance.config import SuiteConfig
from conformance.errors import ConformanceError, PreflightFailed, ProfileError, ResourceError, UsageError
from conformance.profiles import DriverProfile
from conformance.profiles import load as load_profile
from conformance.report import Report, ReportError, summary_table
from conformance.runner import run

__all__ = [
    "AREAS",
    "RULES",
    "Area",
    "ConformanceError",
    "DriverProfile",
    "PreflightFailed",
    "ProfileError",
    "Report",
    "ReportError",
    "ResourceError",
    "Rule",
    "SuiteConfig",
    "UsageError",
    "exclusive",
    "exclusive_cluster",
    "load_profile",
    "rule",
    "run",
    "summary_table",
]
