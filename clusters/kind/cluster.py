"""``KindCluster``: a kind cluster (nodes as Docker containers) with the driver under test in pods.

Lifecycle (:meth:`KindCluster.start`): check the tools (``docker`` with an engine that answers,
``kubectl``, ``helm``, ``kind``: from PATH, else built from Go modules and cached); create the
cluster from the generated config, or reuse one of the same name; check it serves DRA; build the
driver's image from ``driver/deploy/Dockerfile`` and import it into every node (``docker save |
docker exec -i NODE ctr -n k8s.io images import -``, which works across kind versions); install
the chart with the fake backend; wait until every worker publishes slices. Another driver than
the reference one (a :class:`~clusters.release.VendorRelease`, from a profile's ``install``
section) has its images imported the same way, then its chart or manifests installed. A failure on the way
writes the nodes' and the driver pods' logs to ``<work dir>/<name>/logs/`` and deletes a cluster
this object created (unless kept). :meth:`stop` deletes it too, unless ``keep``.

A node's ``{root}`` is the driver pod's fake machine dir and ``{python}`` the pod's interpreter:
:meth:`on_node` runs a profile's fault command inside the driver pod of the node.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from clusters import apicheck, tools
from clusters.base import ContainerView, PodRef, pod_key
from clusters.errors import ClusterError, ToolError
from clusters.incluster import CAT_SPECS, InCluster, find_tools, give_up, parse_specs
from clusters.kind.config import dra_gates, render
from clusters.kind.settings import KindSettings
from clusters.local.gobins import GoBinary, cached_build
from clusters.local.settings import LocalSettings
from clusters.podcluster import PodCluster

__all__ = ["KIND_BINARY", "KIND_CAPABILITIES", "KindCluster", "find_kind"]

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

KIND_CAPABILITIES = frozenset({"view", "restart-driver", "restart-kubelet"})
"""What a kind cluster can do beyond the API (no driver sockets: those are inside the nodes)."""

KIND_BINARY = GoBinary("kind", "sigs.k8s.io/kind", "sigs.k8s.io/kind")
"""kind, built from its Go module when none is on PATH."""


def _say(message: str) -> None:
    log.info("%s", message)


def find_kind(settings: KindSettings, env: Mapping[str, str], progress: Progress = _say) -> Path:
    """``kind``: ``$DRAC_KIND``, else on PATH, else built from Go modules into the cache."""
    try:
        return tools.find("kind", env)
    except ToolError as missing:
        if env.get("DRAC_KIND"):
            raise
        local = LocalSettings.from_env(env)
        entry = local.binaries.cache_root.parent / "tools" / "kind" / settings.kind_version
        try:
            return cached_build(
                KIND_BINARY,
                settings.kind_version,
                entry,
                build=local.binaries.build,
                progress=progress,
                instead="install kind or set DRAC_KIND=PATH",
            )
        except ClusterError as e:
            raise ToolError(f"{missing}; building it failed too: {e}") from e


class KindCluster(PodCluster[KindSettings]):
    """A kind cluster for the suite (see the module docstring)."""

    backend = "kind"
    capabilities = KIND_CAPABILITIES

    def __init__(
        self, settings: KindSettings, progress: Progress | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(settings, progress or _say, env)
        self._created = False
        self._kind: Path | None = None
        self._workers: list[str] = []

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig kind wrote for this cluster."""
        return self.settings.kubeconfig

    @property
    def state_dir(self) -> Path:
        """``<work dir>/<name>``: kubeconfig, config, logs."""
        return self.settings.work_dir / self.settings.name

    def start(self) -> KindCluster:
        """Make (or reuse) the cluster and install the driver; see the module docstring."""
        s = self.settings
        found = find_tools(self._env, s.release if s.install_driver else None)
        self._docker = docker = found.docker
        self._kind = kind = find_kind(s, self._env, self._say)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._in = InCluster(self.kubeconfig, s.release.pods, kubectl=found.kubectl, helm=found.helm)
        existing = tools.run([kind, "get", "clusters"], timeout=60).stdout.split()
        try:
            if s.name in existing:
                self._say(f"reusing kind cluster {s.name}")
                tools.run(
                    [kind, "export", "kubeconfig", "--name", s.name, "--kubeconfig", self.kubeconfig],
                    timeout=60,
                )
            else:
                self._create(kind)
            version = apicheck.check(self.kubeconfig)
            self._say(f"kind cluster {s.name}: Kubernetes {version}, workers {', '.join(self.nodes())}")
            if s.install_driver:
                self._install_driver(docker, self._all_nodes())
        except BaseException:
            self._after_failure()
            raise
        return self

    def info(self) -> dict[str, str]:
        """What another process needs to :meth:`attach` to this cluster."""
        return {
            "backend": self.backend,
            "kubeconfig": str(self.kubeconfig),
            "name": self.settings.name,
            "work_dir": str(self.settings.work_dir),
            **self._pods_info(),
        }

    @classmethod
    def attach(cls, info: Mapping[str, str], env: Mapping[str, str] | None = None) -> KindCluster:
        """The cluster another process made (:meth:`info`); stopping this object leaves it running."""
        base = KindSettings.from_env(os.environ if env is None else env)
        settings = base.with_options(name=info["name"], work_dir=Path(info["work_dir"]))
        cluster = cls(settings, env=env)
        cluster._attach_tools(info)
        cluster._kind = find_kind(settings, cluster._env, cluster._say)
        return cluster

    def _create(self, kind: Path) -> None:
        s = self.settings
        gates = dra_gates(s.k8s_version, self._env, self._say)
        config = self.state_dir / "kind-config.yaml"
        config.write_text(render(workers=s.workers, gates=gates, image=s.node_image))
        self._say(f"creating kind cluster {s.name} ({s.node_image}, {s.workers} worker(s)) ...")
        started = time.monotonic()
        self._created = True  # from here on, a failure deletes what kind made
        tools.run(
            [
                kind,
                "create",
                "cluster",
                "--name",
                s.name,
                "--config",
                config,
                "--image",
                s.node_image,
                "--kubeconfig",
                self.kubeconfig,
                "--wait",
                "180s",
            ],
            timeout=900,
        )
        self._say(f"kind cluster {s.name} created in {time.monotonic() - started:.0f} s")

    def _after_failure(self) -> None:
        give_up(self, self.state_dir / "logs", self._say)

    def collect_logs(self, dest: Path) -> None:
        """The logs of every node (``kind export logs``) and of the driver pods, into ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        if self._kind is not None:
            tools.run(
                [self._kind, "export", "logs", dest / "nodes", "--name", self.settings.name], check=False
            )
        if self._in is not None:
            self._in.logs(dest / "driver")

    def stop(self) -> None:
        """Delete the cluster if this object created it (unless ``keep``); close the API client."""
        self.close_client()
        if self._created and not self.settings.keep and self._kind is not None:
            self._say(f"deleting kind cluster {self.settings.name}")
            tools.run(
                [self._kind, "delete", "cluster", "--name", self.settings.name], timeout=300, check=False
            )
            self._created = False
            self.kubeconfig.unlink(missing_ok=True)  # the config and any logs stay, for a look afterwards

    # --- nodes ------------------------------------------------------------------------------

    def _all_nodes(self) -> list[str]:
        assert self._kind is not None
        out = tools.run([self._kind, "get", "nodes", "--name", self.settings.name], timeout=60).stdout
        return sorted(out.split())

    def nodes(self) -> list[str]:
        """The worker nodes (the control-plane node runs no driver)."""
        if not self._workers:
            self._workers = [n for n in self._all_nodes() if not n.endswith("-control-plane")]
        return list(self._workers)

    def _docker_exec(self, node: str, *argv: str, timeout: float = 120.0) -> str:
        if self._docker is None:
            raise ClusterError("the kind cluster is not started")
        return tools.run([self._docker, "exec", node, *argv], timeout=timeout).stdout

    # --- what tests ask for -----------------------------------------------------------------

    def restart_kubelet(self, node: str, *, crash: bool = False) -> None:
        """``systemctl restart kubelet`` in the node's container (``crash``: SIGKILL, then start)."""
        if crash:
            self._docker_exec(node, "systemctl", "kill", "--signal=SIGKILL", "kubelet")
            self._docker_exec(node, "systemctl", "start", "kubelet")
        else:
            self._docker_exec(node, "systemctl", "restart", "kubelet")
        self._incluster().kubectl(
            "wait", "--for=condition=Ready", f"node/{node}", "--timeout=120s", timeout=150
        )

    def stop_kubelet(self, node: str) -> None:
        """``systemctl stop kubelet`` in the node's container."""
        self._docker_exec(node, "systemctl", "stop", "kubelet")

    def node_cdi_specs(self, node: str) -> list[dict[str, object]]:
        """The CDI specs in the node's container."""
        return parse_specs(self._docker_exec(node, "sh", "-c", CAT_SPECS))

    def container_view(self, pod: PodRef, container: str) -> ContainerView:
        """What the container sees (``kubectl exec``), with the CDI devices inferred from its node's specs."""
        namespace, name = pod_key(pod)
        node = self._incluster().kubectl(
            "get", "pod", "-n", namespace, name, "-o", "jsonpath={.spec.nodeName}"
        )
        return self._incluster().container_view(pod, container, self.node_cdi_specs(node.strip()))
