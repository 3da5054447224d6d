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
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if not kubeconfig.is_file():
        raise ClusterStateError(f"kubeconfig {kubeconfig} does not exist: give the path of a kubeconfig")
    try:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, ValueError, TypeError) as e:
        raise ClusterStateError(f"kubeconfig {kubeconfig} cannot be used: {e}") from e
    try:
        try:
            version = client.VersionApi(api).get_code(_request_timeout=timeout)
            groups = client.ApisApi(api).get_api_versions(_request_timeout=timeout)
        except Exception as e:  # urllib3 and the client raise many kinds: all mean "not reachable"
            server = api.configuration.host
            raise ClusterStateError(
                f"the cluster of {kubeconfig} ({server}) does not answer: {type(e).__name__}: {e}; "
                "check that it runs and that the kubeconfig's server and credentials are right"
            ) from e
        served = {
            v.group_version
            for g in groups.groups or []
            if g.name == "resource.k8s.io"
            for v in g.versions or []
        }
        if DRA_GROUP_VERSION not in served:
            have = ", ".join(sorted(served)) or "none"
            raise ClusterUnfit(
                f"the cluster of {kubeconfig} (Kubernetes {version.git_version}) does not serve "
                f"{DRA_GROUP_VERSION} (resource.k8s.io versions served: {have}): DRA needs Kubernetes "
                "1.34 or newer, or the DynamicResourceAllocation feature gate and that API enabled"
            )
        return str(version.git_version)
    finally:
        api.close()
