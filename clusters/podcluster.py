"""What the kind and k3s backends share as settings and as a :class:`~clusters.base.Cluster`.

Both run the driver under test as pods (the reference driver's chart, or a vendor's chart or
manifests: a :class:`~clusters.release.Release`; :mod:`clusters.incluster` drives ``kubectl``
and ``helm``), so both need the same settings besides their own (:class:`PodClusterSettings`:
Kubernetes version, driver release, whether to install it, how long to wait for slices, the env
vars of these) and do the same on a started cluster (:class:`PodCluster`: install the driver,
give a node's placeholder values, run a command in the node's driver pod, restart that pod).
What differs (how nodes are made, listed, logged and stopped) stays in each backend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from clusters import tools
from clusters.base import Cluster
from clusters.errors import ClusterError
from clusters.incluster import InCluster, wait_slices
from clusters.local.settings import DEFAULT_K8S_VERSION, env_k8s_version, xdg_state_dir
from clusters.progress import Progress
from clusters.release import FAKE_ROOT, DriverPods, DriverRelease, Release

__all__ = ["PodCluster", "PodClusterSettings"]


@dataclass(frozen=True)
class PodClusterSettings:
    """The settings every backend with the driver in pods has; each backend adds its own fields,
    among them ``work_dir`` (its default: :func:`~clusters.local.settings.xdg_state_dir` of
    :attr:`backend`)."""

    backend: ClassVar[str] = ""
    """The backend's name (``kind``, ``k3s``): its state dir below ``$XDG_STATE_HOME/dra-conformance``."""

    k8s_version: str = DEFAULT_K8S_VERSION
    """Kubernetes version (picks the node image and the feature gates)."""
    release: Release = field(default_factory=DriverRelease)
    """The driver to install: the reference driver's image and chart values (default), or a
    vendor's chart or manifests (:class:`~clusters.release.VendorRelease`)."""
    install_driver: bool = True
    """Load and install :attr:`release` (off: the driver is installed otherwise)."""
    slices_timeout: float = 180.0
    """Seconds every node with the driver may take to publish its first slice after the chart installed."""
    failure_logs: Path | None = None
    """Where the cluster's logs go when it does not come up (None: ``logs`` in the backend's work
    dir); ``dra-conformance run`` names its run's ``cluster-logs``."""

    @classmethod
    def _env_changes(cls, env: Mapping[str, str]) -> dict[str, Any]:
        """The changes the env vars every such backend reads make: ``DRAC_K8S_VERSION`` and
        ``XDG_STATE_HOME`` (its ``work_dir``)."""
        changes: dict[str, Any] = {}
        version = env_k8s_version(env)
        if version:
            changes["k8s_version"] = version
        if env.get("XDG_STATE_HOME"):
            changes["work_dir"] = xdg_state_dir(cls.backend, env)
        return changes


S = TypeVar("S", bound=PodClusterSettings)


class PodCluster(Cluster, Generic[S]):
    """A cluster whose driver runs as pods of the reference chart (kind, k3s): see the module docstring."""

    def __init__(self, settings: S, progress: Progress, env: Mapping[str, str] | None) -> None:
        self.settings = settings
        """What to make."""
        self._say = progress
        self._env = dict(os.environ if env is None else env)
        self._docker: Path | None = None
        self._in: InCluster | None = None
        self._tool_env: dict[str, str] = dict(self._env)
        """The env of ``docker`` commands: :attr:`_env`, with what names the engine in use."""

    def _incluster(self) -> InCluster:
        if self._in is None:
            raise ClusterError(f"the {self.backend} cluster is not started")
        return self._in

    def _attach_tools(self, info: Mapping[str, str]) -> None:
        """For :meth:`attach`: docker and kubectl from the env (no helm: attaching installs nothing),
        and the driver's pods as ``info`` names them (else those of :attr:`settings`' release)."""
        self._docker = tools.find("docker", self._env)
        pods = DriverPods.from_info(info) or self.settings.release.pods
        self._in = InCluster(self.kubeconfig, pods, kubectl=tools.find("kubectl", self._env))

    def _pods_info(self) -> dict[str, str]:
        """The driver's pods for :meth:`info` (an attached cluster's as it was told them)."""
        pods = self._in.pods if self._in is not None else self.settings.release.pods
        return pods.info()

    def _install_driver(
        self, docker: Path, containers: Sequence[str], release: Release | None = None
    ) -> None:
        """Load the driver's images into the node ``containers``, install it, wait for slices
        (``release``: instead of :attr:`settings`' own)."""
        incluster = self._incluster()
        release = release or self.settings.release
        release.load(docker, containers, self._say, self._tool_env)
        release.install(incluster, self._say)
        wait_slices(
            incluster.kubectl,
            release.driver,
            self.nodes(),
            timeout=self.settings.slices_timeout,
            progress=self._say,
            report=incluster.pods_report,
        )

    def node_values(self, node: str) -> dict[str, str]:
        """``root`` and ``python`` as the driver pod of ``node`` sees them (see :meth:`on_node`)."""
        return {**super().node_values(node), "root": FAKE_ROOT, "python": "python"}

    def on_node(self, node: str, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` in the driver pod of ``node``."""
        return self._incluster().exec_driver(node, argv)

    def restart_driver(self, node: str, *, crash: bool = False) -> None:
        """Delete the driver pod of ``node``; its DaemonSet starts a new one."""
        self._incluster().restart_driver(node, crash=crash)
