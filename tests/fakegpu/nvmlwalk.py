"""The Python half of the go-nvml differential: walk a machine with pynvml exactly as
``nvmlwalk/main.go`` walks it with go-nvml, into the same JSON shape, and compare the two.

Each value is what the call returned, or ``{"error": code}``; go-nvlib's own views (``nvlib``)
have no pynvml counterpart and are left out of the comparison (the tests check them against the
profile facts instead).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pynvml

GI_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
CI_PROFILE_COUNT = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT


def _val(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except pynvml.NVMLError as e:
        return {"error": e.value}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _memory(h: Any) -> Any:
    def get() -> dict[str, int]:
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        return {"total": m.total, "free": m.free, "used": m.used}

    return _val(get)


def _attributes(h: Any) -> Any:
    def get() -> dict[str, int]:
        a = pynvml.nvmlDeviceGetAttributes_v2(h)
        return {
            "sms": a.multiprocessorCount,
            "ce": a.sharedCopyEngineCount,
            "dec": a.sharedDecoderCount,
            "enc": a.sharedEncoderCount,
            "jpg": a.sharedJpegCount,
            "ofa": a.sharedOfaCount,
            "gi_slices": a.gpuInstanceSliceCount,
            "ci_slices": a.computeInstanceSliceCount,
            "memory_mb": a.memorySizeMB,
        }

    return _val(get)


def _gi_v1(p: Any) -> dict[str, int]:
    return {
        "id": p.id,
        "p2p": p.isP2pSupported,
        "slices": p.sliceCount,
        "instances": p.instanceCount,
        "sms": p.multiprocessorCount,
        "ce": p.copyEngineCount,
        "dec": p.decoderCount,
        "enc": p.encoderCount,
        "jpg": p.jpegCount,
        "ofa": p.ofaCount,
        "memory_mb": p.memorySizeMB,
    }


def _handles(fn: Callable[..., Any], owner: Any, pid: int, capacity: int, kind: Any) -> list[Any]:
    """go-nvml's Get{Gpu,Compute}Instances: an array of the profile's instance count."""
    arr = (kind * capacity)()
    count = ctypes.c_uint(capacity)
    fn(owner, pid, arr, ctypes.byref(count))
    return list(arr[: count.value])


def _gpu_instances(h: Any, info: Any) -> Any:
    if info.instanceCount == 0:
        return {"error": pynvml.NVML_ERROR_INVALID_ARGUMENT}
    try:
        gis = _handles(
            pynvml.nvmlDeviceGetGpuInstances, h, info.id, info.instanceCount, pynvml.c_nvmlGpuInstance_t
        )
    except pynvml.NVMLError as e:
        return {"error": e.value}
    out = []
    for gi in gis:

        def gi_info(gi: Any = gi) -> dict[str, int]:
            g = pynvml.nvmlGpuInstanceGetInfo(gi)
            return {"id": g.id, "profile": g.profileId, "start": g.placement.start, "size": g.placement.size}

        profiles = [_ci_profile(gi, p) for p in range(CI_PROFILE_COUNT)]
        out.append({"info": _val(gi_info), "ci_profiles": profiles})
    return out


def _ci_profile(gi: Any, p: int) -> dict[str, Any]:
    prof: dict[str, Any] = {"profile": p}
    try:
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, p, 0, version=1)
    except pynvml.NVMLError as e:
        prof["error"] = e.value
        return prof
    prof.update(id=ci.id, slices=ci.sliceCount, instances=ci.instanceCount, sms=ci.multiprocessorCount)
    prof["v2_name"] = _val(lambda: _text(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, p, 0).name))
    prof["remaining"] = _val(lambda: pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, ci.id))

    def instances() -> list[Any]:
        found = _handles(
            pynvml.nvmlGpuInstanceGetComputeInstances,
            gi,
            ci.id,
            ci.instanceCount,
            pynvml.c_nvmlComputeInstance_t,
        )
        return [_val(partial(_ci_info, c)) for c in found]

    prof["compute_instances"] = _val(instances)
    return prof


def _ci_info(c: Any) -> dict[str, int]:
    i = pynvml.nvmlComputeInstanceGetInfo(c)
    return {"id": i.id, "profile": i.profileId, "start": i.placement.start, "size": i.placement.size}


def _gi_profile(h: Any, i: int) -> dict[str, Any]:
    prof: dict[str, Any] = {"index": i}
    try:
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, i, version=1)
    except pynvml.NVMLError as e:
        prof["error"] = e.value
        return prof
    prof["v1"] = _gi_v1(info)
    prof["v2_name"] = _val(lambda: _text(pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, i).name))
    prof["v3"] = _val(lambda: _v3(h, i))
    prof["placements"] = _val(lambda: _placements(h, info.id))
    prof["remaining"] = _val(lambda: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, info.id))
    prof["gpu_instances"] = _gpu_instances(h, info)
    return prof


def _mig_device(h: Any, j: int) -> dict[str, Any]:
    try:
        m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
    except pynvml.NVMLError as e:
        return {"error": e.value}
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle
    return {
        "uuid": _val(lambda: _text(pynvml.nvmlDeviceGetUUID(m))),
        "name": _val(lambda: _text(pynvml.nvmlDeviceGetName(m))),
        "is_mig": _val(lambda: bool(pynvml.nvmlDeviceIsMigDeviceHandle(m))),
        "gi": _val(lambda: pynvml.nvmlDeviceGetGpuInstanceId(m)),
        "ci": _val(lambda: pynvml.nvmlDeviceGetComputeInstanceId(m)),
        "memory": _memory(m),
        "attributes": _attributes(m),
        "parent_uuid": _val(lambda: _text(pynvml.nvmlDeviceGetUUID(parent(m)))),
    }


def _placements(h: Any, pid: int) -> list[list[int]]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, None, ctypes.byref(count))
    if count.value == 0:
        return []
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, arr, ctypes.byref(count))
    return [[p.start, p.size] for p in arr[: count.value]]


def _device(h: Any) -> dict[str, Any]:
    r: dict[str, Any] = {}
    r["name"] = _val(lambda: _text(pynvml.nvmlDeviceGetName(h)))
    r["uuid"] = _val(lambda: _text(pynvml.nvmlDeviceGetUUID(h)))
    r["index"] = _val(lambda: pynvml.nvmlDeviceGetIndex(h))
    r["minor"] = _val(lambda: pynvml.nvmlDeviceGetMinorNumber(h))
    r["brand"] = _val(lambda: pynvml.nvmlDeviceGetBrand(h))
    r["arch"] = _val(lambda: pynvml.nvmlDeviceGetArchitecture(h))
    r["cc"] = _val(lambda: list(pynvml.nvmlDeviceGetCudaComputeCapability(h)))

    def pci() -> dict[str, Any]:
        p = pynvml.nvmlDeviceGetPciInfo_v3(h)
        return {
            "bus_id": _text(p.busId),
            "bus_id_legacy": _text(p.busIdLegacy),
            "domain": p.domain,
            "bus": p.bus,
            "device": p.device,
            "device_id": p.pciDeviceId,
            "subsystem_id": p.pciSubSystemId,
        }

    r["pci"] = _val(pci)
    r["memory"] = _memory(h)

    def memory_v2() -> dict[str, int]:
        m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        return {"total": m.total, "reserved": m.reserved, "free": m.free, "used": m.used}

    r["memory_v2"] = _val(memory_v2)
    r["persistence"] = _val(lambda: pynvml.nvmlDeviceGetPersistenceMode(h))
    r["virtualization"] = _val(lambda: pynvml.nvmlDeviceGetVirtualizationMode(h))
    r["mig_mode"] = _val(lambda: list(pynvml.nvmlDeviceGetMigMode(h)))
    r["max_mig"] = _val(lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h))
    r["event_types"] = _val(lambda: pynvml.nvmlDeviceGetSupportedEventTypes(h))
    r["attributes"] = _attributes(h)
    r["gi_profiles"] = [_gi_profile(h, i) for i in range(GI_PROFILE_COUNT)]
    count = r["max_mig"]
    r["mig_devices"] = [_mig_device(h, j) for j in range(count if isinstance(count, int) else 0)]
    return r


def _v3(h: Any, index: int) -> dict[str, Any]:
    """GI profile info v3 through the V call (pynvml has no v3 wrapper; it builds the struct)."""
    from fakegpu._cstructs import GpuInstanceProfileInfo_v3, struct_version

    info = GpuInstanceProfileInfo_v3(version=struct_version(GpuInstanceProfileInfo_v3, 3))
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    pynvml._nvmlCheckReturn(fn(h, ctypes.c_uint(index), ctypes.byref(info)))
    return {"id": info.id, "name": _text(info.name), "memory_mb": info.memorySizeMB}


def varied_layout(machine: Any) -> None:
    """Give a machine's first two MIG-capable GPUs a mixed layout (instances with and without a
    compute instance, several profiles), so a walk reads every kind of MIG answer."""
    from fakegpu._models import MODELS

    capable = [g.index for g in machine.state.gpus if MODELS[g.model].mig_capable and not g.gpu_instances][:2]
    for gpu in capable:
        machine.set_mig_mode(gpu, True)
    if capable:
        machine.create_gpu_instance(capable[0], 9, 4)  # a 3g at slice 4, with its compute instance
        machine.create_gpu_instance(capable[0], 14, 0, with_compute_instance=False)  # a bare 2g
    if len(capable) > 1:
        machine.create_gpu_instance(capable[1], 19)
        machine.create_gpu_instance(capable[1], 19)


def _index_of(uuid: str) -> Any:
    return pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid))


def walk() -> dict[str, Any]:
    """The whole machine, as ``nvmlwalk walk`` prints it (without ``nvlib``)."""
    r: dict[str, Any] = {}
    r["driver_version"] = _val(lambda: _text(pynvml.nvmlSystemGetDriverVersion()))
    r["cuda_driver_version"] = _val(pynvml.nvmlSystemGetCudaDriverVersion)
    r["count"] = _val(pynvml.nvmlDeviceGetCount)
    count = r["count"] if isinstance(r["count"], int) else 0
    r["devices"] = [_device(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    uuids = [dev["uuid"] for dev in r["devices"] if isinstance(dev["uuid"], str)]
    r["by_uuid"] = [_val(partial(_index_of, u)) for u in uuids]
    return r


def without_nvlib(go: dict[str, Any]) -> dict[str, Any]:
    """The Go walk less go-nvlib's views (they have no pynvml counterpart)."""
    return {**go, "devices": [{k: v for k, v in d.items() if k != "nvlib"} for d in go["devices"]]}


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of a JSON value as (path, value)."""
    if isinstance(value, dict):
        for k in sorted(value):
            yield from leaves(value[k], f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def differences(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, list[str]]:
    """(fields compared, one line per field that differs or is on one side only)."""
    left, right = dict(leaves(a)), dict(leaves(b))
    diffs = [
        f"{path}: {left.get(path, '<missing>')!r} != {right.get(path, '<missing>')!r}"
        for path in sorted(set(left) | set(right))
        if left.get(path, "<missing>") != right.get(path, "<missing>")
    ]
    return len(set(left) | set(right)), diffs
