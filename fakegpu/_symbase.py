"""Shared plumbing of the fake NVML symbols: resolving handles against the machine state."""

from __future__ import annotations

from typing import Any

from . import _codes as c
from . import _handles as H
from ._ctypes import Status, handle_in
from ._machine import FakeMachine
from ._models import MODELS, GiProfile, Model, gi_profile_by_id
from ._state import ComputeInstance, Gpu, GpuInstance, MachineState


class Resolved:
    """A device handle resolved: the physical GPU and, for a MIG device, its GI and CI."""

    __slots__ = ("ci", "gi", "gpu", "model", "state")

    def __init__(
        self,
        state: MachineState,
        gpu: Gpu,
        model: Model,
        gi: GpuInstance | None = None,
        ci: ComputeInstance | None = None,
    ) -> None:
        self.state = state
        self.gpu = gpu
        self.model = model
        self.gi = gi
        self.ci = ci

    @property
    def is_mig(self) -> bool:
        """Whether the handle names a MIG device."""
        return self.gi is not None

    @property
    def gi_profile(self) -> GiProfile:
        """The GI profile of a MIG device."""
        assert self.gi is not None
        p = gi_profile_by_id(self.model, self.gi.profile_id)
        assert p is not None
        return p


class SymbolBase:
    """Methods every symbol group uses. ``self.machine`` is the machine the library serves."""

    def __init__(self, machine: FakeMachine) -> None:
        self.machine = machine
        self.store = machine.store

    # -- handles -----------------------------------------------------------------------------

    def _gpu_at(self, state: MachineState, index: int) -> Gpu:
        if index >= len(state.gpus):
            raise Status(c.ERROR_INVALID_ARGUMENT)
        g = state.gpus[index]
        if g.lost:
            raise Status(c.ERROR_GPU_IS_LOST)
        return g

    def dev(self, handle: Any) -> Resolved:
        """Resolve a device handle (a GPU or a MIG device); GPU_IS_LOST for a lost GPU."""
        h = handle_in(handle)
        tag = h >> 56
        state = self.store.read()
        if tag == H.DEVICE:
            g = self._gpu_at(state, H.gpu(h))
            return Resolved(state, g, MODELS[g.model])
        if tag == H.MIG_DEVICE:
            g = self._gpu_at(state, H.gpu(h))
            gi, ci = self._instances(g, h)
            if ci is None:
                raise Status(c.ERROR_INVALID_ARGUMENT)
            return Resolved(state, g, MODELS[g.model], gi, ci)
        raise Status(c.ERROR_INVALID_ARGUMENT)

    def full(self, handle: Any) -> Resolved:
        """Resolve a device handle for a query integrated GPUs (Jetson) do not answer."""
        r = self.dev(handle)
        if r.model.identity_only:
            raise Status(c.ERROR_NOT_SUPPORTED)
        return r

    def physical(self, handle: Any) -> Resolved:
        """Resolve a handle that must name a whole GPU (not a MIG device, not Jetson)."""
        r = self.full(handle)
        if r.is_mig:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        return r

    def mig_gpu(self, handle: Any) -> Resolved:
        """A whole GPU whose model has MIG (NOT_SUPPORTED otherwise)."""
        r = self.dev(handle)
        if r.is_mig:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        if not r.model.mig_capable:
            raise Status(c.ERROR_NOT_SUPPORTED)
        return r

    @staticmethod
    def _instances(g: Gpu, h: int) -> tuple[GpuInstance, ComputeInstance | None]:
        gi = g.gpu_instance(H.gi(h))
        if gi is None:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        if H.kind(h) == H.GPU_INSTANCE:
            if gi.serial & 0xFFFF != H.serial(h):
                raise Status(c.ERROR_INVALID_ARGUMENT)
            return gi, None
        for ci in gi.compute_instances:
            if ci.id == H.ci(h) and ci.serial & 0xFFFF == H.serial(h):
                return gi, ci
        raise Status(c.ERROR_INVALID_ARGUMENT)

    def gpu_instance(self, handle: Any) -> tuple[Resolved, GpuInstance]:
        """Resolve a GPU-instance handle."""
        h = handle_in(handle)
        if h >> 56 != H.GPU_INSTANCE:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        state = self.store.read()
        g = self._gpu_at(state, H.gpu(h))
        gi, _ = self._instances(g, h)
        return Resolved(state, g, MODELS[g.model], gi), gi

    def compute_instance(self, handle: Any) -> tuple[Resolved, GpuInstance, ComputeInstance]:
        """Resolve a compute-instance handle."""
        h = handle_in(handle)
        if h >> 56 != H.COMPUTE_INSTANCE:
            raise Status(c.ERROR_INVALID_ARGUMENT)
        state = self.store.read()
        g = self._gpu_at(state, H.gpu(h))
        gi, ci = self._instances(g, h)
        assert ci is not None
        return Resolved(state, g, MODELS[g.model], gi, ci), gi, ci

    @staticmethod
    def device_handle(g: Gpu) -> int:
        """The handle value of a whole GPU."""
        return H.encode(H.DEVICE, g.index)

    @staticmethod
    def mig_handle(g: Gpu, gi: GpuInstance, ci: ComputeInstance) -> int:
        """The handle value of a MIG device."""
        return H.encode(H.MIG_DEVICE, g.index, gi.id, ci.id, ci.serial)

    @staticmethod
    def gi_handle(g: Gpu, gi: GpuInstance) -> int:
        """The handle value of a GPU instance."""
        return H.encode(H.GPU_INSTANCE, g.index, gi.id, 0, gi.serial)

    @staticmethod
    def ci_handle(g: Gpu, gi: GpuInstance, ci: ComputeInstance) -> int:
        """The handle value of a compute instance."""
        return H.encode(H.COMPUTE_INSTANCE, g.index, gi.id, ci.id, ci.serial)
