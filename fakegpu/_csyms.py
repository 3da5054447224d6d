"""The C signatures of the modelled NVML symbols, and every symbol the C library exports.

One table drives both sides of ``libnvidia-ml.so.1``: :mod:`fakegpu._libbuild` writes a typed
C function per entry (so the C compiler, not a guess, widens and truncates each argument), and
:mod:`fakegpu._cabi` turns the raw values back into what the symbol code takes. An argument is
one token:

=========  ==========================================  ====================================
token      C parameter                                 what the symbol gets
=========  ==========================================  ====================================
``h``      a handle (``nvmlDevice_t``, ...)            its integer value
``u``      ``unsigned int`` or an enum                 an int
``U``      ``unsigned long long``                      an int
``s``      ``const char *``                            the bytes (None for NULL)
``b``      ``char *`` of the next argument's length     a ``c_char`` array over the buffer
``o:T``    ``T *`` out (``u32``, ``i32``, ``u64``,     a ctypes object over the target
           ``h`` or a struct of :mod:`._cstructs`)     (None for NULL)
``v:F``    a versioned struct of family ``F``          the layout its version word names
``a:T``    ``T *`` array out                           a ctypes pointer (None for NULL)
=========  ==========================================  ====================================

Every other exported name (the rest of what go-nvml v0.13.4-1 resolves, listed in
``_clib/exports.txt``) answers NVML_ERROR_NOT_SUPPORTED from C without calling in, but those of
:data:`ANSWERED_IN_C`.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

SIGNATURES: dict[str, tuple[str, ...]] = {
    # library
    "nvmlInit": (),
    "nvmlInit_v2": (),
    "nvmlInitWithFlags": ("u",),
    "nvmlShutdown": (),
    # system
    "nvmlSystemGetDriverVersion": ("b", "u"),
    "nvmlSystemGetNVMLVersion": ("b", "u"),
    "nvmlSystemGetCudaDriverVersion": ("o:i32",),
    "nvmlSystemGetCudaDriverVersion_v2": ("o:i32",),
    # enumeration
    "nvmlDeviceGetCount": ("o:u32",),
    "nvmlDeviceGetCount_v2": ("o:u32",),
    "nvmlDeviceGetHandleByIndex": ("u", "o:h"),
    "nvmlDeviceGetHandleByIndex_v2": ("u", "o:h"),
    "nvmlDeviceGetHandleByUUID": ("s", "o:h"),
    "nvmlDeviceGetHandleByPciBusId": ("s", "o:h"),
    "nvmlDeviceGetHandleByPciBusId_v2": ("s", "o:h"),
    # identity
    "nvmlDeviceGetName": ("h", "b", "u"),
    "nvmlDeviceGetUUID": ("h", "b", "u"),
    "nvmlDeviceGetSerial": ("h", "b", "u"),
    "nvmlDeviceGetBoardPartNumber": ("h", "b", "u"),
    "nvmlDeviceGetVbiosVersion": ("h", "b", "u"),
    "nvmlDeviceGetIndex": ("h", "o:u32"),
    "nvmlDeviceGetMinorNumber": ("h", "o:u32"),
    "nvmlDeviceGetNumaNodeId": ("h", "o:i32"),
    "nvmlDeviceGetCudaComputeCapability": ("h", "o:i32", "o:i32"),
    "nvmlDeviceGetArchitecture": ("h", "o:u32"),
    "nvmlDeviceGetBrand": ("h", "o:u32"),
    "nvmlDeviceGetPciInfo_v2": ("h", "o:PciInfo"),
    "nvmlDeviceGetPciInfo_v3": ("h", "o:PciInfo"),
    "nvmlDeviceGetAttributes": ("h", "o:DeviceAttributes"),
    "nvmlDeviceGetAttributes_v2": ("h", "o:DeviceAttributes"),
    # memory and modes
    "nvmlDeviceGetMemoryInfo": ("h", "o:Memory"),
    "nvmlDeviceGetMemoryInfo_v2": ("h", "v:Memory"),
    "nvmlDeviceGetBAR1MemoryInfo": ("h", "o:BAR1Memory"),
    "nvmlDeviceGetVirtualizationMode": ("h", "o:u32"),
    "nvmlDeviceGetPersistenceMode": ("h", "o:u32"),
    "nvmlDeviceGetComputeMode": ("h", "o:u32"),
    "nvmlDeviceGetGpuFabricInfo": ("h", "o:GpuFabricInfo"),
    "nvmlDeviceGetGpuFabricInfoV": ("h", "v:GpuFabricInfo"),
    # health values
    "nvmlDeviceGetTemperature": ("h", "u", "o:u32"),
    "nvmlDeviceGetUtilizationRates": ("h", "o:Utilization"),
    "nvmlDeviceGetPowerUsage": ("h", "o:u32"),
    "nvmlDeviceGetPowerManagementLimit": ("h", "o:u32"),
    "nvmlDeviceGetPowerManagementDefaultLimit": ("h", "o:u32"),
    "nvmlDeviceGetEnforcedPowerLimit": ("h", "o:u32"),
    "nvmlDeviceGetTotalEnergyConsumption": ("h", "o:u64"),
    "nvmlDeviceGetPerformanceState": ("h", "o:u32"),
    "nvmlDeviceGetClockInfo": ("h", "u", "o:u32"),
    "nvmlDeviceGetMaxClockInfo": ("h", "u", "o:u32"),
    "nvmlDeviceGetComputeRunningProcesses_v3": ("h", "o:u32", "a:u32"),
    "nvmlDeviceGetGraphicsRunningProcesses_v3": ("h", "o:u32", "a:u32"),
    "nvmlDeviceGetMPSComputeRunningProcesses_v3": ("h", "o:u32", "a:u32"),
    "nvmlDeviceGetEccMode": ("h", "o:u32", "o:u32"),
    "nvmlDeviceGetTotalEccErrors": ("h", "u", "u", "o:u64"),
    "nvmlDeviceGetMemoryErrorCounter": ("h", "u", "u", "u", "o:u64"),
    "nvmlDeviceGetRemappedRows": ("h", "o:u32", "o:u32", "o:u32", "o:u32"),
    "nvmlDeviceGetFieldValues": ("h", "u", "a:FieldValue"),
    # MIG mode and GPU instances
    "nvmlDeviceGetMigMode": ("h", "o:u32", "o:u32"),
    "nvmlDeviceSetMigMode": ("h", "u", "o:u32"),
    "nvmlDeviceGetGpuInstanceProfileInfo": ("h", "u", "o:GpuInstanceProfileInfo"),
    "nvmlDeviceGetGpuInstanceProfileInfoV": ("h", "u", "v:GpuInstanceProfileInfo"),
    "nvmlDeviceGetGpuInstancePossiblePlacements": ("h", "u", "a:Placement", "o:u32"),
    "nvmlDeviceGetGpuInstancePossiblePlacements_v2": ("h", "u", "a:Placement", "o:u32"),
    "nvmlDeviceGetGpuInstanceRemainingCapacity": ("h", "u", "o:u32"),
    "nvmlDeviceCreateGpuInstance": ("h", "u", "o:h"),
    "nvmlDeviceCreateGpuInstanceWithPlacement": ("h", "u", "o:Placement", "o:h"),
    "nvmlGpuInstanceDestroy": ("h",),
    "nvmlDeviceGetGpuInstances": ("h", "u", "a:h", "o:u32"),
    "nvmlDeviceGetGpuInstanceById": ("h", "u", "o:h"),
    "nvmlGpuInstanceGetInfo": ("h", "o:GpuInstanceInfo"),
    # compute instances
    "nvmlGpuInstanceGetComputeInstanceProfileInfo": ("h", "u", "u", "o:ComputeInstanceProfileInfo"),
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV": ("h", "u", "u", "v:ComputeInstanceProfileInfo"),
    "nvmlGpuInstanceGetComputeInstanceRemainingCapacity": ("h", "u", "o:u32"),
    "nvmlGpuInstanceGetComputeInstancePossiblePlacements": ("h", "u", "a:Placement", "o:u32"),
    "nvmlGpuInstanceCreateComputeInstance": ("h", "u", "o:h"),
    "nvmlGpuInstanceCreateComputeInstanceWithPlacement": ("h", "u", "o:Placement", "o:h"),
    "nvmlComputeInstanceDestroy": ("h",),
    "nvmlGpuInstanceGetComputeInstances": ("h", "u", "a:h", "o:u32"),
    "nvmlGpuInstanceGetComputeInstanceById": ("h", "u", "o:h"),
    "nvmlComputeInstanceGetInfo": ("h", "o:ComputeInstanceInfo"),
    "nvmlComputeInstanceGetInfo_v2": ("h", "o:ComputeInstanceInfo"),
    # MIG devices
    "nvmlDeviceIsMigDeviceHandle": ("h", "o:u32"),
    "nvmlDeviceGetGpuInstanceId": ("h", "o:u32"),
    "nvmlDeviceGetComputeInstanceId": ("h", "o:u32"),
    "nvmlDeviceGetMaxMigDeviceCount": ("h", "o:u32"),
    "nvmlDeviceGetMigDeviceHandleByIndex": ("h", "u", "o:h"),
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": ("h", "o:h"),
    # events
    "nvmlEventSetCreate": ("o:h",),
    "nvmlEventSetFree": ("h",),
    "nvmlDeviceGetSupportedEventTypes": ("h", "o:u64"),
    "nvmlDeviceRegisterEvents": ("h", "U", "h"),
    "nvmlEventSetWait": ("h", "o:EventData", "u"),
    "nvmlEventSetWait_v2": ("h", "o:EventData", "u"),
}
"""Modelled symbol -> its argument tokens, in C order (see the module docstring)."""

MAX_ARGS = 6
"""The most arguments a modelled symbol takes (the C side passes this many values)."""

ANSWERED_IN_C = frozenset({"nvmlErrorString", "nvmlInternalGetExportTable"})
"""Symbols the C library answers itself, without Python: ``nvmlErrorString`` returns a string,
not a status; ``nvmlInternalGetExportTable`` (NVML's private table, asked for by NVIDIA's
``nvidia-smi``) works before ``nvmlInit``, as the real one does (``_clib/front.c``)."""


@cache
def exported() -> tuple[str, ...]:
    """Every symbol the library exports: the modelled ones and the rest of go-nvml's list."""
    text = resources.files("fakegpu").joinpath("_clib", "exports.txt").read_text()
    names = {line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}
    return tuple(sorted(names | set(SIGNATURES) | ANSWERED_IN_C))


def modelled() -> tuple[str, ...]:
    """The modelled symbols in dispatch order (their index is what C passes)."""
    return tuple(SIGNATURES)


def table_digest() -> str:
    """A digest of the table: the C library and this module must agree on it."""
    text = "\n".join(f"{n}({','.join(a)})" for n, a in SIGNATURES.items())
    return hashlib.sha256(text.encode()).hexdigest()[:16]
