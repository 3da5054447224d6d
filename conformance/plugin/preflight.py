"""Preflight: is the cluster and the driver fit to be tested at all? (the PRE rules)

Run once per session before anything else: the API is served, the DeviceClasses exist (the
suite creates the profile's classes that are missing and remembers them, to delete them at the
end), every node under test has the driver's slices, and the nodes are Ready with the profile's
device count. The first check that fails stops the run with its one message; the checks after it
are not made.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conformance.errors import PreflightFailed
from conformance.harness import ApiError, Kube, WaitTimeout, meta, watch_until
from conformance.profiles import DriverProfile

__all__ = ["PRE_RULES", "Verdict", "class_manifests", "cleanup", "run"]

PRE_RULES = ("PRE-API", "PRE-CLASSES", "PRE-SLICES", "PRE-NODES")
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
        words = [
            w.replace("{python}", sys.executable).replace("{driver}", profile.driver)
            for w in shlex.split(source.command)
        ]
        try:
            proc = subprocess.run(words, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PreflightFailed(f"deviceClasses.command {shlex.join(words)!r} could not run: {e}") from e
        if proc.returncode != 0:
            raise PreflightFailed(
                f"deviceClasses.command {shlex.join(words)!r} failed ({proc.returncode}): "
                f"{proc.stderr.strip()[-1000:]}"
            )
        text = proc.stdout
    elif source.file is not None:
        text = Path(source.file).read_text()
    else:
        return []
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise PreflightFailed(f"the profile's DeviceClasses are not valid YAML: {e}") from e
    bad = [d for d in docs if not isinstance(d, dict) or d.get("kind") != "DeviceClass"]
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
        except ApiError as e:
            if e.status != 409:
                return f"cannot create DeviceClass {name}: {e}"
            continue
        verdict.created.append(str(name))
    wanted = [profile.device_classes.default, *profile.device_classes.names]
    lacking = [n for n in wanted if kube.get("DeviceClass", n) is None]
    if lacking:
        return (
            f"DeviceClass {', '.join(lacking)} does not exist and the profile does not provide it "
            "(deviceClasses.command or deviceClasses.file)"
        )
    return ""


def _check_slices(kube: Kube, profile: DriverProfile, nodes: Sequence[str]) -> str:
    if not nodes:
        return f"no node under test: no node has ResourceSlices of driver {profile.driver}"

    def published(objs: Any) -> bool:
        have = {(s.get("spec") or {}).get("nodeName") for s in objs.values()}
        return set(nodes) <= have

    def describe(objs: Any) -> str:
        have = {(s.get("spec") or {}).get("nodeName") for s in objs.values()}
        on = sorted(str(h) for h in have if h) or "no node"
        return f"slices on {on}; missing on {sorted(set(nodes) - have)}"

    try:
        watch_until(
            kube,
            "ResourceSlice",
            f"ResourceSlices of driver {profile.driver} on {', '.join(nodes)}",
            published,
            profile.timeouts.slices,
            fields=f"spec.driver={profile.driver}",
            describe=describe,
        )
    except WaitTimeout as e:
        return f"the driver did not publish slices in time (timeouts.slices): {e}"
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


def run(kube: Kube, profile: DriverProfile, nodes: Sequence[str], kubeconfig: str = "") -> Verdict:
    """Make the preflight checks in order; stop at the first failure."""
    verdict = Verdict(kubeconfig=kubeconfig, nodes=list(nodes))
    checks: dict[str, Callable[[], str]] = {
        "PRE-API": lambda: _check_api(kube),
        "PRE-CLASSES": lambda: _check_classes(kube, profile, verdict),
        "PRE-SLICES": lambda: _check_slices(kube, profile, nodes),
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
        if message:
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
