"""The mutable state of a fake machine, as plain dataclasses with a JSON form.

Everything a second process needs to see the same machine lives here: identity (so a process
that attaches to a state directory needs no profile), MIG mode and layout, faults and the
event log. Static model facts stay in :mod:`fakegpu._models`, looked up by ``Gpu.model``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT = 1
"""Version of the JSON layout; bumped when a change would misread older files."""

MAX_EVENTS = 1000
"""Events kept in the log; older ones are dropped (a waiter that far behind has lost them)."""


@dataclass
class ComputeInstance:
    """A compute instance inside a GPU instance."""

    id: int
    profile: int
    """The compute-instance profile id (equal to its NVML_COMPUTE_INSTANCE_PROFILE_* index)."""
    start: int
    """First compute slice, relative to the GPU instance."""
    size: int
    """Compute slices."""
    serial: int
    """Machine-wide creation number: makes handles of re-created instances differ (stale handles
    are refused); the MIG UUID does not depend on it."""


@dataclass
class GpuInstance:
    """A MIG GPU instance."""

    id: int
    profile_id: int
    """The driver profile id (19, 20, 15, 14, 9, 5 or 0)."""
    start: int
    """First memory slice."""
    size: int
    """Memory slices."""
    serial: int
    compute_instances: list[ComputeInstance] = field(default_factory=list)


@dataclass
class Gpu:
    """One physical GPU."""

    index: int
    model: str
    uuid: str
    serial_number: str
    pci_domain: int
    pci_bus: int
    minor: int
    mig_current: int = 0
    mig_pending: int = 0
    needs_reset: bool = False
    """MIG mode changes on this GPU never take effect before a reset (``fakegpu reset``)."""
    lost: bool = False
    """The GPU has fallen off the bus: every call on it answers GPU_IS_LOST."""
    ecc_volatile_corrected: int = 0
    ecc_volatile_uncorrected: int = 0
    ecc_aggregate_corrected: int = 0
    ecc_aggregate_uncorrected: int = 0
    remapped_correctable: int = 0
    """Rows remapped for correctable errors (``nvmlDeviceGetRemappedRows``; persistent)."""
    remapped_uncorrectable: int = 0
    """Rows remapped for uncorrectable errors (persistent)."""
    remap_pending: bool = False
    """A row remap waits for a GPU reset."""
    remap_failure: bool = False
    """A row remap failed (no spare row left): stays until the GPU is repaired (``heal``)."""
    fabric_failed: bool = False
    """Its registration with the NVSwitch fabric failed (``GpuFabricInfo.status`` an error) until ``heal``."""
    gpu_instances: list[GpuInstance] = field(default_factory=list)

    def gpu_instance(self, gi_id: int) -> GpuInstance | None:
        """The GPU instance with id ``gi_id``, or None."""
        for gi in self.gpu_instances:
            if gi.id == gi_id:
                return gi
        return None


@dataclass
class Event:
    """One NVML event (XID, ECC) waiting in the machine's log."""

    seq: int
    """Machine-wide sequence number; each event set consumes events in this order, each once."""
    gpu: int
    type: int
    data: int
    gpu_instance: int
    compute_instance: int
    time: float


@dataclass
class MachineState:
    """The whole machine: what the state file holds."""

    profile: str
    node_name: str
    seed: int
    driver_version: str
    cuda_driver_version: int
    gpus: list[Gpu]
    events: list[Event] = field(default_factory=list)
    next_seq: int = 1
    next_serial: int = 1
    nvswitch: bool = False
    """The GPUs sit on an NVSwitch fabric (DGX/HGX): fabric-capable models report it."""
    fabric_cluster_uuid: str = ""
    """The fabric's cluster UUID (canonical text), one per node's NVLink domain."""
    fabric_clique_id: int = 0

    def take_serial(self) -> int:
        """A fresh machine-wide creation number."""
        n = self.next_serial
        self.next_serial += 1
        return n

    def add_event(self, gpu: int, type_: int, data: int, *, gi: int, ci: int, now: float) -> Event:
        """Append an event to the log and return it."""
        ev = Event(self.next_seq, gpu, type_, data, gi, ci, now)
        self.next_seq += 1
        self.events.append(ev)
        if len(self.events) > MAX_EVENTS:
            del self.events[: len(self.events) - MAX_EVENTS]
        return ev

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready form written to the state file."""
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MachineState:
        """Rebuild from :meth:`to_json` output; raises KeyError/TypeError/ValueError when malformed."""
        if data.get("format") != FORMAT:
            raise ValueError(f"state format {data.get('format')!r}, expected {FORMAT}")
        gpus = []
        for raw_gpu in data["gpus"]:
            g = dict(raw_gpu)
            gis = []
            for raw_gi in g.pop("gpu_instances"):
                gi = dict(raw_gi)
                cis = [ComputeInstance(**ci) for ci in gi.pop("compute_instances")]
                gis.append(GpuInstance(**gi, compute_instances=cis))
            gpus.append(Gpu(**g, gpu_instances=gis))
        return cls(
            profile=data["profile"],
            node_name=data["node_name"],
            seed=data["seed"],
            driver_version=data["driver_version"],
            cuda_driver_version=data["cuda_driver_version"],
            gpus=gpus,
            events=[Event(**e) for e in data["events"]],
            next_seq=data["next_seq"],
            next_serial=data["next_serial"],
            nvswitch=data.get("nvswitch", False),
            fabric_cluster_uuid=data.get("fabric_cluster_uuid", ""),
            fabric_clique_id=data.get("fabric_clique_id", 0),
        )
