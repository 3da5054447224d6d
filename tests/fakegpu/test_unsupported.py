"""Jetson answers identity only; unmodelled functions answer NOT_SUPPORTED, never crash."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

import fakegpu

Install = Callable[..., fakegpu.FakeMachine]


def test_jetson_identity_answers(install: Install) -> None:
    install("jetson-orin")
    assert pynvml.nvmlDeviceGetCount() == 1
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetIndex(h) == 0  # part of the handle's identity
    assert pynvml.nvmlDeviceGetName(h) == "Orin (nvgpu)"
    assert pynvml.nvmlDeviceGetUUID(h).startswith("GPU-")
    assert pynvml.nvmlDeviceGetCudaComputeCapability(h) == (8, 7)
    assert pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(h)) is not None
    assert pynvml.nvmlSystemGetDriverVersion() == "540.4.0"


def test_jetson_everything_else_not_supported(install: Install) -> None:
    install("jetson-orin")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    es = pynvml.nvmlEventSetCreate()
    calls: list[Callable[[], object]] = [
        lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        lambda: pynvml.nvmlDeviceGetPciInfo(h),
        lambda: pynvml.nvmlDeviceGetMigMode(h),
        lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, 0),
        lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h),
        lambda: pynvml.nvmlDeviceGetSupportedEventTypes(h),
        lambda: pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es),
        lambda: pynvml.nvmlDeviceGetEccMode(h),
        lambda: pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0),
        lambda: pynvml.nvmlDeviceGetPowerUsage(h),
        lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h),
        lambda: pynvml.nvmlDeviceGetTemperature(h, 0),
        lambda: pynvml.nvmlDeviceGetMinorNumber(h),
        lambda: pynvml.nvmlDeviceGetSerial(h),
        lambda: pynvml.nvmlDeviceGetArchitecture(h),
        lambda: pynvml.nvmlDeviceGetBrand(h),
        lambda: pynvml.nvmlDeviceGetAttributes(h),
        lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
        lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
        lambda: pynvml.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, 2),
        lambda: pynvml.nvmlDeviceSetMigMode(h, 1),
        lambda: pynvml.nvmlDeviceIsMigDeviceHandle(h),
        lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0),
        lambda: pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h),
        lambda: pynvml.nvmlDeviceGetGpuInstanceId(h),
    ]
    for call in calls:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()


@pytest.mark.parametrize(
    "call",
    [
        pynvml.nvmlDeviceGetFanSpeed,
        lambda h: pynvml.nvmlDeviceGetNvLinkState(h, 0),
        pynvml.nvmlDeviceGetDisplayMode,
        pynvml.nvmlDeviceGetGspFirmwareMode,
        pynvml.nvmlDeviceGetPcieReplayCounter,
        lambda h: pynvml.nvmlDeviceGetCpuAffinity(h, 4),
        lambda h: pynvml.nvmlDeviceGetRetiredPages(h, 0),
        lambda h: pynvml.nvmlUnitGetCount(),
    ],
)
def test_unmodelled_functions_are_not_supported(
    h100: fakegpu.FakeMachine, call: Callable[[object], object]
) -> None:
    with pytest.raises(pynvml.NVMLError_NotSupported):
        call(pynvml.nvmlDeviceGetHandleByIndex(0))


def test_garbage_arguments_are_invalid_argument(h100: fakegpu.FakeMachine) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetName(pynvml.c_nvmlDevice_t())  # NULL handle
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetName(ctypes.cast(ctypes.c_void_p(0x1234), pynvml.c_nvmlDevice_t))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByPciBusId("not-a-bus-id")
    lib = pynvml.nvmlLib
    assert lib.nvmlDeviceGetCount_v2("nonsense", 1, 2) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_symbols_accept_attributes_like_ctypes_functions(h100: fakegpu.FakeMachine) -> None:
    fn = pynvml.nvmlLib.nvmlErrorString
    fn.restype = ctypes.c_char_p  # what pynvml itself does
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_TIMEOUT) == "Timeout"
    assert pynvml.nvmlLib.nvmlDeviceGetSomethingNew(1, 2) == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(AttributeError):
        _ = pynvml.nvmlLib.not_a_symbol


def test_an_unreadable_state_dir_is_an_nvml_error_not_a_crash(
    install: Install, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    install("t4", state_dir=tmp_path)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    (tmp_path / "machine.json").write_text("{truncated")
    with pytest.raises(pynvml.NVMLError_Unknown):
        pynvml.nvmlDeviceGetName(h)
    assert "cannot read fake machine state" in caplog.text


def test_numa_node_of_a_dgx_and_none_of_a_jetson() -> None:
    with fakegpu.installed("dgx-h100"):
        pynvml.nvmlInit()
        nodes = [pynvml.nvmlDeviceGetNumaNodeId(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]
    assert nodes == [0, 0, 0, 0, 1, 1, 1, 1]  # the PCI buses of the second socket start at 0x80
    with fakegpu.installed("jetson-orin"):
        pynvml.nvmlInit()
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetNumaNodeId(pynvml.nvmlDeviceGetHandleByIndex(0))
