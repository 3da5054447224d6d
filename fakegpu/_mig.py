"""MIG rules: placements, capacity, instance ids, compute-instance profiles.

Pure functions over a :class:`~fakegpu._state.Gpu` and its :class:`~fakegpu._models.Model`.
Every creation goes through :func:`check_gpu_instance` / :func:`check_compute_instance`, so no
sequence of calls can overlap two instances or use more slices than the GPU has. Refusals raise
:class:`~fakegpu._errors.MigError` carrying the NVML code the fake library answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _codes as c
from ._errors import MigError
from ._models import GiProfile, Model, gi_profile_by_id
from ._state import ComputeInstance, Gpu, GpuInstance, MachineState

COMPUTE_SLICES = 7
MEMORY_SLICES = 8
MAX_MIG_DEVICES = 7

CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}
"""Compute-instance profile id (== NVML_COMPUTE_INSTANCE_PROFILE_* index) -> compute slices."""


def gpu_instance_id(model: Model, profile: GiProfile, start: int) -> int:
    """The GPU-instance id the real driver assigns: it follows the placement (a per-model table),
    not the order of creation."""
    return model.gi_ids[(profile.id, start)]


def _used_memory(gpu: Gpu) -> set[int]:
    used: set[int] = set()
    for gi in gpu.gpu_instances:
        used.update(range(gi.start, gi.start + gi.size))
    return used


def _used_compute(gpu: Gpu, model: Model) -> int:
    total = 0
    for gi in gpu.gpu_instances:
        p = gi_profile_by_id(model, gi.profile_id)
        total += p.slices if p else 0
    return total


def require_mig(gpu: Gpu, model: Model) -> None:
    """Refuse MIG calls on models without MIG (NOT_SUPPORTED) or with MIG mode off."""
    if not model.mig_capable:
        raise MigError(f"{model.name} does not support MIG", c.ERROR_NOT_SUPPORTED)
    if gpu.mig_current != c.MIG_ENABLE:
        raise MigError(
            f"MIG mode is disabled on GPU {gpu.index}; enable it first "
            f"(nvmlDeviceSetMigMode or `fakegpu mig enable {gpu.index}`)",
            c.ERROR_NOT_SUPPORTED,
        )


def profile_for(model: Model, profile_id: int) -> GiProfile:
    """The GI profile with driver id ``profile_id``; INVALID_ARGUMENT for an unknown id."""
    p = gi_profile_by_id(model, profile_id)
    if p is None:
        known = ", ".join(f"{q.id} ({q.name})" for q in model.gi_profiles)
        raise MigError(
            f"unknown GPU instance profile id {profile_id} on {model.name}; known: {known}",
            c.ERROR_INVALID_ARGUMENT,
        )
    return p


def check_gpu_instance(gpu: Gpu, model: Model, profile: GiProfile, start: int) -> None:
    """Raise MigError unless a ``profile`` instance can be created at ``start`` now."""
    if start not in profile.starts:
        raise MigError(
            f"placement start {start} is not valid for {profile.name}; valid: {list(profile.starts)}",
            c.ERROR_INVALID_ARGUMENT,
        )
    same = sum(1 for gi in gpu.gpu_instances if gi.profile_id == profile.id)
    if same >= profile.instance_count:
        raise MigError(
            f"GPU {gpu.index} already has {same} {profile.name} instance(s), the most it can hold",
            c.ERROR_INSUFFICIENT_RESOURCES,
        )
    span = set(range(start, start + profile.memory_slices))
    for gi in gpu.gpu_instances:
        if span & set(range(gi.start, gi.start + gi.size)):
            other = gi_profile_by_id(model, gi.profile_id)
            raise MigError(
                f"{profile.name} at {start} overlaps GPU instance {gi.id} "
                f"({other.name if other else gi.profile_id} at slices {gi.start}-{gi.start + gi.size - 1}) "
                f"on GPU {gpu.index}; destroy it or choose another placement",
                c.ERROR_INSUFFICIENT_RESOURCES,
            )
    if _used_compute(gpu, model) + profile.slices > COMPUTE_SLICES:
        raise MigError(
            f"GPU {gpu.index} has not enough free compute slices for {profile.name}",
            c.ERROR_INSUFFICIENT_RESOURCES,
        )


def choose_start(gpu: Gpu, model: Model, profile: GiProfile) -> int:
    """Where the driver puts an instance created without a placement: the first free start of
    the profile's default order (for 1g: 6, 4, 5, 0, 1, 2, 3)."""
    same = sum(1 for gi in gpu.gpu_instances if gi.profile_id == profile.id)
    if same >= profile.instance_count:
        raise MigError(
            f"GPU {gpu.index} already has {same} {profile.name} instance(s), the most it can hold",
            c.ERROR_INSUFFICIENT_RESOURCES,
        )
    for start in profile.default_starts:
        try:
            check_gpu_instance(gpu, model, profile, start)
        except MigError:
            continue
        return start
    raise MigError(
        f"no room for another {profile.name} instance on GPU {gpu.index}", c.ERROR_INSUFFICIENT_RESOURCES
    )


