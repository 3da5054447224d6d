"""Settings of the kind backend: one frozen object, from defaults, env vars and options.

=============================  ===========================================================
env var                        what
=============================  ===========================================================
``DRAC_KIND_NAME``             cluster name (default ``dra-conformance``)
``DRAC_KIND_VERSION``          kind version built from Go modules when ``kind`` is not on PATH
``DRAC_KIND_NODE_IMAGE``       node image (default: :data:`NODE_IMAGES` for the version); ``build``:
                               the air-gapped image built here (:mod:`clusters.kind.nodeimage`)
``DRAC_KIND_KEEP``             ``1``: leave the cluster after the run
``DRAC_KIND_POD_IMAGE``        the test pods' image built here with ``build`` (default ``busybox:1.36``)
``DRAC_KIND``                  the ``kind`` binary (else PATH, else a Go build)
``DRAC_K8S_VERSION``           Kubernetes version of the nodes (as the local tier)
=============================  ===========================================================

The Docker engine comes from :class:`~clusters.engine.settings.EngineSettings` (``DOCKER_HOST``,
``DRAC_ENGINE``, ``DRAC_ENGINE_DIR``, ...): a running engine, else, as root, a private one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from clusters.engine.settings import EngineSettings
from clusters.local.settings import normalize_version, xdg_state_dir
from clusters.podcluster import PodClusterSettings

__all__ = ["BUILD", "KIND_VERSION", "NODE_IMAGES", "KindSettings", "node_image"]

KIND_VERSION = "v0.33.0"
"""kind built from Go modules (``sigs.k8s.io/kind``) when none is on PATH."""

NODE_IMAGES: Mapping[str, str] = {
    "1.37": "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5",
    "1.36": "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed",
    "1.35": "kindest/node:v1.35.8@sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0",
    "1.34": "kindest/node:v1.34.11@sha256:44e222ee2132dab25ff87301682f89eb82c7880ea3a1bf543bfe9708fd08d67d",
}
"""Node image per Kubernetes minor: the images the release notes of kind v0.33.0 list as built for
it, pinned by digest (a tag alone may point at a build for another kind release). Another kind
version wants the images of its own release notes: ``DRAC_KIND_NODE_IMAGE=image@sha256:...``."""

BUILD = "build"
"""The node image value that asks for the air-gapped image built here (:mod:`clusters.kind.nodeimage`)."""

_TRUE = {"1", "true", "yes", "on"}


def node_image(k8s_version: str) -> str:
    """The node image of :data:`NODE_IMAGES` for ``k8s_version`` (``1.37`` or ``1.37.2``)."""
    minor = ".".join(normalize_version(k8s_version).split(".")[:2])
    try:
        return NODE_IMAGES[minor]
    except KeyError:
        known = ", ".join(sorted(NODE_IMAGES))
        raise ValueError(
            f"no kind node image known for Kubernetes {k8s_version} (known: {known}); "
            "set DRAC_KIND_NODE_IMAGE to one"
        ) from None


@dataclass(frozen=True)
class KindSettings(PodClusterSettings):
    """What the kind backend makes (with ``k8s_version``, ``release``, ``install_driver`` and
    ``slices_timeout`` of :class:`~clusters.podcluster.PodClusterSettings`)."""

    backend: ClassVar[str] = "kind"

    name: str = "dra-conformance"
    """Cluster name (``kind create cluster --name``)."""
    workers: int = 2
    """Worker nodes, where the driver runs (one control-plane node besides)."""
    image: str = ""
    """Node image (empty: :func:`node_image` of :attr:`k8s_version`)."""
    kind_version: str = KIND_VERSION
    """kind version to build when no ``kind`` is found."""
    keep: bool = False
    """Leave the cluster after the run (a run always reuses a cluster of the same name)."""
    work_dir: Path = field(default_factory=lambda: xdg_state_dir("kind", {}))
    """Where the kubeconfig, the cluster config and logs go."""
    pod_image: str = "busybox:1.36"
    """The test pods' image, built here and imported into the nodes with a node image built here
    (:data:`BUILD`): the suite's default (``DRAC_KIND_POD_IMAGE``: another name for it)."""
    engine: EngineSettings = field(default_factory=EngineSettings)
    """Which Docker engine runs the nodes (the user's, else a private one: :mod:`clusters.engine`)."""

    @property
    def node_image(self) -> str:
        """The node image in use (:data:`BUILD`: the one built here; its name comes with the build)."""
        return self.image or node_image(self.k8s_version)

    @property
    def build_image(self) -> bool:
        """Whether the node image is built here (:data:`BUILD`)."""
        return self.image == BUILD

    @property
    def kubeconfig(self) -> Path:
        """The cluster's admin kubeconfig (written by kind)."""
        return self.work_dir / self.name / "kubeconfig"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KindSettings:
        """Defaults, then the env vars of the module docstring."""
        changes = cls._env_changes(env)
        if env.get("DRAC_KIND_NAME"):
            changes["name"] = env["DRAC_KIND_NAME"]
        if env.get("DRAC_KIND_VERSION"):
            changes["kind_version"] = env["DRAC_KIND_VERSION"]
        if env.get("DRAC_KIND_NODE_IMAGE"):
            changes["image"] = env["DRAC_KIND_NODE_IMAGE"]
        if env.get("DRAC_KIND_POD_IMAGE"):
            changes["pod_image"] = env["DRAC_KIND_POD_IMAGE"]
        changes["keep"] = env.get("DRAC_KIND_KEEP", "").lower() in _TRUE
        changes["engine"] = EngineSettings.from_env(env)
        return dataclasses.replace(cls(), **changes)

    def with_options(self, **options: object) -> KindSettings:
        """These settings with the options that are not None."""
        given = {k: v for k, v in options.items() if v is not None}
        if "k8s_version" in given:
            given["k8s_version"] = normalize_version(str(given["k8s_version"]))
        workers = given.get("workers")
        if isinstance(workers, int) and workers < 1:
            raise ValueError(f"workers {workers}: give at least 1")
        return dataclasses.replace(self, **given)  # type: ignore[arg-type]
