"""Preflight: is the cluster and the driver fit to be tested at all? (the PRE rules)

Run once per session before anything else: the API is served, the DeviceClasses exist (the
suite creates the profile's classes that are missing and remembers them, to delete them at the
end), the driver is registered on every node under test (where the cluster lets the suite reach
the sockets), every node under test has the driver's slices, and the nodes are Ready with the
profile's device count. The first check that fails stops the run with its one message; the
checks after it are not made.

A bring-up failure is a verdict, not a crash: a driver that never registers, registers under
another name or never publishes slices fails its PRE rule with what was seen (the registration
sockets and the names their ``GetInfo`` answered, the driver's last log lines). Where what was
seen also breaks a rule of another area (a socket that answers ``GetInfo`` with another driver
name breaks REG-GETINFO), :attr:`Verdict.also` says so, and the plugin records that rule failed too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from clusters import Cluster
from clusters.pools import PoolsSettled
from conformance.errors import PreflightFailed
from conformance.harness import (
    ApiError,
    Kube,
    WaitTimeout,
    command_documents,
    get_info,
    is_socket,
    meta,
    parse_documents,
    until,
)
from conformance.profiles import DriverProfile
from draproto.rest import Conflict

__all__ = ["PRE_RULES", "Verdict", "class_manifests", "cleanup", "run"]

PRE_RULES = ("PRE-API", "PRE-CLASSES", "PRE-REGISTERED", "PRE-SLICES", "PRE-NODES")
"""The preflight rules, in the order they are checked."""

NEEDED_KINDS = ("DeviceClass", "ResourceClaim", "ResourceSlice")

NOT_CHECKED = "not checked"
"""How the result of a check after a failed one begins."""


@dataclass
class Verdict:
    """What preflight found: per PRE rule, an empty string (passed) or why it failed."""

    results: dict[str, str] = field(default_factory=dict)
    """Rule id -> failure message (empty: passed)."""
    created: list[str] = field(default_factory=list)
    """DeviceClasses the suite created (to delete at the end)."""
    kubeconfig: str = ""
    """The cluster they were created in."""
    nodes: list[str] = field(default_factory=list)
    """The nodes under test."""
    also: dict[str, str] = field(default_factory=dict)
    """Rules of other areas that what preflight saw breaks (rule id -> why): the run records them
    failed though it stops before their own tests."""

    @property
    def failure(self) -> str:
        """The first failure, or empty."""
        return next(
            (
                f"{rule}: {msg}"
                for rule, msg in self.results.items()
                if msg and not msg.startswith(NOT_CHECKED)
            ),
            "",
        )

    def to_json(self) -> str:
        """For the session's shared directory."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Verdict:
        """The inverse of :meth:`to_json`."""
        return cls(**json.loads(text))


def class_manifests(profile: DriverProfile) -> list[dict[str, Any]]:
    """The DeviceClass manifests the profile provides (by command or file; none for ``names``)."""
    source = profile.device_classes
    if source.command:
        docs = command_documents(source.command, profile, "deviceClasses.command")
    elif source.file is not None:
        docs = parse_documents(Path(source.file).read_text(), "the profile's DeviceClass file")
    else:
        return []
    bad = [d for d in docs if d.get("kind") != "DeviceClass"]
    if bad:
        raise PreflightFailed(
            f"the profile's DeviceClass source yields objects that are not DeviceClasses: {bad[:1]}"
        )
    return docs


def _check_api(kube: Kube) -> str:
    served = kube.served("resource.k8s.io/v1")
    lacking = [k for k in NEEDED_KINDS if k not in served]
    if not lacking:
        return ""
    return (
        f"the cluster does not serve resource.k8s.io/v1 {', '.join(lacking)} "
        f"(it runs {kube.server_version()}); DRA drivers are tested on Kubernetes 1.34 or newer"
    )


def _check_classes(kube: Kube, profile: DriverProfile, verdict: Verdict) -> str:
    for manifest in class_manifests(profile):
        name = meta(manifest).get("name")
        if kube.get("DeviceClass", str(name)) is not None:
            continue  # someone else's: used as it is, never replaced or deleted
        try:
            kube.create(manifest)
        except Conflict:
            continue
        except ApiError as e:
            return f"cannot create DeviceClass {name}: {e}"
        verdict.created.append(str(name))
    wanted = [profile.device_classes.default, *profile.device_classes.names]
    lacking = [n for n in wanted if kube.get("DeviceClass", n) is None]
    if lacking:
        return (
            f"DeviceClass {', '.join(lacking)} does not exist and the profile does not provide it "
            "(deviceClasses.command or deviceClasses.file)"
        )
    return ""


