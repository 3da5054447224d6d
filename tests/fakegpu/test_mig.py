"""MIG through pynvml: mode, profiles, placements, capacity, instance ids, MIG devices."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable

import pynvml
import pytest

import fakegpu

Install = Callable[..., fakegpu.FakeMachine]

INDEX_TO_ID = {0: 19, 7: 20, 9: 15, 1: 14, 2: 9, 3: 5, 4: 0}
# driver id -> memorySizeMB per model, and SMs (A100, H100/H200)
MEMORY = {
    "dgx-a100-40gb": {19: 4864, 20: 4864, 15: 9856, 14: 9856, 9: 19968, 5: 19968, 0: 40192},
    "dgx-a100-80gb": {19: 9728, 20: 9728, 15: 19968, 14: 19968, 9: 40192, 5: 40192, 0: 80896},
    "dgx-h100": {19: 9984, 20: 9984, 15: 20096, 14: 20096, 9: 40448, 5: 40448, 0: 81152},
    "dgx-h200": {19: 16384, 20: 16384, 15: 33024, 14: 33024, 9: 71168, 5: 71168, 0: 143104},
}
SMS_A100 = {19: 14, 20: 14, 15: 14, 14: 28, 9: 42, 5: 56, 0: 98}
SMS_HOPPER = {19: 16, 20: 16, 15: 26, 14: 32, 9: 60, 5: 64, 0: 132}
NAMES = {
    "dgx-a100-40gb": {19: "1g.5gb", 20: "1g.5gb+me", 15: "1g.10gb", 14: "2g.10gb", 9: "3g.20gb", 5: "4g.20gb",
                      0: "7g.40gb"},
    "dgx-a100-80gb": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb",
                      5: "4g.40gb", 0: "7g.80gb"},
    "dgx-h100": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb",
                 0: "7g.80gb"},
    "dgx-h200": {19: "1g.18gb", 20: "1g.18gb+me", 15: "1g.35gb", 14: "2g.35gb", 9: "3g.71gb", 5: "4g.71gb",
                 0: "7g.141gb"},
}  # fmt: skip
GPU_NAMES = {
    "dgx-a100-40gb": "NVIDIA A100-SXM4-40GB",
    "dgx-a100-80gb": "NVIDIA A100-SXM4-80GB",
    "dgx-h100": "NVIDIA H100 80GB HBM3",
    "dgx-h200": "NVIDIA H200",
}
ONE_SLICE = [0, 1, 2, 3, 4, 5, 6]
PLACEMENTS = {19: ONE_SLICE, 20: ONE_SLICE, 15: [0, 2, 4, 6], 14: [0, 2, 4], 9: [0, 4], 5: [0], 0: [0]}
SIZES = {19: 1, 20: 1, 15: 2, 14: 2, 9: 4, 5: 4, 0: 8}
COUNTS = {19: 7, 20: 1, 15: 4, 14: 3, 9: 2, 5: 1, 0: 1}


def _gpu(i: int = 0) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(i)


def _enable(i: int = 0) -> object:
    h = _gpu(i)
    pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
    return h


def _placements(h: object, profile_id: int) -> list[tuple[int, int]]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, None, ctypes.byref(count))
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, arr, ctypes.byref(count))
    return [(arr[i].start, arr[i].size) for i in range(count.value)]


def _create(h: object, profile_id: int, start: int | None = None) -> int:
    if start is None:
        gi = pynvml.nvmlDeviceCreateGpuInstance(h, profile_id)
    else:
        p = pynvml.c_nvmlGpuInstancePlacement_t()
        p.start, p.size = start, SIZES[profile_id]
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(p))
    return int(pynvml.nvmlGpuInstanceGetInfo(gi).id)


@pytest.mark.parametrize("profile", sorted(MEMORY))
def test_profile_info_ids_memory_and_sms(install: Install, profile: str) -> None:
    install(profile)
    h = _gpu()
    sms = SMS_A100 if "a100" in profile else SMS_HOPPER
    for index, pid in INDEX_TO_ID.items():
        for version in (1, 2):
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index, version=version)
            assert info.id == pid
            assert info.memorySizeMB == MEMORY[profile][pid]
            assert info.multiprocessorCount == sms[pid]
            assert info.instanceCount == COUNTS[pid]
        assert info.name == f"MIG {NAMES[profile][pid]}"


def test_profile_info_works_with_mig_off_and_rejects_unknown_indexes(h100: fakegpu.FakeMachine) -> None:
    h = _gpu()
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
    assert pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, 0).id == 19
    for unsupported in (5, 6, 8, 10):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, unsupported)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-h200", "dgx-a100-80gb"])
def test_possible_placements(install: Install, profile: str) -> None:
    install(profile)
    h = _gpu()
    for pid, starts in PLACEMENTS.items():
        assert _placements(h, pid) == [(s, SIZES[pid]) for s in starts]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _placements(h, 4)  # an index constant, not a driver profile id


def test_placements_buffer_too_small(h100: fakegpu.FakeMachine) -> None:
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * 2)()
    count = ctypes.c_uint(2)
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(_gpu(), 19, arr, ctypes.byref(count))
    assert count.value == 7


def test_set_mig_mode_on_idle_gpu_is_immediate(h100: fakegpu.FakeMachine) -> None:
    h = _gpu()
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    assert pynvml.nvmlDeviceSetMigMode(h, 0) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]


def test_set_mig_mode_stays_pending_until_reset(install: Install) -> None:
    needs_reset = fakegpu.parse_profile({"name": "r", "gpus": [{"model": "h100-80gb", "needs_reset": True}]})
    m = install(needs_reset)
    h = _gpu()
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstance(h, 0)
    m.reset(0)
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    assert _create(h, 0) == 0
    m.clear_mig(0)
    # the mark describes the GPU: the next change waits for a reset again
    assert pynvml.nvmlDeviceSetMigMode(h, 0) == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 0]
    m.reset()
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]


def test_asking_for_the_current_mode_cancels_a_pending_change(install: Install) -> None:
    install(fakegpu.parse_profile({"name": "r", "gpus": [{"model": "a100-40gb", "needs_reset": True}]}))
    h = _gpu()
    assert pynvml.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceSetMigMode(h, 0) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]


def test_disabling_mig_with_instances_stays_pending_in_use(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    _create(h, 9)
    assert pynvml.nvmlDeviceSetMigMode(h, 0) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 0]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7  # MIG is still on until the reset
    assert _create(h, 9) == 1  # the first 3g went to slice 4 (GPU instance 2)
    h100.reset(0)
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstance(h, 9)


def test_retrying_set_mig_mode_once_idle_takes_effect(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, 0)
    assert pynvml.nvmlDeviceSetMigMode(h, 0) == pynvml.NVML_ERROR_IN_USE
    pynvml.nvmlGpuInstanceDestroy(gi)  # "idle the device and retry" (nvml.h)
    assert pynvml.nvmlDeviceSetMigMode(h, 0) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]


def test_set_mig_mode_rejects_other_modes(h100: fakegpu.FakeMachine) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceSetMigMode(_gpu(), 2)


@pytest.mark.parametrize(
    ("sequence", "ids"),
    [
        ([19, 14, 5], [13, 5, 1]),  # the example in NVIDIA's MIG user guide
        ([9, 9], [2, 1]),
        ([0], [0]),
        ([15, 15, 15, 15], [6, 5, 4, 3]),
        ([19] * 7, [13, 11, 12, 7, 8, 9, 10]),  # starts 6, 4, 5, 0, 1, 2, 3
        ([20], [13]),
    ],
)
def test_instance_ids_follow_the_driver(
    h100: fakegpu.FakeMachine, sequence: list[int], ids: list[int]
) -> None:
    h = _enable()
    assert [_create(h, pid) for pid in sequence] == ids


@pytest.mark.parametrize(
    ("pid", "start", "gi_id"),
    [(0, 0, 0), (5, 0, 1), (9, 0, 1), (9, 4, 2), (14, 0, 3), (14, 2, 4), (14, 4, 5), (15, 6, 6), (19, 0, 7),
     (19, 6, 13), (20, 3, 10)],
)  # fmt: skip
def test_instance_id_by_placement(h100: fakegpu.FakeMachine, pid: int, start: int, gi_id: int) -> None:
    h = _enable()
    assert _create(h, pid, start) == gi_id
    info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(h, gi_id))
    assert (info.profileId, info.placement.start, info.placement.size) == (pid, start, SIZES[pid])
    assert pynvml.nvmlDeviceGetIndex(info.device) == 0


def test_placement_by_struct_and_by_pointer(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    p = pynvml.c_nvmlGpuInstancePlacement_t(4, 4)
    gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, ctypes.pointer(p))
    assert pynvml.nvmlGpuInstanceGetInfo(gi).id == 2
    gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, pynvml.c_nvmlGpuInstancePlacement_t(0, 4))
    assert pynvml.nvmlGpuInstanceGetInfo(gi).id == 1


def test_overlap_invalid_start_and_capacity(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    _create(h, 9, 0)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        _create(h, 5, 0)  # 4g at 0 overlaps the 3g at 0
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        _create(h, 14, 1)  # 2g starts at 0, 2 or 4 only
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceCreateGpuInstance(h, 3)  # not a driver profile id
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9) == 1
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 3  # starts 4, 5, 6
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0) == 0
    _create(h, 14, 4)
    _create(h, 19, 6)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 0  # 3+2+1 slices, 7th has no memory
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(h, 19)


def test_only_one_media_extension_instance(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    _create(h, 20)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 20) == 0
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        _create(h, 20, 0)


def test_list_and_destroy_gpu_instances(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    _create(h, 19)
    _create(h, 19)
    arr = (pynvml.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(h, 19, arr, ctypes.byref(count))
    assert count.value == 2
    ids = [pynvml.nvmlGpuInstanceGetInfo(arr[i]).id for i in range(2)]
    assert ids == [11, 13]  # starts 6 then 4, listed in id order
    pynvml.nvmlGpuInstanceDestroy(arr[0])
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlGpuInstanceDestroy(arr[0])  # stale handle
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetGpuInstanceById(h, 11)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 6


def test_destroying_gpu_instance_with_compute_instance_is_in_use(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, 9)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    with pytest.raises(pynvml.NVMLError_InUse):
        pynvml.nvmlGpuInstanceDestroy(gi)
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0) == 1


@pytest.mark.parametrize(("gi_pid", "ci_ids"), [(0, [0, 1, 2, 3, 4]), (5, [0, 1, 3]), (9, [0, 1, 2]),
                                                (14, [0, 1]), (15, [0]), (19, [0])])  # fmt: skip
def test_compute_instance_profiles_per_gi_size(
    h100: fakegpu.FakeMachine, gi_pid: int, ci_ids: list[int]
) -> None:
    h = _enable()
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, gi_pid)
    supported = []
    for ci_pid in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, ci_pid, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except pynvml.NVMLError_NotSupported:
            continue
        assert info.id == ci_pid
        supported.append(ci_pid)
    assert supported == ci_ids


def test_compute_instances(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, 9)  # 3g.40gb
    full = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 2, 0)
    assert (full.sliceCount, full.multiprocessorCount, full.name) == (3, 60, "MIG 3g.40gb")
    one = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)
    assert (one.sliceCount, one.instanceCount, one.name) == (1, 3, "MIG 1c.3g.40gb")
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    info = pynvml.nvmlComputeInstanceGetInfo(ci)
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (0, 0, 0, 1)
    assert pynvml.nvmlGpuInstanceGetInfo(info.gpuInstance).id == 2
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0) == 2
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 2) == 0
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    p = pynvml.c_nvmlComputeInstancePlacement_t(2, 1)
    ci2 = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, ctypes.byref(p))
    assert pynvml.nvmlComputeInstanceGetInfo(ci2).id == 1
    assert (
        pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 1)).placement.start
        == 2
    )
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 5)


def test_fresh_gi_compute_instance_gets_id_zero(h100: fakegpu.FakeMachine) -> None:
    h = _enable()
    for pid in (19, 14):
        gi = pynvml.nvmlDeviceCreateGpuInstance(h, pid)
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
        assert pynvml.nvmlComputeInstanceGetInfo(ci).id == 0


def test_mig_devices(h100: fakegpu.FakeMachine) -> None:
    h = _gpu()
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 0
    _enable()
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    for pid in (19, 9, 14):  # GI ids 13, 1, 5 -> MIG devices ordered 1, 5, 13
        gi = pynvml.nvmlDeviceCreateGpuInstance(h, pid)
        full = max(p for p in range(5) if _supports(gi, p))
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, full)
    names, gis = [], []
    for i in range(3):
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(mig)
        names.append(pynvml.nvmlDeviceGetName(mig))
        gis.append(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        assert pynvml.nvmlDeviceGetComputeInstanceId(mig) == 0
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert pynvml.nvmlDeviceGetUUID(parent) == pynvml.nvmlDeviceGetUUID(h)
        uuid = pynvml.nvmlDeviceGetUUID(mig)
        assert re.fullmatch(r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid)
        again = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        assert pynvml.nvmlDeviceGetGpuInstanceId(again) == gis[-1]
    assert gis == [1, 5, 13]
    assert names == [f"NVIDIA H100 80GB HBM3 MIG {n}" for n in ("3g.40gb", "2g.20gb", "1g.10gb")]
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    mem = pynvml.nvmlDeviceGetMemoryInfo(mig)
    assert mem.total == 40448 << 20
    assert mem.free + mem.used == mem.total
    assert pynvml.nvmlDeviceGetAttributes(mig).multiprocessorCount == 60
    assert not pynvml.nvmlDeviceIsMigDeviceHandle(h)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 3)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 7)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h)


def _supports(gi: object, ci_pid: int) -> bool:
    try:
        pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_pid, 0)
    except pynvml.NVMLError_NotSupported:
        return False
    return True


@pytest.mark.parametrize("profile", ["l4x4", "t4"])
def test_mig_calls_on_gpus_without_mig(install: Install, profile: str) -> None:
    install(profile)
    h = _gpu()
    calls: list[Callable[[], object]] = [
        lambda: pynvml.nvmlDeviceGetMigMode(h),
        lambda: pynvml.nvmlDeviceSetMigMode(h, 1),
        lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, 0),
        lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0),
        lambda: pynvml.nvmlDeviceCreateGpuInstance(h, 19),
        lambda: pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19),
        lambda: pynvml.nvmlDeviceGetGpuInstanceId(h),
    ]
    for call in calls:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()


def test_profile_preset_layout(install: Install) -> None:
    install("dgx-h100-mig")
    expected = {0: [0], 2: [1, 2], 4: [1, 5, 13], 6: [7, 8, 9, 10, 11, 12, 13]}
    for gpu, gis in expected.items():
        h = _gpu(gpu)
        assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
        found = [
            pynvml.nvmlDeviceGetGpuInstanceId(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i))
            for i in range(len(gis))
        ]
        assert found == gis


def test_machine_api_mig(h100: fakegpu.FakeMachine) -> None:
    with pytest.raises(fakegpu.MigError, match=r"disabled on GPU 1; enable it .*`fakegpu mig enable 1`"):
        h100.create_gpu_instance(1, "3g.40gb")
    h100.set_mig_mode(1, True)
    assert h100.create_gpu_instance(1, "3g.40gb", 4) == 2
    assert h100.create_gpu_instance("1", 14) == 4  # highest free 2g start left of the 3g is 2
    with pytest.raises(
        fakegpu.MigError,
        match=r"4g.40gb at 0 overlaps GPU instance 4 \(2g.20gb at slices 2-3\) on GPU 1; destroy it or",
    ):
        h100.create_gpu_instance(1, "4g.40gb", 0)
    with pytest.raises(fakegpu.MigError, match="no MIG profile"):
        h100.create_gpu_instance(1, "5g.50gb")
    snap = h100.snapshot()["gpus"][1]["mig"]
    assert [gi["id"] for gi in snap["gpu_instances"]] == [2, 4]
    with pytest.raises(fakegpu.MigError, match=r"no GPU instance 9; it has \[2, 4\]"):
        h100.destroy_gpu_instance(1, 9)
    h100.destroy_gpu_instance(1, 2)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(_gpu(1), 9) == 1


def test_h200_mig_device_name_and_memory(install: Install) -> None:
    m = install("dgx-h200")
    m.set_mig_mode(0, True)
    m.create_gpu_instance(0, "7g.141gb")
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(_gpu(), 0)
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H200 MIG 7g.141gb"
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 143104 << 20
    attrs = pynvml.nvmlDeviceGetAttributes(mig)
    assert attrs.gpuInstanceSliceCount == attrs.computeInstanceSliceCount == 7
    assert attrs.multiprocessorCount == 132


@pytest.mark.parametrize("profile", sorted(NAMES))
def test_mig_device_name_memory_and_sms_per_model(install: Install, profile: str) -> None:
    m = install(profile)
    sms = SMS_A100 if "a100" in profile else SMS_HOPPER
    for gpu, pid in enumerate(INDEX_TO_ID.values()):  # one profile per GPU, each on an empty GPU
        m.set_mig_mode(gpu, True)
        m.create_gpu_instance(gpu, pid)
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(_gpu(gpu), 0)
        assert pynvml.nvmlDeviceGetName(mig) == f"{GPU_NAMES[profile]} MIG {NAMES[profile][pid]}"
        mem = pynvml.nvmlDeviceGetMemoryInfo(mig)
        assert mem.total == MEMORY[profile][pid] << 20
        assert mem.used > 0 and mem.free + mem.used == mem.total
        assert pynvml.nvmlDeviceGetAttributes(mig).multiprocessorCount == sms[pid]
