"""Resolve CDI device ids from the node's CDI spec dir into container edits.

What a container runtime does with ``vendor/class=name`` ids: find the spec of
that kind, apply the spec-level ``containerEdits`` (once per spec) and then the
device's own edits. Specs are read fresh on every resolve (there are few), so a
driver that writes or removes a spec is seen at once. A spec that is malformed
does not poison the others: its error is reported only when one of its ids is
asked for, or when an id cannot be found at all.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nodeagent.errors import CDIError

__all__ = ["ContainerEdits", "load_specs", "resolve"]

log = logging.getLogger(__name__)

CDI_VERSIONS = frozenset(
    {"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"}
)
_KIND_PART = r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
KIND_RE = re.compile(rf"^{_KIND_PART}/{_KIND_PART}$")
DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
ENV_RE = re.compile(r"^[^=]+=")


@dataclass
class ContainerEdits:
    """What the resolved devices add to a container (the ContainerView's content)."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    cdi_devices: list[str] = field(default_factory=list)

    def apply(self, edits: Mapping[str, Any]) -> None:
        """Merge one ``containerEdits`` object: later env wins, nodes and mounts deduplicated by path."""
        for entry in edits.get("env") or []:
            key, _, value = str(entry).partition("=")
            self.env[key] = value
        for node in edits.get("deviceNodes") or []:
            self.device_nodes = [n for n in self.device_nodes if n.get("path") != node.get("path")]
            self.device_nodes.append(dict(node))
        for mount in edits.get("mounts") or []:
            self.mounts = [m for m in self.mounts if m.get("containerPath") != mount.get("containerPath")]
            self.mounts.append(dict(mount))

    def to_json(self) -> dict[str, Any]:
        """The ContainerView JSON (docs/interfaces.md)."""
        return {
            "env": dict(self.env),
            "device_nodes": list(self.device_nodes),
            "mounts": list(self.mounts),
            "cdi_devices": list(self.cdi_devices),
        }


@dataclass
class Spec:
    """One parsed CDI spec file."""

    path: Path
    kind: str
    edits: dict[str, Any]
    devices: dict[str, dict[str, Any]]


@dataclass
class SpecSet:
    """Every spec of a dir, plus the files that failed to load and why."""

    specs: list[Spec] = field(default_factory=list)
    broken: dict[Path, str] = field(default_factory=dict)


def _check_edits(edits: Any, where: str) -> dict[str, Any]:
    if edits is None:
        return {}
    if not isinstance(edits, dict):
        raise ValueError(f"{where}: containerEdits must be an object, got {type(edits).__name__}")
    env = edits.get("env") or []
    if not isinstance(env, list) or not all(isinstance(e, str) and ENV_RE.match(e) for e in env):
        raise ValueError(f"{where}: env must be a list of 'KEY=VALUE' strings, got {env!r}")
    nodes = edits.get("deviceNodes") or []
    if not isinstance(nodes, list):
        raise ValueError(f"{where}: deviceNodes must be a list")
    for node in nodes:
        if not isinstance(node, dict) or not node.get("path"):
            raise ValueError(f"{where}: a deviceNode needs a path, got {node!r}")
        if node.get("type", "") not in ("", "b", "c", "u", "p"):
            raise ValueError(f"{where}: deviceNode {node['path']} has invalid type {node.get('type')!r}")
        perms = node.get("permissions", "")
        if not isinstance(perms, str) or set(perms) - set("rwm"):
            raise ValueError(f"{where}: deviceNode {node['path']} has invalid permissions {perms!r}")
    mounts = edits.get("mounts") or []
    if not isinstance(mounts, list):
        raise ValueError(f"{where}: mounts must be a list")
    for mount in mounts:
        if not isinstance(mount, dict) or not mount.get("hostPath") or not mount.get("containerPath"):
            raise ValueError(f"{where}: a mount needs hostPath and containerPath, got {mount!r}")
    return edits


def parse_spec(path: Path, text: str) -> Spec:
    """Parse and check one spec file's text; ValueError says what is wrong."""
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise ValueError(f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError("a CDI spec must be an object")
    version = str(data.get("cdiVersion", ""))
    if version not in CDI_VERSIONS:
        raise ValueError(f"cdiVersion {version!r} is not one of {sorted(CDI_VERSIONS)}")
    kind = data.get("kind")
    if not isinstance(kind, str) or not KIND_RE.match(kind):
        raise ValueError(f"kind {kind!r} is not vendor/class")
    devices_raw = data.get("devices")
    if not isinstance(devices_raw, list) or not devices_raw:
        raise ValueError(f"kind {kind}: devices must be a non-empty list")
    devices: dict[str, dict[str, Any]] = {}
    for dev in devices_raw:
        name = dev.get("name") if isinstance(dev, dict) else None
        if not isinstance(name, str) or not DEVICE_NAME_RE.match(name):
            raise ValueError(f"kind {kind}: invalid device name {name!r}")
        if name in devices:
            raise ValueError(f"kind {kind}: device name {name!r} appears twice")
        edits = _check_edits(dev.get("containerEdits"), f"kind {kind} device {name}")
        if not any(edits.get(k) for k in edits):
            raise ValueError(f"kind {kind}: device {name!r} has no containerEdits")
        devices[name] = edits
    spec_edits = _check_edits(data.get("containerEdits"), f"kind {kind}")
    return Spec(path=path, kind=kind, edits=spec_edits, devices=devices)


def load_specs(dirs: Iterable[Path]) -> SpecSet:
    """Read every ``*.json`` / ``*.yaml`` spec under ``dirs`` (missing dirs are empty)."""
    found = SpecSet()
    for d in dirs:
        try:
            paths = sorted(p for p in d.iterdir() if p.suffix in (".json", ".yaml", ".yml"))
        except FileNotFoundError:
            continue
        for path in paths:
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue  # removed while we looked
            except OSError as e:
                found.broken[path] = str(e)
                continue
            try:
                found.specs.append(parse_spec(path, text))
            except ValueError as e:
                found.broken[path] = str(e)
    return found


def split_id(device_id: str) -> tuple[str, str]:
    """``"vendor/class=name"`` -> ``("vendor/class", "name")``; CDIError when it is not that."""
    kind, sep, name = device_id.partition("=")
    if not sep or not KIND_RE.match(kind) or not DEVICE_NAME_RE.match(name):
        raise CDIError(f"{device_id!r} is not a qualified CDI device name (vendor/class=name)")
    return kind, name


def resolve(device_ids: Iterable[str], dirs: Iterable[Path]) -> ContainerEdits:
    """The container edits of ``device_ids``, in order; CDIError names the first unresolvable id."""
    ids = list(device_ids)
    out = ContainerEdits(cdi_devices=ids)
    if not ids:
        return out
    specs = load_specs(dirs)
    applied: set[Path] = set()
    for device_id in ids:
        kind, name = split_id(device_id)
        matches = [s for s in specs.specs if s.kind == kind and name in s.devices]
        if len(matches) > 1:
            files = ", ".join(str(s.path) for s in matches)
            raise CDIError(f"CDI device {device_id} is defined by more than one spec: {files}")
        if not matches:
            problems = "; ".join(f"{p}: {e}" for p, e in specs.broken.items())
            hint = f" (malformed CDI specs: {problems})" if problems else ""
            raise CDIError(f"CDI device {device_id} not found in the node's CDI specs{hint}")
        spec = matches[0]
        if spec.path not in applied:
            out.apply(spec.edits)
            applied.add(spec.path)
        out.apply(spec.devices[name])
    return out
