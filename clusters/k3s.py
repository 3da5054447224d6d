"""``K3sCluster``: a one-node k3s cluster in a container (``testcontainers``), with the driver under test.

The k3s server runs from a pinned image (:func:`k3s_image`; ``DRAC_K3S_IMAGE`` overrides), with
the DRA feature gates of its version (as the kind backend reads them) on the API server,
scheduler, controller manager and kubelet, through k3s's ``--<component>-arg`` flags. The
kubeconfig comes from the container. The driver image is built from ``driver/deploy/Dockerfile``,
imported into the node's containerd (``docker save``, then ``docker exec -i ID ctr -n k8s.io images
import -``: :func:`clusters.release.import_image`), and installed with the chart (another driver:
its images imported the same way, its chart or manifests installed,
:class:`~clusters.release.VendorRelease`); then the run waits for the node's slices. Faults and
views work as on kind (in the driver pod; ``kubectl exec``); the kubelet is part of the k3s process, so
it cannot restart alone.

The container comes from a factory (default: testcontainers' ``K3SContainer``), so the logic
can be tested without a Docker engine.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from clusters import apicheck, tools
from clusters.base import ContainerView, PodRef
from clusters.errors import ClusterError, ToolError
from clusters.incluster import CAT_SPECS, InCluster, find_tools, give_up, parse_specs
from clusters.kind.config import dra_gates
from clusters.local.settings import normalize_version, xdg_state_dir
from clusters.podcluster import PodCluster, PodClusterSettings
from clusters.progress import Progress

__all__ = ["K3S_CAPABILITIES", "K3sCluster", "K3sSettings", "k3s_args", "k3s_image"]

log = logging.getLogger(__name__)

K3S_CAPABILITIES = frozenset({"view", "restart-driver"})
"""What a k3s cluster can do beyond the API (its kubelet is inside the k3s server process)."""

_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet")


def k3s_image(k8s_version: str) -> str:
    """The k3s image of a Kubernetes version: ``rancher/k3s:v<version>-k3s1`` (k3s tags each
    Kubernetes patch release so)."""
    return f"rancher/k3s:v{normalize_version(k8s_version)}-k3s1"


def k3s_args(gates: Mapping[str, bool]) -> list[str]:
    """The k3s server command: no traefik, the DRA gates on every component."""
    args = ["server", "--disable=traefik"]
    if gates:
        value = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))
        args += [f"--{c}-arg=feature-gates={value}" for c in _COMPONENTS]
    return args


class Container(Protocol):
    """The part of testcontainers' ``DockerContainer`` this backend uses."""

    def with_command(self, command: str) -> Any: ...
    def start(self) -> Any: ...
    def stop(self) -> None: ...
    def config_yaml(self) -> str: ...
    def get_wrapped_container(self) -> Any: ...


ContainerFactory = Callable[[str], Container]


def _testcontainers(image: str) -> Container:
    try:
        from testcontainers.community.k3s import K3SContainer  # its current home
    except ImportError:
        try:
            from testcontainers.k3s import K3SContainer
        except ImportError as e:
            raise ToolError(
                "the k3s backend needs the testcontainers package: pip install 'dra-conformance[k3s]'"
            ) from e
    container: Container = K3SContainer(image=image)
    return container


@dataclass(frozen=True)
class K3sSettings(PodClusterSettings):
    """What the k3s backend makes (env: ``DRAC_K3S_IMAGE``, ``DRAC_K8S_VERSION``), with
    ``k8s_version``, ``release``, ``install_driver`` and ``slices_timeout`` of
    :class:`~clusters.podcluster.PodClusterSettings`."""

    backend: ClassVar[str] = "k3s"

    image: str = ""
    """k3s image (empty: :func:`k3s_image` of the version)."""
    work_dir: Path = field(default_factory=lambda: xdg_state_dir("k3s", {}))
    """Where the kubeconfig and logs go."""

    @property
    def server_image(self) -> str:
        """The image in use."""
        return self.image or k3s_image(self.k8s_version)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> K3sSettings:
        """Defaults, then ``DRAC_K3S_IMAGE``, ``DRAC_K8S_VERSION``, ``XDG_STATE_HOME``."""
        changes = cls._env_changes(env)
        if env.get("DRAC_K3S_IMAGE"):
            changes["image"] = env["DRAC_K3S_IMAGE"]
        return dataclasses.replace(cls(), **changes)


