"""An existing cluster from a kubeconfig: real nodes with the driver under test already installed.

The suite creates API objects there and watches what happens. It cannot reach the nodes by
itself: what it may do there comes from the profile (``external`` in a profile). Commands
``restartDriver``, ``restartKubelet``, ``cdiSpecs`` and ``probeAddress`` (placeholders ``{node}``,
``{kubeconfig}``, ``{driver}``, ``{mode}``) run here. With ``cdiSpecs``, what a container sees is
read by ``kubectl exec`` into the test pods. The driver's sockets and CDI specs are reached through
a node probe (:mod:`clusters.probe`) on each node: at the address ``probeAddress`` prints, or in
the pod of the probe DaemonSet in ``probeNamespace``, through the API server's port-forward; a
local mirror per node gives the harness the paths it dials and reads. A rule whose command or
probe is missing skips with the reason.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from clusters import tools
from clusters.base import Cluster, ContainerView, PodRef, pod_key
from clusters.errors import CapabilityMissing, ClusterStateError
from clusters.incluster import parse_specs, parse_view
from clusters.probe import NodeMirror, PortForwards, ProbeClient, tcp

__all__ = ["COMMAND_CAPABILITIES", "ExternalCluster", "command_capabilities"]

COMMAND_CAPABILITIES: Mapping[str, str] = {
    "restartDriver": "restart-driver",
    "restartKubelet": "restart-kubelet",
    "cdiSpecs": "view",
    "probeAddress": "grpc",
}
"""Which capability each profile command gives."""

_PROBE_CAPABILITY = "grpc"
"""What a node probe gives, at an address (``probeAddress``) or as a DaemonSet (``probeNamespace``)."""


def command_capabilities(commands: Mapping[str, str], probe_namespace: str = "") -> frozenset[str]:
    """The capabilities an external cluster has with these profile commands (by key; empty ones
    give none) and, given a ``probe_namespace``, the probe DaemonSet there."""
    found = {COMMAND_CAPABILITIES[k] for k, v in commands.items() if v and k in COMMAND_CAPABILITIES}
    return frozenset(found | ({_PROBE_CAPABILITY} if probe_namespace else set()))


_WHAT = {
    "restartDriver": "restart the driver",
    "restartKubelet": "restart the kubelet",
    "cdiSpecs": "show what a container sees",
    "probeAddress": "reach the driver's sockets on a node",
}

_PLACEHOLDER = re.compile(r"\{([a-z]+)\}")

COMMAND_TIMEOUT = 300.0
"""Seconds a profile command may take."""


class ExternalCluster(Cluster):
    """Any cluster a kubeconfig reaches."""

    backend = "external"

    def __init__(
        self,
        kubeconfig: Path,
        *,
        nodes: Sequence[str] = (),
        driver: str = "",
        commands: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        node_selector: str = "",
        probe_namespace: str = "",
    ) -> None:
        path = kubeconfig.expanduser().resolve()
        if not path.is_file():
            raise ClusterStateError(f"kubeconfig {kubeconfig} does not exist (give --kubeconfig PATH)")
        self._kubeconfig = path
        self._nodes = list(nodes)
        self.driver = driver
        """The driver whose nodes are the nodes under test (when no node list is given)."""
        self.node_selector = node_selector
        """A label selector (``key=value,...``): of the driver's nodes, only those it matches are
        under test (empty: all)."""
        self.commands = {k: v for k, v in (commands or {}).items() if v}
        """The profile's commands by key (``restartDriver``, ``restartKubelet``, ``cdiSpecs``,
        ``probeAddress``)."""
        unknown = sorted(set(self.commands) - set(COMMAND_CAPABILITIES))
        if unknown:
            raise ValueError(f"unknown external command(s) {unknown}; known: {sorted(COMMAND_CAPABILITIES)}")
        if probe_namespace and "probeAddress" in self.commands:
            raise ValueError(
                f"a probe address command and a probe namespace ({probe_namespace!r}) both given: give one"
            )
        self.probe_namespace = probe_namespace
        """Where the probe DaemonSet runs, reached by port-forward (empty: none)."""
        self._env = dict(os.environ if env is None else env)
        self.capabilities = command_capabilities(self.commands, probe_namespace)
        self._mirrors: dict[str, NodeMirror] = {}
        self._forwards: PortForwards | None = None
        self._lock = threading.Lock()

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig given."""
        return self._kubeconfig

    def nodes(self) -> list[str]:
        """The nodes given, else those where the driver publishes node-local ResourceSlices; of
        either, only those :attr:`node_selector` matches."""
        rest = self.rest()
        if self._nodes:
            found = set(self._nodes)
        else:
            query = {"fieldSelector": f"spec.driver={self.driver}"} if self.driver else {}
            items = (
                rest.send("GET", "/apis/resource.k8s.io/v1/resourceslices", query=query).get("items") or []
            )
            found = {str(s["spec"]["nodeName"]) for s in items if (s.get("spec") or {}).get("nodeName")}
        if self.node_selector:
            chosen = rest.send("GET", "/api/v1/nodes", query={"labelSelector": self.node_selector})
            found &= {str(n["metadata"]["name"]) for n in chosen.get("items") or []}
        return sorted(found)

    def command(self, key: str, node: str, mode: str = "") -> list[str]:
        """The argv of the profile command ``key`` for ``node``; :class:`CapabilityMissing` without one."""
        template = self.commands.get(key)
        if not template:
            raise CapabilityMissing(self.backend, _WHAT[key], f"the profile has no external.{key} command")
        values = {"node": node, "kubeconfig": str(self._kubeconfig), "driver": self.driver, "mode": mode}
        return [
            _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), w) for w in shlex.split(template)
        ]

    def _run(self, key: str, node: str, mode: str = "") -> str:
        return tools.run(self.command(key, node, mode), timeout=COMMAND_TIMEOUT, env=self._env).stdout

    def restart_driver(self, node: str, *, crash: bool = False) -> None:
        """Run the profile's ``restartDriver`` command."""
        self._run("restartDriver", node, "crash" if crash else "graceful")

    def restart_kubelet(self, node: str, *, crash: bool = False) -> None:
        """Run the profile's ``restartKubelet`` command."""
        self._run("restartKubelet", node, "crash" if crash else "graceful")

    def container_view(self, pod: PodRef, container: str) -> ContainerView:
        """``kubectl exec`` into the pod; CDI devices from the profile's ``cdiSpecs`` of its node."""
        self.command("cdiSpecs", "")  # refuses early without the command
        namespace, name = pod_key(pod)
        kubectl = tools.find("kubectl", self._env)
        base: list[str | Path] = [kubectl, "--kubeconfig", self._kubeconfig]

        def run(*argv: str) -> str:
            return tools.run([*base, *argv], timeout=60, env=self._env).stdout

        node = run("get", "pod", "-n", namespace, name, "-o", "jsonpath={.spec.nodeName}").strip()
        specs = self.node_cdi_specs(node)

        def exec_(*argv: str) -> str:
            return run("exec", "-n", namespace, name, "-c", container, "--", *argv)

        return parse_view(exec_("env"), exec_("ls", "-l", "/dev"), exec_("cat", "/proc/mounts"), specs)

    def node_cdi_specs(self, node: str) -> list[dict[str, object]]:
        """The profile's ``cdiSpecs`` command of ``node``, parsed."""
        return parse_specs(self._run("cdiSpecs", node))

    def registry_dir(self, node: str) -> Path:
        """The local mirror of ``node``'s plugin-registration dir, in step with the node now."""
        return self._mirror(node).registry_dir()

    def cdi_dir(self, node: str) -> Path:
        """The local mirror of ``node``'s CDI dir, in step with the node now."""
        return self._mirror(node).cdi_dir()

    def node_socket(self, node: str, path: str) -> Path:
        """A local relay of the socket ``path`` of ``node`` (through its probe)."""
        return self._mirror(node).socket(path)

    def _mirror(self, node: str) -> NodeMirror:
        """The mirror of ``node``, made on first use (the probe's address is asked for once)."""
        with self._lock:
            mirror = self._mirrors.get(node)
        if mirror is not None:
            return mirror
        made = NodeMirror(self._probe(node), node)  # the address command may take a while: unlocked
        with self._lock:
            mirror = self._mirrors.setdefault(node, made)
        if mirror is not made:
            made.close()
        return mirror

    def _probe(self, node: str) -> ProbeClient:
        if "probeAddress" in self.commands:
            address = self._run("probeAddress", node).strip()
            return ProbeClient(tcp(address), f"the probe of node {node} at {address}")
        if self.probe_namespace:
            with self._lock:
                if self._forwards is None:
                    self._forwards = PortForwards(self._kubeconfig, self.probe_namespace)
                forwards = self._forwards
            where = f"the probe of node {node} (port-forward, namespace {self.probe_namespace})"
            return ProbeClient(forwards.dial(node), where)
        raise CapabilityMissing(
            self.backend,
            _WHAT["probeAddress"],
            "the profile has no external.probeAddress command or external.probeNamespace",
        )

    def stop(self) -> None:
        """Close the probes' mirrors and the API client; the cluster is not ours to stop."""
        with self._lock:
            mirrors = list(self._mirrors.values())
            self._mirrors.clear()
            forwards, self._forwards = self._forwards, None
        for mirror in mirrors:
            mirror.close()
        if forwards is not None:
            forwards.close()
        self.close_client()
