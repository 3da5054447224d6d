"""``LocalCluster``: the local control plane plus N fake nodes, each with a node agent (or, on nodes of
kind ``kubelet``, the real kubelet beside a fake runtime: :mod:`clusters.local.kubeletnode`) and a driver.

Layout under one short temp root (unix socket paths must stay under 108 bytes, and a driver
started with a pod UID for rolling updates names its registration socket
``<driver>-<uid>-reg.sock``, 37 bytes longer)::

    /tmp/dXXXX/
        cp/                         control plane: pki, kubeconfig, etcd data, logs
        n0/                         node root of node-0 (the agent's --root), laid out as
                                    nodeagent.layout.NodeLayout says (kubelet dirs, cdi/, agent/)
            gpus/                   the fake GPU machine's state (default driver)
            logs/agent.log, logs/driver.log
                                    (kubelet nodes: logs/kubelet.log, logs/runtime.log, kubelet/ and
                                    log/ as the kubelet's /var/lib/kubelet and /var/log, cri.sock)

The driver is started as a process from a command line, as a vendor's driver would be;
this module never imports it. The node agent too is only started as a process
(``python -m nodeagent``); of its code this module uses the node layout alone.
"""

from __future__ import annotations

import abc
import logging
import os
import secrets
import shutil
import string
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from clusters.base import Cluster, ContainerView, PodRef, pod_key
from clusters.errors import ClusterError, NodeError, UpdateFailed
from clusters.local import fakenvml, features, kubeletnode, pki
from clusters.local.binaries import Binaries, resolve, resolve_kubelet
from clusters.local.controlplane import ControlPlane, ControlPlaneConfig, free_port
from clusters.local.driverproc import (
    answering_names,
    create_objects,
    default_driver_command,
    describe_sockets,
    device_class_manifests,
    driver_sockets,
    early_exit_message,
    expand_command,
    manifests_from_file,
)
from clusters.local.gobins import fill_binaries, resolve_fakecri
from clusters.local.processes import ManagedProcess, install_signal_handlers
from clusters.local.settings import LocalSettings
from clusters.pools import PoolsSettled
from clusters.progress import Progress
from draproto.rest import q
from nodeagent.layout import NodeLayout

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
PODS = "/api/v1/pods"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


def _key(obj: dict[str, Any]) -> str:
    m = obj.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


_T = TypeVar("_T")

__all__ = ["LOCAL_CAPABILITIES", "LocalCluster", "LocalClusterBase", "LocalNode", "find_container_view"]

log = logging.getLogger(__name__)

LOCAL_CAPABILITIES = frozenset(
    {"grpc", "view", "restart-driver", "update-driver", "restart-kubelet", "restart-apiserver"}
)
"""Everything: the local tier owns every process and file of its nodes."""

NIC_DRIVER = "nic.dra-conformance.io"
"""The companion NIC driver's name (``python -m nicdriver``'s default)."""


def companions_of(nic_driver: bool) -> frozenset[str]:
    """The companion drivers a local cluster runs by its settings' ``nic_driver``."""
    return frozenset({NIC_DRIVER}) if nic_driver else frozenset()


_SOCKET_PATH_MAX = 107
"""Longest unix socket path Linux accepts (``sun_path`` is 108 bytes with the NUL)."""

_POD_UID = "00000000-0000-0000-0000-000000000000"
"""As long as any pod UID: what a driver run with ``--pod-uid`` puts into its socket names."""

_ROOT_PREFIX = "d"
_ROOT_RANDOM = 4
"""The cluster root is ``<work_dir>/d`` and 4 random characters: ``/tmp/dXXXX/n0`` leaves room for
``kubelet/plugins_registry/gpu.dra-conformance.io-<pod uid>-reg.sock`` (mkdtemp's 8 would not)."""


_PORT_TRIES = 4
"""How often a kubelet starts again on new ports after finding its port taken."""


def _socket_paths(node: NodeLayout, driver: str) -> list[str]:
    """The socket paths a driver may create under ``node``: the conventional names, and those of a
    rolling update (``kubeletplugin.RollingUpdate``: the pod UID in both names)."""
    return [
        str(node.registration_socket(driver)),
        str(node.dra_socket(driver)),
        str(node.registry_dir / f"{driver}-{_POD_UID}-reg.sock"),
        str(node.plugin_dir(driver) / f"dra-{_POD_UID}.sock"),
    ]


def _short_temp_dir(parent: Path) -> Path:
    """A new private dir ``<parent>/dXXXX`` (like mkdtemp, with a shorter random part)."""
    letters = string.ascii_lowercase + string.digits
    for _ in range(1000):
        path = parent / (_ROOT_PREFIX + "".join(secrets.choice(letters) for _ in range(_ROOT_RANDOM)))
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return path
    raise ClusterError(f"no free short directory name under {parent} after 1000 tries; clean it up")


