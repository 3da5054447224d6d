"""A driver deployed in the cluster (a DaemonSet), driven with ``kubectl`` and ``helm``.

What the kind and k3s backends share: install a :class:`~clusters.release.Release` (the
reference driver's chart, or a vendor's chart or manifests), wait until every node publishes
slices, find the driver pod of a node (:class:`~clusters.release.DriverPods`), restart it
(delete the pod; its DaemonSet makes a new one), run a command in it (the ``fakegpu`` CLI for
faults), and read what a real container sees (``kubectl exec`` of ``env``, ``ls -l /dev`` and
``cat /proc/mounts``).

A real container cannot list the CDI devices it was given, so :func:`parse_view` infers them from
the node's CDI specs: a device counts as injected when every env var and device node of its
edits shows in the container (and at least one of them does).
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from clusters import tools
from clusters.base import ContainerView, PodRef, pod_key
from clusters.errors import ClusterError, DriverDeployError, ToolError
from clusters.progress import Progress
from clusters.release import DriverPods, Release, VendorRelease

__all__ = [
    "InCluster",
    "Tools",
    "find_tools",
    "give_up",
    "parse_view",
    "wait_slices",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tools:
    """The outside tools a kind or k3s cluster is driven with."""

    docker: Path
    """``docker``, whose engine answers."""
    kubectl: Path
    """``kubectl``."""
    helm: Path | None
    """``helm`` (None when no driver is installed)."""


def find_tools(env: Mapping[str, str], release: Release | None) -> Tools:
    """Check, before anything is made, that every tool is there and the Docker engine answers, and
    that what ``release`` installs from is there (None: nothing is installed);
    :class:`~clusters.errors.ToolError` (or :class:`DriverDeployError` from :meth:`Release.check`)
    names what is missing."""
    docker = tools.find("docker", env)
    tools.docker_engine(docker)
    kubectl = tools.find("kubectl", env)
    helm = tools.find("helm", env) if release is not None and release.uses_helm else None
    if release is not None:
        release.check()
        if isinstance(release, VendorRelease) and release.builds_here:
            raise ToolError(
                "the profile's install section names {src:NAME} or {image:NAME}, parts that only the "
                "kind tier makes here: run it with --cluster kind, or give a chart and images a k3s "
                "node can get"
            )
    return Tools(docker, kubectl, helm)


class LogsSource(Protocol):
    """A cluster whose logs can be collected and which can be stopped."""

    @property
    def backend(self) -> str: ...

    def collect_logs(self, dest: Path) -> None: ...
    def stop(self) -> None: ...


def give_up(cluster: LogsSource, dest: Path, progress: Progress) -> None:
    """After a failed start: the cluster's logs into ``dest`` (best effort), then stop it."""
    progress(f"the {cluster.backend} cluster did not come up; logs go to {dest}")
    try:
        cluster.collect_logs(dest)
    except (ClusterError, OSError) as e:
        progress(f"could not collect the logs: {e}")
    cluster.stop()


EXEC_TRIES = 3
"""Tries of a container view's ``kubectl exec`` when kubectl lost its output
(:meth:`InCluster.container_view`)."""

REGISTRATION_SETTLE = 3.0
"""Seconds :meth:`InCluster.restart_driver` waits after the new pod is Ready. Ready says its
registration socket exists; the kubelet registers the plugin once its watcher sees it (under a
second on kind), and a pod whose prepare comes in that gap fails with "driver ... is not
registered" and was not retried by the kubelet for a minute (RES-DRIVER-RESTART on kind)."""


