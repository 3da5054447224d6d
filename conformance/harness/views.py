"""Which devices a container got, from its view, by the ways the profile gives (``container``).

A view (:class:`clusters.ContainerView`) holds what a container got from its CDI edits: env vars,
device nodes, network interfaces, mounts and the CDI ids. Each way a profile gives reads one kind
of entry and finds a device in it: an env var's name or value (``env``), or the group ``value`` of
a pattern on a device node's path, an interface's name, a mount's path or a CDI id, which equals
an attribute of the device or is part of its name. Here each way's finds become device names of
the node; a find that names no device (or more than one) stays as written, with why, so that a
comparison with what the claims hold fails naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from clusters import ContainerView
from conformance.harness.devices import attribute_value
from conformance.profiles import ContainerSpec, ViewPattern

__all__ = ["env_name", "shown_by_way"]

Obj = Mapping[str, Any]


def env_name(name: str) -> str:
    """A device name as an env var's name carries it: upper-cased, other characters than A-Z and
    0-9 as ``_`` (``gpu-0`` -> ``GPU_0``)."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def shown_by_way(
    view: ContainerView,
    spec: ContainerSpec,
    devices: Mapping[str, Obj],
    *,
    driver: str,
    unique: str,
    node: str,
) -> dict[str, set[str]]:
    """For each way ``spec`` gives (by its profile key: ``env``, ``deviceNodes``, ...), the devices
    of ``devices`` (the driver's devices of ``node`` by name) that ``view`` shows that way.

    ``unique`` is the profile's ``devices.unique`` (``name``: the device name), which an env var's
    value carries when ``env`` has no group ``device``. A find that names no device of the node, or
    several, is kept as its text with why (``/dev/nvidia9 (no device of node-0 has minor 9)``).
    """
    node_devices = _NodeDevices(devices, driver, node)
    shown: dict[str, set[str]] = {}
    if spec.env:
        shown["env"] = set(_env_devices(view, spec.env, unique, node_devices))
    for way in spec.patterns:
        found = set()
        for text, value in _finds(view, way):
            if way.attribute:
                found.add(node_devices.by_attribute(way.attribute, value, text))
            else:
                found.add(node_devices.by_name(way.device.replace("{value}", value), text))
        shown[way.way] = found
    return shown


@dataclass(frozen=True)
class _NodeDevices:
    """The driver's devices of one node, found by name or attribute."""

    devices: Mapping[str, Obj]
    driver: str
    node: str

    def by_name(self, name: str, text: str) -> str:
        """``name`` if the node has it, else ``text`` with why."""
        return name if name in self.devices else f"{text} (no device {name} on {self.node})"

    def by_attribute(self, attribute: str, value: str, text: str) -> str:
        """The one device whose ``attribute`` is ``value``, else ``text`` with why."""
        named = sorted(
            n for n, d in self.devices.items() if _equal(attribute_value(d, attribute, self.driver), value)
        )
        if len(named) == 1:
            return named[0]
        if not named:
            return f"{text} (no device of {self.node} has {attribute} {value})"
        return (
            f"{text} (devices {', '.join(named)} all have {attribute} {value}: it does not tell them apart)"
        )


def _env_devices(view: ContainerView, env: str, unique: str, devices: _NodeDevices) -> Iterator[str]:
    pattern = re.compile(env)
    for key, value in view.env.items():
        m = pattern.match(key)
        if m is None:
            continue
        if "device" in pattern.groupindex:
            part = env_name(m.group("device"))
            named = [n for n in devices.devices if env_name(n) == part]
            yield named[0] if len(named) == 1 else f"{key} ({_no_env_device(named, devices.node)})"
        elif unique == "name":
            yield devices.by_name(value, f"{key}={value}")
        else:
            yield devices.by_attribute(unique, value, f"{key}={value}")


def _no_env_device(named: list[str], node: str) -> str:
    if named:
        return f"devices {', '.join(sorted(named))} all have this name in an env var's"
    return f"no device of {node} has this name (upper-cased, '_' for other characters)"


def _finds(view: ContainerView, way: ViewPattern) -> Iterator[tuple[str, str]]:
    """(the entry's text, the group ``value``) of each entry of ``view`` the pattern finds."""
    entries: list[Any]
    if way.way == "cdiDevices":
        entries = list(view.cdi_devices)
    else:
        listed = {"deviceNodes": view.device_nodes, "netDevices": view.net_devices, "mounts": view.mounts}
        entries = [entry.get(way.key) for entry in listed[way.way]]
    pattern = re.compile(way.pattern)
    for text in entries:
        if not isinstance(text, str):
            continue
        m = pattern.search(text)
        if m is not None and m.group("value") is not None:
            yield text, m.group("value")


def _equal(attribute: Any, text: str) -> bool:
    """Whether a device's attribute value is what a container's text says (``7`` is int 7)."""
    if isinstance(attribute, bool):
        return text.lower() == str(attribute).lower()
    if isinstance(attribute, int):
        return re.fullmatch(r"[+-]?[0-9]+", text) is not None and int(text) == attribute
    return attribute is not None and str(attribute) == text
