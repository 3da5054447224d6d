"""The device model: what discovery finds and the driver publishes.

``Inventory`` holds every published device (``DeviceInfo``) by its name in the
ResourceSlice, plus the counter sets of partitionable GPUs. ``driver.devices`` fills it
from NVML; the slices, the health monitor and the prepare path read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "DEVICE_KINDS",
    "GIB",
    "MIB",
    "NUMA_NODE",
    "SKIP_ALL",
    "AttributeValue",
    "DeviceInfo",
    "DeviceKind",
    "Inventory",
    "MigProfile",
    "Placement",
    "RequestPolicy",
    "Version",
]

NUMA_NODE = "resource.kubernetes.io/numaNode"
"""The standard attribute of the NUMA node a device is closest to (KEP-6072): devices of several
drivers (a GPU and a NIC) are placed together by matching it."""

DEVICE_KINDS = ("gpu", "mig", "partitionable-mig")
"""The values ``--device-kinds`` accepts, in the order they are documented."""

DeviceKind = Literal["gpu", "mig", "partition", "license"]
"""What one published device is: a whole GPU, an existing MIG device, a possible partition, or a
GPU's license seat (``driver.licenses``: nothing on the node)."""

SKIP_ALL = ("*",)
"""``skipNodeOperations`` of a slice whose devices need neither NodePrepareResources nor
NodeUnprepareResources (KEP-5945)."""

MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True)
class Version:
    """A device attribute that is a semantic version (``versionValue`` in the ResourceSlice)."""

    value: str

    def __str__(self) -> str:
        return self.value


AttributeValue = str | int | bool | Version | list[str] | list[int] | list[bool] | list[Version]
"""A device attribute: ``string``, ``int``, ``bool`` or ``version`` in the ResourceSlice, or a list
of one of them (``strings``, ``ints``, ... with the DRAListTypeAttributes feature)."""


@dataclass(frozen=True)
class Placement:
    """Where a GPU instance sits: its first memory slice and how many it spans."""

    start: int
    size: int

    @property
    def slices(self) -> range:
        """The memory slices this placement covers."""
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class RequestPolicy:
    """How a claim consumes one capacity of a device that several claims share (``requestPolicy``).

    A claim that asks nothing of the capacity consumes :attr:`default`; an amount it asks is rounded
    up to ``minimum + n * step`` by the scheduler. The API requires ``default`` within the range and
    ``default - minimum`` a multiple of ``step``.
    """

    default: int
    minimum: int
    step: int | None = None

    def body(self) -> dict[str, object]:
        """The ``requestPolicy`` as the API server expects it (a ``validRange``)."""
        valid: dict[str, str] = {"min": str(self.minimum)}
        if self.step is not None:
            valid["step"] = str(self.step)
        return {"default": str(self.default), "validRange": valid}


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of a MIG-capable GPU, as NVML reports it."""

    id: int
    """The driver's profile id (``info.id``), which creation and placement calls take."""
    index: int
    """The ``NVML_GPU_INSTANCE_PROFILE_*`` constant this profile was looked up with."""
    name: str
    """``1g.18gb``, ``1g.18gb+me``, ``7g.141gb``."""
    slices: int
    """Compute slices (the ``Ng`` in the name)."""
    instance_count: int
    memory_bytes: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placements: tuple[Placement, ...]

    @property
    def label(self) -> str:
        """The name squeezed into a DNS label part: ``1g.18gb+me`` -> ``1g18gbme``."""
        return re.sub(r"[^a-z0-9]", "", self.name.lower())

    def capacity(self) -> dict[str, int]:
        """What a device of this profile offers, as ResourceSlice capacities."""
        return {
            "memory": self.memory_bytes,
            "multiprocessors": self.multiprocessors,
            "copyEngines": self.copy_engines,
            "decoders": self.decoders,
            "encoders": self.encoders,
            "jpegEngines": self.jpeg_engines,
            "ofaEngines": self.ofa_engines,
        }


