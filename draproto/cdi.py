"""CDI (Container Device Interface) specs: the rules a spec must pass, and qualified device names.

A CDI spec is an interface between a driver (which writes it) and a node (whose runtime
injects it), so its rules live here, once: the driver checks the specs it writes, the node
agent refuses specs that break them, the conformance suite asserts them. The rules
(``docs/cdi-rules.md``) follow the runtimes' parser, stricter than the published JSON schema:

- ``cdiVersion`` one of :data:`VALID_VERSIONS` and at least :func:`minimum_version` of the spec;
- ``kind`` = ``vendor/class``, each part starting with a letter, ending with a letter or digit,
  ``[A-Za-z0-9_.-]`` between;
- devices: at least one; names start and end with a letter or digit, ``[A-Za-z0-9_.:-]``
  between, unique in the spec; each with non-empty ``containerEdits``;
- edits: env entries ``KEY=VALUE``; device nodes with a ``path``, ``type`` in {"", b, c, u, p},
  ``permissions`` within "rwm"; mounts with ``hostPath`` and ``containerPath``; hooks with a
  known ``hookName`` and an absolute ``path``.

:func:`validate_spec` returns every broken rule, each naming where and the offending value;
:func:`parse_qualified_name` splits ``vendor/class=name``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = [
    "EDIT_KEYS",
    "VALID_VERSIONS",
    "QualifiedName",
    "minimum_version",
    "parse_qualified_name",
    "validate_spec",
]

VALID_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
"""The ``cdiVersion`` values a spec may declare."""
EDIT_KEYS = ("env", "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGids", "netDevices")
"""The kinds of edit a ``containerEdits`` object may carry."""

_KIND_PART = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
_NODE_TYPES = ("", "b", "c", "u", "p")


class QualifiedName(NamedTuple):
    """A qualified CDI device name, ``vendor/class=name``, in its parts."""

    vendor: str
    device_class: str
    name: str

    @property
    def kind(self) -> str:
        """``vendor/class``: the ``kind`` of the spec that defines the device."""
        return f"{self.vendor}/{self.device_class}"

    def __str__(self) -> str:
        return f"{self.kind}={self.name}"


def _valid_kind(kind: object) -> bool:
    vendor, slash, device_class = str(kind).partition("/")
    return bool(slash) and bool(_KIND_PART.match(vendor)) and bool(_KIND_PART.match(device_class))


def parse_qualified_name(text: str) -> QualifiedName:
    """``"vendor/class=name"`` in its parts; ValueError naming ``text`` when it is not one."""
    kind, eq, name = text.partition("=")
    if not eq or not _valid_kind(kind) or not _DEVICE_NAME.match(name):
        raise ValueError(f"{text!r} is not a qualified CDI device name (vendor/class=name)")
    vendor, _, device_class = kind.partition("/")
    return QualifiedName(vendor, device_class, name)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _edits_of(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits = [spec.get("containerEdits") or {}]
    devices = spec.get("devices")
    if isinstance(devices, list):
        edits += [d.get("containerEdits") or {} for d in devices if isinstance(d, Mapping)]
    return [e for e in edits if isinstance(e, Mapping)]


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest ``cdiVersion`` that allows every feature the spec uses."""
    needed = "0.3.0"

    def at_least(version: str) -> None:
        nonlocal needed
        needed = max(needed, version, key=_version)

    if "." in str(spec.get("kind", "")).partition("/")[2] or spec.get("annotations"):
        at_least("0.6.0")
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else []:
        if isinstance(device, Mapping):
            if str(device.get("name", ""))[:1].isdigit():
                at_least("0.5.0")
            if device.get("annotations"):
                at_least("0.6.0")
    for edits in _edits_of(spec):
        nodes = edits.get("deviceNodes")
        if isinstance(nodes, list) and any(isinstance(n, Mapping) and n.get("hostPath") for n in nodes):
            at_least("0.5.0")
        if edits.get("intelRdt") or edits.get("additionalGids"):
            at_least("0.7.0")
        if edits.get("netDevices"):
            at_least("1.1.0")
    return needed


