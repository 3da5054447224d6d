"""``KindCluster``: a kind cluster (nodes as Docker containers) with the driver under test in pods.

Lifecycle (:meth:`KindCluster.start`): find the Docker engine (the user's, else as root a private
one: :mod:`clusters.engine`); check the tools (``kubectl``, ``helm``, ``kind``: from PATH, else
built from Go modules and cached); with ``DRAC_KIND_NODE_IMAGE=build``, build the air-gapped node
image (:mod:`clusters.kind.nodeimage`) and load it into the engine; create the
cluster from the generated config, or reuse one of the same name; where the engine has a network
namespace of its own, reach the API server through a relay (:func:`clusters.engine.forward`: the
kubeconfig names the relay's port); check it serves DRA; build the
driver's image from ``driver/deploy/Dockerfile`` (with the node image built here, where nothing
can be pulled: the driver's and the test pods' images built here instead, and ``helm`` built
when none is on PATH: :mod:`clusters.kind.appimages`) and import it into every node (``docker save``
once, then ``docker exec -i NODE ctr -n k8s.io images import -`` on every node at once, which works
across kind versions; :func:`clusters.release.import_image`); install
the chart with the fake backend; wait until every worker publishes slices. Another driver than
the reference one (a :class:`~clusters.release.VendorRelease`, from a profile's ``install``
section) has its images imported the same way, then its chart or manifests installed. A failure on the way
writes the nodes' and the driver pods' logs to ``<work dir>/<name>/logs/`` and deletes a cluster
this object created (unless kept). :meth:`stop` deletes it too, unless ``keep``, and stops the
relay and a private engine this object started.

A node's ``{root}`` is the driver pod's fake machine dir and ``{python}`` the pod's interpreter:
:meth:`on_node` runs a profile's fault command inside the driver pod of the node.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from clusters import apicheck, tools
from clusters.base import ContainerView, PodRef, pod_key
from clusters.engine import Engine, Forward, PrivateEngine, find_or_start, forward
from clusters.errors import ClusterError, ToolError
from clusters.incluster import CAT_SPECS, InCluster, Tools, give_up, parse_specs
from clusters.kind.appimages import binary_archive, busybox_archive, driver_archive, ensure_image
from clusters.kind.config import dra_gates, render
from clusters.kind.nodeimage import ensure_node_image, node_archive
from clusters.kind.nodeparts import resolve_parts
from clusters.kind.settings import KindSettings
from clusters.local.gobins import GoBinary, cached_build, resolve_binary, resolve_source
from clusters.local.settings import LocalSettings
from clusters.podcluster import PodCluster
from clusters.progress import Progress, to_log
from clusters.release import DriverRelease, Release, VendorRelease, import_image

__all__ = [
    "HELM_BINARY",
    "HELM_VERSION",
    "KIND_BINARY",
    "KIND_CAPABILITIES",
    "KindCluster",
    "build_helm",
    "find_kind",
]

log = logging.getLogger(__name__)

KIND_CAPABILITIES = frozenset({"view", "restart-driver", "restart-kubelet"})
"""What a kind cluster can do beyond the API (no driver sockets: those are inside the nodes)."""

KIND_BINARY = GoBinary("kind", "sigs.k8s.io/kind", "sigs.k8s.io/kind")
"""kind, built from its Go module when none is on PATH."""
HELM_VERSION = "v4.3.2"
"""helm built for clusters of the node image built here, when none is on PATH (85 s on 2 cores)."""
HELM_BINARY = GoBinary("helm", "helm.sh/helm/v4", "helm.sh/helm/v4/cmd/helm")
"""helm, from its Go module."""


_say = to_log(log)


def find_tools(
    engine: Engine,
    env: Mapping[str, str],
    release: Release | None,
    kubectl_built: Path | None = None,
    build_helm: Callable[[], Path] | None = None,
) -> Tools:
    """``kubectl`` (else ``kubectl_built``, the node image's) and (to install ``release``) ``helm``
    (else what ``build_helm`` builds), beside the engine's client, and what ``release`` installs
    from (:class:`ToolError` or :class:`DriverDeployError` names what is missing)."""
    try:
        kubectl = tools.find("kubectl", env)
    except ToolError:
        if kubectl_built is None or env.get("DRAC_KUBECTL"):
            raise
        kubectl = kubectl_built
    helm = None
    if release is not None and release.uses_helm:
        try:
            helm = tools.find("helm", env)
        except ToolError:
            if build_helm is None or env.get("DRAC_HELM"):
                raise
            helm = build_helm()
    if release is not None:
        release.check()
    return Tools(engine.docker, kubectl, helm)


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


def build_helm(env: Mapping[str, str], progress: Progress = _say) -> Path:
    """``helm`` :data:`HELM_VERSION`, built from its Go module into the cache (once)."""
    local = LocalSettings.from_env(env)
    entry = local.binaries.cache_root.parent / "tools" / "helm" / HELM_VERSION
    try:
        return cached_build(
            HELM_BINARY,
            HELM_VERSION,
            entry,
            build=local.binaries.build,
            progress=progress,
            instead="install helm 3 or 4, or set DRAC_HELM=PATH",
        )
    except ClusterError as e:
        raise ToolError(f"helm is not on PATH; building it failed too: {e}") from e


SLOW_CONTROL_PLANE = "wait-control-plane"
"""The kubeadm phase named in a failed ``kind create cluster`` whose API server did not answer in
time (seen on a busy 2-core machine): worth one more try."""


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
        self._engine: Engine | None = None
        self._private: PrivateEngine | None = None
        self._relay: Forward | None = None

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
        self._engine, self._private = engine, _ = find_or_start(s.engine, self._env, self._say)
        self._tool_env = engine.env(self._env)
        try:
            found = find_tools(
                engine,
                self._env,
                s.release if s.install_driver else None,
                self._kubectl_built(),
                (lambda: build_helm(self._env, self._say)) if s.build_image else None,
            )
            self._docker = docker = found.docker
            self._kind = kind = find_kind(s, self._env, self._say)
        except BaseException:
            self._stop_engine()
            raise
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._in = InCluster(self.kubeconfig, s.release.pods, kubectl=found.kubectl, helm=found.helm)
        try:
            existing = self._run([kind, "get", "clusters"], timeout=60).stdout.split()
            if s.name in existing:
                self._say(f"reusing kind cluster {s.name}")
                self._run(
                    [kind, "export", "kubeconfig", "--name", s.name, "--kubeconfig", self.kubeconfig],
                    timeout=60,
                )
            else:
                self._create(kind, self._node_image(engine))
            self._reach_api(engine)
            version = apicheck.check(self.kubeconfig)
            self._say(f"kind cluster {s.name}: Kubernetes {version}, workers {', '.join(self.nodes())}")
            if s.build_image:  # nothing can be pulled: the images the suite needs, built here
                self._import_built_images(engine, self._all_nodes())
            if s.install_driver:
                self._install_driver(docker, self._all_nodes(), self._release_to_install())
        except BaseException:
            self._after_failure()
            raise
        return self

    def _run(
        self, argv: list[str | Path], timeout: float = 600.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A ``kind`` or ``docker`` command, against the engine in use."""
        return tools.run(argv, timeout=timeout, check=check, env=self._tool_env)

    def _kubectl_built(self) -> Path | None:
        """With a node image built here, the kubectl built for it (cached: no build of its own)."""
        if not self.settings.build_image:
            return None
        local = LocalSettings.from_env(self._env).with_version(self.settings.k8s_version)
        return resolve_parts(local, self.settings.kind_version, self._say).node_tools / "kubectl"

    def _node_image(self, engine: Engine) -> str:
        """The node image: the one built here (``DRAC_KIND_NODE_IMAGE=build``), else the setting's."""
        s = self.settings
        if not s.build_image:
            return s.node_image
        local = LocalSettings.from_env(self._env).with_version(s.k8s_version)
        return ensure_node_image(engine, node_archive(local, s.kind_version, self._say), self._say)

    def _import_built_images(self, engine: Engine, nodes: Sequence[str]) -> None:
        """With the node image built here: the test pods' image, built here
        (:mod:`clusters.kind.appimages`), loaded into the engine and imported into ``nodes``; and
        (when the reference driver is installed) the driver's, built here and loaded into the
        engine (its release imports it: :meth:`_release_to_install`)."""
        s = self.settings
        cache = LocalSettings.from_env(self._env).binaries.cache_root.parent / "kind-node"
        pods = ensure_image(engine, busybox_archive(cache, s.pod_image, progress=self._say), self._say)
        import_image(engine.docker, pods, nodes, self._say, self._tool_env)
        release = s.release
        if s.install_driver and isinstance(release, DriverRelease):
            ensure_image(engine, driver_archive(cache, release.image, self._say), self._say)

    def _release_to_install(self) -> Release:
        """The release to install: the reference driver's told not to build its image where
        :meth:`_import_built_images` loaded one into the engine; another driver's with its
        ``{src:NAME}`` chart and ``{image:NAME}`` images made here (:meth:`_binary_image`)."""
        release = self.settings.release
        if self.settings.build_image and isinstance(release, DriverRelease):
            return dataclasses.replace(release, build=False)
        if isinstance(release, VendorRelease) and release.builds_here:
            local = LocalSettings.from_env(self._env).with_version(self.settings.k8s_version)
            return release.filled(
                lambda name: resolve_source(name, local, self._say),
                lambda name: self._binary_image(local, name),
            )
        return release

    def _binary_image(self, local: LocalSettings, name: str) -> str:
        """The Go binary ``name`` (cached or built) as an image made here and loaded into the
        engine (:func:`clusters.kind.appimages.binary_archive`); its ref."""
        assert self._engine is not None
        binary = resolve_binary(name, local, self._say)
        cache = local.binaries.cache_root.parent / "kind-node"
        return ensure_image(self._engine, binary_archive(cache, name, binary, progress=self._say), self._say)

    def _reach_api(self, engine: Engine) -> None:
        """Where the engine's network is apart, relay the API server's published port to this
        machine's loopback and point the kubeconfig at the relay (kind's own copy stays beside)."""
        if engine.netns_pid is None:
            return
        text = self.kubeconfig.read_text()
        match = re.search(r"server: https://127\.0\.0\.1:(\d+)", text)
        if match is None:
            raise ClusterError(
                f"the kubeconfig kind wrote ({self.kubeconfig}) names no API server on 127.0.0.1"
            )
        if self._relay is not None:
            self._relay.close()
        self._relay = forward(engine.netns_pid, int(match.group(1)))
        (self.state_dir / "kubeconfig.engine").write_text(text)
        self.kubeconfig.write_text(
            text.replace(match.group(0), f"server: https://127.0.0.1:{self._relay.port}")
        )
        self._say(
            f"API server port {match.group(1)} of the engine's network: 127.0.0.1:{self._relay.port} here"
        )

    def info(self) -> dict[str, str]:
        """What another process needs to :meth:`attach` to this cluster."""
        engine = {"docker_host": self._engine.host} if self._engine is not None and self._engine.host else {}
        return {
            "backend": self.backend,
            "kubeconfig": str(self.kubeconfig),
            "name": self.settings.name,
            "work_dir": str(self.settings.work_dir),
            **engine,
            **self._pods_info(),
        }

    @classmethod
    def attach(cls, info: Mapping[str, str], env: Mapping[str, str] | None = None) -> KindCluster:
        """The cluster another process made (:meth:`info`); stopping this object leaves it running."""
        base = KindSettings.from_env(os.environ if env is None else env)
        settings = base.with_options(name=info["name"], work_dir=Path(info["work_dir"]))
        cluster = cls(settings, env=env)
        if info.get("docker_host"):
            cluster._tool_env["DOCKER_HOST"] = info["docker_host"]
        cluster._attach_tools(info)
        cluster._kind = find_kind(settings, cluster._env, cluster._say)
        return cluster

    def _create(self, kind: Path, image: str) -> None:
        s = self.settings
        gates = dra_gates(s.k8s_version, self._env, self._say)
        config = self.state_dir / "kind-config.yaml"
        # the node image built here has no CoreDNS: leave it out rather than wait on it for ever
        config.write_text(render(workers=s.workers, gates=gates, image=image, coredns=not s.build_image))
        self._say(f"creating kind cluster {s.name} ({image}, {s.workers} worker(s)) ...")
        started = time.monotonic()
        self._created = True  # from here on, a failure deletes what kind made
        create: list[str | Path] = [
            kind, "create", "cluster", "--name", s.name, "--config", config, "--image", image,
            "--kubeconfig", self.kubeconfig, "--wait", "180s",
            "--retain",  # a failed create keeps its nodes for their logs; give_up then deletes them
        ]  # fmt: skip
        try:
            self._run(create, timeout=900)
        except ToolError as e:
            if SLOW_CONTROL_PLANE not in str(e):
                raise
            # kubeadm gave up waiting on the API server (a busy machine): once more, from scratch
            self._say(f"the control plane of {s.name} did not come up in time: deleting it, trying once more")
            self._run([kind, "delete", "cluster", "--name", s.name], check=False, timeout=300)
            self._run(create, timeout=900)
        self._say(f"kind cluster {s.name} created in {time.monotonic() - started:.0f} s")

    def _after_failure(self) -> None:
        give_up(self, self.settings.failure_logs or self.state_dir / "logs", self._say)

    def collect_logs(self, dest: Path) -> None:
        """The logs of every node (``kind export logs``) and of the driver pods, into ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        if self._kind is not None:
            self._run(
                [self._kind, "export", "logs", dest / "nodes", "--name", self.settings.name], check=False
            )
        if self._in is not None:
            self._in.logs(dest / "driver")

    def stop(self) -> None:
        """Delete the cluster if this object created it (unless ``keep``); close the API client and the
        relay; stop a private engine this object started (unless ``keep``: the cluster lives in it;
        ``python -m clusters.engine stop`` ends it later)."""
        self.close_client()
        if self._created and not self.settings.keep and self._kind is not None:
            self._say(f"deleting kind cluster {self.settings.name}")
            self._run(
                [self._kind, "delete", "cluster", "--name", self.settings.name], timeout=300, check=False
            )
            self._created = False
            self.kubeconfig.unlink(missing_ok=True)  # the config and any logs stay, for a look afterwards
        if self._relay is not None:  # a later start() of a kept cluster makes its own
            self._relay.close()
            self._relay = None
        if not self.settings.keep:
            self._stop_engine()

    def _stop_engine(self) -> None:
        if self._private is not None and self._private.started_here:
            self._private.stop()
        self._private = None

    # --- nodes ------------------------------------------------------------------------------

    def _all_nodes(self) -> list[str]:
        assert self._kind is not None
        out = self._run([self._kind, "get", "nodes", "--name", self.settings.name], timeout=60).stdout
        return sorted(out.split())

    def nodes(self) -> list[str]:
        """The worker nodes (the control-plane node runs no driver)."""
        if not self._workers:
            self._workers = [n for n in self._all_nodes() if not n.endswith("-control-plane")]
        return list(self._workers)

    def _docker_exec(self, node: str, *argv: str, timeout: float = 120.0) -> str:
        if self._docker is None:
            raise ClusterError("the kind cluster is not started")
        return self._run([self._docker, "exec", node, *argv], timeout=timeout).stdout

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

    def restart_driver(self, node: str, *, crash: bool = False) -> None:
        """Delete the driver pod of ``node`` (its DaemonSet makes a new one); ``crash``: kill its
        container instead (``crictl stop --timeout 0`` in the node: SIGKILL, as the local tier's
        crash), so the kubelet starts it again in the same pod."""
        if not crash:
            super().restart_driver(node)
            return
        self._incluster().crash_driver(
            node, lambda container: self._docker_exec(node, "crictl", "stop", "--timeout", "0", container)
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