LOG_LINES = 15
"""How many of the driver's last log lines a bring-up failure quotes."""

WRONG_NAME_GRACE = 3.0
"""Seconds registration sockets that answer only other driver names must stay so before preflight
gives up on registration (rather than waiting out ``timeouts.slices``)."""

SOCKET_TIMEOUT = 2.0
"""Seconds one registration socket has to answer ``GetInfo``."""


def _driver_log(cluster: Cluster | None, node: str) -> str:
    """The driver's last log lines on ``node``, as a block for a message (empty when unknown)."""
    path = cluster.node_logs(node).get("driver") if cluster is not None else None
    if path is None:
        return ""
    try:
        lines = path.read_text(errors="replace").splitlines()[-LOG_LINES:]
    except OSError as e:
        return f"\n  the driver's log {path} cannot be read: {e.strerror}"
    shown = "\n".join(f"    {line}" for line in lines) or "    (nothing logged)"
    return f"\n  the driver's last log lines on {node} ({path}):\n{shown}"


def _answers(registry: Path, companions: frozenset[str]) -> dict[str, str]:
    """Each registration socket in ``registry`` by file name: the driver name its ``GetInfo`` answers,
    or why it did not answer (in parentheses); sockets that answer a companion driver's name (one the
    cluster runs beside the driver under test) are left out."""
    found: dict[str, str] = {}
    for path in sorted(registry.iterdir()) if registry.is_dir() else []:
        if not is_socket(path):
            continue
        try:
            name = get_info(path, SOCKET_TIMEOUT).name
        except (grpc.RpcError, grpc.FutureTimeoutError) as e:
            found[path.name] = f"(no answer: {type(e).__name__})"
            continue
        if name not in companions:
            found[path.name] = name
    return found


def _check_registered(
    cluster: Cluster | None, profile: DriverProfile, nodes: Sequence[str], verdict: Verdict
) -> str:
    if cluster is None or "grpc" not in cluster.capabilities:
        backend = cluster.backend if cluster is not None else "unknown"
        return (
            f"{NOT_CHECKED}: cluster backend {backend!r} cannot reach the driver's sockets on a node (grpc)"
        )
    driver = profile.driver
    companions = cluster.companion_drivers() - {driver}
    started = time.monotonic()
    deadline = started + profile.timeouts.slices
    settled: tuple[float, object] = (started, None)
    early = ""
    while True:
        # the nodes' sockets asked at once: each GetInfo opens a channel (about 0.4 s a node)
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            found = pool.map(lambda n: _answers(cluster.registry_dir(n), companions), nodes)
            seen = dict(zip(nodes, found, strict=True))
        lacking = [n for n in nodes if driver not in seen[n].values()]
        if not lacking or time.monotonic() >= deadline:
            break
        # every node that lacks the driver has a socket that answers another name, and that has not
        # changed for a while: the driver registered under another name, and waiting on is no use
        picture = {n: seen[n] for n in lacking}
        if picture != settled[1]:
            settled = (time.monotonic(), picture)
        elif time.monotonic() - settled[0] >= WRONG_NAME_GRACE and all(
            any(not got.startswith("(") for got in seen[n].values()) for n in lacking
        ):
            early = f"the driver registered under another name (unchanged for {WRONG_NAME_GRACE:.0f} s)"
            break
        time.sleep(0.5)
    if not lacking:
        return ""
    problems = []
    others = []
    for n in lacking:
        answers = seen[n]
        shown = ", ".join(
            f"{name} {got}" if got.startswith("(") else f"{name} answers {got!r}"
            for name, got in answers.items()
        )
        wrong = sorted({got for got in answers.values() if not got.startswith("(")})
        if wrong:
            others.append(f"on {n} GetInfo answers driver name {', '.join(map(repr, wrong))}, not {driver!r}")
        problems.append(
            f"node {n}: no registration socket in {cluster.registry_dir(n)} answers GetInfo with driver "
            f"{driver!r}; sockets there: {shown or 'none'}{_driver_log(cluster, n)}"
        )
    if others:
        verdict.also["REG-GETINFO"] = "; ".join(others) + " (seen by preflight)"
    why = early or f"the driver did not register within {profile.timeouts.slices:.0f} s (timeouts.slices)"
    return f"{why}: " + "\n".join(problems)


