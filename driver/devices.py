"""Device discovery and MIG partitions, through ``pynvml`` only.

The same code runs on real GPUs and on ``fakegpu``: the fake replaces the C library
underneath ``pynvml``, so nothing here knows which one it talks to.

``discover(kinds)`` walks the machine once and returns an ``Inventory``: every device
the driver publishes, keyed by its name in the ResourceSlice, plus the counter sets of
partitionable GPUs. Three kinds of device, chosen by the ``--device-kinds`` setting:

``gpu``
    a whole GPU (``gpu-0``). Published for GPUs whose MIG mode is off.
``mig``
    a MIG device that already exists, made by an administrator (``gpu-0-mig-1g18gb-7``,
    the last number is the GPU instance id). Published for GPUs whose MIG mode is on.
``partitionable-mig``
    for GPUs whose MIG mode is on: one counter set per GPU (memory slices, compute
    slices, memory), one device per possible placement of every MIG profile
    (``gpu-0-part-3g71gb-4``, the last number is the first memory slice) consuming
    its share, and the whole GPU consuming everything. The scheduler picks a
    combination that fits; ``prepare_partition`` then creates that GPU instance and
    its full-size compute instance, and ``unprepare_partition`` destroys them.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pynvml

from driver.errors import DriverError

__all__ = [
    "DEVICE_KINDS",
    "DeviceError",
    "DeviceInfo",
    "DeviceKind",
    "Inventory",
    "MigProfile",
    "Placement",
    "Version",
    "discover",
    "nvml",
    "prepare_partition",
    "semver",
    "unprepare_partition",
]

log = logging.getLogger(__name__)

DEVICE_KINDS = ("gpu", "mig", "partitionable-mig")
"""The values ``--device-kinds`` accepts, in the order they are documented."""

DeviceKind = Literal["gpu", "mig", "partition"]
"""What one published device is: a whole GPU, an existing MIG device, or a possible partition."""

MIB = 1024 * 1024

_T = TypeVar("_T")


class DeviceError(DriverError):
    """NVML refused or failed a device operation (discovery, creating or destroying a partition)."""


@dataclass(frozen=True)
class Version:
    """A device attribute that is a semantic version (``versionValue`` in the ResourceSlice)."""

    value: str

    def __str__(self) -> str:
        return self.value


AttributeValue = str | int | bool | Version
"""A device attribute: ``string``, ``int``, ``bool`` or ``version`` in the ResourceSlice."""


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

    @property
    def gpu_uuid(self) -> str:
        """The UUID of the physical GPU this device lives on."""
        gpu = self.parent_uuid if self.kind != "gpu" else self.uuid
        assert gpu is not None, f"device {self.name} has no GPU UUID"
        return gpu


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


# --- NVML helpers -------------------------------------------------------------------------------

_NVML_LOCK = threading.RLock()
"""Serialises MIG changes: NVML allows one at a time, and create-then-find must not interleave."""


@contextmanager
def nvml() -> Iterator[None]:
    """``nvmlInit`` / ``nvmlShutdown`` around a block; pynvml counts nested inits."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise DeviceError(f"cannot initialise NVML: {e}; is the NVIDIA driver (or fakegpu) installed?") from e
    try:
        yield
    finally:
        pynvml.nvmlShutdown()


_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)


def _optional(call: Callable[..., _T], *args: Any) -> _T | None:
    """Call an NVML wrapper, answering None where the device does not support it (Jetson, T4)."""
    try:
        return call(*args)
    except _UNSUPPORTED:
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


