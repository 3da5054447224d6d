"""Fake NVML symbols for MIG: mode, GPU/compute-instance profiles, placements, instances, MIG devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _codes as c
from . import _mig
from ._ctypes import (
    Status,
    array_out,
    check_version,
    element,
    handle_array_store,
    handle_out,
    handle_store,
    num,
    put,
    target,
)
from ._models import GiProfile, Model
from ._symbase import Resolved, SymbolBase

GI_PROFILE_COUNT = 0x12
CI_PROFILE_COUNT = 0x9
CI_ENGINE_SHARED = 0


def _gi_by_index(model: Model, index: int) -> GiProfile:
    if not 0 <= index < GI_PROFILE_COUNT:
        raise Status(c.ERROR_INVALID_ARGUMENT)
    for p in model.gi_profiles:
        if p.index == index:
            return p
    raise Status(c.ERROR_NOT_SUPPORTED)


def _placement_in(arg: Any) -> tuple[int, int | None]:
    p = target(arg)
    return num(p.start), (num(p.size) if hasattr(p, "size") else None)


class MigSymbols(SymbolBase):
    """nvmlDevice*Mig*, nvmlDevice*GpuInstance*, nvmlGpuInstance*, nvmlComputeInstance*."""

    def _enabled(self, handle: Any) -> Resolved:
        r = self.mig_gpu(handle)
        if r.gpu.mig_current != c.MIG_ENABLE:
            raise Status(c.ERROR_NOT_SUPPORTED)
        return r

    # -- mode --------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        r = self.mig_gpu(handle)
        put(current, r.gpu.mig_current)
        put(pending, r.gpu.mig_pending)
        return c.SUCCESS

    def nvmlDeviceSetMigMode(self, handle: Any, mode: Any, status: Any) -> int:
        r = self.mig_gpu(handle)
        with self.store.mutate() as state:
            g = state.gpus[r.gpu.index]
            activation = _mig.set_mig_mode(g, r.model, num(mode))
        put(status, activation)
        return c.SUCCESS

    # -- GPU-instance profiles ---------------------------------------------------------------

    def _fill_gi_info(self, handle: Any, index: Any, out: Any, v2: bool) -> int:
        r = self.mig_gpu(handle)
        p = _gi_by_index(r.model, num(index))
        info = target(out)
        if v2:
            check_version(info, "GpuInstanceProfileInfo")
        info.id = p.id
        if hasattr(info, "isP2pSupported"):  # v1 and v2; v3 has capabilities instead
            info.isP2pSupported = 0
        if hasattr(info, "capabilities"):
            info.capabilities = 0
        info.sliceCount = p.slices
        info.instanceCount = p.instance_count
        info.multiprocessorCount = p.multiprocessors
        info.copyEngineCount = p.copy_engines
        info.decoderCount = p.decoders
        info.encoderCount = p.encoders
        info.jpegCount = p.jpegs
        info.ofaCount = p.ofas
        info.memorySizeMB = p.memory_mib
        if v2:
            info.name = f"MIG {p.name}".encode()
        return c.SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, index: Any, out: Any) -> int:
        return self._fill_gi_info(handle, index, out, v2=False)

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, index: Any, out: Any) -> int:
        return self._fill_gi_info(handle, index, out, v2=True)

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, handle: Any, profile_id: Any, out: Any, count: Any
    ) -> int:
        r = self.mig_gpu(handle)
        p = _mig.profile_for(r.model, num(profile_id))
        return _write_placements(out, count, p.starts, p.memory_slices)

    nvmlDeviceGetGpuInstancePossiblePlacements = nvmlDeviceGetGpuInstancePossiblePlacements_v2

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: Any, profile_id: Any, count: Any) -> int:
        r = self._enabled(handle)
        p = _mig.profile_for(r.model, num(profile_id))
        put(count, _mig.remaining_capacity(r.gpu, r.model, p))
        return c.SUCCESS

    # -- GPU instances -----------------------------------------------------------------------

    def _create_gi(self, handle: Any, profile_id: Any, start: int | None, out: Any) -> int:
        r = self._enabled(handle)
        with self.store.mutate() as state:
            g = state.gpus[r.gpu.index]
            _mig.require_mig(g, r.model)
            gi = _mig.create_gpu_instance(state, g, r.model, num(profile_id), start)
            value = self.gi_handle(g, gi)
        handle_out(out, value)
        return c.SUCCESS

    def nvmlDeviceCreateGpuInstance(self, handle: Any, profile_id: Any, out: Any) -> int:
        return self._create_gi(handle, profile_id, None, out)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: Any, placement: Any, out: Any
    ) -> int:
        r = self._enabled(handle)
        p = _mig.profile_for(r.model, num(profile_id))
        start, size = _placement_in(placement)
        if size is not None and size != p.memory_slices:
            return c.ERROR_INVALID_ARGUMENT
        return self._create_gi(handle, profile_id, start, out)

    def nvmlGpuInstanceDestroy(self, gi_handle: Any) -> int:
        r, gi = self.gpu_instance(gi_handle)
        with self.store.mutate() as state:
            g = state.gpus[r.gpu.index]
            live = g.gpu_instance(gi.id)
            if live is None or live.serial != gi.serial:
                return c.ERROR_INVALID_ARGUMENT
            _mig.destroy_gpu_instance(g, live)
        return c.SUCCESS

    def nvmlDeviceGetGpuInstances(self, handle: Any, profile_id: Any, out: Any, count: Any) -> int:
        r = self._enabled(handle)
        p = _mig.profile_for(r.model, num(profile_id))
        found = [gi for gi in r.gpu.gpu_instances if gi.profile_id == p.id]
        if out is None:
            put(count, len(found))
            return c.SUCCESS if not found else c.ERROR_INSUFFICIENT_SIZE
        arr, length = array_out(out)
        if length is not None and length < len(found):
            put(count, len(found))
            return c.ERROR_INSUFFICIENT_SIZE
        for i, gi in enumerate(found):
            handle_array_store(arr, i, self.gi_handle(r.gpu, gi))
        put(count, len(found))
        return c.SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: Any, out: Any) -> int:
        r = self._enabled(handle)
        gi = r.gpu.gpu_instance(num(gi_id))
        if gi is None:
            return c.ERROR_NOT_FOUND
        handle_out(out, self.gi_handle(r.gpu, gi))
        return c.SUCCESS

    def nvmlGpuInstanceGetInfo(self, gi_handle: Any, out: Any) -> int:
        r, gi = self.gpu_instance(gi_handle)
        info = target(out)
        handle_store(info, type(info).device.offset, self.device_handle(r.gpu))
        info.id = gi.id
        info.profileId = gi.profile_id
        info.placement.start = gi.start
        info.placement.size = gi.size
        return c.SUCCESS

    # -- compute instances -------------------------------------------------------------------

    def _ci_profile(self, gi_handle: Any, profile: Any) -> tuple[Resolved, Any, _mig.CiProfile]:
        r, gi = self.gpu_instance(gi_handle)
        pid = num(profile)
        if not 0 <= pid < CI_PROFILE_COUNT:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        if pid not in _mig.CI_SLICES:
            raise Status(c.ERROR_NOT_SUPPORTED)
        return r, gi, _mig.ci_profile_for(r.gi_profile.slices, pid)

    def _fill_ci_info(self, gi_handle: Any, profile: Any, engine: Any, out: Any, v2: bool) -> int:
        if num(engine) != CI_ENGINE_SHARED:
            return c.ERROR_NOT_SUPPORTED
        r, _, p = self._ci_profile(gi_handle, profile)
        gp = r.gi_profile
        whole = p.slices == gp.slices
        info = target(out)
        if v2:
            check_version(info, "ComputeInstanceProfileInfo")
        if hasattr(info, "capabilities"):  # v3
            info.capabilities = 0
        info.id = p.id
        info.sliceCount = p.slices
        info.instanceCount = len(p.starts)
        info.multiprocessorCount = (
            gp.multiprocessors if whole else p.slices * r.model.gi_profiles[0].multiprocessors
        )
        info.sharedCopyEngineCount = gp.copy_engines
        info.sharedDecoderCount = gp.decoders
        info.sharedEncoderCount = gp.encoders
        info.sharedJpegCount = gp.jpegs
        info.sharedOfaCount = gp.ofas
        if v2:
            info.name = (f"MIG {gp.name}" if whole else f"MIG {p.slices}c.{gp.name}").encode()
        return c.SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: Any, profile: Any, engine: Any, out: Any
    ) -> int:
        return self._fill_ci_info(gi, profile, engine, out, v2=False)

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, gi: Any, profile: Any, engine: Any, out: Any
    ) -> int:
        return self._fill_ci_info(gi, profile, engine, out, v2=True)

    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, gi_handle: Any, profile: Any, count: Any
    ) -> int:
        _, gi, p = self._ci_profile(gi_handle, profile)
        put(count, _mig.ci_remaining(gi, p))
        return c.SUCCESS

    def nvmlGpuInstanceGetComputeInstancePossiblePlacements(
        self, gi_handle: Any, profile: Any, out: Any, count: Any
    ) -> int:
        _, _, p = self._ci_profile(gi_handle, profile)
        return _write_placements(out, count, p.starts, p.slices)

    def _create_ci(self, gi_handle: Any, profile: Any, start: int | None, out: Any) -> int:
        r, gi, p = self._ci_profile(gi_handle, profile)
        with self.store.mutate() as state:
            g = state.gpus[r.gpu.index]
            live = g.gpu_instance(gi.id)
            if live is None or live.serial != gi.serial:
                return c.ERROR_INVALID_ARGUMENT
            ci = _mig.create_compute_instance(state, live, r.gi_profile.slices, p.id, start)
            value = self.ci_handle(g, live, ci)
        handle_out(out, value)
        return c.SUCCESS

    def nvmlGpuInstanceCreateComputeInstance(self, gi_handle: Any, profile: Any, out: Any) -> int:
        return self._create_ci(gi_handle, profile, None, out)

    def nvmlGpuInstanceCreateComputeInstanceWithPlacement(
        self, gi_handle: Any, profile: Any, placement: Any, out: Any
    ) -> int:
        _, _, p = self._ci_profile(gi_handle, profile)
        start, size = _placement_in(placement)
        if size is not None and size != p.slices:
            return c.ERROR_INVALID_ARGUMENT
        return self._create_ci(gi_handle, profile, start, out)

    def nvmlComputeInstanceDestroy(self, ci_handle: Any) -> int:
        r, gi, ci = self.compute_instance(ci_handle)
        with self.store.mutate() as state:
            live = state.gpus[r.gpu.index].gpu_instance(gi.id)
            match = [x for x in (live.compute_instances if live else []) if x.serial == ci.serial]
            if live is None or not match:
                return c.ERROR_INVALID_ARGUMENT
            live.compute_instances.remove(match[0])
        return c.SUCCESS

    def nvmlGpuInstanceGetComputeInstances(self, gi_handle: Any, profile: Any, out: Any, count: Any) -> int:
        r, gi, p = self._ci_profile(gi_handle, profile)
        found = [ci for ci in gi.compute_instances if ci.profile == p.id]
        if out is None:
            put(count, len(found))
            return c.SUCCESS if not found else c.ERROR_INSUFFICIENT_SIZE
        arr, length = array_out(out)
        if length is not None and length < len(found):
            put(count, len(found))
            return c.ERROR_INSUFFICIENT_SIZE
        for i, ci in enumerate(found):
            handle_array_store(arr, i, self.ci_handle(r.gpu, gi, ci))
        put(count, len(found))
        return c.SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, gi_handle: Any, ci_id: Any, out: Any) -> int:
        r, gi = self.gpu_instance(gi_handle)
        for ci in gi.compute_instances:
            if ci.id == num(ci_id):
                handle_out(out, self.ci_handle(r.gpu, gi, ci))
                return c.SUCCESS
        return c.ERROR_NOT_FOUND

    def nvmlComputeInstanceGetInfo_v2(self, ci_handle: Any, out: Any) -> int:
        r, gi, ci = self.compute_instance(ci_handle)
        info = target(out)
        t = type(info)
        handle_store(info, t.device.offset, self.device_handle(r.gpu))
        handle_store(info, t.gpuInstance.offset, self.gi_handle(r.gpu, gi))
        info.id = ci.id
        info.profileId = ci.profile
        info.placement.start = ci.start
        info.placement.size = ci.size
        return c.SUCCESS

    nvmlComputeInstanceGetInfo = nvmlComputeInstanceGetInfo_v2

    # -- MIG devices -------------------------------------------------------------------------

    def nvmlDeviceIsMigDeviceHandle(self, handle: Any, out: Any) -> int:
        put(out, int(self.full(handle).is_mig))
        return c.SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, handle: Any, out: Any) -> int:
        r = self.dev(handle)
        return self._instance_id(r, r.gi, out)

    def nvmlDeviceGetComputeInstanceId(self, handle: Any, out: Any) -> int:
        r = self.dev(handle)
        return self._instance_id(r, r.ci, out)

    @staticmethod
    def _instance_id(r: Resolved, instance: Any, out: Any) -> int:
        """A MIG device's GPU- or compute-instance id; a whole GPU has none."""
        if instance is None:
            return c.ERROR_NOT_SUPPORTED if not r.model.mig_capable else c.ERROR_INVALID_ARGUMENT
        put(out, instance.id)
        return c.SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, out: Any) -> int:
        r = self.physical(handle)
        # nvml.h: 0 (and success) on a GPU without MIG, as with MIG off
        on = r.model.mig_capable and r.gpu.mig_current == c.MIG_ENABLE
        put(out, _mig.MAX_MIG_DEVICES if on else 0)
        return c.SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, out: Any) -> int:
        r = self.mig_gpu(handle)
        i = num(index)
        limit = _mig.MAX_MIG_DEVICES if r.gpu.mig_current == c.MIG_ENABLE else 0
        if not 0 <= i < limit:
            return c.ERROR_INVALID_ARGUMENT
        devices = _mig.mig_devices(r.gpu)
        if i >= len(devices):
            return c.ERROR_NOT_FOUND
        gi, ci = devices[i]
        handle_out(out, self.mig_handle(r.gpu, gi, ci))
        return c.SUCCESS

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Any, out: Any) -> int:
        r = self.full(handle)
        if not r.is_mig:
            return c.ERROR_INVALID_ARGUMENT
        handle_out(out, self.device_handle(r.gpu))
        return c.SUCCESS


def _write_placements(out: Any, count: Any, starts: Sequence[int], size: int) -> int:
    """Fill a caller's placement array (or only the count when ``out`` is NULL), as NVML does."""
    put(count, len(starts))
    if out is None:
        return c.SUCCESS
    arr, length = array_out(out)
    if length is not None and length < len(starts):
        return c.ERROR_INSUFFICIENT_SIZE
    for i, start in enumerate(starts):
        el = element(arr, i)
        el.start = start
        el.size = size
    return c.SUCCESS