def _entries(edits: Mapping[str, Any], key: str, where: str, problems: list[str]) -> list[Any]:
    value = edits.get(key) or []
    if not isinstance(value, list):
        problems.append(f"{where}.{key}: must be a list, got {value!r}")
        return []
    return value


def _check_edits(edits: object, where: str, problems: list[str]) -> bool:
    """Append the rules ``edits`` breaks to ``problems``; return whether it edits anything."""
    if not isinstance(edits, Mapping):
        problems.append(f"{where}: containerEdits must be an object, got {edits!r}")
        return False
    for i, entry in enumerate(_entries(edits, "env", where, problems)):
        if not isinstance(entry, str) or "=" not in entry or entry.startswith("="):
            problems.append(f"{where}.env[{i}]: {entry!r} is not KEY=VALUE")
    for i, node in enumerate(_entries(edits, "deviceNodes", where, problems)):
        at = f"{where}.deviceNodes[{i}]"
        if not isinstance(node, Mapping) or not node.get("path"):
            problems.append(f"{at}: path is required, got {node!r}")
            continue
        if node.get("type", "") not in _NODE_TYPES:
            problems.append(f"{at}: type {node.get('type')!r} is not one of b, c, u, p")
        if not isinstance(node.get("permissions", ""), str) or set(node.get("permissions", "")) - set("rwm"):
            problems.append(f"{at}: permissions {node.get('permissions')!r} not within 'rwm'")
    for i, mount in enumerate(_entries(edits, "mounts", where, problems)):
        if not isinstance(mount, Mapping) or not mount.get("hostPath") or not mount.get("containerPath"):
            problems.append(f"{where}.mounts[{i}]: hostPath and containerPath are required, got {mount!r}")
    for i, hook in enumerate(_entries(edits, "hooks", where, problems)):
        if not isinstance(hook, Mapping) or hook.get("hookName") not in _HOOK_NAMES:
            name = hook.get("hookName") if isinstance(hook, Mapping) else hook
            problems.append(f"{where}.hooks[{i}]: unknown hookName {name!r}")
        elif not str(hook.get("path", "")).startswith("/"):
            problems.append(f"{where}.hooks[{i}]: path {hook.get('path')!r} must be absolute")
    return any(edits.get(key) for key in EDIT_KEYS)


def validate_spec(data: Mapping[str, Any]) -> list[str]:
    """Every CDI rule the spec ``data`` (parsed JSON or YAML) breaks; empty when it passes."""
    problems: list[str] = []
    version = data.get("cdiVersion")
    if version not in VALID_VERSIONS:
        problems.append(f"cdiVersion {version!r} is not one of {', '.join(VALID_VERSIONS)}")
    else:
        needed = minimum_version(data)
        if _version(str(version)) < _version(needed):
            problems.append(f"cdiVersion {version} is below {needed}, which the spec's features need")
    if not _valid_kind(data.get("kind", "")):
        problems.append(f"kind {data.get('kind')!r} is not vendor/class")
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices:
        problems.append(f"devices: at least one device is required, got {devices!r}")
        devices = []
    seen: set[str] = set()
    for i, device in enumerate(devices):
        if not isinstance(device, Mapping):
            problems.append(f"devices[{i}]: must be an object, got {device!r}")
            continue
        name = device.get("name")
        if not isinstance(name, str) or not _DEVICE_NAME.match(name):
            problems.append(f"devices[{i}]: invalid device name {name!r}")
        elif name in seen:
            problems.append(f"devices[{i}]: name {name!r} is not unique")
        seen.add(str(name))
        if not _check_edits(device.get("containerEdits", {}), f"devices[{i}]", problems):
            problems.append(f"devices[{i}] {name!r}: no containerEdits (they must not be empty)")
    if "containerEdits" in data:
        _check_edits(data["containerEdits"], "containerEdits", problems)
    return problems