_BRANDS = {
    pynvml.NVML_BRAND_QUADRO: "Quadro",
    pynvml.NVML_BRAND_TESLA: "Tesla",
    pynvml.NVML_BRAND_NVS: "NVS",
    pynvml.NVML_BRAND_GRID: "Grid",
    pynvml.NVML_BRAND_GEFORCE: "GeForce",
    pynvml.NVML_BRAND_TITAN: "Titan",
    pynvml.NVML_BRAND_NVIDIA_VAPPS: "NvidiaVApps",
    pynvml.NVML_BRAND_NVIDIA_VPC: "NvidiaVPC",
    pynvml.NVML_BRAND_NVIDIA_VCS: "NvidiaVCS",
    pynvml.NVML_BRAND_NVIDIA_VWS: "NvidiaVWS",
    pynvml.NVML_BRAND_NVIDIA_CLOUD_GAMING: "NvidiaCloudGaming",
    pynvml.NVML_BRAND_QUADRO_RTX: "QuadroRTX",
    pynvml.NVML_BRAND_NVIDIA_RTX: "NvidiaRTX",
    pynvml.NVML_BRAND_NVIDIA: "Nvidia",
    pynvml.NVML_BRAND_GEFORCE_RTX: "GeForceRTX",
    pynvml.NVML_BRAND_TITAN_RTX: "TitanRTX",
}

_ARCHITECTURES = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "Kepler",
    pynvml.NVML_DEVICE_ARCH_MAXWELL: "Maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "Pascal",
    pynvml.NVML_DEVICE_ARCH_VOLTA: "Volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "Turing",
    pynvml.NVML_DEVICE_ARCH_AMPERE: "Ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "Ada Lovelace",
    pynvml.NVML_DEVICE_ARCH_HOPPER: "Hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "Blackwell",
}

# GPU-instance slice count -> the compute-instance profile constant of the same size:
# a partition gets one compute instance covering its whole GPU instance.
_FULL_CI_PROFILE = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

_MAX_PLACEMENTS = 16
_MAX_INSTANCES = 16


def semver(text: str) -> str:
    """A version string as strict semver: ``535.104.05`` -> ``535.104.5``, ``9.0`` -> ``9.0.0``.

    NVIDIA driver versions carry leading zeros and two-part versions are common; the
    API server accepts only semver 2.0.0 in ``versionValue``.
    """
    parts = [str(int(p)) for p in re.findall(r"\d+", text)[:3]]
    while len(parts) < 3:
        parts.append("0")
    return ".".join(parts)


def _cuda_version(value: int) -> str:
    """NVML's CUDA driver version integer (12040) as semver (12.4.0)."""
    return f"{value // 1000}.{(value % 1000) // 10}.0"


def _pci_bus_id(pci: Any) -> str:
    """The ``resource.kubernetes.io/pciBusID`` form, ``0000:3b:00.0``, from NVML's PCI info."""
    bus_id = _text(pci.busId) or _text(pci.busIdLegacy)
    match = re.fullmatch(r"([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", bus_id.strip())
    if match:
        domain, bus, dev, func = match.groups()
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{func}"
    return f"{pci.domain:04x}:{pci.bus:02x}:{pci.device:02x}.0"


# --- discovery ----------------------------------------------------------------------------------


@dataclass
class _Gpu:
    """What discovery learns about one physical GPU before turning it into devices."""

    handle: Any
    index: int
    minor: int
    uuid: str
    attributes: dict[str, AttributeValue]
    memory_bytes: int | None
    mig_enabled: bool


