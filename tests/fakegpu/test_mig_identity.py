"""MIG identity as real GPUs give it: default placement, GPU-instance ids per model, stable MIG UUIDs.

Sources (issue 12, fakegpu/profiles/README.md): nvidia-smi transcripts of H100 80GB SXM,
H100 PCIe, A100 80GB PCIe and A100-PCIE-40GB.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pynvml
import pytest

import fakegpu

Install = Callable[..., fakegpu.FakeMachine]
SIZES = {19: 1, 20: 1, 15: 2, 14: 2, 9: 4, 5: 4, 0: 8}


def _one(model: str, *, mig: bool = True) -> fakegpu.Profile:
    return fakegpu.parse_profile({"name": f"one-{model}", "gpus": [{"model": model, "mig": mig}]})


def _gpu() -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(0)


def _create(h: object, profile_id: int, start: int | None = None) -> tuple[int, int]:
    """Create a GI; (its id, its placement start)."""
    if start is None:
        gi = pynvml.nvmlDeviceCreateGpuInstance(h, profile_id)
    else:
        p = pynvml.c_nvmlGpuInstancePlacement_t()
        p.start, p.size = start, SIZES[profile_id]
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(p))
    info = pynvml.nvmlGpuInstanceGetInfo(gi)
    return int(info.id), int(info.placement.start)


@pytest.mark.parametrize("model", ["h100-80gb", "h100-pcie", "a100-80gb", "a100-pcie-40gb", "h200"])
def test_seven_1g_without_placement_take_starts_6_4_5_0_1_2_3(install: Install, model: str) -> None:
    install(_one(model))
    h = _gpu()
    starts = [_create(h, 19)[1] for _ in range(7)]
    assert starts == [6, 4, 5, 0, 1, 2, 3]


@pytest.mark.parametrize("model", ["h100-80gb", "h200", "a100-80gb", "a100-40gb"])
def test_sxm_gpu_instance_ids_follow_the_placement(install: Install, model: str) -> None:
    install(_one(model))
    h = _gpu()
    assert [_create(h, 19, s)[0] for s in range(7)] == [7, 8, 9, 10, 11, 12, 13]


def test_h100_pcie_1g_ids_are_11_to_14_then_7_to_9(install: Install) -> None:
    install(_one("h100-pcie"))
    h = _gpu()
    assert [_create(h, 19, s)[0] for s in range(7)] == [11, 12, 13, 14, 7, 8, 9]


@pytest.mark.parametrize(("pid", "start", "gi_id"), [(19, 0, 11), (14, 2, 6), (9, 4, 1)])
def test_a100_pcie_40gb_ids_from_the_transcript(install: Install, pid: int, start: int, gi_id: int) -> None:
    install(_one("a100-pcie-40gb"))
    assert _create(_gpu(), pid, start) == (gi_id, start)


def test_a100_pcie_40gb_seven_1g_ids(install: Install) -> None:
    install(_one("a100-pcie-40gb"))
    h = _gpu()
    assert sorted(_create(h, 19)[0] for _ in range(7)) == [7, 8, 9, 11, 12, 13, 14]


def test_pcie_models_identity(install: Install) -> None:
    gpus = [{"model": "h100-pcie"}, {"model": "a100-pcie-40gb"}]
    install(fakegpu.parse_profile({"name": "pcie", "gpus": gpus}))
    names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(2)]
    assert names == ["NVIDIA H100 PCIe", "NVIDIA A100-PCIE-40GB"]
    ids = [pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).pciDeviceId for i in range(2)]
    assert ids == [0x233110DE, 0x20F110DE]


def _mig_uuid(h: object, gi_id: int) -> str:
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
        except pynvml.NVMLError_NotFound:
            continue
        if pynvml.nvmlDeviceGetGpuInstanceId(mig) == gi_id:
            return str(pynvml.nvmlDeviceGetUUID(mig))
    raise AssertionError(f"no MIG device on GI {gi_id}")


def test_mig_uuid_is_the_same_when_recreated_with_the_same_ids(install: Install) -> None:
    install(_one("a100-80gb"))
    h = _gpu()
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, 9)
    gi_id = int(pynvml.nvmlGpuInstanceGetInfo(gi).id)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    first = _mig_uuid(h, gi_id)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, 9)
    assert int(pynvml.nvmlGpuInstanceGetInfo(gi).id) == gi_id
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    assert _mig_uuid(h, gi_id) == first
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByUUID(first)) == first


def test_mig_uuid_differs_per_gpu_and_per_gi(install: Install) -> None:
    install(fakegpu.parse_profile({"name": "two", "gpus": [{"model": "h100-80gb", "count": 2, "mig": True}]}))
    uuids = set()
    for i in range(2):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        for start in (0, 4):
            gi = pynvml.nvmlDeviceGetGpuInstanceById(h, _create(h, 9, start)[0])
            pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
        uuids |= {_mig_uuid(h, 1), _mig_uuid(h, 2)}
    assert len(uuids) == 4


def test_stale_mig_handle_still_refused_after_recreation(install: Install) -> None:
    machine = install(_one("h100-80gb"))
    h = _gpu()
    machine.create_gpu_instance(0, "7g.80gb")
    old = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    machine.destroy_gpu_instance(0, 0)
    machine.create_gpu_instance(0, "7g.80gb")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetName(old)
