"""Fake NVML symbols: library init, system queries and per-device queries."""

from __future__ import annotations

import re
import time
import uuid as uuidlib
from typing import Any

from . import _codes as c
from . import _mig
from ._cstructs import GpuFabricInfo_v3, struct_version
from ._ctypes import (
    Status,
    array_out,
    check_version,
    element,
    handle_out,
    num,
    put,
    put_str,
    target,
    text_in,
)
from ._models import MIB, MODELS
from ._profiles import mig_uuid
from ._symbase import Resolved, SymbolBase

_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID_TEXT = re.compile(rf"^(GPU|MIG)-({_HEX_UUID})$")
_LEGACY_MIG_UUID = re.compile(rf"^MIG-(GPU-{_HEX_UUID})/(\d+)/(\d+)$")
"""The MIG UUID form of drivers before R470, which NVML still resolves."""
_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$")

_LOCATION_DRAM = 2
"""NVML_MEMORY_LOCATION_DRAM (``nvmlMemoryLocation_t``)."""
_MEMORY_LOCATIONS = 8
"""NVML_MEMORY_LOCATION_COUNT: L1, L2, DRAM, register file, texture, texture shared, CBU, SRAM."""

_FI_POWER_INSTANT = 186
_FI_POWER_DEFAULT_LIMIT = 189
_FI_POWER_CURRENT_LIMIT = 190
_FI_POWER_REQUESTED_LIMIT = 192
"""NVML_FI_DEV_POWER_* field ids (nvml.h), the values in milliwatts."""
_POWER_SCOPE_GPU = 0
"""NVML_POWER_SCOPE_GPU: a power field's ``scopeId`` for the GPU (1, the module, is not modelled)."""
_VALUE_TYPE_UINT = 1
"""NVML_VALUE_TYPE_UNSIGNED_INT."""

MIG_USED_MIB = 13
"""What an idle MIG device reports as used memory."""


def _mig_name(r: Resolved) -> str:
    p = r.gi_profile
    assert r.ci is not None
    if r.ci.size == p.slices:
        return f"{r.model.name} MIG {p.name}"
    return f"{r.model.name} MIG {r.ci.size}c.{p.name}"


def _power_mw(r: Resolved) -> int:
    """What a GPU draws: its model's idle power, a watt more or less per GPU."""
    return r.model.idle_power_mw + 1000 * (r.gpu.index % 3)


