"""Property tests: no sequence of MIG mode, create, destroy and reset calls can overlap or overfill a GPU."""

from __future__ import annotations

import copy

import pynvml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fakegpu
from fakegpu import _mig
from fakegpu._models import MODELS

GI_IDS = [19, 20, 15, 14, 9, 5, 0]
STARTS = {19: range(7), 20: range(7), 15: range(0, 8, 2), 14: range(0, 6, 2), 9: (0, 4), 5: (0,), 0: (0,)}

op = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(GI_IDS), st.none() | st.integers(0, 7)),
    st.tuples(st.just("destroy"), st.integers(0, 6), st.none()),
    st.tuples(st.just("ci"), st.integers(0, 6), st.integers(0, 4)),
    st.tuples(st.just("destroy_ci"), st.integers(0, 6), st.none()),
    st.tuples(st.just("mode"), st.integers(0, 1), st.none()),
    st.tuples(st.just("reset"), st.integers(0, 0), st.none()),
)


def _check_invariants(machine: fakegpu.FakeMachine, h: object) -> None:
    gpu = machine.state.gpus[0]
    model = MODELS[gpu.model]
    if gpu.mig_current == 0:
        assert not gpu.gpu_instances, "GPU instances on a GPU with MIG off"
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0
        return
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    mem: set[int] = set()
    compute = 0
    ids = set()
    for gi in gpu.gpu_instances:
        p = _mig.profile_for(model, gi.profile_id)
        span = set(range(gi.start, gi.start + gi.size))
        assert not span & mem, "GPU instances overlap"
        assert span <= set(range(8))
        assert gi.start in p.starts
        assert gi.id == _mig.gpu_instance_id(model, p, gi.start)
        mem |= span
        compute += p.slices
        ids.add(gi.id)
        ci_used: set[int] = set()
        for ci in gi.compute_instances:
            cspan = set(range(ci.start, ci.start + ci.size))
            assert not cspan & ci_used, "compute instances overlap"
            assert cspan <= set(range(p.slices))
            ci_used |= cspan
    assert compute <= 7
    assert len(ids) == len(gpu.gpu_instances)
    for pid in GI_IDS:
        remaining = pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, pid)
        # exactly `remaining` more fit when created one after another, and not one more
        trial = copy.deepcopy(machine.state)
        g = trial.gpus[0]
        for _ in range(remaining):
            _mig.create_gpu_instance(trial, g, model, pid, None)
        try:
            _mig.create_gpu_instance(trial, g, model, pid, None)
        except fakegpu.MigError:
            pass
        else:
            raise AssertionError(f"remaining capacity of {pid} is {remaining} but one more fit")


Op = tuple[str, int, int | None]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=25), profile=st.sampled_from(["dgx-h100", "dgx-a100-40gb", "dgx-h200"]))
def test_mig_sequences_never_overlap_or_overfill(ops: list[Op], profile: str) -> None:
    machine = fakegpu.install(profile)
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceSetMigMode(h, 1)
        gis: list[object] = []
        cis: list[object] = []
        for kind, a, b in ops:
            try:
                if kind == "create":
                    if b is None:
                        gis.append(pynvml.nvmlDeviceCreateGpuInstance(h, a))
                    else:
                        size = _mig.profile_for(MODELS[machine.state.gpus[0].model], a).memory_slices
                        placement = pynvml.c_nvmlGpuInstancePlacement_t(b, size)
                        gis.append(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, a, placement))
                        assert b in STARTS[a]
                elif kind == "destroy" and gis:
                    pynvml.nvmlGpuInstanceDestroy(gis.pop(a % len(gis)))
                elif kind == "ci" and gis:
                    cis.append(pynvml.nvmlGpuInstanceCreateComputeInstance(gis[a % len(gis)], b))
                elif kind == "destroy_ci" and cis:
                    pynvml.nvmlComputeInstanceDestroy(cis.pop(a % len(cis)))
                elif kind == "mode":
                    status = pynvml.nvmlDeviceSetMigMode(h, a)
                    current, pending = pynvml.nvmlDeviceGetMigMode(h)
                    assert pending == a
                    if status == pynvml.NVML_SUCCESS:
                        assert current == a
                    else:  # GPU instances keep the change pending until a reset
                        assert status == pynvml.NVML_ERROR_IN_USE and current != a
                elif kind == "reset":
                    machine.reset(0)  # instances go: the handles kept here are stale now
                    gis.clear()
                    cis.clear()
            except pynvml.NVMLError as e:
                assert isinstance(
                    e,
                    pynvml.NVMLError_InsufficientResources
                    | pynvml.NVMLError_InvalidArgument
                    | pynvml.NVMLError_InUse
                    | pynvml.NVMLError_NotSupported,
                ), e
            _check_invariants(machine, h)
    finally:
        fakegpu.uninstall()
