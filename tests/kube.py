"""The tests' way into the kubernetes client: raw JSON in, answers as they come, typed ``Any``.

The tests write the API's JSON shapes (dicts), which the client accepts, while its typed
signatures want models and its models make every field Optional; its config loaders are
untyped. So tests reach the client through these helpers, typed ``Any`` (the driver and the node
agent send plain JSON themselves: ``draproto.rest``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "admin_client",
    "client_from_dict",
    "core",
    "create_from_dict",
    "preload",
    "rbac",
    "resource",
    "to_json",
]


def admin_client(kubeconfig: Path | str) -> Any:
    """An ``ApiClient`` for a kubeconfig file (close it when done)."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]


def client_from_dict(kubeconfig: dict[str, Any]) -> Any:
    """An ``ApiClient`` for a kubeconfig given as a dict."""
    from kubernetes import config

    return config.new_client_from_config_dict(kubeconfig)  # type: ignore[no-untyped-call]


def preload() -> None:
    """Import the client's typed APIs these helpers hand out, and with them their models."""
    from kubernetes import client
    from kubernetes.client import exceptions  # noqa: F401

    for api in ("CoreV1Api", "ResourceV1Api", "RbacAuthorizationV1Api"):
        getattr(client, api)


def core(api: Any) -> Any:
    """``CoreV1Api`` over ``api``."""
    from kubernetes import client

    return client.CoreV1Api(api)


def resource(api: Any) -> Any:
    """``ResourceV1Api`` (resource.k8s.io/v1) over ``api``."""
    from kubernetes import client

    return client.ResourceV1Api(api)


def rbac(api: Any) -> Any:
    """``RbacAuthorizationV1Api`` over ``api``."""
    from kubernetes import client

    return client.RbacAuthorizationV1Api(api)


def to_json(model: Any) -> Any:
    """A client model as the JSON the API server would get."""
    from kubernetes import client

    return client.ApiClient().sanitize_for_serialization(model)  # type: ignore[no-untyped-call]


def create_from_dict(api: Any, obj: dict[str, Any], namespace: str) -> Any:
    """Create an object of any kind from its manifest (namespaced ones in ``namespace``)."""
    from kubernetes import utils

    return utils.create_from_dict(api, obj, namespace=namespace)  # type: ignore[no-untyped-call]