class DeviceSymbols(SymbolBase):
    """nvmlInit/Shutdown, nvmlSystem*, nvmlDeviceGet* for identity, memory, PCI, health values."""

    initialized = 0

    # -- library -----------------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: Any = 0) -> int:
        self.initialized += 1
        return c.SUCCESS

    def nvmlInit_v2(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlInit(self) -> int:
        return self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> int:
        if self.initialized <= 0:
            return c.ERROR_UNINITIALIZED
        self.initialized -= 1
        return c.SUCCESS

    def nvmlErrorString(self, result: Any) -> bytes:
        code = num(result)
        return c.ERROR_STRINGS.get(code, f"Unknown Error (code {code})").encode()

    # -- system ------------------------------------------------------------------------------

    def nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> int:
        put_str(buf, length, self.store.read().driver_version)
        return c.SUCCESS

    def nvmlSystemGetNVMLVersion(self, buf: Any, length: Any) -> int:
        cuda = self.store.read().cuda_driver_version
        put_str(buf, length, f"{cuda // 1000}.{self.store.read().driver_version}")
        return c.SUCCESS

    def nvmlSystemGetCudaDriverVersion(self, out: Any) -> int:
        put(out, self.store.read().cuda_driver_version)
        return c.SUCCESS

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    # -- enumeration -------------------------------------------------------------------------

    def nvmlDeviceGetCount_v2(self, out: Any) -> int:
        put(out, len(self.store.read().gpus))
        return c.SUCCESS

    nvmlDeviceGetCount = nvmlDeviceGetCount_v2

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        state = self.store.read()
        i = num(index)
        if not 0 <= i < len(state.gpus):
            return c.ERROR_INVALID_ARGUMENT
        g = self._gpu_at(state, i)
        handle_out(out, self.device_handle(g))
        return c.SUCCESS

    nvmlDeviceGetHandleByIndex = nvmlDeviceGetHandleByIndex_v2

    def nvmlDeviceGetHandleByUUID(self, uuid: Any, out: Any) -> int:
        """A GPU or MIG device by UUID: INVALID_ARGUMENT for a malformed string, NOT_FOUND for a
        well-formed one no device has (nvml.h)."""
        wanted = text_in(uuid)
        legacy = _LEGACY_MIG_UUID.match(wanted)
        if legacy is None and _UUID_TEXT.match(wanted) is None:
            return c.ERROR_INVALID_ARGUMENT
        wanted = wanted.lower() if legacy is None else wanted
        state = self.store.read()
        for g in state.gpus:
            if legacy is not None:
                if g.uuid.lower() != legacy.group(1).lower():
                    continue
                devices = [
                    (gi, ci)
                    for gi, ci in _mig.mig_devices(g)
                    if (gi.id, ci.id) == (int(legacy.group(2)), int(legacy.group(3)))
                ]
            elif g.uuid.lower() == wanted:
                if g.lost:
                    return c.ERROR_GPU_IS_LOST
                handle_out(out, self.device_handle(g))
                return c.SUCCESS
            elif wanted.startswith("mig-"):
                devices = [
                    (gi, ci)
                    for gi, ci in _mig.mig_devices(g)
                    if mig_uuid(g.uuid, gi.id, ci.id).lower() == wanted
                ]
            else:
                continue
            if devices:
                if g.lost:
                    return c.ERROR_GPU_IS_LOST
                handle_out(out, self.mig_handle(g, *devices[0]))
                return c.SUCCESS
        return c.ERROR_NOT_FOUND

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id: Any, out: Any) -> int:
        m = _BUS_ID.match(text_in(bus_id).strip())
        if not m:
            return c.ERROR_INVALID_ARGUMENT
        domain, bus, dev = int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16)
        for g in self.store.read().gpus:
            if (g.pci_domain, g.pci_bus, 0) == (domain, bus, dev) and not MODELS[g.model].identity_only:
                if g.lost:
                    return c.ERROR_GPU_IS_LOST
                handle_out(out, self.device_handle(g))
                return c.SUCCESS
        return c.ERROR_NOT_FOUND

    nvmlDeviceGetHandleByPciBusId = nvmlDeviceGetHandleByPciBusId_v2

    # -- identity ----------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: Any, buf: Any, length: Any) -> int:
        r = self.dev(handle)
        put_str(buf, length, _mig_name(r) if r.is_mig else r.model.name)
        return c.SUCCESS

    def nvmlDeviceGetUUID(self, handle: Any, buf: Any, length: Any) -> int:
        r = self.dev(handle)
        if r.is_mig:
            assert r.gi is not None and r.ci is not None
            text = mig_uuid(r.gpu.uuid, r.gi.id, r.ci.id)
        else:
            text = r.gpu.uuid
        put_str(buf, length, text)
        return c.SUCCESS

    def nvmlDeviceGetIndex(self, handle: Any, out: Any) -> int:
        r = self.dev(handle)
        if r.is_mig:
            # nvml.h: for a MIG device, the index nvmlDeviceGetMigDeviceHandleByIndex takes
            devices = _mig.mig_devices(r.gpu)
            put(out, next(i for i, (gi, ci) in enumerate(devices) if gi is r.gi and ci is r.ci))
        else:
            put(out, r.gpu.index)
        return c.SUCCESS

    def nvmlDeviceGetMinorNumber(self, handle: Any, out: Any) -> int:
        put(out, self.full(handle).gpu.minor)
        return c.SUCCESS

    def nvmlDeviceGetNumaNodeId(self, handle: Any, out: Any) -> int:
        # two sockets: the PCI buses of the first below 0x80, as on a DGX (x86 root complexes)
        g = self.full(handle).gpu
        put(out, 2 * g.pci_domain + (1 if g.pci_bus >= 0x80 else 0))
        return c.SUCCESS

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        r = self.dev(handle)
        put(major, r.model.compute_capability[0])
        put(minor, r.model.compute_capability[1])
        return c.SUCCESS

    def nvmlDeviceGetArchitecture(self, handle: Any, out: Any) -> int:
        put(out, self.full(handle).model.architecture)
        return c.SUCCESS

    def nvmlDeviceGetBrand(self, handle: Any, out: Any) -> int:
        put(out, self.full(handle).model.brand)
        return c.SUCCESS

    def nvmlDeviceGetSerial(self, handle: Any, buf: Any, length: Any) -> int:
        put_str(buf, length, self.full(handle).gpu.serial_number)
        return c.SUCCESS

    def nvmlDeviceGetBoardPartNumber(self, handle: Any, buf: Any, length: Any) -> int:
        put_str(buf, length, self.full(handle).model.board_part_number)
        return c.SUCCESS

    def nvmlDeviceGetVbiosVersion(self, handle: Any, buf: Any, length: Any) -> int:
        put_str(buf, length, self.full(handle).model.vbios)
        return c.SUCCESS

    def nvmlDeviceGetPciInfo_v3(self, handle: Any, out: Any) -> int:
        r = self.full(handle)
        g, model = r.gpu, r.model
        info = target(out)
        info.busIdLegacy = f"{g.pci_domain:04X}:{g.pci_bus:02X}:00.0".encode()
        info.busId = f"{g.pci_domain:08X}:{g.pci_bus:02X}:00.0".encode()
        info.domain = g.pci_domain
        info.bus = g.pci_bus
        info.device = 0
        info.pciDeviceId = model.pci_device_id
        info.pciSubSystemId = model.pci_subsystem_id
        return c.SUCCESS

    nvmlDeviceGetPciInfo_v2 = nvmlDeviceGetPciInfo_v3

    def nvmlDeviceGetAttributes_v2(self, handle: Any, out: Any) -> int:
        r = self.full(handle)
        a = target(out)
        if r.is_mig:
            p = r.gi_profile
            assert r.ci is not None
            share = r.ci.size == p.slices
            a.multiprocessorCount = (
                p.multiprocessors if share else r.ci.size * r.model.gi_profiles[0].multiprocessors
            )
            a.sharedCopyEngineCount = p.copy_engines
            a.sharedDecoderCount = p.decoders
            a.sharedEncoderCount = p.encoders
            a.sharedJpegCount = p.jpegs
            a.sharedOfaCount = p.ofas
            a.gpuInstanceSliceCount = p.slices
            a.computeInstanceSliceCount = r.ci.size
            a.memorySizeMB = p.memory_mib
        else:
            full = r.model.gi_profiles[-1] if r.model.mig_capable else None
            a.multiprocessorCount = r.model.multiprocessors
            a.sharedCopyEngineCount = full.copy_engines if full else 2
            a.sharedDecoderCount = full.decoders if full else 2
            a.sharedEncoderCount = full.encoders if full else 1
            a.sharedJpegCount = full.jpegs if full else 1
            a.sharedOfaCount = full.ofas if full else 1
            a.gpuInstanceSliceCount = _mig.COMPUTE_SLICES if full else 0
            a.computeInstanceSliceCount = _mig.COMPUTE_SLICES if full else 0
            a.memorySizeMB = r.model.memory_total // MIB
        return c.SUCCESS

    nvmlDeviceGetAttributes = nvmlDeviceGetAttributes_v2

    # -- memory ------------------------------------------------------------------------------

    def _memory(self, r: Resolved) -> tuple[int, int, int]:
        """(total, reserved, used-by-processes) in bytes."""
        if r.is_mig:
            return r.gi_profile.memory_mib * MIB, 0, MIG_USED_MIB * MIB
        return r.model.memory_total, r.model.reserved_mib * MIB, 0

    def nvmlDeviceGetMemoryInfo(self, handle: Any, out: Any) -> int:
        total, reserved, used = self._memory(self.full(handle))
        m = target(out)
        m.total = total
        m.used = reserved + used
        m.free = total - reserved - used
        return c.SUCCESS

    def nvmlDeviceGetMemoryInfo_v2(self, handle: Any, out: Any) -> int:
        m = target(out)
        check_version(m, "Memory")
        total, reserved, used = self._memory(self.full(handle))
        m.total = total
        m.reserved = reserved
        m.used = used
        m.free = total - reserved - used
        return c.SUCCESS

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: Any, out: Any) -> int:
        r = self.full(handle)
        total = r.model.bar1_mib * MIB
        m = target(out)
        m.bar1Total, m.bar1Used, m.bar1Free = total, 2 * MIB, total - 2 * MIB
        return c.SUCCESS

    def nvmlDeviceGetVirtualizationMode(self, handle: Any, out: Any) -> int:
        self.full(handle)
        put(out, c.GPU_VIRTUALIZATION_MODE_NONE)  # the fake is always bare metal
        return c.SUCCESS

    # -- NVSwitch fabric ---------------------------------------------------------------------

    def _fabric(self, handle: Any, info: Any) -> None:
        r = self.physical(handle)
        if not (r.model.fabric and r.state.nvswitch):
            raise Status(c.ERROR_NOT_SUPPORTED)
        info.clusterUuid[:] = list(uuidlib.UUID(r.state.fabric_cluster_uuid).bytes)
        info.status = c.ERROR_UNKNOWN if r.gpu.fabric_failed else c.SUCCESS
        info.cliqueId = r.state.fabric_clique_id
        info.state = c.GPU_FABRIC_STATE_COMPLETED

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, out: Any) -> int:
        self._fabric(handle, target(out))
        return c.SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, out: Any) -> int:
        info = target(out)
        version = check_version(info, "GpuFabricInfo")
        self._fabric(handle, info)
        info.healthMask = c.GPU_FABRIC_HEALTH_MASK_HEALTHY
        if version == struct_version(GpuFabricInfo_v3, 3):
            failed = self.physical(handle).gpu.fabric_failed
            info.healthSummary = (
                c.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY if failed else c.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
            )
        return c.SUCCESS

    # -- health values -----------------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, out: Any) -> int:
        r = self.physical(handle)
        if num(sensor) != 0:
            return c.ERROR_INVALID_ARGUMENT
        put(out, r.model.idle_temperature_c + r.gpu.index % 4)
        return c.SUCCESS

    def nvmlDeviceGetUtilizationRates(self, handle: Any, out: Any) -> int:
        r = self.physical(handle)
        if r.gpu.mig_current:
            return c.ERROR_NOT_SUPPORTED  # not available per GPU while MIG is on
        u = target(out)
        u.gpu = 0
        u.memory = 0
        return c.SUCCESS

    def nvmlDeviceGetPowerUsage(self, handle: Any, out: Any) -> int:
        r = self.physical(handle)
        put(out, _power_mw(r))
        return c.SUCCESS

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any, out: Any) -> int:
        put(out, self.physical(handle).model.power_limit_mw)
        return c.SUCCESS

    nvmlDeviceGetEnforcedPowerLimit = nvmlDeviceGetPowerManagementLimit
    nvmlDeviceGetPowerManagementDefaultLimit = nvmlDeviceGetPowerManagementLimit

    def nvmlDeviceGetFieldValues(self, handle: Any, count: Any, values: Any) -> int:
        # The call succeeds and each field carries its own status, as nvml.h has it; a field
        # the fake does not model answers NOT_SUPPORTED in its nvmlReturn (nvidia-smi -q asks
        # for the power limits here and prints whatever a field left in place on failure).
        r = self.full(handle)
        n = num(count)
        arr, length = array_out(values)
        if n < 0 or (length is not None and n > length):
            raise Status(c.ERROR_INVALID_ARGUMENT)
        answers = {} if r.is_mig else self._power_fields(r)
        stamp = time.time_ns() // 1000
        for i in range(n):
            field = element(arr, i)
            value = answers.get(field.fieldId) if field.scopeId == _POWER_SCOPE_GPU else None
            field.timestamp = stamp
            field.latencyUsec = 0
            if value is None:
                field.nvmlReturn = c.ERROR_NOT_SUPPORTED
            else:
                field.valueType = _VALUE_TYPE_UINT
                field.value.uiVal = value
                field.nvmlReturn = c.SUCCESS
        return c.SUCCESS

    @staticmethod
    def _power_fields(r: Resolved) -> dict[int, int]:
        """The NVML_FI_DEV_POWER_* fields the model has, in milliwatts (min and max it has not)."""
        limit = r.model.power_limit_mw
        if not limit:
            return {}
        return {
            _FI_POWER_INSTANT: _power_mw(r),
            _FI_POWER_DEFAULT_LIMIT: limit,
            _FI_POWER_CURRENT_LIMIT: limit,
            _FI_POWER_REQUESTED_LIMIT: limit,
        }

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any, out: Any) -> int:
        r = self.physical(handle)
        put(out, 1_000_000 * (100 + r.gpu.index))
        return c.SUCCESS

    def nvmlDeviceGetPersistenceMode(self, handle: Any, out: Any) -> int:
        self.physical(handle)
        put(out, 1)
        return c.SUCCESS

    def nvmlDeviceGetComputeMode(self, handle: Any, out: Any) -> int:
        self.full(handle)
        put(out, 0)  # DEFAULT
        return c.SUCCESS

    def nvmlDeviceGetPerformanceState(self, handle: Any, out: Any) -> int:
        self.physical(handle)
        put(out, 0)
        return c.SUCCESS

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: Any, out: Any) -> int:
        self.physical(handle)
        put(out, {0: 345, 1: 345, 2: 2619, 3: 765}.get(num(clock), 0))
        return c.SUCCESS

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: Any, out: Any) -> int:
        self.physical(handle)
        put(out, {0: 1980, 1: 1980, 2: 2619, 3: 1545}.get(num(clock), 0))
        return c.SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> int:
        self.full(handle)
        put(count, 0)
        return c.SUCCESS

    nvmlDeviceGetGraphicsRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses_v3

    # -- ECC ---------------------------------------------------------------------------------

    def nvmlDeviceGetEccMode(self, handle: Any, current: Any, pending: Any) -> int:
        self.physical(handle)
        put(current, 1)
        put(pending, 1)
        return c.SUCCESS

    def _ecc(self, handle: Any, error_type: Any, counter_type: Any) -> int:
        g = self.physical(handle).gpu
        et, ct = num(error_type), num(counter_type)
        if et not in (0, 1) or ct not in (0, 1):
            raise Status(c.ERROR_INVALID_ARGUMENT)
        if ct == 0:
            return g.ecc_volatile_corrected if et == 0 else g.ecc_volatile_uncorrected
        return g.ecc_aggregate_corrected if et == 0 else g.ecc_aggregate_uncorrected

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter_type: Any, out: Any) -> int:
        put(out, self._ecc(handle, error_type, counter_type))
        return c.SUCCESS

    def nvmlDeviceGetRemappedRows(
        self, handle: Any, correctable: Any, uncorrectable: Any, pending: Any, failure: Any
    ) -> int:
        r = self.physical(handle)
        if not r.model.row_remapping:
            return c.ERROR_NOT_SUPPORTED
        g = r.gpu
        put(correctable, g.remapped_correctable)
        put(uncorrectable, g.remapped_uncorrectable)
        put(pending, int(g.remap_pending))
        put(failure, int(g.remap_failure))
        return c.SUCCESS

    def nvmlDeviceGetMemoryErrorCounter(
        self, handle: Any, error_type: Any, counter_type: Any, location: Any, out: Any
    ) -> int:
        r = self.full(handle)
        loc = num(location)
        if not 0 <= loc < _MEMORY_LOCATIONS:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        if r.is_mig:
            # nvml.h: a MIG device answers per instance only "non-DRAM uncorrectable volatile
            # errors" (nvidia-smi's MIG table asks for SRAM); every injected error is DRAM, so 0
            if (num(error_type), num(counter_type)) != (1, 0) or loc == _LOCATION_DRAM:
                raise Status(c.ERROR_NOT_SUPPORTED)
            put(out, 0)
            return c.SUCCESS
        n = self._ecc(handle, error_type, counter_type)
        put(out, n if loc == _LOCATION_DRAM else 0)  # all injected errors are device memory (DRAM)
        return c.SUCCESS
