"""An existing cluster from a kubeconfig: real nodes with the driver under test already installed.

The suite creates API objects there and watches what happens. It cannot reach the nodes by
itself: what it may do there comes from commands the profile gives (``external`` in a profile:
``restartDriver``, ``restartKubelet``, ``cdiSpecs``; placeholders ``{node}``, ``{kubeconfig}``,
``{driver}``, ``{mode}``). With ``cdiSpecs``, what a container sees is read by ``kubectl exec``
into the test pods. A rule whose command is missing skips with the reason; driver sockets are
never reachable here.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from clusters import tools
from clusters.base import Cluster, ContainerView, PodRef, pod_key
from clusters.errors import CapabilityMissing, ClusterStateError
from clusters.incluster import parse_specs, parse_view

__all__ = ["COMMAND_CAPABILITIES", "ExternalCluster", "command_capabilities"]

COMMAND_CAPABILITIES: Mapping[str, str] = {
    "restartDriver": "restart-driver",
    "restartKubelet": "restart-kubelet",
    "cdiSpecs": "view",
}
"""Which capability each profile command gives."""


def command_capabilities(commands: Mapping[str, str]) -> frozenset[str]:
    """The capabilities an external cluster has with these profile commands (by key; empty ones
    give none)."""
    return frozenset(COMMAND_CAPABILITIES[k] for k, v in commands.items() if v and k in COMMAND_CAPABILITIES)


_WHAT = {
    "restartDriver": "restart the driver",
    "restartKubelet": "restart the kubelet",
    "cdiSpecs": "show what a container sees",
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
        """The profile's commands by key (``restartDriver``, ``restartKubelet``, ``cdiSpecs``)."""
        unknown = sorted(set(self.commands) - set(COMMAND_CAPABILITIES))
        if unknown:
            raise ValueError(f"unknown external command(s) {unknown}; known: {sorted(COMMAND_CAPABILITIES)}")
        self._env = dict(os.environ if env is None else env)
        self.capabilities = command_capabilities(self.commands)

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
        specs = parse_specs(self._run("cdiSpecs", node))

        def exec_(*argv: str) -> str:
            return run("exec", "-n", namespace, name, "-c", container, "--", *argv)

        return parse_view(exec_("env"), exec_("ls", "-l", "/dev"), exec_("cat", "/proc/mounts"), specs)

    def stop(self) -> None:
        """Close the API client; the cluster is not ours to stop."""
        self.close_client()
