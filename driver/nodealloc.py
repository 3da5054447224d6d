"""Host memory a device takes from its node, published for the scheduler (KEP-5517, gate
``DRANodeAllocatableResources``, alpha in 1.37).

A GPU pins host memory for its driver and DMA buffers, memory the pod's own requests do not name.
With ``--host-memory-overhead`` a device carries
``nodeAllocatableResources: {memory: {overhead: {perPod: QUANTITY}}}``: the scheduler adds it to the
memory of each pod whose claim holds the device (once per pod and device, however many containers
use it), fits the pod against the node's allocatable memory with it, and writes what it counted to
``pod.status.nodeAllocatableResourceClaimStatuses``; the kubelet sizes the pod's cgroups by that.
The flag takes one amount for every device (``256Mi``) or one per device kind
(``gpu=1Gi,partition=256Mi``; kinds ``driver.inventory.DeviceKind``).

Kubernetes 1.37.2 cannot schedule a pod that asks for a class's extended resource (DRAExtendedResource)
when the device it gets declares such resources: the scheduler records the overhead under the
claim's placeholder name, which pod status validation refuses, so the pod is never bound
(kubernetes/kubernetes#141556 fixes the validation after 1.37.2). Declare it only on devices of
classes without ``extendedResourceName`` there.

With the gate off the API server drops the field, and nothing else changes: the setting is off by
default, for clusters that turn the gate on. A node must also declare the feature
(``status.declaredFeatures``, as a kubelet with the gate on does): the API server refuses the slices
of a node that does not.

Testing switch ``no-node-allocatable`` (``driver.breaking_slices``): the slices leave the field out.
Pure: no side effects here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import get_args

from driver.config import parse_quantity
from driver.errors import ConfigError
from driver.inventory import DeviceKind, Inventory

__all__ = ["NODE_ALLOCATABLE", "parse_overhead", "with_host_memory_overhead"]

NODE_ALLOCATABLE = "nodeAllocatableResources"
"""The device field (``resource.k8s.io/v1`` ``Device``)."""

KINDS: tuple[str, ...] = tuple(k for k in get_args(DeviceKind) if k != "license")
"""The device kinds an amount may name (a license seat takes no host memory)."""


def parse_overhead(text: str, flag: str) -> dict[str, int]:
    """``256Mi`` (every kind) or ``gpu=1Gi,partition=256Mi``: device kind -> bytes per pod.

    Raises ``ConfigError`` naming ``flag`` and the bad part."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError(flag, f"{text!r} names no amount; give e.g. 256Mi or partition=256Mi")
    if len(parts) == 1 and "=" not in parts[0]:
        return dict.fromkeys(KINDS, parse_quantity(parts[0], flag))
    out: dict[str, int] = {}
    for part in parts:
        kind, sep, amount = part.partition("=")
        if not sep or kind not in KINDS:
            raise ConfigError(
                flag,
                f"{part!r} is not KIND=QUANTITY with KIND one of {', '.join(KINDS)} (e.g. partition=256Mi)",
            )
        if kind in out:
            raise ConfigError(flag, f"device kind {kind} is given twice")
        out[kind] = parse_quantity(amount, f"{flag} {kind}")
    return out


def with_host_memory_overhead(inventory: Inventory, by_kind: Mapping[str, int]) -> Inventory:
    """The inventory with ``by_kind[kind]`` bytes of host memory per pod on each device of that kind."""
    devices = {
        n: dataclasses.replace(d, host_memory_overhead=by_kind.get(d.kind, 0))
        for n, d in inventory.devices.items()
    }
    return dataclasses.replace(inventory, devices=devices)