def remaining_capacity(gpu: Gpu, model: Model, profile: GiProfile) -> int:
    """How many more ``profile`` instances fit, all together, on the GPU as it is now."""
    used_mem = _used_memory(gpu)
    free_compute = COMPUTE_SLICES - _used_compute(gpu, model)
    left = profile.instance_count - sum(1 for gi in gpu.gpu_instances if gi.profile_id == profile.id)
    n = 0
    for start in profile.starts:
        span = set(range(start, start + profile.memory_slices))
        if n >= left or free_compute < profile.slices:
            break
        if span & used_mem:
            continue
        used_mem |= span
        free_compute -= profile.slices
        n += 1
    return n


def create_gpu_instance(
    state: MachineState, gpu: Gpu, model: Model, profile_id: int, start: int | None
) -> GpuInstance:
    """Create a GPU instance (MIG must be on) and return it."""
    require_mig(gpu, model)
    profile = profile_for(model, profile_id)
    if start is None:
        start = choose_start(gpu, model, profile)
    else:
        check_gpu_instance(gpu, model, profile, start)
    gi = GpuInstance(
        id=gpu_instance_id(model, profile, start),
        profile_id=profile.id,
        start=start,
        size=profile.memory_slices,
        serial=state.take_serial(),
    )
    gpu.gpu_instances.append(gi)
    gpu.gpu_instances.sort(key=lambda g: g.id)
    return gi


def destroy_gpu_instance(gpu: Gpu, gi: GpuInstance) -> None:
    """Destroy a GPU instance; IN_USE while it still holds compute instances."""
    if gi.compute_instances:
        raise MigError(
            f"GPU instance {gi.id} on GPU {gpu.index} still has compute instances; destroy them first",
            c.ERROR_IN_USE,
        )
    gpu.gpu_instances.remove(gi)


@dataclass(frozen=True)
class CiProfile:
    """A compute-instance profile as seen inside one GPU instance."""

    id: int
    slices: int
    starts: tuple[int, ...]


def ci_profiles(gi_slices: int) -> list[CiProfile]:
    """Compute-instance profiles available in a GPU instance of ``gi_slices`` compute slices.

    A 4g instance offers 1c x4, 2c x2 and 4c, but no 3c (``nvidia-smi mig -lcip``).
    """
    out = []
    for pid, n in CI_SLICES.items():
        if n > gi_slices or (gi_slices == 4 and n == 3):
            continue
        step = 4 if n == 3 else n
        out.append(CiProfile(pid, n, tuple(range(0, gi_slices - n + 1, step))))
    return out


def ci_profile_for(gi_slices: int, profile_id: int) -> CiProfile:
    """The CI profile ``profile_id`` inside a GI of ``gi_slices``; NOT_SUPPORTED when too big."""
    if profile_id not in CI_SLICES and profile_id >= 0:
        raise MigError(f"unknown compute instance profile {profile_id}", c.ERROR_INVALID_ARGUMENT)
    for p in ci_profiles(gi_slices):
        if p.id == profile_id:
            return p
    raise MigError(
        f"compute instance profile {profile_id} does not fit a {gi_slices}-slice GPU instance",
        c.ERROR_NOT_SUPPORTED,
    )


def _ci_used(gi: GpuInstance) -> set[int]:
    used: set[int] = set()
    for ci in gi.compute_instances:
        used.update(range(ci.start, ci.start + ci.size))
    return used


