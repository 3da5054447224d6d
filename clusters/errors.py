"""Errors of the cluster backends.

The hierarchy::

    ClusterError                  root: anything a cluster backend raises on purpose
    ├── CapabilityMissing         the backend cannot do this (tests skip with the message)
    ├── BinariesError             control-plane binaries cannot be found, fetched or built
    │   ├── ChecksumMismatch      a download did not match its published checksum
    │   └── GoBuildError          ``go`` failed building them from Go modules
    ├── ControlPlaneError         a component failed to start or did not become ready
    ├── NodeError                 a node agent or driver process failed
    │   └── UpdateFailed          a driver update's new instance exited before it registered
    ├── ClusterStateError         no running cluster where one was expected (CLI, fixtures)
    ├── ToolError                 an outside tool (kind, docker, helm, kubectl) is missing or failed
    ├── ClusterUnfit              the cluster answers but cannot run DRA (resource.k8s.io/v1 not served)
    ├── ProbeError                a node probe cannot be reached, or refused a request
    └── DriverDeployError         the driver under test did not come up (chart failed, no slices)

Every message names the offending value and, where there is one, what to do.
"""

from __future__ import annotations

__all__ = [
    "BinariesError",
    "CapabilityMissing",
    "ChecksumMismatch",
    "ClusterError",
    "ClusterStateError",
    "ClusterUnfit",
    "ControlPlaneError",
    "DriverDeployError",
    "GoBuildError",
    "NodeError",
    "ProbeError",
    "ToolError",
    "UpdateFailed",
]


class ClusterError(Exception):
    """Root of the errors the cluster backends raise."""


class CapabilityMissing(ClusterError):
    """The backend cannot do what was asked; a test that needs it skips with this message."""

    def __init__(self, backend: str, capability: str, reason: str = "") -> None:
        self.backend = backend
        self.capability = capability
        self.reason = reason
        message = f"cluster backend {backend!r} cannot {capability}"
        super().__init__(f"{message}: {reason}" if reason else message)


class BinariesError(ClusterError):
    """The control-plane binaries could not be found, downloaded or built."""


class ChecksumMismatch(BinariesError):
    """A downloaded file did not match its published SHA-256 checksum."""


class GoBuildError(BinariesError):
    """``go`` failed; the message holds the command and the tail of its output."""


class ControlPlaneError(ClusterError):
    """A control-plane component failed to start, exited, or did not become ready in time."""


class NodeError(ClusterError):
    """A fake node's agent or driver process failed to start or to become ready."""


class UpdateFailed(NodeError):
    """A rolling update's new driver instance exited before it registered; the old one still runs."""


class ClusterStateError(ClusterError):
    """No running cluster was found where one was expected (state dir missing or stale)."""


class ToolError(ClusterError):
    """An outside tool (``kind``, ``docker``, ``helm``, ``kubectl``) is missing, has no engine to talk
    to, or failed; the message holds the command and the tail of its output."""


class ClusterUnfit(ClusterError):
    """The cluster answers but cannot run the suite: no DRA API (``resource.k8s.io/v1``)."""


class ProbeError(ClusterError):
    """A node probe (:mod:`clusters.probe`) cannot be reached, answered what it should not, or refused
    a request; the message names the probe, the request and its answer."""


class DriverDeployError(ClusterError):
    """The driver under test did not come up: its chart failed, or it never published slices."""