POD_UID_PLACEHOLDER = "{pod_uid}"
"""In a driver command: the driver pod's UID (:attr:`LocalNode.pod_uid`: kept across restarts, new for
an update's instance); ``--pod-uid`` names the sockets for a rolling update."""

FAILED_UPDATE_FLAG = "--dra-conformance-failed-update"
"""What a failed update's new driver instance is given: a flag no driver knows, so it exits."""

METRICS_PORT_FILE = "metrics.port"
"""In a node's root: the free TCP port chosen for its driver's metrics endpoint when the node was
made (``{metrics_port}``), the same after driver restarts and for every process that asks."""

DRIVER_START_CHECK = 15.0
"""Seconds a driver under test is watched after its start when the cluster does not wait for it to
register: exiting within them stops the cluster's start with why; still running after them (or
registered before), it is the suite's to judge."""


@dataclass
class LocalNode:
    """One fake node: its root dir and its processes."""

    name: str
    """Node name."""
    root: Path
    """Node root (the agent's ``--root``)."""
    kind: str = "agent"
    """What plays the kubelet: ``agent`` (the node agent) or ``kubelet`` (the real one)."""
    agent: ManagedProcess | None = None
    """What plays the kubelet: the node agent, or the kubelet in its namespaces."""
    runtime: ManagedProcess | None = None
    """A kubelet node's fake container runtime (``fakecri``); it outlives kubelet restarts."""
    driver: ManagedProcess | None = None
    """The driver under test on this node."""
    driver_command: tuple[str, ...] = ()
    """The driver's command line with placeholders filled in (empty: none)."""
    pod_uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    """The driver "pod"'s UID (``{pod_uid}``): kept across restarts of its driver (a container restart
    keeps its pod), new for the new instance of an update (a new pod)."""
    nic: ManagedProcess | None = None
    """The companion NIC driver on this node (``LocalSettings.nic_driver``)."""
    driver_env: dict[str, str] | None = None
    """The driver's environment when it differs from ours (fake NVML: :mod:`clusters.local.fakenvml`)."""

    @property
    def layout(self) -> NodeLayout:
        """The paths under :attr:`root` the agent and the driver use."""
        return NodeLayout(self.root)

    @property
    def log_files(self) -> dict[str, Path]:
        """The driver's and the node agent's logs, by the role they play."""
        if self.kind == "kubelet":
            return {
                "driver": self.root / "logs" / "driver.log",
                "kubelet": self.root / "logs" / "kubelet.log",
                "runtime": self.root / "logs" / "runtime.log",
            }
        return {"driver": self.root / "logs" / "driver.log", "kubelet": self.root / "logs" / "agent.log"}


class LocalClusterBase(Cluster):
    """A local cluster seen from the process that runs it (:class:`LocalCluster`) or from another
    one (:class:`~clusters.local.attached.AttachedLocalCluster`): either way its nodes are
    directories on this machine, so what a test reads of a node comes from the node's root."""

    backend = "local"
    capabilities = LOCAL_CAPABILITIES

    @abc.abstractmethod
    def _local_node(self, name: str) -> LocalNode:
        """The node ``name``; raises :class:`~clusters.errors.ClusterError` for an unknown one."""

    def node_values(self, node: str) -> dict[str, str]:
        """``node``, ``kubeconfig``, ``root`` (the node's root dir) and ``metrics_port`` (a free port
        of this machine chosen once per node, for a driver's metrics endpoint)."""
        root = self._local_node(node).root
        values = {**super().node_values(node), "root": str(root)}
        port = root / METRICS_PORT_FILE
        if port.is_file():  # written when the node is made
            values["metrics_port"] = port.read_text().strip()
        return values

    def wait_quiet(self, timeout: float) -> None:
        """Wait until no pod is bound to the cluster's nodes and no claim is allocated (what a run
        before left is gone); ``TimeoutError`` names what is left after ``timeout`` seconds."""
        nodes = set(self.nodes())
        rest = self.rest()
        deadline = time.monotonic() + timeout
        while True:
            pods = [
                _key(p)
                for p in rest.send("GET", PODS)["items"]
                if (p.get("spec") or {}).get("nodeName") in nodes
            ]
            claims = [
                _key(c)
                for c in rest.send("GET", CLAIMS)["items"]
                if (c.get("status") or {}).get("allocation")
            ]
            if not pods and not claims:
                return
            if time.monotonic() > deadline:
                left = f"pods {pods[:5]}, allocated claims {claims[:5]}"
                raise TimeoutError(f"after {timeout:.0f} s still on the nodes: {left}")
            time.sleep(0.2)

    def container_view(self, pod: PodRef, container: str) -> ContainerView:
        """Read the view the node agent wrote for a running container."""
        return find_container_view([self._local_node(n).root for n in self.nodes()], pod, container)

    def registry_dir(self, node: str) -> Path:
        """The node's plugin-registration directory."""
        return self._local_node(node).layout.registry_dir

    def cdi_dir(self, node: str) -> Path:
        """The node's CDI spec directory."""
        return self._local_node(node).layout.cdi_dir

    def node_logs(self, node: str) -> dict[str, Path]:
        """The driver's and the node agent's log files."""
        return self._local_node(node).log_files


