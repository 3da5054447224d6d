"""Is this cluster fit for the suite? Reachable through its kubeconfig, and serving DRA.

:func:`check` answers before anything is started or installed, so a bad kubeconfig or a cluster
without ``resource.k8s.io/v1`` stops a run with one message that says what to fix.
"""

from __future__ import annotations

from pathlib import Path

from clusters.errors import ClusterStateError, ClusterUnfit

__all__ = ["DRA_GROUP_VERSION", "check"]

DRA_GROUP_VERSION = "resource.k8s.io/v1"
"""The DRA API the suite needs (GA, on by default, from Kubernetes 1.34)."""


def check(kubeconfig: Path, timeout: float = 15.0) -> str:
    """The server version (``v1.37.2``) of the cluster ``kubeconfig`` reaches.

    Raises :class:`~clusters.errors.ClusterStateError` when the kubeconfig is missing, unreadable
    or the server does not answer, and :class:`~clusters.errors.ClusterUnfit` when it answers but
    does not serve :data:`DRA_GROUP_VERSION`.
    """
    # draproto comes with grpc: not for every user of this module
    from draproto.apiconn import KubeconfigError, connect
    from draproto.rest import Rest, RestError

    if not kubeconfig.is_file():
        raise ClusterStateError(f"kubeconfig {kubeconfig} does not exist: give the path of a kubeconfig")
    try:
        rest = Rest(connect(kubeconfig), timeout)
    except (KubeconfigError, OSError, ValueError, TypeError, AttributeError) as e:  # a malformed one too
        raise ClusterStateError(f"kubeconfig {kubeconfig} cannot be used: {e}") from e
    try:
        try:
            version = str(rest.send("GET", "/version").get("gitVersion", ""))
            groups = rest.send("GET", "/apis").get("groups") or []
        except (RestError, KubeconfigError) as e:  # no answer, a refusal, or a token file gone
            raise ClusterStateError(
                f"the cluster of {kubeconfig} ({rest.connection.server}) does not answer: {e}; "
                "check that it runs and that the kubeconfig's server and credentials are right"
            ) from e
        served = {
            str(v.get("groupVersion"))
            for g in groups
            if g.get("name") == "resource.k8s.io"
            for v in g.get("versions") or []
        }
        if DRA_GROUP_VERSION not in served:
            have = ", ".join(sorted(served)) or "none"
            raise ClusterUnfit(
                f"the cluster of {kubeconfig} (Kubernetes {version}) does not serve "
                f"{DRA_GROUP_VERSION} (resource.k8s.io versions served: {have}): DRA needs Kubernetes "
                "1.34 or newer, or the DynamicResourceAllocation feature gate and that API enabled"
            )
        return version
    finally:
        rest.close()
