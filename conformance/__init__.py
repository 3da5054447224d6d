"""The DRA driver conformance suite: rules, driver profiles, the pytest plugin, runs and reports.

Three ways in: ``dra-conformance run --profile NAME`` (:mod:`conformance.cli`), ``pytest --pyargs
conformance.suite --dra-profile NAME`` (:mod:`conformance.plugin`), and from Python::

    import conformance
    report = conformance.run(conformance.SuiteConfig.build("reference-gpu"))
    assert report.ok, conformance.summary_table(report)

The names below are imported when first used (:func:`__getattr__`): ``import conformance.catalogue``
or ``import conformance.profiles`` loads what those need, not the runner's cluster backends, gRPC
stubs and Kubernetes client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

_LAZY: dict[str, tuple[str, str]] = {
    "AREAS": ("conformance.catalogue", "AREAS"),
    "RULES": ("conformance.catalogue", "RULES"),
    "Area": ("conformance.catalogue", "Area"),
    "Rule": ("conformance.catalogue", "Rule"),
    "exclusive": ("conformance.catalogue", "exclusive"),
    "exclusive_cluster": ("conformance.catalogue", "exclusive_cluster"),
    "rule": ("conformance.catalogue", "rule"),
    "SuiteConfig": ("conformance.config", "SuiteConfig"),
    "ConformanceError": ("conformance.errors", "ConformanceError"),
    "PreflightFailed": ("conformance.errors", "PreflightFailed"),
    "ProfileError": ("conformance.errors", "ProfileError"),
    "ResourceError": ("conformance.errors", "ResourceError"),
    "UsageError": ("conformance.errors", "UsageError"),
    "DriverProfile": ("conformance.profiles", "DriverProfile"),
    "load_profile": ("conformance.profiles", "load"),
    "Report": ("conformance.report", "Report"),
    "ReportError": ("conformance.report", "ReportError"),
    "summary_table": ("conformance.report", "summary_table"),
    "run": ("conformance.runner", "run"),
}
"""Each public name: the module that defines it and its name there."""

if not TYPE_CHECKING:  # mypy sees the imports above, and no __getattr__ that would hide a typo

    def __getattr__(name: str) -> object:
        """A public name, imported from its module on first use (then cached in this module)."""
        try:
            module, attr = _LAZY[name]
        except KeyError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