def ci_fits(gi: GpuInstance, profile: CiProfile, start: int) -> bool:
    """Whether a compute instance of ``profile`` can start at ``start`` in ``gi`` now."""
    return start in profile.starts and not (_ci_used(gi) & set(range(start, start + profile.slices)))


def ci_remaining(gi: GpuInstance, profile: CiProfile) -> int:
    """How many more compute instances of ``profile`` fit in ``gi``."""
    used = _ci_used(gi)
    n = 0
    for start in profile.starts:
        span = set(range(start, start + profile.slices))
        if not span & used:
            used |= span
            n += 1
    return n


def create_compute_instance(
    state: MachineState, gi: GpuInstance, gi_slices: int, profile_id: int, start: int | None
) -> ComputeInstance:
    """Create a compute instance in ``gi`` (lowest free placement unless given)."""
    profile = ci_profile_for(gi_slices, profile_id)
    if start is None:
        start = next((s for s in profile.starts if ci_fits(gi, profile, s)), -1)
        if start < 0:
            raise MigError(
                f"no room for another {profile.slices}c compute instance in GPU instance {gi.id}",
                c.ERROR_INSUFFICIENT_RESOURCES,
            )
    elif start not in profile.starts:
        raise MigError(
            f"compute placement start {start} is not valid; valid: {list(profile.starts)}",
            c.ERROR_INVALID_ARGUMENT,
        )
    elif not ci_fits(gi, profile, start):
        raise MigError(
            f"compute instance at {start} overlaps another in GPU instance {gi.id}",
            c.ERROR_INSUFFICIENT_RESOURCES,
        )
    taken = {ci.id for ci in gi.compute_instances}
    ci_id = next(i for i in range(COMPUTE_SLICES + 1) if i not in taken)
    ci = ComputeInstance(
        id=ci_id, profile=profile.id, start=start, size=profile.slices, serial=state.take_serial()
    )
    gi.compute_instances.append(ci)
    gi.compute_instances.sort(key=lambda x: x.id)
    return ci


def mig_devices(gpu: Gpu) -> list[tuple[GpuInstance, ComputeInstance]]:
    """MIG devices (one per compute instance) in the order NVML indexes them: by GI id, then CI id."""
    return [(gi, ci) for gi in gpu.gpu_instances for ci in gi.compute_instances]


def set_mig_mode(gpu: Gpu, model: Model, mode: int) -> int:
    """Request a MIG mode; return the activation status (SUCCESS when the reset happened).

    The driver resets an idle GPU itself, so the new mode is current at once. When it cannot,
    the new mode stays pending until :func:`reset_gpu` and the activation status says why:
    IN_USE while GPU instances exist, RESET_REQUIRED on a GPU the profile marks ``needs_reset``
    (a property of the GPU: every change on it waits for a reset). Asking for the current mode
    cancels a pending change.
    """
    if not model.mig_capable:
        raise MigError(f"{model.name} does not support MIG", c.ERROR_NOT_SUPPORTED)
    if mode not in (c.MIG_DISABLE, c.MIG_ENABLE):
        raise MigError(f"MIG mode must be 0 (disable) or 1 (enable), not {mode}", c.ERROR_INVALID_ARGUMENT)
    gpu.mig_pending = mode
    if mode == gpu.mig_current:
        return c.SUCCESS
    if gpu.gpu_instances:
        return c.ERROR_IN_USE
    if gpu.needs_reset:
        return c.ERROR_RESET_REQUIRED
    gpu.mig_current = mode
    return c.SUCCESS


def reset_gpu(gpu: Gpu) -> None:
    """A GPU reset: pending MIG mode takes effect, volatile ECC counters clear, a pending row remap
    is done, a lost GPU is back.

    MIG instances do not survive a reset (as on hardware, where they are not persistent).
    ``needs_reset`` stays: it describes the GPU, not one request.
    """
    gpu.gpu_instances.clear()
    gpu.mig_current = gpu.mig_pending
    gpu.lost = False
    gpu.ecc_volatile_corrected = 0
    gpu.ecc_volatile_uncorrected = 0
    gpu.remap_pending = False