class K3sCluster(PodCluster[K3sSettings]):
    """A one-node k3s cluster for the suite (see the module docstring)."""

    backend = "k3s"
    capabilities = K3S_CAPABILITIES

    def __init__(
        self,
        settings: K3sSettings,
        progress: Progress | None = None,
        env: Mapping[str, str] | None = None,
        factory: ContainerFactory = _testcontainers,
    ) -> None:
        super().__init__(settings, progress or (lambda m: log.info("%s", m)), env)
        self._factory = factory
        self._container: Container | None = None
        self._container_ref = ""
        self._nodes: list[str] = []

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig read from the container."""
        return self.settings.work_dir / "kubeconfig"

    def start(self) -> K3sCluster:
        """Start the k3s container, check DRA, install the driver; a failure stops the container."""
        s = self.settings
        found = find_tools(self._env, s.release if s.install_driver else None)
        self._docker = docker = found.docker
        gates = dra_gates(s.k8s_version, self._env, self._say)
        self._say(f"starting k3s ({s.server_image}) ...")
        container = self._factory(s.server_image)
        container.with_command(" ".join(k3s_args(gates)))
        self._container = container
        try:
            container.start()
            s.work_dir.mkdir(parents=True, exist_ok=True)
            self.kubeconfig.write_text(container.config_yaml())
            self.kubeconfig.chmod(0o600)
            version = apicheck.check(self.kubeconfig)
            self._in = InCluster(self.kubeconfig, s.release.pods, kubectl=found.kubectl, helm=found.helm)
            self._say(f"k3s: Kubernetes {version}, node {', '.join(self.nodes())}")
            if s.install_driver:
                self._install_driver(docker, [self._container_id()])
        except BaseException:
            self._after_failure()
            raise
        return self

    def _container_id(self) -> str:
        if not self._container_ref:
            if self._container is None:
                raise ClusterError("the k3s cluster is not started")
            self._container_ref = str(self._container.get_wrapped_container().id)
        return self._container_ref

    def info(self) -> dict[str, str]:
        """What another process needs to :meth:`attach` to this cluster."""
        return {
            "backend": self.backend,
            "kubeconfig": str(self.kubeconfig),
            "container": self._container_id(),
            **self._pods_info(),
        }

    @classmethod
    def attach(cls, info: Mapping[str, str], env: Mapping[str, str] | None = None) -> K3sCluster:
        """The cluster another process started (:meth:`info`); stopping this object leaves it running."""
        settings = dataclasses.replace(K3sSettings(), work_dir=Path(info["kubeconfig"]).parent)
        cluster = cls(settings, env=env)
        cluster._attach_tools(info)
        cluster._container_ref = info["container"]
        return cluster

    def _after_failure(self) -> None:
        give_up(self, self.settings.failure_logs or self.settings.work_dir / "logs", self._say)

    def collect_logs(self, dest: Path) -> None:
        """The k3s server's log and the driver pods' logs, into ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        if self._docker is not None and (self._container is not None or self._container_ref):
            done = tools.run([self._docker, "logs", self._container_id()], check=False)
            (dest / "k3s.log").write_text(done.stdout + done.stderr)
        if self._in is not None:
            self._in.logs(dest / "driver")

    def stop(self) -> None:
        """Stop and remove the container; close the API client."""
        self.close_client()
        if self._container is not None:
            self._say("stopping k3s")
            self._container.stop()
            self._container = None
            self.kubeconfig.unlink(missing_ok=True)

    def nodes(self) -> list[str]:
        """The k3s node (the server is its only node)."""
        if not self._nodes:
            out = self._incluster().kubectl("get", "nodes", "-o", "name")
            self._nodes = sorted(n.rpartition("/")[2] for n in out.split())
        return list(self._nodes)

    def node_cdi_specs(self, node: str) -> list[dict[str, object]]:
        """The CDI specs in the k3s container (its only node)."""
        if self._docker is None:
            raise ClusterError("the k3s cluster is not started")
        specs_text = tools.run([self._docker, "exec", self._container_id(), "sh", "-c", CAT_SPECS]).stdout
        return parse_specs(specs_text)

    def container_view(self, pod: PodRef, container: str) -> ContainerView:
        """What the container sees (``kubectl exec``), CDI devices inferred from the node's specs."""
        return self._incluster().container_view(pod, container, self.node_cdi_specs(""))
