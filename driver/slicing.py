"""Cutting the node's pool into ResourceSlice bodies: pure, deterministic, no API calls.

``build_slices`` turns an ``Inventory`` (and device taints) into ``resource.k8s.io/v1``
ResourceSlice bodies for one pool, named after the node and owned by the Node object:

- counter sets of partitionable GPUs go in slices of their own (the API allows
  ``sharedCounters`` or ``devices`` in a slice, not both; at most 8 sets a slice);
- devices are packed in order, at most 128 a slice, or 64 in a slice where any device
  has taints, consumes counters or carries a list attribute;
- every slice carries the same ``pool.generation`` and the right ``resourceSliceCount``;
- a device several claims share by capacity (``driver.consumable``) carries
  ``allowMultipleAllocations`` and a ``requestPolicy`` per capacity.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from driver.faults import Fault
from driver.inventory import DeviceInfo, Inventory, Version
from driver.nodealloc import NODE_ALLOCATABLE

__all__ = [
    "API_VERSION",
    "MAX_COUNTER_SETS_PER_SLICE",
    "MAX_DEVICES_PER_SLICE",
    "MAX_DEVICES_PER_SLICE_WITH_EXTRAS",
    "Body",
    "DeviceTaint",
    "attribute_body",
    "build_slices",
    "device_body",
    "slice_name",
    "taints_from_faults",
]

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_EXTRAS = 64
"""The limit for a slice where a device has taints, consumes counters or has a list attribute."""
MAX_COUNTER_SETS_PER_SLICE = 8

API_VERSION = "resource.k8s.io/v1"

Body = dict[str, Any]
"""A Kubernetes object as JSON (camelCase keys), the way the API server speaks it."""


@dataclass(frozen=True)
class DeviceTaint:
    """A taint the driver puts on one of its devices (``spec.devices[].taints[]``).

    ``effect`` is ``NoSchedule`` (no new claims) or ``NoExecute`` (pods using it are
    evicted too); ``time_added`` is a unix timestamp.
    """

    key: str
    value: str
    effect: str
    time_added: float | None = None

    def body(self) -> Body:
        """The taint as the API server expects it."""
        out: Body = {"key": self.key, "value": self.value, "effect": self.effect}
        if self.time_added is not None:
            stamp = datetime.fromtimestamp(int(self.time_added), tz=UTC)
            out["timeAdded"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        return out


def taints_from_faults(faults: Mapping[str, Fault], driver_name: str) -> dict[str, list[DeviceTaint]]:
    """One taint per unhealthy device: key ``<driver>/unhealthy``, the reason as value, the fault's
    effect, added when the fault began."""
    return {
        name: [DeviceTaint(f"{driver_name}/unhealthy", fault.reason, fault.severity, fault.since)]
        for name, fault in faults.items()
    }


def attribute_body(value: object) -> Body:
    """One device attribute as the API spells it (``{"int": 3}``, ``{"version": "12.0.0"}``, ...)."""
    # bool before int: True is an int too.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.value}
    if isinstance(value, list | tuple):
        items = list(value)
        if all(isinstance(v, bool) for v in items):
            return {"bools": items}
        if all(isinstance(v, int) for v in items):
            return {"ints": items}
        if all(isinstance(v, Version) for v in items):
            return {"versions": [v.value for v in items]}
        return {"strings": [str(v) for v in items]}
    return {"string": str(value)}


def _capacity(dev: DeviceInfo, key: str, value: int) -> Body:
    entry: Body = {"value": str(value)}
    policy = dev.request_policies.get(key)
    if policy is not None:
        entry["requestPolicy"] = policy.body()
    return entry


def device_body(dev: DeviceInfo, taints: Sequence[DeviceTaint] = ()) -> Body:
    """One ``spec.devices[]`` entry: attributes, capacity (with request policies where several claims
    share the device), counters consumed (with compatibility groups), binding conditions, host memory
    overhead, taints."""
    body: Body = {
        "name": dev.name,
        "attributes": {key: attribute_body(value) for key, value in dev.attributes.items()},
    }
    if dev.multi_allocatable:
        body["allowMultipleAllocations"] = True
    if dev.capacity:
        body["capacity"] = {key: _capacity(dev, key, value) for key, value in dev.capacity.items()}
    if dev.consumes_counters:
        body["consumesCounters"] = [
            {"counterSet": name, "counters": {k: {"value": str(v)} for k, v in counters.items()}}
            for name, counters in dev.consumes_counters.items()
        ]
        if dev.compatibility_groups:
            for entry in body["consumesCounters"]:
                entry["compatibilityGroups"] = list(dev.compatibility_groups)
    if dev.binding_conditions:
        body["bindingConditions"] = list(dev.binding_conditions)
        body["bindingFailureConditions"] = list(dev.binding_failure_conditions)
    if dev.host_memory_overhead:
        overhead = {"perPod": str(dev.host_memory_overhead)}
        body[NODE_ALLOCATABLE] = {"memory": {"overhead": overhead}}
    if taints:
        body["taints"] = [t.body() for t in taints]
    return body


def _has_extras(body: Body) -> bool:
    """Whether this device lowers its slice's limit to 64."""
    if body.get("taints") or body.get("consumesCounters"):
        return True
    lists = ("bools", "ints", "strings", "versions")
    return any(key in attr for attr in body.get("attributes", {}).values() for key in lists)


