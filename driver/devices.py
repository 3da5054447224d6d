"""Device discovery through ``pynvml`` only.

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
    combination that fits; ``driver.partitions.prepare_partition`` then creates that GPU
    instance and its full-size compute instance, and ``unprepare_partition`` destroys them.

The device model (``DeviceInfo``, ``Inventory``, ...) is ``driver.inventory``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from driver._nvml import nvml, optional, text
from driver.errors import DeviceError
from driver.inventory import (
    DEVICE_KINDS,
    MIB,
    NUMA_NODE,
    AttributeValue,
    DeviceInfo,
    Inventory,
    MigProfile,
    Placement,
    Version,
)

__all__ = ["discover", "semver"]

log = logging.getLogger(__name__)

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

_MAX_PLACEMENTS = 16


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
    bus_id = text(pci.busId) or text(pci.busIdLegacy)
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
    if dev.name in devices and dev.profile is not None:
        # Two profiles whose names squeeze to the same label: the profile id tells them apart.
        dev = dataclasses.replace(dev, name=f"{dev.name}-p{dev.profile.id}")
    if dev.name in devices:
        log.error("two devices with one name; the second is left out", extra={"device": dev.name})
        return
    devices[dev.name] = dev


def _system_attributes() -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    driver = optional(pynvml.nvmlSystemGetDriverVersion)
    if driver:
        attributes["driverVersion"] = Version(semver(text(driver)))
    cuda = optional(pynvml.nvmlSystemGetCudaDriverVersion)
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
            uuid = text(pynvml.nvmlDeviceGetUUID(handle))
            product = text(pynvml.nvmlDeviceGetName(handle))
        except pynvml.NVMLError as e:
            # One broken GPU must not hide the others; health reports it separately.
            log.error("GPU cannot be read; left out", extra={"index": index, "error": str(e)})
            continue
        minor = optional(pynvml.nvmlDeviceGetMinorNumber, handle)
        attributes: dict[str, AttributeValue] = {"type": "gpu", "uuid": uuid, "productName": product}
        brand = optional(pynvml.nvmlDeviceGetBrand, handle)
        if brand is not None:
            attributes["brand"] = _BRANDS.get(brand, "Unknown")
        arch = optional(pynvml.nvmlDeviceGetArchitecture, handle)
        if arch is not None:
            attributes["architecture"] = _ARCHITECTURES.get(arch, "Unknown")
        cc = optional(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
        if cc is not None:
            attributes["cudaComputeCapability"] = Version(f"{cc[0]}.{cc[1]}.0")
        attributes.update(common)
        attributes["index"] = index
        attributes["minor"] = index if minor is None else minor
        pci = optional(pynvml.nvmlDeviceGetPciInfo, handle)
        if pci is not None:
            attributes["resource.kubernetes.io/pciBusID"] = _pci_bus_id(pci)
        numa = optional(pynvml.nvmlDeviceGetNumaNodeId, handle)
        if numa is not None and numa >= 0:  # -1: the system has no NUMA
            attributes[NUMA_NODE] = int(numa)
        memory = optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
        mig = optional(pynvml.nvmlDeviceGetMigMode, handle)
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
    name = text(getattr(info, "name", b"") or b"").strip()
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
    count = optional(pynvml.nvmlDeviceGetMaxMigDeviceCount, gpu.handle) or 0
    for slot in range(count):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        uuid = text(pynvml.nvmlDeviceGetUUID(mig))
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
        memory = optional(pynvml.nvmlDeviceGetMemoryInfo, mig)
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
