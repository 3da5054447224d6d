"""The driver's identity as the API server sees it: the profile's service account, its token bound
to a node, and the access the profile's ``identity.install`` grants it (made here where the cluster
runs no chart). Rules that ask what the driver may write take it from here."""

from __future__ import annotations

from conformance.harness.documents import command_documents
from conformance.harness.kube import Kube, meta
from conformance.profiles import DriverProfile

__all__ = ["INSTALLED_LABEL", "NODE_NAME_EXTRA", "as_driver", "install_identity"]

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
"""The user extra in which the API server names the node a service-account token is bound to."""

INSTALLED_LABEL = "dra-conformance.io/installed-by"
"""The label on the objects the suite made from the profile's ``identity.install``: only those it
replaces later (a chart's own are left alone)."""


def install_identity(kube: Kube, profile: DriverProfile) -> bool:
    """Make what the profile's ``identity.install`` prints where it is missing (the local tier runs
    no chart), or replace what an earlier install made; leave others' (a chart's). Whether anything
    was written (a write takes the API server a moment to enforce)."""
    wrote = False
    for obj in command_documents(profile.identity.install, profile, "identity.install"):
        m = meta(obj)
        labels = {**(m.get("labels") or {}), INSTALLED_LABEL: "identity.install"}
        ours = {**obj, "metadata": {**m, "labels": labels}}
        current = kube.get(obj["kind"], m["name"], m.get("namespace"))
        if current is None:
            kube.create(ours)
        elif INSTALLED_LABEL in (meta(current).get("labels") or {}):
            version = meta(current).get("resourceVersion")
            kube.replace({**ours, "metadata": {**ours["metadata"], "resourceVersion": version}})
        else:
            continue
        wrote = True
    return wrote


def as_driver(kube: Kube, profile: DriverProfile, node: str) -> Kube:
    """``kube`` acting as the driver's service account with a token bound to ``node``."""
    return kube.impersonating(profile.identity.username(), {NODE_NAME_EXTRA: node})
