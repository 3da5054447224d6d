"""The node agent's errors: the node's side (``driver/errors.py`` has the plugin's own tree).

::

    AgentError
    ├── CDIError          a CDI device id cannot be resolved from the node's spec dir
    ├── PluginError       a DRA plugin is unknown, failed its handshake or a call failed
    │   └── PrepareError  NodePrepareResources / NodeUnprepareResources gave no usable answer
    ├── ClaimNotReady     a pod's claim is missing, not allocated or not reserved for the pod
    │   └── ClaimNotForPod  a claim named as generated for the pod was not created for it
    └── KubeError         the API server refused a request
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "CDIError",
    "ClaimNotForPod",
    "ClaimNotReady",
    "KubeError",
    "PluginError",
    "PrepareError",
]


class AgentError(Exception):
    """Root of the node agent's errors."""


class CDIError(AgentError):
    """A CDI device id cannot be resolved (unknown, ambiguous, or its spec is malformed)."""


class PluginError(AgentError):
    """A DRA plugin is not registered, failed its handshake, or a call to it failed."""


class PrepareError(PluginError):
    """A prepare or unprepare call failed as a whole or for at least one claim."""


class ClaimNotReady(AgentError):
    """A pod's ResourceClaim does not exist yet, is not allocated, or is not reserved for the pod."""


class ClaimNotForPod(ClaimNotReady):
    """The claim ``pod.status.resourceClaimStatuses`` names for one of the pod's templates is not
    controlled by the pod (the kubelet's ``resourceclaim.IsForPod``): it is not prepared."""


class KubeError(AgentError):
    """The API server answered a request with an error status."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status
        """HTTP status code, 0 when no answer came."""
