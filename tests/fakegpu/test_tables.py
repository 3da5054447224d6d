"""Per-model table values checked against nvidia-smi transcripts and nvml.h (issue 12).

Where each number comes from: fakegpu/profiles/README.md, "Where the facts come from".
"""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import pytest

import fakegpu

Install = Callable[..., fakegpu.FakeMachine]
DGX = ["dgx-h200", "dgx-h100", "dgx-h100-mig", "dgx-h100-mig-empty", "dgx-a100-80gb", "dgx-a100-40gb"]


def _one(model: str, *, mig: bool = False) -> fakegpu.Profile:
    return fakegpu.parse_profile({"name": f"one-{model}", "gpus": [{"model": model, "mig": mig}]})


def _gi_memory(pid_index: int) -> int:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return int(pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pid_index).memorySizeMB)


def test_h200_7g_memory_is_143104_mib(install: Install) -> None:
    install("dgx-h200")
    assert _gi_memory(pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE) == 143104


def test_a100_80gb_1g_memory_is_9728_mib(install: Install) -> None:
    install("dgx-a100-80gb")
    assert _gi_memory(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE) == 9728
    assert _gi_memory(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1) == 9728  # 1g.10gb+me


@pytest.mark.parametrize("model", ["a100-40gb", "a100-80gb", "h100-80gb", "h200"])
def test_compute_instance_profiles_of_a_4g_instance(install: Install, model: str) -> None:
    install(_one(model, mig=True))
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, 5)  # 4g
    counts = {}
    for ci_pid in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_pid, 0)
        except pynvml.NVMLError_NotSupported:
            continue
        counts[int(info.sliceCount)] = int(info.instanceCount)
    assert counts == {1: 4, 2: 2, 4: 1}
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)


BAR1_AND_RESERVED = {
    # model: (BAR1 total MiB, reserved FB MiB)
    "h100-80gb": (131072, 454),
    "h200": (262144, 700),
    "a100-80gb": (131072, 834),
    "a100-40gb": (65536, 620),
    "l4": (32768, 556),
    "t4": (256, 393),
}


@pytest.mark.parametrize("model", sorted(BAR1_AND_RESERVED))
def test_bar1_total_and_reserved_memory(install: Install, model: str) -> None:
    bar1, reserved = BAR1_AND_RESERVED[model]
    install(_one(model))
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    b = pynvml.nvmlDeviceGetBAR1MemoryInfo(h)
    assert b.bar1Total == bar1 << 20
    assert b.bar1Used + b.bar1Free == b.bar1Total
    assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).reserved == reserved << 20
    assert pynvml.nvmlDeviceGetMemoryInfo(h).used == reserved << 20


def test_h200_subsystem_id_and_board_part_number(install: Install) -> None:
    install("dgx-h200")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPciInfo(h).pciSubSystemId == 0x18BE10DE
    assert pynvml.nvmlDeviceGetBoardPartNumber(h) == "695-2G520-0280-000"


def _minors() -> list[int]:
    return [
        pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i))
        for i in range(pynvml.nvmlDeviceGetCount())
    ]


@pytest.mark.parametrize("profile", DGX)
def test_dgx_minor_numbers_are_not_the_index(install: Install, profile: str) -> None:
    install(profile)
    minors = _minors()
    assert minors[0] == 2  # GPU 0 had minor 2
    assert sorted(minors) == list(range(8))
    assert all(m != i for i, m in enumerate(minors))


def test_minor_numbers_from_the_profile(install: Install) -> None:
    install(fakegpu.parse_profile({"name": "l4", "minor_numbers": [8], "gpus": [{"model": "l4"}]}))
    assert _minors() == [8]


@pytest.mark.parametrize(
    ("minors", "match"), [([1], "one per GPU"), ([1, 1], "unique"), ([1, -1], r"minor_numbers\[1\]")]
)
def test_bad_minor_numbers_are_refused(minors: list[int], match: str) -> None:
    with pytest.raises(fakegpu.ProfileError, match=match):
        fakegpu.parse_profile({"name": "x", "minor_numbers": minors, "gpus": [{"model": "l4", "count": 2}]})


def test_minor_numbers_survive_a_state_dir(tmp_path: object) -> None:
    a = fakegpu.FakeMachine("dgx-h100", state_dir=str(tmp_path))
    b = fakegpu.FakeMachine.attach(str(tmp_path))
    assert [g.minor for g in b.state.gpus] == [g.minor for g in a.state.gpus] != list(range(8))
    a.close()
    b.close()