def slice_name(node_name: str, driver_name: str, number: int) -> str:
    """``<node>-<driver>-<n>``: stable, so a slice is updated in place rather than replaced."""
    name = f"{node_name}-{driver_name}-{number}".lower()
    if len(name) > 253:
        digest = hashlib.sha256(f"{node_name}/{driver_name}".encode()).hexdigest()[:12]
        name = f"{node_name[:200]}-{digest}-{number}".lower()
    return name


def _pack(devices: list[Body]) -> list[list[Body]]:
    chunks: list[list[Body]] = []
    current: list[Body] = []
    extras = False
    for dev in devices:
        dev_extras = _has_extras(dev)
        limit = MAX_DEVICES_PER_SLICE_WITH_EXTRAS if (extras or dev_extras) else MAX_DEVICES_PER_SLICE
        if len(current) >= limit:
            chunks.append(current)
            current, extras = [], False
        current.append(dev)
        extras = extras or dev_extras
    if current:
        chunks.append(current)
    return chunks


def build_slices(
    inventory: Inventory,
    *,
    driver_name: str,
    node_name: str,
    generation: int,
    pool_name: str | None = None,
    node_uid: str | None = None,
    taints: Mapping[str, Sequence[DeviceTaint]] | None = None,
) -> list[Body]:
    """The node's pool as ResourceSlice bodies, ready to create or replace.

    A pool with no devices still gets one empty slice, so
    that consumers can tell "no devices" from "driver not running".
    """
    pool = pool_name or node_name
    taints = taints or {}
    # devices to attach on demand last: kube-scheduler's allocator takes the first devices that fit,
    # in the order of the slice, so a claim gets a device that is ready at once while one is free,
    # and its pod does not wait out the scheduler's 5 s look at binding conditions (PreBind)
    ordered = sorted(inventory, key=lambda dev: bool(dev.binding_conditions))
    # skipNodeOperations is the slice's: devices that skip node operations get slices of their own
    by_skip: dict[tuple[str, ...], list[Body]] = {}
    for dev in ordered:
        by_skip.setdefault(dev.skip_node_operations, []).append(device_body(dev, taints.get(dev.name, ())))
    specs: list[Body] = []
    counter_sets = [
        {"name": name, "counters": {k: {"value": str(v)} for k, v in counters.items()}}
        for name, counters in inventory.counter_sets.items()
    ]
    for i in range(0, len(counter_sets), MAX_COUNTER_SETS_PER_SLICE):
        specs.append({"sharedCounters": counter_sets[i : i + MAX_COUNTER_SETS_PER_SLICE]})
    for skip, devices in sorted(by_skip.items()):
        extra: Body = {"skipNodeOperations": list(skip)} if skip else {}
        specs.extend({"devices": chunk, **extra} for chunk in _pack(devices))
    if not specs:
        specs.append({"devices": []})
    metadata_extra: Body = {}
    if node_uid:
        metadata_extra["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
        ]
    slices = []
    for number, content in enumerate(specs):
        spec: Body = {
            "driver": driver_name,
            "nodeName": node_name,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": len(specs)},
            **content,
        }
        slices.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": slice_name(node_name, driver_name, number), **metadata_extra},
                "spec": spec,
            }
        )
    return slices
