"""FakeMachine: one simulated node's GPUs, their MIG layout and faults.

The machine is what tests and the CLI hold; the fake NVML library (:mod:`fakegpu._lib`) reads
the same state. With a state directory the machine is shared by every process that opens it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from . import _codes as c
from . import _mig
from ._errors import FaultError, MigError, StateError, UnknownGpuError
from ._models import MODELS, Model, gi_profile_by_id, gi_profile_by_name
from ._profiles import Profile, initial_state, load_profile, mig_uuid
from ._state import Gpu, GpuInstance, MachineState
from ._store import Store

log = logging.getLogger(__name__)

GpuRef = int | str
"""A GPU named by index (``0``) or UUID (``"GPU-..."``)."""

ECC_KINDS = ("single", "double")


class FakeMachine:
    """A simulated GPU machine.

    Build one from a profile (``FakeMachine("dgx-h100")``), optionally sharing it through a
    state directory, or attach to an existing state directory with :meth:`attach`.
    Every method that takes ``gpu`` accepts an index or a UUID.
    """

    def __init__(
        self,
        profile: str | Path | Profile = "dgx-h100",
        *,
        state_dir: str | Path | None = None,
        node_name: str | None = None,
    ) -> None:
        prof = profile if isinstance(profile, Profile) else load_profile(profile)
        fresh = initial_state(prof, node_name or "")
        self.profile_name = prof.name
        if state_dir is None:
            self._store = Store(fresh, None)
            self.attached = False
            return
        store, attached = Store.open(Path(state_dir), fresh)
        existing = store.read()
        if attached and existing.profile != prof.name:
            store.close()
            raise StateError(
                f"state directory {state_dir} holds a {existing.profile!r} machine, not {prof.name!r}; "
                "use another directory or the same profile"
            )
        if attached and node_name and existing.node_name != node_name:
            log.warning(
                "state directory %s holds the machine of node %r; attaching as node %r keeps its UUIDs",
                state_dir,
                existing.node_name,
                node_name,
            )
        self._store = store
        self.attached = attached
        """True when the machine already existed in the state directory (it was not reset)."""

    @classmethod
    def attach(cls, state_dir: str | Path) -> FakeMachine:
        """The machine already in ``state_dir`` (StateError when there is none)."""
        self = cls.__new__(cls)
        self._store = Store.load(Path(state_dir))
        self.profile_name = self._store.read().profile
        self.attached = True
        return self

    # -- reading -----------------------------------------------------------------------------

    @property
    def state_dir(self) -> Path | None:
        """The shared state directory, or None for a machine private to this process."""
        return self._store.state_dir

    @property
    def store(self) -> Store:
        """The state store (used by the fake library)."""
        return self._store

    @property
    def state(self) -> MachineState:
        """The current state (read-only: change it through the methods)."""
        return self._store.read()

    @property
    def gpu_count(self) -> int:
        """Number of physical GPUs."""
        return len(self._store.read().gpus)

    def close(self) -> None:
        """Release the state file this process holds open."""
        self._store.close()

    def _find(self, state: MachineState, gpu: GpuRef) -> Gpu:
        if isinstance(gpu, int) and not isinstance(gpu, bool):
            if 0 <= gpu < len(state.gpus):
                return state.gpus[gpu]
        elif isinstance(gpu, str):
            if gpu.isdigit():
                return self._find(state, int(gpu))
            for g in state.gpus:
                if g.uuid == gpu:
                    return g
        raise UnknownGpuError(
            f"no GPU {gpu!r} on this machine (indexes 0..{len(state.gpus) - 1} or a GPU UUID)"
        )

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready description of the machine: every GPU, its MIG layout and faults."""
        state = self._store.read()
        gpus = []
        for g in state.gpus:
            model = MODELS[g.model]
            entry: dict[str, Any] = {
                "index": g.index,
                "model": g.model,
                "name": model.name,
                "uuid": g.uuid,
                "pci_bus_id": f"{g.pci_domain:08X}:{g.pci_bus:02X}:00.0",
                "memory_total": model.memory_total,
                "lost": g.lost,
                "fabric_failed": g.fabric_failed,
                "ecc": {
                    "volatile": {"single": g.ecc_volatile_corrected, "double": g.ecc_volatile_uncorrected},
                    "aggregate": {"single": g.ecc_aggregate_corrected, "double": g.ecc_aggregate_uncorrected},
                },
            }
            if model.row_remapping:
                entry["row_remap"] = {
                    "correctable": g.remapped_correctable,
                    "uncorrectable": g.remapped_uncorrectable,
                    "pending": g.remap_pending,
                    "failure": g.remap_failure,
                }
            if model.mig_capable:
                entry["mig"] = {
                    "current": g.mig_current,
                    "pending": g.mig_pending,
                    "needs_reset": g.needs_reset,
                    "gpu_instances": [self._gi_dict(g, model, gi) for gi in g.gpu_instances],
                }
            gpus.append(entry)
        return {
            "profile": state.profile,
            "node_name": state.node_name,
            "driver_version": state.driver_version,
            "cuda_driver_version": state.cuda_driver_version,
            "state_dir": str(self.state_dir) if self.state_dir else None,
            "gpus": gpus,
            "events": [vars(e).copy() for e in state.events[-20:]],
        }

    @staticmethod
    def _gi_dict(g: Gpu, model: Model, gi: GpuInstance) -> dict[str, Any]:
        p = gi_profile_by_id(model, gi.profile_id)
        assert p is not None
        return {
            "id": gi.id,
            "profile_id": gi.profile_id,
            "profile": p.name,
            "placement": {"start": gi.start, "size": gi.size},
            "compute_instances": [
                {
                    "id": ci.id,
                    "profile_id": ci.profile,
                    "placement": {"start": ci.start, "size": ci.size},
                    "uuid": mig_uuid(g.uuid, gi.id, ci.id),
                }
                for ci in gi.compute_instances
            ],
        }

    # -- faults ------------------------------------------------------------------------------

    def inject_xid(
        self, gpu: GpuRef, xid: int, *, gpu_instance: int | None = None, compute_instance: int | None = None
    ) -> int:
        """Raise XID ``xid`` on ``gpu`` (an XidCriticalError event); returns its sequence number."""
        if isinstance(xid, bool) or not isinstance(xid, int) or xid < 0:
            raise FaultError(f"an XID is a non-negative integer (e.g. 48 or 79), not {xid!r}")
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            ev = state.add_event(
                g.index,
                c.EVENT_XID_CRITICAL,
                xid,
                gi=c.NO_INSTANCE if gpu_instance is None else gpu_instance,
                ci=c.NO_INSTANCE if compute_instance is None else compute_instance,
                now=time.time(),
            )
            return ev.seq

    def inject_ecc(self, gpu: GpuRef, kind: str = "double", count: int = 1) -> int:
        """Count ``count`` ECC errors of ``kind`` (``"single"`` or ``"double"``) and raise the event."""
        if kind not in ECC_KINDS:
            raise FaultError(f"ECC kind must be one of {list(ECC_KINDS)}, not {kind!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise FaultError(f"an ECC error count is an integer >= 1, not {count!r}")
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            if kind == "single":
                g.ecc_volatile_corrected += count
                g.ecc_aggregate_corrected += count
                type_ = c.EVENT_SINGLE_BIT_ECC
            else:
                g.ecc_volatile_uncorrected += count
                g.ecc_aggregate_uncorrected += count
                type_ = c.EVENT_DOUBLE_BIT_ECC
            return state.add_event(g.index, type_, 0, gi=c.NO_INSTANCE, ci=c.NO_INSTANCE, now=time.time()).seq

    def inject_row_remap(self, gpu: GpuRef, *, uncorrectable: bool = True, failure: bool = False) -> None:
        """A row of ``gpu``'s memory is remapped (``nvmlDeviceGetRemappedRows``).

        The remap is pending until the GPU is reset (:meth:`reset`); with ``failure`` the remap
        failed (no spare row) and the failure flag stays until :meth:`heal` (the repair). No
        event is raised: inject the ECC error that caused it with :meth:`inject_ecc`.
        """
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            if not MODELS[g.model].row_remapping:
                raise FaultError(
                    f"GPU {g.index} ({MODELS[g.model].name}) has no row remapping; "
                    f"models with it: {sorted(k for k, m in MODELS.items() if m.row_remapping)}"
                )
            if uncorrectable:
                g.remapped_uncorrectable += 1
            else:
                g.remapped_correctable += 1
            if failure:
                g.remap_failure = True
            else:
                g.remap_pending = True

    def mark_lost(self, gpu: GpuRef) -> None:
        """The GPU falls off the bus: XID 79 is raised and every later call on it answers GPU_IS_LOST."""
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            if not g.lost:
                g.lost = True
                state.add_event(
                    g.index,
                    c.EVENT_XID_CRITICAL,
                    c.XID_FALLEN_OFF_BUS,
                    gi=c.NO_INSTANCE,
                    ci=c.NO_INSTANCE,
                    now=time.time(),
                )

    def fail_fabric(self, gpu: GpuRef) -> None:
        """The GPU's registration with the NVSwitch fabric fails: ``GpuFabricInfo`` says state
        completed, status an error, health unhealthy (no event; a GPU without fabric is unaffected)."""
        with self._store.mutate() as state:
            self._find(state, gpu).fabric_failed = True

    def heal(self, gpu: GpuRef) -> None:
        """Undo faults on ``gpu``: it answers again, its volatile ECC counters are cleared and its
        row remaps are forgotten (as after a repair)."""
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            g.lost = False
            g.ecc_volatile_corrected = 0
            g.ecc_volatile_uncorrected = 0
            g.remapped_correctable = g.remapped_uncorrectable = 0
            g.remap_pending = g.remap_failure = False
            g.fabric_failed = False

    def reset(self, gpu: GpuRef | None = None) -> None:
        """Reset one GPU (or all): a pending MIG mode takes effect, MIG instances, faults and
        volatile ECC counters clear."""
        with self._store.mutate() as state:
            for g in state.gpus if gpu is None else [self._find(state, gpu)]:
                _mig.reset_gpu(g)

    # -- MIG ---------------------------------------------------------------------------------

    def set_mig_mode(self, gpu: GpuRef, enabled: bool) -> int:
        """Request MIG on/off; returns the activation status.

        0: the mode is current now. ERROR_IN_USE (GPU instances exist) or ERROR_RESET_REQUIRED
        (the profile marks the GPU ``needs_reset``): the mode is pending until :meth:`reset`.
        """
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            return _mig.set_mig_mode(g, MODELS[g.model], c.MIG_ENABLE if enabled else c.MIG_DISABLE)

    def _profile_id(self, model: Model, profile: int | str) -> int:
        if isinstance(profile, str) and not profile.isdigit():
            p = gi_profile_by_name(model, profile)
            if p is None:
                known = ", ".join(q.name for q in model.gi_profiles) or "none"
                raise MigError(
                    f"{model.name} has no MIG profile {profile!r}; known: {known}", c.ERROR_INVALID_ARGUMENT
                )
            return p.id
        return int(profile)

    def create_gpu_instance(
        self,
        gpu: GpuRef,
        profile: int | str,
        placement: int | None = None,
        *,
        with_compute_instance: bool = True,
    ) -> int:
        """Create a GPU instance (profile name or driver id); returns its id.

        With ``with_compute_instance`` (default) a compute instance spanning it is created too,
        so it shows up as a MIG device.
        """
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            model = MODELS[g.model]
            _mig.require_mig(g, model)
            pid = self._profile_id(model, profile)
            gi = _mig.create_gpu_instance(state, g, model, pid, placement)
            if with_compute_instance:
                p = _mig.profile_for(model, pid)
                full = max(q.id for q in _mig.ci_profiles(p.slices))
                _mig.create_compute_instance(state, gi, p.slices, full, None)
            return gi.id

    def destroy_gpu_instance(self, gpu: GpuRef, gpu_instance: int) -> None:
        """Destroy a GPU instance and its compute instances."""
        with self._store.mutate() as state:
            g = self._find(state, gpu)
            gi = g.gpu_instance(gpu_instance)
            if gi is None:
                have = [x.id for x in g.gpu_instances]
                raise MigError(
                    f"GPU {g.index} has no GPU instance {gpu_instance}; it has {have or 'none'}",
                    c.ERROR_NOT_FOUND,
                )
            gi.compute_instances.clear()
            _mig.destroy_gpu_instance(g, gi)

    def clear_mig(self, gpu: GpuRef | None = None) -> None:
        """Destroy every GPU and compute instance on one GPU (or all)."""
        with self._store.mutate() as state:
            for g in state.gpus if gpu is None else [self._find(state, gpu)]:
                g.gpu_instances.clear()