def _check_slices(
    kube: Kube, profile: DriverProfile, nodes: Sequence[str], cluster: Cluster | None = None
) -> str:
    if not nodes:
        return f"no node under test: no node has ResourceSlices of driver {profile.driver}"

    settled = PoolsSettled(nodes)  # whole pools, or as whole as a broken driver makes them
    listed: list[Any] = []

    def published() -> bool:
        listed[:] = kube.objects("ResourceSlice", fields=f"spec.driver={profile.driver}")
        return settled(listed)

    def describe() -> str:
        have = {(s.get("spec") or {}).get("nodeName") for s in listed}
        on = sorted(str(h) for h in have if h) or "no node"
        return f"slices on {on}; missing on {sorted(set(nodes) - have)}"

    try:
        until(
            f"ResourceSlices of driver {profile.driver} on {', '.join(nodes)}",
            published,
            profile.timeouts.slices,
            interval=0.25,
            describe=describe,
        )
    except WaitTimeout as e:
        have = {
            (sl.get("spec") or {}).get("nodeName")
            for sl in kube.objects("ResourceSlice", fields=f"spec.driver={profile.driver}")
        }
        logs = "".join(_driver_log(cluster, n) for n in nodes if n not in have)
        return f"the driver did not publish slices in time (timeouts.slices): {e}{logs}"
    return ""


def _check_nodes(kube: Kube, profile: DriverProfile, nodes: Sequence[str]) -> str:
    problems = []
    counts: dict[str, int] = {}
    for s in kube.objects("ResourceSlice", fields=f"spec.driver={profile.driver}"):
        spec = s.get("spec") or {}
        counts[spec.get("nodeName", "")] = counts.get(spec.get("nodeName", ""), 0) + len(
            spec.get("devices") or []
        )
    for name in nodes:
        node = kube.get("Node", name)
        if node is None:
            problems.append(f"node {name} does not exist")
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            problems.append(f"node {name} is not Ready")
        if counts.get(name, 0) < profile.devices.per_node:
            problems.append(
                f"node {name} has {counts.get(name, 0)} device(s) of {profile.driver}, "
                f"the profile says {profile.devices.per_node} (devices.perNode)"
            )
    return "; ".join(problems)


def run(
    kube: Kube,
    profile: DriverProfile,
    nodes: Sequence[str],
    kubeconfig: str = "",
    cluster: Cluster | None = None,
) -> Verdict:
    """Make the preflight checks in order; stop at the first failure. ``cluster`` lets preflight
    reach the driver's sockets and logs (without it, registration is not checked)."""
    verdict = Verdict(kubeconfig=kubeconfig, nodes=list(nodes))
    checks: dict[str, Callable[[], str]] = {
        "PRE-API": lambda: _check_api(kube),
        "PRE-CLASSES": lambda: _check_classes(kube, profile, verdict),
        "PRE-REGISTERED": lambda: _check_registered(cluster, profile, nodes, verdict),
        "PRE-SLICES": lambda: _check_slices(kube, profile, nodes, cluster),
        "PRE-NODES": lambda: _check_nodes(kube, profile, nodes),
    }
    failed = ""
    for rule_id, check in checks.items():
        if failed:
            verdict.results[rule_id] = f"{NOT_CHECKED}: {failed} failed"
            continue
        try:
            message = check()
        except (PreflightFailed, ApiError) as e:
            message = str(e)
        verdict.results[rule_id] = message
        if message and not message.startswith(NOT_CHECKED):  # a check that cannot be made stops nothing
            failed = rule_id
    return verdict


def cleanup(kube: Kube, verdict: Verdict) -> list[str]:
    """Delete the DeviceClasses preflight created; what could not be deleted."""
    errors = []
    for name in reversed(verdict.created):
        try:
            kube.delete("DeviceClass", name)
        except ApiError as e:
            errors.append(f"DeviceClass {name}: {e}")
    return errors
