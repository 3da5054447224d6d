"""What a test created, removed in reverse order when it ends (csi-sanity's resource tracker).

Only objects the tracker created (or was told a test created) are deleted: the suite never
deletes an object it did not make. NotFound counts as done; every other error is collected and
reported together at the end, so one stuck object does not hide the others.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.errors import ResourceError
from conformance.harness.kube import ApiError, Kube, meta

__all__ = ["PULL_SECRETS_NAMESPACE", "Created", "Tracker", "copy_secrets"]

PULL_SECRETS_NAMESPACE = "default"
"""Where the profile's image pull secrets are read from (:func:`copy_secrets`)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Created:
    """One object a test made."""

    kind: str
    """Its kind."""
    name: str
    """Its name."""
    namespace: str | None
    """Its namespace (None: cluster-scoped)."""
    uid: str
    """Its UID when created (a newer object of the same name is not ours)."""


class Tracker:
    """Creates objects and remembers them; :meth:`cleanup` deletes them newest first."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        """The API."""
        self.created: list[Created] = []
        """What was made, oldest first."""

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj`` and remember it."""
        made = self.kube.create(obj)
        m = meta(made)
        self.created.append(Created(made["kind"], m["name"], m.get("namespace"), m.get("uid", "")))
        return made

    def forget(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Stop tracking an object (a test deleted it itself)."""
        self.created = [c for c in self.created if (c.kind, c.name, c.namespace) != (kind, name, namespace)]

    def cleanup(self) -> None:
        """Delete everything made, newest first; raise one error listing what could not be deleted."""
        errors = []
        while self.created:
            c = self.created.pop()
            try:
                current = self.kube.get(c.kind, c.name, c.namespace)
                if current is None or (c.uid and meta(current).get("uid") != c.uid):
                    continue  # gone, or replaced by an object that is not ours
                self.kube.delete(c.kind, c.name, c.namespace)
            except ApiError as e:
                errors.append(f"{c.kind} {c.namespace or ''}/{c.name}: {e}")
        if errors:
            raise ResourceError("could not delete what the test created: " + "; ".join(errors))


def copy_secrets(
    tracker: Tracker, names: Sequence[str], namespace: str, source: str = PULL_SECRETS_NAMESPACE
) -> None:
    """Copy the Secrets ``names`` (a profile's image pull secrets) from ``source`` into ``namespace``,
    those not there yet; :class:`ResourceError` names a missing one and how to make it."""
    for name in names:
        if tracker.kube.get("Secret", name, namespace) is not None:
            continue
        found = tracker.kube.get("Secret", name, source)
        if found is None:
            raise ResourceError(
                f"image pull secret {name!r} (profile pods.imagePullSecrets) is not in namespace "
                f"{source!r}: create it there (kubectl create secret docker-registry {name} -n {source} "
                "...); the suite copies it into each test namespace"
            )
        body: dict[str, Any] = {k: found[k] for k in ("apiVersion", "kind", "type", "data") if k in found}
        tracker.create({**body, "metadata": {"name": name, "namespace": namespace}})
