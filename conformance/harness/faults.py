"""Fault injection: the profile's fault commands, filled in for one device of a node, and run.

A profile says how to make a device unhealthy and how to heal it (``faults``: command templates,
:data:`~conformance.profiles.FAULT_PLACEHOLDERS`). The values come from three places: the cluster
backend knows the node's (:meth:`clusters.Cluster.node_values`: ``node``, ``kubeconfig``, and
``root`` on the local tier), the run knows ``driver`` and ``python``, and the device its name,
``unique`` value and attributes (``{attr:NAME}``). A fault entry of ``kinds`` or ``benign`` is
filled first, then takes the place of ``{fault}`` as shell words; every other value replaces its
placeholder inside one word, so a value with spaces stays one argument.

Commands run without a shell where the backend says (:meth:`clusters.Cluster.on_node`): here,
on the machine that runs the suite, for the local tier's nodes and for a remote cluster whose
command reaches the node itself (``{node}``, ``{kubeconfig}``); in the node's driver pod on kind
and k3s. A command that fails or hangs raises :class:`FaultCommandFailed` with its
output; a template that needs a value the backend cannot give raises
:class:`~clusters.errors.CapabilityMissing` (the test skips with that reason).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from clusters import Cluster
from clusters.errors import CapabilityMissing
from conformance.errors import ConformanceError
from conformance.harness import devices as slicedevices
from conformance.harness.kube import Kube
from conformance.harness.waiting import Objects, watch_until
from conformance.profiles import DriverProfile

__all__ = ["FaultCommandFailed", "FaultCommands", "tainted_since", "wait_untainted"]

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")

COMMAND_TIMEOUT = 60.0
"""Seconds a fault command may take."""


class FaultCommandFailed(ConformanceError, AssertionError):
    """A fault command exited non-zero, could not start, or hung (a test failure: the profile's
    command or the tool behind it is broken, and no fault was made)."""


class FaultCommands:
    """The profile's ``inject`` and ``heal`` commands for the devices of one node."""

    def __init__(self, cluster: Cluster, profile: DriverProfile, node: str) -> None:
        self.profile = profile
        """The profile whose commands these are."""
        self.node = node
        """The node whose devices they address."""
        self._backend = cluster.backend
        self._cluster = cluster
        # a backend whose node commands run elsewhere (in a driver pod) names its own {python}
        self._values = {"python": sys.executable, **cluster.node_values(node), "driver": profile.driver}

    def values(self, device: Mapping[str, Any]) -> dict[str, str]:
        """The placeholder values for ``device`` (a slice device), ``{attr:NAME}`` aside."""
        unique_key = self.profile.devices.unique
        unique = device["name"] if unique_key == "name" else self._attribute(device, unique_key, "unique")
        return {**self._values, "device": str(device["name"]), "unique": str(unique)}

    def _attribute(self, device: Mapping[str, Any], name: str, where: str) -> str:
        value = slicedevices.attribute_value(device, name, self.profile.driver)
        if value is None:
            raise FaultCommandFailed(
                f"device {device.get('name')} of {self.node} has no attribute {name!r}, which the "
                f"profile's fault commands need for {{{where}}}"
            )
        return str(value)

    def _fill(self, text: str, device: Mapping[str, Any], values: Mapping[str, str], field: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("attr:"):
                return self._attribute(device, name.removeprefix("attr:"), name)
            if name in values:
                return values[name]
            raise CapabilityMissing(
                self._backend,
                f"fill {{{name}}} in the profile's faults.{field}",
                f"it knows {', '.join('{' + k + '}' for k in sorted(values))}",
            )

        return _PLACEHOLDER.sub(one, text)

    def fault(self, fault: str, device: Mapping[str, Any]) -> str:
        """A ``kinds``/``benign`` entry filled in for ``device``, as shell words."""
        values = self.values(device)
        return shlex.join(self._fill(word, device, values, "kinds") for word in shlex.split(fault))

    def command(self, which: str, device: Mapping[str, Any], fault: str = "") -> list[str]:
        """The argv of ``inject`` (with ``fault``, an entry of ``kinds`` or ``benign``) or ``heal``."""
        template = self.profile.faults.inject if which == "inject" else self.profile.faults.heal
        if not template:
            raise FaultCommandFailed(f"profile {self.profile.name} has no faults.{which} command")
        values = self.values(device)
        words = shlex.split(template.replace("{fault}", self.fault(fault, device)) if fault else template)
        return self._cluster.on_node(self.node, [self._fill(word, device, values, which) for word in words])

    def run(self, argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> float:
        """Run a filled-in command; the seconds it took. Raises :class:`FaultCommandFailed`."""
        shown = shlex.join(argv)
        started = time.monotonic()
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            output = _output(e.stdout, e.stderr)
            raise FaultCommandFailed(
                f"fault command did not finish in {timeout:.0f} s: {shown}; output: {output}"
            ) from e
        except OSError as e:
            raise FaultCommandFailed(f"fault command could not start: {shown}: {e}") from e
        if done.returncode != 0:
            output = _output(done.stdout, done.stderr)
            raise FaultCommandFailed(f"fault command exited {done.returncode}: {shown}; output: {output}")
        return time.monotonic() - started


def _output(stdout: str | bytes | None, stderr: str | bytes | None) -> str:
    parts = []
    for raw in (stdout, stderr):
        part = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        if part and part.strip():
            parts.append(part.strip())
    text = "\n".join(parts)
    return (text[-2000:] if len(text) > 2000 else text) or "(none)"


def tainted_since(slices: Objects, node: str, before: set[str]) -> set[str]:
    """The devices of ``node`` in ``slices`` (watched ResourceSlices) that carry taints, except those
    in ``before``."""
    return {
        d["name"]
        for s in slices.values()
        if (s.get("spec") or {}).get("nodeName") == node
        for d in (s.get("spec") or {}).get("devices") or []
        if d.get("taints") and d["name"] not in before
    }


def wait_untainted(kube: Kube, driver: str, node: str, before: set[str], timeout: float) -> None:
    """Wait until no device of ``driver`` on ``node`` carries a taint in its slices, except those in
    ``before`` (tainted before the faults); raises :class:`~conformance.harness.waiting.WaitTimeout`."""
    watch_until(
        kube,
        "ResourceSlice",
        f"the devices of {node} tainted after a fault to be untainted",
        lambda objs: not tainted_since(objs, node, before),
        timeout,
        fields=f"spec.driver={driver}",
        describe=lambda objs: f"still tainted: {sorted(tainted_since(objs, node, before))}",
    )
