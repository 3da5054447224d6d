"""Errors of the conformance suite.

The hierarchy::

    ConformanceError            root: anything the suite raises on purpose
    ├── UsageError              a bad command line or config: exit 2
    │   ├── ProfileError        a driver profile that does not load or validate: names file and field
    │   └── UnknownRule         an id, glob or area that names no rule of the catalogue (also a
    │                           KeyError, for lookups): names the closest ids
    ├── PreflightFailed         the cluster or driver is not fit to test (no resource.k8s.io/v1, no
    │                           slices, a missing DeviceClass): the run stops with this one message
    ├── ResourceError           the suite could not create or clean up what a test needs
    └── ReportError             a run directory or conformance.json that is not a report
                                (defined in conformance.report.model)

Every message names the offending value and, where there is one, what to do.
"""

from __future__ import annotations

__all__ = [
    "ConformanceError",
    "PreflightFailed",
    "ProfileError",
    "ResourceError",
    "UnknownRule",
    "UsageError",
]


class ConformanceError(Exception):
    """Root of the errors the conformance suite raises."""


class UsageError(ConformanceError):
    """The command line or the configuration is wrong; the CLI exits with status 2."""


class ProfileError(UsageError):
    """A driver profile cannot be read or does not validate."""


class UnknownRule(UsageError, KeyError):
    """An id, glob or area that names no rule of the catalogue; the message names the closest."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PreflightFailed(ConformanceError):
    """The cluster or the driver is not fit to be tested; nothing else runs."""


class ResourceError(ConformanceError):
    """An object a test needs could not be created, or one it made could not be removed."""