@dataclass(frozen=True)
class DeviceInfo:
    """One device the driver publishes.

    ``uuid`` is the NVML UUID of a GPU or MIG device; a partition has none until it is
    prepared (``prepare_partition`` returns it). ``index`` and ``minor`` are those of
    the (parent) GPU.
    """

    name: str
    kind: DeviceKind
    uuid: str | None
    parent_uuid: str | None
    index: int
    minor: int
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, int]
    consumes_counters: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Counter set name -> counter -> amount; empty unless the GPU is partitionable."""
    profile: MigProfile | None = None
    """The MIG profile of a MIG device or partition."""
    placement: Placement | None = None
    """Where a MIG device sits, or where a partition would be created."""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    multi_allocatable: bool = False
    """Published with ``allowMultipleAllocations``: several claims share it by capacity."""
    request_policies: Mapping[str, RequestPolicy] = field(default_factory=dict)
    """Capacity name -> how a claim consumes it (multi-allocatable devices only)."""
    binding_conditions: tuple[str, ...] = ()
    """Conditions a pod waits for before it is bound to a node with this device (KEP-5007; attached
    on demand, ``driver.binding``); empty for a device that is always there."""
    binding_failure_conditions: tuple[str, ...] = ()
    """Conditions that say attaching it failed (set with ``binding_conditions``)."""
    compatibility_groups: tuple[str, ...] = ()
    """The groups it declares on each counter set it consumes (KEP-5963, ``driver.compatibility``):
    the scheduler allocates devices of one set together only when their groups meet."""
    host_memory_overhead: int = 0
    """Bytes of host memory a pod holding it takes besides its own requests, published as node
    allocatable overhead (KEP-5517, ``driver.nodealloc``); 0: none published."""
    skip_node_operations: tuple[str, ...] = ()
    """The node operations its slice says the kubelet may leave out (KEP-5945, ``skipNodeOperations``;
    ``SKIP_ALL`` for a license seat); devices that differ here go into different slices."""

    def default_consumption(self) -> dict[str, int]:
        """What a claim that asks for no capacity consumes of each: the policy's default, else the
        whole capacity (as the API says for a capacity without a policy)."""
        return {
            key: self.request_policies[key].default if key in self.request_policies else value
            for key, value in self.capacity.items()
        }

    @property
    def gpu_uuid(self) -> str:
        """The UUID of the physical GPU this device lives on."""
        gpu = self.parent_uuid if self.kind != "gpu" else self.uuid
        assert gpu is not None, f"device {self.name} has no GPU UUID"
        return gpu

    def overlaps(self, other: DeviceInfo) -> bool:
        """Whether the two devices use the same hardware: the same GPU, and the whole GPU on
        either side or MIG placements that share a memory slice (``gpu-0`` overlaps
        ``gpu-0-part-7g80gb-0``, which overlaps ``gpu-0-part-3g40gb-4``)."""
        if self.name == other.name:
            return True
        if "license" in (self.kind, other.kind):  # a seat is no hardware
            return False
        if self.gpu_uuid != other.gpu_uuid:
            return False
        if self.placement is None or other.placement is None:
            return True
        return bool(set(self.placement.slices) & set(other.placement.slices))


@dataclass(frozen=True)
class Inventory:
    """Everything ``discover`` found: devices by name, counter sets by name."""

    devices: Mapping[str, DeviceInfo]
    counter_sets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def __iter__(self) -> Iterator[DeviceInfo]:
        return iter(self.devices.values())

    def __len__(self) -> int:
        return len(self.devices)

    def __contains__(self, name: object) -> bool:
        return name in self.devices

    def __getitem__(self, name: str) -> DeviceInfo:
        return self.devices[name]

    def get(self, name: str) -> DeviceInfo | None:
        """The device called ``name``, or None."""
        return self.devices.get(name)

    def gpu_uuids(self) -> list[str]:
        """UUIDs of every physical GPU with at least one published device, in index order."""
        seen: dict[str, int] = {}
        for dev in self:
            seen.setdefault(dev.gpu_uuid, dev.index)
        return sorted(seen, key=seen.__getitem__)

    def on_gpu(self, gpu_uuid: str) -> list[DeviceInfo]:
        """Every published device on the GPU with this UUID (the GPU itself, MIG devices, partitions)."""
        return [dev for dev in self if dev.gpu_uuid == gpu_uuid]

    def by_uuid(self, uuid: str) -> DeviceInfo | None:
        """The GPU or MIG device with this NVML UUID, or None."""
        return next((dev for dev in self if dev.uuid == uuid), None)
