"""Identity facts: names, memory, compute capability, architecture, brand, PCI, UUIDs, versions."""

from __future__ import annotations

import re
from collections.abc import Callable

import pynvml
import pytest

import fakegpu

MODEL_FACTS = {
    # profile: (name, memory.total, compute capability, architecture, PCI device id, brand)
    "dgx-h200": ("NVIDIA H200", 150754820096, (9, 0), 9, 0x233510DE, pynvml.NVML_BRAND_NVIDIA),
    "dgx-h100": ("NVIDIA H100 80GB HBM3", 85520809984, (9, 0), 9, 0x233010DE, pynvml.NVML_BRAND_NVIDIA),
    "dgx-a100-80gb": ("NVIDIA A100-SXM4-80GB", 85899345920, (8, 0), 7, 0x20B210DE, pynvml.NVML_BRAND_NVIDIA),
    "dgx-a100-40gb": ("NVIDIA A100-SXM4-40GB", 42949672960, (8, 0), 7, 0x20B010DE, pynvml.NVML_BRAND_NVIDIA),
    "l4x4": ("NVIDIA L4", 24152899584, (8, 9), 8, 0x27B810DE, pynvml.NVML_BRAND_NVIDIA),
    "t4": ("Tesla T4", 16106127360, (7, 5), 6, 0x1EB810DE, pynvml.NVML_BRAND_NVIDIA),  # recent drivers
}
UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
Install = Callable[..., fakegpu.FakeMachine]


@pytest.mark.parametrize("profile", sorted(MODEL_FACTS))
def test_model_facts(install: Install, profile: str) -> None:
    name, total, cc, arch, pci_id, brand = MODEL_FACTS[profile]
    install(profile)
    minors = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert pynvml.nvmlDeviceGetName(h) == name
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        assert mem.total == total
        assert mem.used > 0
        assert mem.free + mem.used == mem.total
        assert pynvml.nvmlDeviceGetCudaComputeCapability(h) == cc
        assert pynvml.nvmlDeviceGetArchitecture(h) == arch
        assert pynvml.nvmlDeviceGetPciInfo(h).pciDeviceId == pci_id
        assert pynvml.nvmlDeviceGetBrand(h) == brand
        assert pynvml.nvmlDeviceGetIndex(h) == i
        minors.add(pynvml.nvmlDeviceGetMinorNumber(h))
    assert len(minors) == pynvml.nvmlDeviceGetCount()  # unique; not the index on DGX (test_tables.py)


def test_memory_v2_adds_up(h100: fakegpu.FakeMachine) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert m.total == 85520809984
    assert m.reserved > 0
    assert m.free + m.used + m.reserved == m.total


@pytest.mark.parametrize("profile", ["dgx-h100", "mixed", "hgx-16xh100", "l4x4"])
def test_pci_bus_ids_unique_and_well_formed(install: Install, profile: str) -> None:
    install(profile)
    ids = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        pci = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:00\.0", pci.busId)
        assert pci.busIdLegacy == pci.busId[4:]
        assert pci.bus == int(pci.busId[9:11], 16)
        ids.append(pci.busId)
        assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(pci.busId)) == i
    assert len(set(ids)) == len(ids)


def test_index_minor_uuid(h100: fakegpu.FakeMachine) -> None:
    uuids = set()
    for i in range(8):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert pynvml.nvmlDeviceGetIndex(h) == i
        assert pynvml.nvmlDeviceGetMinorNumber(h) == (2, 3, 0, 1, 6, 7, 4, 5)[i]
        uuid = pynvml.nvmlDeviceGetUUID(h)
        assert UUID.match(uuid)
        uuids.add(uuid)
        assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == i
    assert len(uuids) == 8


def test_unknown_uuid_is_not_found(h100: fakegpu.FakeMachine) -> None:
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")


def test_bad_index_is_invalid_argument(h100: fakegpu.FakeMachine) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(8)


def _uuids(install: Install, profile: str = "dgx-h100", **kwargs: object) -> list[str]:
    install(profile, **kwargs)
    out = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]
    fakegpu.uninstall()
    return out


def test_uuids_deterministic_and_seeded_by_node_name(install: Install) -> None:
    a = _uuids(install, node_name="node-a")
    assert _uuids(install, node_name="node-a") == a
    assert not set(_uuids(install, node_name="node-b")) & set(a)
    assert not set(_uuids(install, "dgx-h200", node_name="node-a")) & set(a)  # the profile counts too


def test_driver_and_cuda_versions(h100: fakegpu.FakeMachine) -> None:
    assert pynvml.nvmlSystemGetDriverVersion() == "580.95.05"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 13000
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == 13000
    assert pynvml.nvmlSystemGetNVMLVersion() == "13.580.95.05"


def test_error_string(h100: fakegpu.FakeMachine) -> None:
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_FOUND) == "Not Found"
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "GPU is lost"


def test_sixteen_gpus(install: Install) -> None:
    install("hgx-16xh100")
    assert pynvml.nvmlDeviceGetCount() == 16
    assert pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByIndex(15)) == 15


def test_calls_before_init_are_uninitialized() -> None:
    with fakegpu.installed("t4"):
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 1
        pynvml.nvmlShutdown()
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()


def test_uninstall_restores_pynvml() -> None:
    before = pynvml.nvmlLib
    with fakegpu.installed("t4") as m:
        assert pynvml.nvmlLib is not before
        assert fakegpu.current() is m
    assert pynvml.nvmlLib is before
    assert fakegpu.current() is None