def discover(kinds: Collection[str] = ("gpu",)) -> Inventory:
    """Walk the machine through NVML and return the devices of the requested kinds.

    A GPU with MIG mode off becomes a ``gpu`` device (when ``gpu`` is asked for). A GPU
    with MIG mode on is partitionable when ``partitionable-mig`` is asked for, else its
    existing MIG devices are published when ``mig`` is asked for; its whole-GPU device
    is published only in the partitionable case, where it consumes all counters.
    """
    unknown = set(kinds) - set(DEVICE_KINDS)
    if unknown:
        raise DeviceError(f"unknown device kinds {sorted(unknown)}; known: {', '.join(DEVICE_KINDS)}")
    devices: dict[str, DeviceInfo] = {}
    counter_sets: dict[str, dict[str, int]] = {}
    with nvml():
        common = _system_attributes()
        for gpu in _gpus(common):
            if not gpu.mig_enabled:
                if "gpu" in kinds:
                    _add(devices, _gpu_device(gpu))
                continue
            if "partitionable-mig" in kinds:
                profiles = _profiles(gpu.handle)
                if not profiles:
                    log.warning("MIG is on but NVML lists no profiles; GPU left out", extra={"gpu": gpu.uuid})
                    continue
                name, counters = _counter_set(gpu, profiles)
                counter_sets[name] = counters
                _add(devices, _gpu_device(gpu, consumes={name: dict(counters)}))
                for profile in profiles:
                    for placement in profile.placements:
                        _add(devices, _partition_device(gpu, profile, placement, name))
            elif "mig" in kinds:
                for dev in _mig_devices(gpu):
                    _add(devices, dev)
            else:
                log.info(
                    "GPU has MIG mode on and no MIG device kind is enabled; GPU left out",
                    extra={"gpu": gpu.uuid, "index": gpu.index},
                )
    log.info(
        "discovered devices",
        extra={"devices": len(devices), "counter_sets": len(counter_sets), "kinds": sorted(kinds)},
    )
    return Inventory(devices=devices, counter_sets=counter_sets)


def _add(devices: dict[str, DeviceInfo], dev: DeviceInfo) -> None:
    if dev.name in devices:
        raise DeviceError(f"two devices would be called {dev.name!r}; this is a driver bug")
    devices[dev.name] = dev


def _system_attributes() -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    driver = _optional(pynvml.nvmlSystemGetDriverVersion)
    if driver:
        attributes["driverVersion"] = Version(semver(_text(driver)))
    cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
    if cuda:
        attributes["cudaDriverVersion"] = Version(_cuda_version(int(cuda)))
    return attributes


