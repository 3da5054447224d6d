"""Resolve CDI device ids from the node's CDI spec dir into container edits.

What a container runtime does with ``vendor/class=name`` ids: find the spec of
that kind, apply the spec-level ``containerEdits`` (once per spec) and then the
device's own edits. Specs are read fresh on every resolve (there are few), so a
driver that writes or removes a spec is seen at once. A spec that breaks the CDI
rules (:mod:`draproto.cdi`) does not poison the others: its error is reported only
when one of its ids is asked for, or when an id cannot be found at all.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from draproto import cdi as cdi_rules
from nodeagent.errors import CDIError

__all__ = ["ContainerEdits", "load_specs", "resolve"]

log = logging.getLogger(__name__)


@dataclass
class ContainerEdits:
    """What the resolved devices add to a container (the ContainerView's content): every kind of
    CDI edit (:data:`draproto.cdi.EDIT_KEYS`), merged as a container runtime merges them."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    cdi_devices: list[str] = field(default_factory=list)
    net_devices: list[dict[str, Any]] = field(default_factory=list)
    """CDI 1.1 ``netDevices``: ``hostInterfaceName`` moved into the container as ``name``."""
    hooks: list[dict[str, Any]] = field(default_factory=list)
    """OCI hooks (``hookName``, ``path``, ``args``, ...), in the order they were applied."""
    additional_gids: list[int] = field(default_factory=list)
    """Extra group ids of the container's process."""
    intel_rdt: dict[str, Any] | None = None
    """Intel RDT (``closID``, ``l3CacheSchema``, ...): the last edit that sets it wins."""

    def apply(self, edits: Mapping[str, Any]) -> None:
        """Merge one ``containerEdits`` object: later env wins, nodes and mounts deduplicated by path,
        net devices by their name in the container, hooks appended, group ids once each."""
        for entry in edits.get("env") or []:
            key, _, value = str(entry).partition("=")
            self.env[key] = value
        for node in edits.get("deviceNodes") or []:
            self.device_nodes = [n for n in self.device_nodes if n.get("path") != node.get("path")]
            self.device_nodes.append(dict(node))
        for mount in edits.get("mounts") or []:
            self.mounts = [m for m in self.mounts if m.get("containerPath") != mount.get("containerPath")]
            self.mounts.append(dict(mount))
        for net in edits.get("netDevices") or []:
            self.net_devices = [n for n in self.net_devices if n.get("name") != net.get("name")]
            self.net_devices.append(dict(net))
        self.hooks.extend(dict(h) for h in edits.get("hooks") or [])
        for gid in edits.get("additionalGids") or []:
            if int(gid) not in self.additional_gids:
                self.additional_gids.append(int(gid))
        if edits.get("intelRdt"):
            self.intel_rdt = dict(edits["intelRdt"])

    def to_json(self) -> dict[str, Any]:
        """The ContainerView JSON (docs/interfaces.md)."""
        return {
            "env": dict(self.env),
            "device_nodes": list(self.device_nodes),
            "mounts": list(self.mounts),
            "cdi_devices": list(self.cdi_devices),
            "net_devices": list(self.net_devices),
            "hooks": list(self.hooks),
            "additional_gids": list(self.additional_gids),
            "intel_rdt": self.intel_rdt,
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


def parse_spec(path: Path, text: str) -> Spec:
    """Parse one spec file's text and check it by the CDI rules; ValueError says what is wrong."""
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise ValueError(f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"a CDI spec must be an object, got {type(data).__name__}")
    problems = cdi_rules.validate_spec(data)
    if problems:
        raise ValueError("; ".join(problems))
    devices = {d["name"]: d.get("containerEdits") or {} for d in data["devices"]}
    return Spec(path=path, kind=data["kind"], edits=data.get("containerEdits") or {}, devices=devices)


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


def resolve(device_ids: Iterable[str], dirs: Iterable[Path]) -> ContainerEdits:
    """The container edits of ``device_ids``, in order; CDIError names the first unresolvable id."""
    ids = list(device_ids)
    out = ContainerEdits(cdi_devices=ids)
    if not ids:
        return out
    specs = load_specs(dirs)
    applied: set[Path] = set()
    for device_id in ids:
        try:
            qualified = cdi_rules.parse_qualified_name(device_id)
        except ValueError as e:
            raise CDIError(str(e)) from e
        kind, name = qualified.kind, qualified.name
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
