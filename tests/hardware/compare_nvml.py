"""Run the same NVML queries on real hardware and on a fakegpu profile; print every difference.

    python tests/hardware/compare_nvml.py [--profile dgx-h200] [--gpu 0] [--mig] [--json OUT]

Identity values that differ between any two machines (UUIDs, serial numbers, PCI bus numbers,
driver version) are shown but not counted as differences. With ``--mig`` the script enables MIG
on the real GPU to read the profile tables and placements (needs root; it restores the mode).
Exits 0 with "skipped: no NVIDIA GPU/NVML" where real NVML cannot initialise; otherwise exits 0,
or 1 with ``--strict`` when a counted difference was found.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pynvml

INFORMATIONAL = (
    "uuid", "serial", "pci.bus", "pci.busId", "pci.subsystem", "minor", "numa_node", "driver_version",
    "nvml_version",
    "cuda_driver_version", "temperature", "power_usage", "memory.used", "memory.free", "memory_v2.used",
    "memory_v2.free", "memory_v2.reserved", "vbios", "board_part_number",
)  # fmt: skip
GI_INDEXES = (0, 7, 9, 1, 2, 3, 4)


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except pynvml.NVMLError as e:
        return f"<{type(e).__name__}>"


def _struct(s: Any) -> dict[str, Any]:
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        out[name] = v.decode() if isinstance(v, bytes) else v
    return out


def query(gpu: int, mig: bool) -> dict[str, Any]:
    """Everything the driver and the suite read, for one GPU, as a flat dict."""
    r: dict[str, Any] = {
        "device_count": pynvml.nvmlDeviceGetCount(),
        "driver_version": _try(pynvml.nvmlSystemGetDriverVersion),
        "cuda_driver_version": _try(pynvml.nvmlSystemGetCudaDriverVersion_v2),
        "nvml_version": _try(pynvml.nvmlSystemGetNVMLVersion),
    }
    h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    r["name"] = _try(lambda: pynvml.nvmlDeviceGetName(h))
    r["uuid"] = _try(lambda: pynvml.nvmlDeviceGetUUID(h))
    r["serial"] = _try(lambda: pynvml.nvmlDeviceGetSerial(h))
    r["minor"] = _try(lambda: pynvml.nvmlDeviceGetMinorNumber(h))
    r["numa_node"] = _try(lambda: pynvml.nvmlDeviceGetNumaNodeId(h))
    r["brand"] = _try(lambda: pynvml.nvmlDeviceGetBrand(h))
    r["architecture"] = _try(lambda: pynvml.nvmlDeviceGetArchitecture(h))
    r["compute_capability"] = _try(lambda: list(pynvml.nvmlDeviceGetCudaComputeCapability(h)))
    r["vbios"] = _try(lambda: pynvml.nvmlDeviceGetVbiosVersion(h))
    r["board_part_number"] = _try(lambda: pynvml.nvmlDeviceGetBoardPartNumber(h))
    mem = _try(lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
    if not isinstance(mem, str):
        r.update({f"memory.{k}": v for k, v in _struct(mem).items()})
    mem2 = _try(lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2))
    if not isinstance(mem2, str):
        r.update({f"memory_v2.{k}": v for k, v in _struct(mem2).items() if k != "version"})
    pci = _try(lambda: pynvml.nvmlDeviceGetPciInfo(h))
    if not isinstance(pci, str):
        r["pci.deviceId"] = hex(pci.pciDeviceId)
        r["pci.subsystem"] = hex(pci.pciSubSystemId)
        r["pci.bus"] = pci.bus
        r["pci.busId"] = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
    r["temperature"] = _try(lambda: pynvml.nvmlDeviceGetTemperature(h, 0))
    r["power_usage"] = _try(lambda: pynvml.nvmlDeviceGetPowerUsage(h))
    r["power_limit"] = _try(lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h))
    r["ecc_mode"] = _try(lambda: pynvml.nvmlDeviceGetEccMode(h))
    r["ecc_volatile_dbe"] = _try(lambda: pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0))
    r["supported_events"] = _try(lambda: hex(pynvml.nvmlDeviceGetSupportedEventTypes(h)))
    r["attributes"] = _try(lambda: _struct(pynvml.nvmlDeviceGetAttributes(h)))
    r["mig_mode"] = _try(lambda: pynvml.nvmlDeviceGetMigMode(h))
    r["max_mig_devices"] = _try(lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h))
    r["unknown_uuid"] = _try(
        lambda: pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    )
    restore = None
    if mig and r["mig_mode"] == [0, 0]:
        restore = 0
        r["set_mig_mode"] = _try(lambda: pynvml.nvmlDeviceSetMigMode(h, 1))
        r["mig_mode_after_set"] = _try(lambda: pynvml.nvmlDeviceGetMigMode(h))
        r["max_mig_devices_after_set"] = _try(lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h))
    try:
        for index in GI_INDEXES:
            info = _try(partial(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, h, index))
            key = f"gi_profile[{index}]"
            if isinstance(info, str):
                r[key] = info
                continue
            d = _struct(info)
            d.pop("version", None)
            r[key] = d
            r[f"{key}.placements"] = _try(partial(_placements, h, info.id))
            r[f"{key}.remaining"] = _try(
                partial(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, h, info.id)
            )
        if mig:
            r.update(_mig_ids(h))
    finally:
        if restore is not None:
            _try(lambda: pynvml.nvmlDeviceSetMigMode(h, restore))
    return r


def _placements(h: Any, pid: int) -> list[list[int]]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, None, ctypes.byref(count))
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, arr, ctypes.byref(count))
    return [[arr[i].start, arr[i].size] for i in range(count.value)]


def _mig_ids(h: Any) -> dict[str, Any]:
    """Create instances in a few sequences and record the ids the driver assigns (cleans up)."""
    out: dict[str, Any] = {}
    for seq in ([19, 14, 5], [9, 9], [15, 15], [0]):
        gis: list[Any] = []
        ids: list[Any] = []
        for pid in seq:
            try:
                gi = pynvml.nvmlDeviceCreateGpuInstance(h, pid)
            except pynvml.NVMLError as e:
                ids.append(f"<{type(e).__name__}>")
                continue
            gis.append(gi)
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            ids.append([info.id, info.placement.start])
        if gis:
            ci = _try(partial(pynvml.nvmlGpuInstanceCreateComputeInstance, gis[0], 0))
            if not isinstance(ci, str):
                out[f"ci_id_on_fresh_gi{seq}"] = pynvml.nvmlComputeInstanceGetInfo(ci).id
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
                out[f"mig_name{seq}"] = pynvml.nvmlDeviceGetName(mig)
                out[f"mig_memory{seq}"] = pynvml.nvmlDeviceGetMemoryInfo(mig).total
                out[f"mig_index1{seq}"] = _try(
                    lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 1) and "found"
                )
                out[f"destroy_gi_with_ci{seq}"] = _try(partial(pynvml.nvmlGpuInstanceDestroy, gis[0]))
                _try(partial(pynvml.nvmlComputeInstanceDestroy, ci))
        out[f"gi_ids{seq}"] = ids
        for gi in gis:
            _try(partial(pynvml.nvmlGpuInstanceDestroy, gi))
    return out


def compare(real: dict[str, Any], fake: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(counted differences, informational differences) as printable lines."""
    counted: list[str] = []
    info: list[str] = []
    for key in sorted(set(real) | set(fake)):
        a, b = real.get(key, "<absent>"), fake.get(key, "<absent>")
        if a == b:
            continue
        line = f"{key}:\n    real: {a!r}\n    fake: {b!r}"
        (info if key.startswith(INFORMATIONAL) else counted).append(line)
    return counted, info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default="dgx-h200")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--mig", action="store_true", help="also enable MIG on the real GPU (root)")
    parser.add_argument("--json", help="write both query results here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a counted difference is found")
    args = parser.parse_args(argv)

    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as e:
        print(f"skipped: no NVIDIA GPU/NVML ({e})")
        return 0
    try:
        real = query(args.gpu, args.mig)
    finally:
        pynvml.nvmlShutdown()

    import fakegpu

    with fakegpu.installed(args.profile):
        pynvml.nvmlInit()
        fake = query(args.gpu, args.mig)
        pynvml.nvmlShutdown()

    if args.json:
        Path(args.json).write_text(json.dumps({"real": real, "fake": fake}, indent=2, default=str))
    counted, info = compare(real, fake)
    print(f"real: {real['name']} (driver {real['driver_version']}), fake: {args.profile} GPU {args.gpu}")
    print(f"{len(counted)} difference(s):")
    for line in counted:
        print("  " + line)
    print(f"{len(info)} expected difference(s) (identity, live values):")
    for line in info:
        print("  " + line)
    return 1 if counted and args.strict else 0


if __name__ == "__main__":
    raise SystemExit(main())