def _gpus(common: Mapping[str, AttributeValue]) -> Iterator[_Gpu]:
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as e:
        raise DeviceError(f"cannot count GPUs: {e}") from e
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            product = _text(pynvml.nvmlDeviceGetName(handle))
        except pynvml.NVMLError as e:
            # One broken GPU must not hide the others; health reports it separately.
            log.error("GPU cannot be read; left out", extra={"index": index, "error": str(e)})
            continue
        minor = _optional(pynvml.nvmlDeviceGetMinorNumber, handle)
        attributes: dict[str, AttributeValue] = {"type": "gpu", "uuid": uuid, "productName": product}
        brand = _optional(pynvml.nvmlDeviceGetBrand, handle)
        if brand is not None:
            attributes["brand"] = _BRANDS.get(brand, "Unknown")
        arch = _optional(pynvml.nvmlDeviceGetArchitecture, handle)
        if arch is not None:
            attributes["architecture"] = _ARCHITECTURES.get(arch, "Unknown")
        cc = _optional(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
        if cc is not None:
            attributes["cudaComputeCapability"] = Version(f"{cc[0]}.{cc[1]}.0")
        attributes.update(common)
        attributes["index"] = index
        attributes["minor"] = index if minor is None else minor
        pci = _optional(pynvml.nvmlDeviceGetPciInfo, handle)
        if pci is not None:
            attributes["resource.kubernetes.io/pciBusID"] = _pci_bus_id(pci)
        memory = _optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
        mig = _optional(pynvml.nvmlDeviceGetMigMode, handle)
        yield _Gpu(
            handle=handle,
            index=index,
            minor=index if minor is None else minor,
            uuid=uuid,
            attributes=attributes,
            memory_bytes=None if memory is None else int(memory.total),
            mig_enabled=mig is not None and mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE,
        )


def _gpu_device(gpu: _Gpu, consumes: Mapping[str, Mapping[str, int]] | None = None) -> DeviceInfo:
    capacity = {} if gpu.memory_bytes is None else {"memory": gpu.memory_bytes}
    return DeviceInfo(
        name=f"gpu-{gpu.index}",
        kind="gpu",
        uuid=gpu.uuid,
        parent_uuid=None,
        index=gpu.index,
        minor=gpu.minor,
        attributes=dict(gpu.attributes),
        capacity=capacity,
        consumes_counters=dict(consumes or {}),
    )


def _profile_name(info: Any, gpu_memory: int | None) -> str:
    """``1g.18gb`` from NVML's profile name (``MIG 1g.18gb``), or derived as nvidia-smi does."""
    name = _text(getattr(info, "name", b"") or b"").strip()
    if name:
        return name.removeprefix("MIG ").strip()
    # No name (old drivers): round the memory fraction up to eighths of the whole GPU, like go-nvlib.
    mem = int(info.memorySizeMB) * MIB
    if gpu_memory:
        eighths = -(-mem * 8 // gpu_memory)
        gb = round(eighths / 8 * -(-gpu_memory // 10**9))
    else:
        gb = round(mem / 10**9)
    return f"{info.sliceCount}g.{gb}gb"


def _profiles(handle: Any) -> list[MigProfile]:
    """Every GPU-instance profile the GPU supports, with its possible placements, by profile id."""
    try:
        gpu_memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    except pynvml.NVMLError:
        gpu_memory = None
    found: dict[int, MigProfile] = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument, pynvml.NVMLError_NotFound):
            continue
        if info.instanceCount == 0 or info.id in found:
            continue
        found[info.id] = MigProfile(
            id=int(info.id),
            index=index,
            name=_profile_name(info, gpu_memory),
            slices=int(info.sliceCount),
            instance_count=int(info.instanceCount),
            memory_bytes=int(info.memorySizeMB) * MIB,
            multiprocessors=int(info.multiprocessorCount),
            copy_engines=int(info.copyEngineCount),
            decoders=int(info.decoderCount),
            encoders=int(info.encoderCount),
            jpeg_engines=int(info.jpegCount),
            ofa_engines=int(info.ofaCount),
            placements=_placements(handle, int(info.id)),
        )
    return [found[k] for k in sorted(found)]


def _placements(handle: Any, profile_id: int) -> tuple[Placement, ...]:
    array = (pynvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
    count = ctypes.c_uint(_MAX_PLACEMENTS)
    try:
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    except pynvml.NVMLError as e:
        raise DeviceError(f"cannot list placements of MIG profile id {profile_id}: {e}") from e
    return tuple(Placement(int(array[i].start), int(array[i].size)) for i in range(count.value))


def _counter_set(gpu: _Gpu, profiles: list[MigProfile]) -> tuple[str, dict[str, int]]:
    """The counter set of a partitionable GPU: what every partition draws from.

    One counter per memory slice (so placements cannot overlap), the compute slices and
    the memory (so the sum of partitions cannot exceed the GPU), and, for a profile
    that has fewer instances than placements (``1g.18gb+me``: one media-extension
    instance, seven places), a counter for its instances.
    """
    memory_slices = max(p.start + p.size for prof in profiles for p in prof.placements)
    counters = {f"memory-slice-{i}": 1 for i in range(memory_slices)}
    counters["compute-slices"] = max(prof.slices for prof in profiles)
    counters["memory"] = max([gpu.memory_bytes or 0, *(prof.memory_bytes for prof in profiles)])
    for prof in profiles:
        if prof.instance_count < len(prof.placements):
            counters[_instance_counter(prof)] = prof.instance_count
    return f"gpu-{gpu.index}-counter-set", counters


def _instance_counter(profile: MigProfile) -> str:
    return f"{profile.label}-instances"


def _mig_attributes(gpu: _Gpu, profile: MigProfile) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        key: value for key, value in gpu.attributes.items() if key not in ("uuid", "type")
    }
    attributes["type"] = "mig"
    attributes["parentUUID"] = gpu.uuid
    attributes["profile"] = profile.name
    return attributes


def _partition_device(gpu: _Gpu, profile: MigProfile, placement: Placement, counter_set: str) -> DeviceInfo:
    counters = {f"memory-slice-{i}": 1 for i in placement.slices}
    counters["compute-slices"] = profile.slices
    counters["memory"] = profile.memory_bytes
    if profile.instance_count < len(profile.placements):
        counters[_instance_counter(profile)] = 1
    attributes = _mig_attributes(gpu, profile)
    attributes["placementStart"] = placement.start
    attributes["placementSize"] = placement.size
    return DeviceInfo(
        name=f"gpu-{gpu.index}-part-{profile.label}-{placement.start}",
        kind="partition",
        uuid=None,
        parent_uuid=gpu.uuid,
        index=gpu.index,
        minor=gpu.minor,
        attributes=attributes,
        capacity=profile.capacity(),
        consumes_counters={counter_set: counters},
        profile=profile,
        placement=placement,
    )


def _mig_devices(gpu: _Gpu) -> Iterator[DeviceInfo]:
    """The MIG devices that exist on a MIG-enabled GPU, in GPU-instance order."""
    profiles = {p.id: p for p in _profiles(gpu.handle)}
    count = _optional(pynvml.nvmlDeviceGetMaxMigDeviceCount, gpu.handle) or 0
    for slot in range(count):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        gi_id = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci_id = int(pynvml.nvmlDeviceGetComputeInstanceId(mig))
        gi_info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(gpu.handle, gi_id))
        profile = profiles.get(int(gi_info.profileId))
        if profile is None:
            log.warning("MIG device of an unknown profile; left out", extra={"uuid": uuid})
            continue
        placement = Placement(int(gi_info.placement.start), int(gi_info.placement.size))
        attributes = _mig_attributes(gpu, profile)
        attributes["uuid"] = uuid
        capacity = profile.capacity()
        memory = _optional(pynvml.nvmlDeviceGetMemoryInfo, mig)
        if memory is not None and memory.total:
            capacity["memory"] = int(memory.total)
        suffix = f"{gi_id}" if ci_id == 0 else f"{gi_id}-{ci_id}"
        yield DeviceInfo(
            name=f"gpu-{gpu.index}-mig-{profile.label}-{suffix}",
            kind="mig",
            uuid=uuid,
            parent_uuid=gpu.uuid,
            index=gpu.index,
            minor=gpu.minor,
            attributes=attributes,
            capacity=capacity,
            profile=profile,
            placement=placement,
            gpu_instance_id=gi_id,
            compute_instance_id=ci_id,
        )


# --- partitions ---------------------------------------------------------------------------------


def _partition_parts(info: DeviceInfo) -> tuple[MigProfile, Placement]:
    if info.kind != "partition" or info.profile is None or info.placement is None:
        raise DeviceError(f"device {info.name} is a {info.kind}, not a partition: nothing to create")
    return info.profile, info.placement


def _find_gpu_instance(handle: Any, profile: MigProfile, placement: Placement) -> Any | None:
    """The existing GPU instance of this profile at this placement, or None."""
    array = (pynvml.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
    count = ctypes.c_uint(_MAX_INSTANCES)
    pynvml.nvmlDeviceGetGpuInstances(handle, profile.id, array, ctypes.byref(count))
    for i in range(count.value):
        gi_info = pynvml.nvmlGpuInstanceGetInfo(array[i])
        if int(gi_info.placement.start) == placement.start and int(gi_info.placement.size) == placement.size:
            return array[i]
    return None


def _compute_instances(gpu_instance: Any) -> list[Any]:
    found: list[Any] = []
    for ci_profile in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gpu_instance, ci_profile, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument, pynvml.NVMLError_NotFound):
            continue
        array = (pynvml.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
        count = ctypes.c_uint(_MAX_INSTANCES)
        pynvml.nvmlGpuInstanceGetComputeInstances(gpu_instance, info.id, array, ctypes.byref(count))
        found.extend(array[i] for i in range(count.value))
    return found


def _mig_uuid(handle: Any, gi_id: int, ci_id: int) -> str:
    count = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    for slot in range(count):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        if (
            pynvml.nvmlDeviceGetGpuInstanceId(mig) == gi_id
            and pynvml.nvmlDeviceGetComputeInstanceId(mig) == ci_id
        ):
            return _text(pynvml.nvmlDeviceGetUUID(mig))
    raise DeviceError(
        f"MIG device for GPU instance {gi_id}, compute instance {ci_id} not found after creation"
    )


def prepare_partition(info: DeviceInfo) -> str:
    """Create the partition's GPU instance at its placement and a full-size compute instance.

    Returns the UUID of the MIG device that results. Idempotent: a GPU instance that
    already exists at that placement with that profile (a repeated prepare, or one
    that survived a driver restart) is reused. Raises ``DeviceError`` when NVML
    refuses, e.g. because another instance overlaps the placement.
    """
    profile, placement = _partition_parts(info)
    ctx = {"device": info.name, "gpu": info.parent_uuid, "profile": profile.name, "start": placement.start}
    with _NVML_LOCK, nvml():
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(info.gpu_uuid)
            gi = _find_gpu_instance(handle, profile, placement)
            created_gi = gi is None
            if gi is None:
                c_placement = pynvml.c_nvmlGpuInstancePlacement_t(placement.start, placement.size)
                gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                    handle, profile.id, ctypes.byref(c_placement)
                )
            gi_id = int(pynvml.nvmlGpuInstanceGetInfo(gi).id)
        except pynvml.NVMLError as e:
            raise DeviceError(
                f"cannot create MIG GPU instance {profile.name} at memory slice {placement.start} "
                f"on GPU {info.gpu_uuid} for {info.name}: {e}"
            ) from e
        try:
            cis = _compute_instances(gi)
            if cis:
                ci = cis[0]
            else:
                ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi,
                    _FULL_CI_PROFILE.get(profile.slices, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE),
                    pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
                ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
            ci_id = int(pynvml.nvmlComputeInstanceGetInfo(ci).id)
            uuid = _mig_uuid(handle, gi_id, ci_id)
        except (pynvml.NVMLError, DeviceError) as e:
            if created_gi:
                try:
                    pynvml.nvmlGpuInstanceDestroy(gi)
                except pynvml.NVMLError as cleanup:
                    log.error("cannot destroy half-made GPU instance", extra={**ctx, "error": str(cleanup)})
            raise DeviceError(
                f"cannot create the compute instance of {profile.name} at memory slice {placement.start} "
                f"on GPU {info.gpu_uuid} for {info.name}: {e}"
            ) from e
    log.info(
        "partition created", extra={**ctx, "mig_uuid": uuid, "gpu_instance": gi_id, "reused": not created_gi}
    )
    return uuid


def unprepare_partition(info: DeviceInfo) -> None:
    """Destroy the partition's compute instances and GPU instance; nothing there is success."""
    profile, placement = _partition_parts(info)
    ctx = {"device": info.name, "gpu": info.parent_uuid, "profile": profile.name, "start": placement.start}
    with _NVML_LOCK, nvml():
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(info.gpu_uuid)
            gi = _find_gpu_instance(handle, profile, placement)
            if gi is None:
                log.info("partition already gone", extra=ctx)
                return
            for ci in _compute_instances(gi):
                pynvml.nvmlComputeInstanceDestroy(ci)
            pynvml.nvmlGpuInstanceDestroy(gi)
        except pynvml.NVMLError as e:
            raise DeviceError(
                f"cannot destroy MIG partition {profile.name} at memory slice {placement.start} "
                f"on GPU {info.gpu_uuid} ({info.name}): {e}; is a process still using it?"
            ) from e
    log.info("partition destroyed", extra=ctx)
