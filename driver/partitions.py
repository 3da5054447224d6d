"""MIG partitions: create the GPU instance a partition device stands for, and destroy it.

A partition (``gpu-0-part-3g71gb-4``) is a possible GPU instance of one profile at one
placement. Preparing it creates that GPU instance and one compute instance covering
it, and answers the UUID of the MIG device that results; unpreparing destroys both.
Both are idempotent and serialised by one lock per process.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import pynvml

from driver._nvml import MIG_LOCK, nvml, text
from driver.errors import DeviceError
from driver.inventory import DeviceInfo, MigProfile, Placement

__all__ = ["partition_uuid", "prepare_partition", "unprepare_partition"]

log = logging.getLogger(__name__)

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

_MAX_INSTANCES = 16


def _partition_parts(info: DeviceInfo) -> tuple[MigProfile, Placement, dict[str, object]]:
    """The partition's profile and placement, and its log fields."""
    if info.kind != "partition" or info.profile is None or info.placement is None:
        raise DeviceError(f"device {info.name} is a {info.kind}, not a partition: nothing to create")
    ctx: dict[str, object] = {
        "device": info.name,
        "gpu": info.parent_uuid,
        "profile": info.profile.name,
        "start": info.placement.start,
    }
    return info.profile, info.placement, ctx


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
            return text(pynvml.nvmlDeviceGetUUID(mig))
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
    profile, placement, ctx = _partition_parts(info)
    with MIG_LOCK, nvml():
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
    profile, placement, ctx = _partition_parts(info)
    with MIG_LOCK, nvml():
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


def partition_uuid(info: DeviceInfo) -> str | None:
    """The UUID of the partition's MIG device if its GPU and compute instance exist, else None."""
    profile, placement, _ = _partition_parts(info)
    with MIG_LOCK, nvml():
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(info.gpu_uuid)
            gi = _find_gpu_instance(handle, profile, placement)
            if gi is None:
                return None
            cis = _compute_instances(gi)
            if not cis:
                return None
            gi_id = int(pynvml.nvmlGpuInstanceGetInfo(gi).id)
            return _mig_uuid(handle, gi_id, int(pynvml.nvmlComputeInstanceGetInfo(cis[0]).id))
        except pynvml.NVMLError as e:
            raise DeviceError(f"cannot look up MIG partition {info.name} on GPU {info.gpu_uuid}: {e}") from e
