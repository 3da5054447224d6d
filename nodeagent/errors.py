"""The node agent's errors: the node's side (``driver/errors.py`` has the plugin's own tree).

::

    AgentError
    ├── CDIError          a CDI device id cannot be resolved from the node's spec dir
    ├── PluginError       a DRA plugin is unknown, failed its handshake or a call failed
    │   └── PrepareError  NodePrepareResources / NodeUnprepareResources gave no usable answer
    ├── ClaimNotReady     a pod's claim is missing, not allocated or not reserved for the pod
    │   └── ClaimNotForPod  a claim named as generated for the pod was not created for it
    └── KubeError         the API server refused a request (also a draproto ``RestError``)
        ├── KubeNotFound      404 (a ``draproto.rest.NotFound``)
        ├── KubeConflict      409 (a ``draproto.rest.Conflict``)
        │   └── KubeAlreadyExists  409 AlreadyExists (a ``draproto.rest.AlreadyExists``)
        ├── KubeGone          410 (a ``draproto.rest.Gone``)
        └── KubeInvalid       422 (a ``draproto.rest.Invalid``)

:func:`kube_error` makes the one of a status, by draproto's table (``draproto.rest.error_type``):
code catches ``NotFound``, ``Conflict``, ... instead of testing the status.
"""

from __future__ import annotations

from collections.abc import Mapping

from draproto.rest import AlreadyExists, Conflict, Forbidden, Gone, Invalid, NotFound, RestError, error_type

__all__ = [
    "AgentError",
    "CDIError",
    "ClaimNotForPod",
    "ClaimNotReady",
    "KubeAlreadyExists",
    "KubeConflict",
    "KubeError",
    "KubeForbidden",
    "KubeGone",
    "KubeInvalid",
    "KubeNotFound",
    "PluginError",
    "PrepareError",
    "kube_error",
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


class KubeError(AgentError, RestError):
    """The API server answered a request with an error status, or none (``status`` 0); made by
    :func:`kube_error`, of the subclass of its status."""


class KubeForbidden(KubeError, Forbidden):
    """403: the node's account may not do this."""


class KubeNotFound(KubeError, NotFound):
    """404: the object does not exist."""


class KubeConflict(KubeError, Conflict):
    """409: a stale resourceVersion, a failed precondition, or a name that is taken."""


class KubeAlreadyExists(KubeConflict, AlreadyExists):
    """409 AlreadyExists: a create of a name that is taken."""


class KubeGone(KubeError, Gone):
    """410: a resourceVersion the server no longer keeps."""


class KubeInvalid(KubeError, Invalid):
    """422: the object does not validate."""


_KUBE_ERRORS: Mapping[type[RestError], type[KubeError]] = {
    Forbidden: KubeForbidden,
    NotFound: KubeNotFound,
    Conflict: KubeConflict,
    AlreadyExists: KubeAlreadyExists,
    Gone: KubeGone,
    Invalid: KubeInvalid,
}


def kube_error(text: str, status: int = 0, reason: str = "", message: str = "") -> KubeError:
    """The :class:`KubeError` of an answer with ``status`` (and the Status ``reason``): the subclass
    of the draproto error class the status names (``draproto.rest.error_type``)."""
    kind = _KUBE_ERRORS.get(error_type(status, reason), KubeError)
    return kind(text, status, reason, message)