class LocalCluster(LocalClusterBase):
    """Control-plane processes and fake nodes on this machine (no Docker, no root)."""

    def __init__(self, settings: LocalSettings, progress: Progress | None = None) -> None:
        self.settings = settings
        """What to start."""
        self.progress: Progress = progress or (lambda message: log.info("%s", message))
        self.root: Path | None = None
        """The cluster's temp root (after :meth:`start`)."""
        self.binaries: Binaries | None = None
        """The binaries in use (after :meth:`start`)."""
        self.control_plane: ControlPlane | None = None
        """The control plane (after :meth:`start`)."""
        self.local_nodes: dict[str, LocalNode] = {}
        """Fake nodes by name."""
        self.timings: dict[str, float] = {}
        """Seconds each start phase took."""
        self.kubelet: Path | None = None
        """The kubelet binary of kubelet nodes (after :meth:`start`, when there are any)."""
        self.fakecri: Path | None = None
        """The fake container runtime of kubelet nodes (likewise)."""
        self.nvml_lib: Path | None = None
        """fakegpu's libnvidia-ml.so.1 directory, for a driver on fake NVML (``settings.fake_nvml``)."""

    # --- Cluster ---------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig."""
        if self.control_plane is None:
            raise ClusterError("the local cluster has not been started")
        return self.control_plane.kubeconfig

    def nodes(self) -> list[str]:
        """Names of the fake nodes."""
        return list(self.local_nodes)

    def companion_drivers(self) -> frozenset[str]:
        """The NIC driver when ``settings.nic_driver`` runs it."""
        return companions_of(self.settings.nic_driver)

    def start_driver(self, node: str, command: Sequence[str]) -> None:
        """Replace the driver on ``node`` with ``command`` (placeholders allowed) and wait for it."""
        n = self._local_node(node)
        if n.driver is not None:
            n.driver.stop()
        n.driver_command = tuple(self._expand(n, fill_binaries(command, self.settings, self.progress)))
        n.driver = None
        n.pod_uid = str(uuid.uuid4())  # a new driver pod
        if n.driver_command:
            self._start_driver(n)
            self._wait_driver_registered(n)

    def reset_drivers(self, command: Sequence[str] | None = None) -> None:
        """Give every node a fresh driver: stop each, delete what it left, and start ``command``
        (placeholders allowed; None: the command each had) on every node, waiting until each has
        registered when ``settings.wait_registered`` says so (never for its slices: a driver under
        test that publishes none is for the suite to find).

        What a driver leaves is its sockets, its plugin dir (checkpoint), the node's CDI specs, the
        node's fake GPU machine and driver root (``gpus/``, ``driver/``: made again from the
        profile) and its ResourceSlices, on any node. The control plane and the node agents keep
        running: one cluster serves many driver configurations, each as if on a new cluster.
        """
        nodes = list(self.local_nodes.values())
        for n in nodes:
            if n.driver is not None:
                n.driver.terminate()
        for n in nodes:
            if n.driver is not None:
                n.driver.stop()
                n.driver = None
        self._delete_slices()
        driver = self.settings.driver_name
        for n in nodes:
            for path in (n.layout.plugin_dir(driver), n.layout.cdi_dir, n.root / "gpus", n.root / "driver"):
                shutil.rmtree(path, ignore_errors=True)
            for sock in n.layout.registry_dir.glob(f"{driver}*"):
                sock.unlink(missing_ok=True)
            n.layout.create(drivers=(driver,))
            n.pod_uid = str(uuid.uuid4())  # a new driver pod
            if self.settings.fake_nvml and self.nvml_lib is not None:
                fakenvml.prepare_node(n.root, n.name, self.settings.fake_nvml)
            if command is not None:
                filled = fill_binaries(command, self.settings, self.progress)
                n.driver_command = tuple(self._expand(n, filled))
        started = [n for n in nodes if n.driver_command]
        for n in started:
            self._start_driver(n)
        if self.settings.wait_registered:
            for n in started:
                self._wait_driver_registered(n)
        else:
            self._check_drivers_started(started)

    def _delete_slices(self) -> None:
        """Delete every ResourceSlice of the driver, whichever node it names (or none)."""
        selector = f"spec.driver={self.settings.driver_name}"
        self.rest().send("DELETE", SLICES, query={"fieldSelector": selector})

    def stop_driver(self, node: str) -> None:
        """Stop (SIGTERM) the driver on ``node``; :meth:`restart_driver` starts it again."""
        n = self._local_node(node)
        if n.driver is not None:
            n.driver.stop()

    def restart_driver(self, node: str, *, crash: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL when ``crash``) and restart the driver on ``node``.

        A driver stopped by :meth:`stop_driver` is just started again.
        """
        n = self._local_node(node)
        if not n.driver_command:
            raise NodeError(f"node {node} has no driver command to restart")
        old_sockets = set(self._driver_sockets(n).values())
        slices = self._slice_uids(n)
        if n.driver is not None and n.driver.alive():
            if crash:
                n.driver.kill()  # leaves its sockets behind, as a crash would: the new one must cope
            else:
                n.driver.stop()
        self._start_driver(n)
        self._wait_driver_registered(n, old_sockets)
        if slices:  # a driver may keep its slices across a restart, so any slice will do
            self._wait_republished(n, set())

    def update_driver(self, node: str, *, fail: bool = False) -> None:
        """A rolling update (see :class:`~clusters.base.Cluster`): the new instance gets a new
        ``{pod_uid}``, so its sockets have names of their own; a command without one is refused."""
        n = self._local_node(node)
        if not any(POD_UID_PLACEHOLDER in arg for arg in n.driver_command):
            raise NodeError(
                f"node {node}: the driver command has no {POD_UID_PLACEHOLDER}: a second instance would take "
                "the first one's sockets (give the driver its pod UID, e.g. --pod-uid {pod_uid})"
            )
        old = n.driver
        if old is None or not old.alive():
            raise NodeError(f"node {node}: no driver runs to update")
        before = set(self._driver_sockets(n).values())
        extra = (FAILED_UPDATE_FLAG,) if fail else ()
        uid = str(uuid.uuid4())
        new = self._start_driver(n, extra, uid)
        try:
            self._wait_driver_registered(n, before)
        except NodeError as e:
            n.driver = old
            if new.alive():
                new.stop()
                raise
            if fail:
                raise UpdateFailed(f"node {node}: the new driver exited before it registered: {e}") from e
            raise
        if fail:
            n.driver = old
            new.stop()
            raise NodeError(f"node {node}: the driver registered though it was given {FAILED_UPDATE_FLAG}")
        n.pod_uid = uid
        old.stop()

    def restart_kubelet(self, node: str, *, crash: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL when ``crash``) and restart the node agent on ``node``.

        A node agent stopped by :meth:`stop_kubelet` is just started again.
        """
        n = self._local_node(node)
        if n.agent is None:
            raise NodeError(f"no node agent runs on node {node}")
        started = time.time()
        slices = self._slice_uids(n)
        if crash:
            n.agent.kill()
        else:
            n.agent.stop()
        self._start_agent(n)
        self._wait_nodes_ready([n])
        self._wait_lease_renewed(n, started)
        # the agent wipes its node's slices when it starts (as the kubelet does); wait for the
        # driver's new ones so the next test step does not race the wipe
        if slices and n.kind == "kubelet":
            self._wait_slices([n])  # the kubelet keeps a registered driver's slices
        elif slices:
            self._wait_republished(n, slices)

    def stop_kubelet(self, node: str) -> None:
        """Stop (SIGTERM) the node agent on ``node``; :meth:`restart_kubelet` starts it again.

        Its Node, Lease, pods and prepared claims stay as they are, as with a stopped kubelet.
        """
        n = self._local_node(node)
        if n.agent is None:
            raise NodeError(f"no node agent runs on node {node}")
        n.agent.stop()

    def restart_component(self, component: str, *, crash: bool = False) -> None:
        """Restart a control-plane component (SIGTERM, or SIGKILL when ``crash``) and wait until
        it is healthy (components that went down meanwhile are started again too)."""
        if self.control_plane is None:
            raise ClusterError("the local cluster has not been started")
        self.control_plane.restart(component, crash=crash)

    def revive_control_plane(self) -> list[str]:
        """Start again the control-plane components that have exited (a kubelet's static pods come
        back so); the names started."""
        return [] if self.control_plane is None else self.control_plane.revive()

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Resolve binaries, start the control plane, nodes and drivers; wait until usable."""
        self._check_work_dir()
        install_signal_handlers()
        s = self.settings
        t0 = time.monotonic()
        try:
            self.binaries = resolve(s.binaries, self.progress)
            if any(s.node_kind(i) == "kubelet" for i in range(s.nodes)):
                kubeletnode.check_user_namespaces()
                self.kubelet = resolve_kubelet(s.binaries, self.progress)
                self.fakecri = resolve_fakecri(s, self.progress)
            self.timings["binaries"] = time.monotonic() - t0
            s.work_dir.mkdir(parents=True, exist_ok=True)
            self.root = _short_temp_dir(s.work_dir)
            t = time.monotonic()
            self.progress(f"starting the control plane (Kubernetes {s.k8s_version}) in {self.root}")
            # the node agents need only the API server: they start while the scheduler and the
            # controller manager do
            self.control_plane = ControlPlane(
                self.binaries, self.root / "cp", ControlPlaneConfig(ready_timeout=s.ready_timeout)
            ).start(wait_controllers=False)
            self._make_nodes()
            t_agents = time.monotonic()
            if s.agent:
                for n in self.local_nodes.values():
                    self._start_agent(n)
            self.control_plane.wait_controllers()
            self.timings["control_plane"] = time.monotonic() - t
            for step, seconds in self.control_plane.timings.items():
                if step != "total":
                    self.timings[f"control_plane.{step}"] = seconds
            if s.agent and self.local_nodes:
                self._wait_nodes_ready(list(self.local_nodes.values()))
                self.timings["agents"] = time.monotonic() - t_agents
            if s.nic_driver:
                for n in self.local_nodes.values():
                    self._start_nic(n)
            drivers = [n for n in self.local_nodes.values() if n.driver_command]
            if drivers:
                t = time.monotonic()
                self._create_device_classes()
                for n in drivers:
                    self._start_driver(n)
                if s.wait_registered:
                    for n in drivers:
                        self._wait_driver_registered(n)
                else:
                    self._check_drivers_started(drivers)
                if s.wait_slices:
                    self._wait_slices(drivers)
                self.timings["drivers"] = time.monotonic() - t
            if s.nic_driver and (s.wait_registered or s.wait_slices):
                for n in self.local_nodes.values():
                    self._wait_nic_published(n)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        self.progress(f"cluster ready in {self.timings['total']:.1f} s: {len(self.local_nodes)} node(s)")
        return self

    def stop(self) -> None:
        """Stop drivers, agents and the control plane; remove the temp root. Idempotent."""
        self.close_client()
        procs = [
            p
            for n in self.local_nodes.values()
            for p in (n.driver, n.nic, n.agent, n.runtime)
            if p is not None
        ]
        for proc in procs:  # all at once: with many nodes, one by one takes long
            proc.terminate()
        for proc in procs:
            proc.stop()
        if self.control_plane is not None:
            self.control_plane.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    # --- helpers ---------------------------------------------------------------------------

    def _check_work_dir(self) -> None:
        """Refuse a work dir that would break the kubeconfig export line or the unix sockets."""
        s = self.settings
        work = str(s.work_dir.absolute())
        if any(c.isspace() for c in work):
            raise ClusterError(
                f"work dir {work!r} contains whitespace, which 'export KUBECONFIG=...' cannot carry; "
                "set DRAC_WORK_DIR to a path without spaces"
            )
        # the driver's sockets are the longest paths under a node: with a pod UID (rolling updates,
        # kubeletplugin.RollingUpdate) they are <driver>-<uid>-reg.sock and dra-<uid>.sock
        node = NodeLayout(Path(f"{work}/{_ROOT_PREFIX}{'X' * _ROOT_RANDOM}/n{max(s.nodes - 1, 0)}"))
        longest = max(_socket_paths(node, s.driver_name), key=len)
        if len(longest.encode()) > _SOCKET_PATH_MAX:
            raise ClusterError(
                f"work dir {work!r} is too deep for driver {s.driver_name}: unix socket paths under it "
                f"would be up to {len(longest.encode())} bytes ({longest}; at most {_SOCKET_PATH_MAX}); "
                "set DRAC_WORK_DIR to a short path such as /tmp"
            )

    def _local_node(self, name: str) -> LocalNode:
        try:
            return self.local_nodes[name]
        except KeyError:
            raise NodeError(f"unknown node {name!r}; nodes: {sorted(self.local_nodes)}") from None

    def _expand(self, n: LocalNode, command: Sequence[str]) -> list[str]:
        values = self.node_values(n.name)
        if self.nvml_lib is not None:
            values = {**values, "nvml_lib": str(self.nvml_lib), "driver_root": str(n.root / "driver")}
        else:
            used = [p for p in fakenvml.PLACEHOLDERS if any("{" + p + "}" in w for w in command)]
            if used:
                raise ClusterError(
                    f"the driver command uses {{{used[0]}}}, which only a driver on fakegpu's "
                    "libnvidia-ml.so.1 has: set the profile's local.nvml: fake "
                    "(cluster up --fake-nvml PROFILE)"
                )
        return expand_command(command, **values, driver=self.settings.driver_name, python=sys.executable)

    def _make_nodes(self) -> None:
        assert self.root is not None
        s = self.settings
        command = default_driver_command(s.driver_name)
        if s.driver_command is not None:
            # a driver built from Go modules ({bin:NAME}) is built (or found in the cache) once, here
            command = fill_binaries(s.driver_command, s, self.progress) if s.nodes else list(s.driver_command)
        if s.fake_nvml and s.nodes:
            self.progress(f"fake NVML for the driver: fakegpu's libnvidia-ml.so.1, profile {s.fake_nvml}")
            self.nvml_lib = fakenvml.library_dir()
        for i in range(s.nodes):
            n = LocalNode(f"node-{i}", self.root / f"n{i}", kind=s.node_kind(i))
            n.layout.create(drivers=(s.driver_name,))
            (n.root / "logs").mkdir(exist_ok=True)
            (n.root / METRICS_PORT_FILE).write_text(f"{free_port()}\n")
            self.local_nodes[n.name] = n
            if s.fake_nvml and self.nvml_lib is not None:
                fakenvml.prepare_node(n.root, n.name, s.fake_nvml)
                n.driver_env = fakenvml.driver_env(os.environ, self.nvml_lib, n.root, n.name, s.fake_nvml)
            n.driver_command = tuple(self._expand(n, command)) if command else ()

    def _start_agent(self, n: LocalNode) -> None:
        if n.kind == "kubelet":
            self._start_kubelet(n)
            return
        argv = [
            sys.executable,
            "-m",
            "nodeagent",
            "--kubeconfig",
            str(self.kubeconfig),
            "--node-name",
            n.name,
            "--root",
            str(n.root),
            "--k8s-version",
            self.settings.k8s_version,
        ]
        n.agent = ManagedProcess(f"agent-{n.name}", argv, n.log_files["kubelet"]).start()

    def _start_kubelet(self, n: LocalNode, *, new_ports: bool = False) -> None:
        """Start the node's fake runtime (unless it runs) and its kubelet, in its own namespaces
        (on ports chosen again when ``new_ports``)."""
        assert self.control_plane is not None and self.kubelet is not None and self.fakecri is not None
        cp = self.control_plane
        socket = n.root / "cri.sock"
        kubeconfig = n.root / "kubelet.kubeconfig"
        config = n.root / "kubelet.yaml"
        cert = pki.CertPair(cp.pki.directory / f"node-{n.name}.crt", cp.pki.directory / f"node-{n.name}.key")
        if not config.exists():
            cert = pki.issue_client(cp.pki, f"node-{n.name}", f"system:node:{n.name}", ["system:nodes"])
            pki.write_kubeconfig(kubeconfig, cp.server, cp.pki.ca.cert, cert, f"system:node:{n.name}")
        if new_ports or not config.exists():
            kubeletnode.write_kubelet_files(
                n.root,
                runtime_socket=socket,
                ca_cert=cp.pki.ca.cert,
                port=free_port(),
                healthz_port=free_port(),
                feature_gates=features.kubelet_gates(cp.feature_gates),
            )
        if n.runtime is None or not n.runtime.alive():
            socket.unlink(missing_ok=True)
            argv = kubeletnode.runtime_argv(
                self.fakecri, n.root, server=cp.server, ca_cert=cp.pki.ca.cert, cert=cert.cert, key=cert.key
            )
            n.runtime = ManagedProcess(f"runtime-{n.name}", argv, n.log_files["runtime"], cwd=n.root).start()
            self._wait(
                f"the fake runtime's socket {socket}", socket.exists, [n.runtime], self.settings.ready_timeout
            )
        argv = kubeletnode.kubelet_argv(self.kubelet, n.root, n.name, kubeconfig, config)
        # its working directory is the node root: nothing it does with a relative path reaches elsewhere
        n.agent = ManagedProcess(f"kubelet-{n.name}", argv, n.log_files["kubelet"], cwd=n.root).start()

    def _start_driver(self, n: LocalNode, extra: Sequence[str] = (), pod_uid: str = "") -> ManagedProcess:
        """Start the node's driver command (and ``extra`` arguments), ``{pod_uid}`` the node's
        (or ``pod_uid``: a new pod's)."""
        log_path = n.log_files["driver"]
        uid = pod_uid or n.pod_uid
        argv = [arg.replace(POD_UID_PLACEHOLDER, uid) for arg in (*n.driver_command, *extra)]
        n.driver = ManagedProcess(f"driver-{n.name}", argv, log_path, env=n.driver_env).start()
        return n.driver

    def _start_nic(self, n: LocalNode) -> None:
        """Start the companion NIC driver on the node (waited for by :meth:`_wait_nic_published`, after
        the driver under test has started beside it)."""
        argv = [
            sys.executable,
            "-m",
            "nicdriver",
            "--node-name",
            n.name,
            "--kubeconfig",
            str(self.kubeconfig),
            "--registry-dir",
            str(n.layout.registry_dir),
            "--plugin-dir",
            str(n.layout.plugin_dir(NIC_DRIVER)),
            "--cdi-dir",
            str(n.layout.cdi_dir),
        ]
        n.nic = ManagedProcess(f"nic-{n.name}", argv, n.root / "logs" / "nic-driver.log").start()

    def _wait_nic_published(self, n: LocalNode) -> None:
        """Wait until the companion NIC driver has published the node's slice (a rule that needs it
        would otherwise skip for want of a second driver)."""
        assert n.nic is not None
        query = {"fieldSelector": f"spec.driver={NIC_DRIVER},spec.nodeName={n.name}"}
        self._wait(
            f"the ResourceSlice of {NIC_DRIVER} on {n.name}",
            lambda: bool(self.rest().send("GET", SLICES, query=query).get("items")),
            [n.nic],
            self.settings.ready_timeout,
        )

    def _driver_sockets(self, n: LocalNode) -> dict[Path, tuple[int, int]]:
        return driver_sockets(n.layout.registry_dir, self.settings.driver_name)

    def _slice_uids(self, n: LocalNode) -> set[str]:
        listed = self.rest().send("GET", SLICES, query={"fieldSelector": f"spec.nodeName={n.name}"})
        return {str(s["metadata"]["uid"]) for s in listed.get("items") or []}

    def _wait_republished(self, n: LocalNode, old: set[str], timeout: float = 30.0) -> None:
        """Wait until the node has slices and none of them is in ``old``.

        Only warns on timeout: a driver under test that does not republish is for the suite
        to find, not for a restart to fail on.
        """
        if not n.driver_command:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            uids = self._slice_uids(n)
            if uids and not uids & old:
                return
            time.sleep(0.2)
        log.warning("ResourceSlices of %s not republished %.0f s after a restart", n.name, timeout)

    def _wait_lease_renewed(self, n: LocalNode, since: float) -> None:
        rest = self.rest()
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{q(n.name)}"

        def renewed() -> bool:
            # None: not made yet (a kubelet makes it some time after its start)
            renew = ((rest.get(path) or {}).get("spec") or {}).get("renewTime")
            return renew is not None and _timestamp(renew) >= since - 1.0

        procs = [n.agent] if n.agent else []
        self._wait(
            f"the Lease of {n.name} renewed by the new agent", renewed, procs, self.settings.ready_timeout
        )

    def _wait(
        self,
        what: str,
        check: Callable[[], bool],
        procs: Sequence[ManagedProcess],
        timeout: float,
        seen: Callable[[], str] | None = None,
    ) -> None:
        """Wait until ``check()``; NodeError when one of ``procs`` exits or time is up (with ``seen()``,
        what was there instead, and the processes' last log lines)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in procs:
                if not proc.alive():
                    raise NodeError(
                        f"{proc.name} exited with status {proc.returncode} while waiting for {what}; "
                        f"log {proc.log_path}:\n{proc.tail(25)}"
                    )
            if check():
                return
            time.sleep(0.1)
        logs = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.tail(15)}" for p in procs)
        instead = f"; seen instead: {seen()}" if seen is not None else ""
        raise NodeError(f"timed out after {timeout:.0f} s waiting for {what}{instead}\n{logs}")

    def _check_drivers_started(self, nodes: Sequence[LocalNode]) -> None:
        """Fail at once, with its binary, the cause and its first log lines, when a driver exits
        before it registers (a binary that panics at start, a missing library, a bad flag), so that
        the suite never waits out its timeouts for a process that is gone. Returns once every
        node's driver registered (under any name: the suite judges the name), or after
        :data:`DRIVER_START_CHECK` seconds with the drivers still running (registering is then for
        the suite to judge)."""
        began = time.monotonic()
        pending = [n for n in nodes if n.driver is not None]
        while pending:
            for n in list(pending):
                assert n.driver is not None
                if not n.driver.alive():
                    raise NodeError(
                        early_exit_message(
                            n.name,
                            n.driver.argv,
                            n.driver.returncode,
                            time.monotonic() - began,
                            n.driver.head(12),
                        )
                        + f"\n(log {n.driver.log_path})"
                    )
                if answering_names(n.layout.registry_dir, timeout=0.5) - self.companion_drivers():
                    pending.remove(n)
            if time.monotonic() - began > DRIVER_START_CHECK:
                return
            time.sleep(0.1)

    def _wait_driver_registered(self, n: LocalNode, old: set[tuple[int, int]] | None = None) -> None:
        """Wait for a registration socket whose ``GetInfo`` names the driver, whatever its file name
        (a new one, not among ``old``, after a restart)."""
        assert n.driver is not None
        before = old or set()

        def fresh() -> bool:
            return any(ident not in before for ident in self._driver_sockets(n).values())

        driver = self.settings.driver_name
        what = f"a registration socket of driver {driver} in {n.layout.registry_dir} ({n.name})"
        self._wait(
            what,
            fresh,
            [n.driver],
            self.settings.ready_timeout,
            seen=lambda: describe_sockets(n.layout.registry_dir),
        )

    def _wait_nodes_ready(self, nodes: Sequence[LocalNode]) -> None:
        rest = self.rest()
        names = {n.name for n in nodes}

        def ready() -> bool:
            ok = set()
            for item in rest.send("GET", "/api/v1/nodes").get("items") or []:
                conditions = (item.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                    ok.add(item["metadata"]["name"])
            return names <= ok

        for attempt in range(_PORT_TRIES):
            procs = [n.agent for n in nodes if n.agent is not None]
            try:
                self._wait(f"nodes {sorted(names)} Ready", ready, procs, self.settings.ready_timeout)
                return
            except NodeError:
                lost = [n for n in nodes if n.kind == "kubelet" and n.agent and n.agent.lost_its_port()]
                if not lost or attempt == _PORT_TRIES - 1:
                    raise
            for n in lost:
                log.info("kubelet of %s found its port taken; starting it on others", n.name)
                self._start_kubelet(n, new_ports=True)

    def _wait_slices(self, nodes: Sequence[LocalNode]) -> None:
        rest = self.rest()
        names = {n.name for n in nodes}

        settled = PoolsSettled(names)

        def published() -> bool:
            return settled(rest.send("GET", SLICES).get("items") or [])

        procs = [p for n in nodes for p in (n.driver, n.agent) if p is not None]
        self._wait(f"ResourceSlices of {sorted(names)}", published, procs, self.settings.slice_timeout)

    def _create_device_classes(self) -> None:
        """The reference driver's classes when it is the driver; else those of ``--device-classes``."""
        s = self.settings
        if s.device_classes is not None:
            manifests = manifests_from_file(s.device_classes, s.driver_name)
        elif s.driver_command is None:
            manifests = device_class_manifests(s.driver_name)
        else:
            return  # another driver without a class file: its classes are the user's (or a suite's) to make
        create_objects(self.api_client(), manifests)
        names = ", ".join(str(m["metadata"]["name"]) for m in manifests)
        self.progress(f"DeviceClasses created: {names or '(none)'}")

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of every process of the cluster by name."""
        from clusters.local.controlplane import rss_of

        return self.measure(rss_of)

    def measure(self, of: Callable[[int], _T]) -> dict[str, _T]:
        """``of(pid)`` of every running process of the cluster by name (``rss_of``, ``cpu_of`` of
        :mod:`clusters.local.controlplane`)."""
        out = self.control_plane.measure(of) if self.control_plane else {}
        for n in self.local_nodes.values():
            for proc in (n.agent, n.driver, n.runtime):
                if proc is not None and proc.pid is not None and proc.alive():
                    out[proc.name] = of(proc.pid)
        return out


def find_container_view(node_roots: Iterable[Path], pod: PodRef, container: str) -> ContainerView:
    """The view a node agent wrote for ``container`` of ``pod`` under one of ``node_roots``."""
    namespace, name = pod_key(pod)
    paths = [NodeLayout(root).view_path(namespace, name, container) for root in node_roots]
    for path in paths:
        if path.exists():
            return ContainerView.from_file(path)
    raise ClusterError(
        f"no container view for {namespace}/{name} container {container!r} on any node "
        f"(looked for {', '.join(map(str, paths))}); is the pod Running?"
    )


def _timestamp(rfc3339: str) -> float:
    """Seconds since the epoch of an API server time (``2026-12-03T12:00:00.123456Z``)."""
    return datetime.fromisoformat(rfc3339).timestamp()