class InCluster:
    """``kubectl`` and ``helm`` on one cluster (its admin kubeconfig), and the driver's pods there."""

    def __init__(
        self, kubeconfig: Path, pods: DriverPods, *, kubectl: Path, helm: Path | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        """Admin kubeconfig."""
        self.pods = pods
        """Where the driver's pods run."""
        self.kubectl_bin = kubectl
        self.helm_bin = helm

    def kubectl(self, *args: str, timeout: float = 120.0, check: bool = True) -> str:
        """Run ``kubectl --kubeconfig K ARGS``; its stdout."""
        argv: list[str | Path] = [self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args]
        return tools.run(argv, timeout=timeout, check=check).stdout

    def helm(self, *args: str, timeout: float = 360.0) -> str:
        """Run ``helm ARGS``; its stdout. :class:`ToolError` when there is no helm or it fails."""
        if self.helm_bin is None:
            raise ToolError("installing the driver's chart needs helm")
        return tools.run([self.helm_bin, *args], timeout=timeout).stdout

    def pods_report(self) -> str:
        """``kubectl get pods -o wide`` of the driver's namespace (for error messages)."""
        try:
            return self.kubectl("get", "pods", "-n", self.pods.namespace, "-o", "wide", timeout=30)
        except ToolError as e:
            return f"(cannot list the driver pods: {e})"

    def driver_pod(self, node: str) -> str:
        """The running driver pod on ``node``. Raises :class:`DriverDeployError` when there is none."""
        pods = self._pods(node)
        running = [name for name, phase, _ in pods if phase == "Running"]
        if not running:
            raise DriverDeployError(
                f"no running driver pod ({self.pods.selector}) on node {node}: {pods or 'none'}"
            )
        return running[0]

    def _pods(self, node: str) -> list[tuple[str, str, str]]:
        out = self.kubectl(
            "get",
            "pods",
            "-n",
            self.pods.namespace,
            "-l",
            self.pods.selector,
            "--field-selector",
            f"spec.nodeName={node}",
            "-o",
            "json",
        )
        items = json.loads(out or "{}").get("items") or []
        return [
            (
                str(p["metadata"]["name"]),
                str((p.get("status") or {}).get("phase", "")),
                str(p["metadata"].get("uid", "")),
            )
            for p in items
            if not p["metadata"].get("deletionTimestamp")
        ]

    def restart_driver(self, node: str, *, crash: bool = False, timeout: float = 120.0) -> None:
        """Delete the driver pod of ``node`` (``crash``: at once, no grace) and wait for its successor
        to run and be ready."""
        old = self.driver_pod(node)
        grace = ["--grace-period=0", "--force"] if crash else []
        self.kubectl("delete", "pod", "-n", self.pods.namespace, old, "--wait=false", *grace)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fresh = [name for name, phase, _ in self._pods(node) if name != old and phase == "Running"]
            if fresh:
                self.kubectl(
                    "wait",
                    "-n",
                    self.pods.namespace,
                    "--for=condition=Ready",
                    f"pod/{fresh[0]}",
                    "--timeout=90s",
                    timeout=120,
                )
                time.sleep(REGISTRATION_SETTLE)
                return
            time.sleep(1.0)
        raise DriverDeployError(
            f"no new driver pod ran on {node} within {timeout:.0f} s of deleting {old}\n{self.pods_report()}"
        )

    def crash_driver(self, node: str, kill: Callable[[str], object], *, timeout: float = 150.0) -> None:
        """Kill the driver container on ``node`` as a crash would (``kill`` of its container ID, as
        the runtime names it: SIGKILL, nothing the driver can answer) and wait until the kubelet has
        started it again in the same pod and it is ready. Deleting the pod, even with no grace,
        lets the driver hear SIGTERM and clean up: no crash."""
        pod = self.driver_pod(node)
        container_id, restarts, _ = self._container_state(pod)
        if not container_id:
            raise DriverDeployError(f"driver pod {pod} on {node} has no running container to kill")
        kill(container_id.partition("://")[2] or container_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, now, ready = self._container_state(pod)
            if now > restarts and ready:
                time.sleep(REGISTRATION_SETTLE)
                return
            time.sleep(1.0)
        raise DriverDeployError(
            f"the driver container of {pod} on {node} was not running and ready again within {timeout:.0f} s "
            f"of its kill\n{self.pods_report()}"
        )

    def _container_state(self, pod: str) -> tuple[str, int, bool]:
        """The driver container's ID, restart count and readiness in ``pod``."""
        out = self.kubectl("get", "pod", "-n", self.pods.namespace, pod, "-o", "json")
        statuses = (json.loads(out or "{}").get("status") or {}).get("containerStatuses") or []
        for status in statuses:
            if not self.pods.container or status.get("name") == self.pods.container:
                running = "running" in (status.get("state") or {})
                return (
                    str(status.get("containerID", "")) if running else "",
                    int(status.get("restartCount", 0)),
                    bool(status.get("ready")) and running,
                )
        return "", 0, False

    def exec_driver(self, node: str, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` in the driver container (:attr:`DriverPods.container`) on ``node``."""
        pod = self.driver_pod(node)
        return [
            str(self.kubectl_bin),
            "--kubeconfig",
            str(self.kubeconfig),
            "exec",
            "-n",
            self.pods.namespace,
            pod,
            *(["-c", self.pods.container] if self.pods.container else []),
            "--",
            *argv,
        ]

    def container_view(
        self, pod: PodRef, container: str, specs: Iterable[Mapping[str, Any]]
    ) -> ContainerView:
        """What ``container`` of ``pod`` sees: its env, its device nodes, its mounts, and the CDI
        devices of ``specs`` (the node's CDI specs) whose edits all show."""
        namespace, name = pod_key(pod)

        def run(*cmd: str) -> str:
            for attempt in range(EXEC_TRIES):
                try:
                    return self.kubectl(
                        "exec", "-n", namespace, name, "-c", container, "--", *cmd, timeout=60
                    )
                except ToolError as e:
                    # kubectl's websocket exec now and then loses a command's output and exits 1
                    # ("Unknown stream id 1, discarding message"; seen once a run on kind)
                    if "Unknown stream id" not in str(e) or attempt == EXEC_TRIES - 1:
                        raise
                    log.info("kubectl exec lost its output; again: %s", e)
            raise AssertionError("unreachable")

        try:
            env = run("env")
        except ToolError as e:
            if "container not found" not in str(e):
                raise
            # It ran and exited (an init container): nothing can be exec'd in it any more, but the
            # suite's init containers print their env (``sh -c env``), so their log is that env.
            # Their device nodes and mounts are gone with them: a device counts by its env alone.
            log.info("container %s of pod %s/%s has exited: its view is its log", container, namespace, name)
            text = self.kubectl("logs", "-n", namespace, name, "-c", container, timeout=60)
            return parse_view(text, "", "", specs, nodes_seen=False)
        return parse_view(env, run("ls", "-l", "/dev"), run("cat", "/proc/mounts"), specs)

    def logs(self, dest: Path) -> list[Path]:
        """Write each driver pod's log (and the previous one, after a restart) into ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        try:
            out = self.kubectl(
                "get", "pods", "-n", self.pods.namespace, "-l", self.pods.selector, "-o", "name"
            )
        except ToolError as e:
            (dest / "driver-pods.txt").write_text(f"cannot list the driver pods: {e}\n")
            return [dest / "driver-pods.txt"]
        for ref in out.split():
            name = ref.rpartition("/")[2]
            for previous in (False, True):
                flag = ["--previous"] if previous else []
                text = self.kubectl(
                    "logs", "-n", self.pods.namespace, name, "--all-containers", *flag, check=False
                )
                if text:
                    path = dest / f"{name}{'.previous' if previous else ''}.log"
                    path.write_text(text)
                    written.append(path)
        return written


def wait_slices(
    kubectl: Callable[..., str],
    driver: str,
    nodes: Sequence[str],
    *,
    timeout: float,
    progress: Progress,
    report: Callable[[], str] = lambda: "",
) -> None:
    """Wait until every node of ``nodes`` has a ResourceSlice of ``driver``; raises
    :class:`DriverDeployError` naming the nodes without one."""
    progress(f"waiting for ResourceSlices of {driver} on {', '.join(nodes)} ...")
    deadline = time.monotonic() + timeout
    missing = list(nodes)
    while True:
        out = kubectl("get", "resourceslices.resource.k8s.io", "-o", "json", check=False)
        try:
            items = json.loads(out or "{}").get("items") or []
        except ValueError:
            items = []
        have = {
            (s.get("spec") or {}).get("nodeName")
            for s in items
            if (s.get("spec") or {}).get("driver") == driver
        }
        missing = [n for n in nodes if n not in have]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise DriverDeployError(
                f"driver {driver} published no ResourceSlice for node(s) {', '.join(missing)} within "
                f"{timeout:.0f} s: check its pods and logs\n{report()}"
            )
        time.sleep(1.0)


def parse_view(
    env: str, dev: str, mounts: str, specs: Iterable[Mapping[str, Any]], *, nodes_seen: bool = True
) -> ContainerView:
    """A :class:`ContainerView` from the output of ``env``, ``ls -l /dev`` and ``cat /proc/mounts`` in a
    container, with the CDI devices of ``specs`` whose edits the container shows (``nodes_seen``
    False: its device nodes could not be listed, so a device counts by its env alone, and needs some)."""
    env_map: dict[str, str] = {}
    for line in env.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            env_map[key] = value
    nodes = []
    for line in dev.splitlines():
        parts = line.split()
        if len(parts) < 10 or parts[0][:1] not in ("c", "b"):
            continue
        major, minor = parts[4].rstrip(","), parts[5]
        entry: dict[str, Any] = {"path": f"/dev/{parts[-1]}", "type": parts[0][0]}
        if major.isdigit() and minor.isdigit():
            entry.update(major=int(major), minor=int(minor))
        nodes.append(entry)
    mount_list = []
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            mount_list.append(
                {
                    "hostPath": parts[0],
                    "containerPath": parts[1],
                    "type": parts[2],
                    "options": parts[3].split(","),
                }
            )
    paths = {n["path"] for n in nodes}
    injected = []
    for spec in specs:
        kind = spec.get("kind")
        for device in spec.get("devices") or []:
            if not isinstance(device, Mapping):
                continue
            edits = device.get("containerEdits") or {}
            wanted_env = [str(e) for e in edits.get("env") or []]
            wanted_nodes = [
                str(d.get("path")) for d in edits.get("deviceNodes") or [] if isinstance(d, Mapping)
            ]
            if not wanted_env and not wanted_nodes:
                continue
            if not nodes_seen:
                wanted_nodes = []
                if not wanted_env:
                    continue
            env_ok = all(
                e.partition("=")[0] in env_map and env_map[e.partition("=")[0]] == e.partition("=")[2]
                for e in wanted_env
            )
            if env_ok and all(p in paths for p in wanted_nodes):
                injected.append(f"{kind}={device.get('name')}")
    return ContainerView(env=env_map, device_nodes=nodes, mounts=mount_list, cdi_devices=sorted(injected))


def parse_specs(text: str) -> list[dict[str, Any]]:
    """CDI specs printed one after another, as mappings: files separated by :data:`SPEC_SEPARATOR`
    (:data:`CAT_SPECS` prints that), JSON objects back to back, or YAML documents (``---``). A file
    that does not parse is left out (what a runtime would do with it is PREP-CDI's to judge)."""
    out: list[dict[str, Any]] = []
    for chunk in _documents(text):
        out.extend(d for d in _parse_chunk(chunk) if isinstance(d, dict))
    return out


def _parse_chunk(chunk: str) -> list[Any]:
    decoder = json.JSONDecoder()
    docs: list[Any] = []
    at = 0
    body = chunk.strip()
    try:
        while at < len(body):
            doc, end = decoder.raw_decode(body, at)
            docs.append(doc)
            at = end
            while at < len(body) and body[at].isspace():
                at += 1
        return docs
    except ValueError:
        pass
    try:
        return list(yaml.safe_load_all(body))
    except yaml.YAMLError:
        return []


SPEC_SEPARATOR = "--- dra-conformance cdi spec ---"
"""What :data:`CAT_SPECS` prints between two spec files."""

CAT_SPECS = (
    "for f in /var/run/cdi/*.json /var/run/cdi/*.yaml /etc/cdi/*.json /etc/cdi/*.yaml; do "
    f'[ -f "$f" ] && {{ echo {shlex.quote(SPEC_SEPARATOR)}; cat "$f"; echo; }}; done; true'
)
"""A ``sh -c`` script that prints a node's CDI specs, separated by :data:`SPEC_SEPARATOR`."""


def _documents(text: str) -> list[str]:
    return [c for c in text.split(SPEC_SEPARATOR) if c.strip()]
