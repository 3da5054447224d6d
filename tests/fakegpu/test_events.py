"""Events, ECC counters and lost GPUs through pynvml."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pynvml
import pytest

import fakegpu

Install = Callable[..., fakegpu.FakeMachine]
ALL = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypeSingleBitEccError
)


def _watch(*gpus: int, mask: int = ALL) -> object:
    es = pynvml.nvmlEventSetCreate()
    for i in gpus:
        pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(i), mask, es)
    return es


def test_supported_event_types(h100: fakegpu.FakeMachine) -> None:
    types = pynvml.nvmlDeviceGetSupportedEventTypes(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert types & ALL == ALL


def test_xid_delivered_once_then_timeout(h100: fakegpu.FakeMachine) -> None:
    es = _watch(0, 1)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 0)
    h100.inject_xid(1, 48)
    data = pynvml.nvmlEventSetWait(es, 1000)
    assert data.eventType == pynvml.nvmlEventTypeXidCriticalError == 8
    assert data.eventData == 48
    assert pynvml.nvmlDeviceGetIndex(data.device) == 1
    assert data.gpuInstanceId == data.computeInstanceId == 0xFFFFFFFF
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 20)
    pynvml.nvmlEventSetFree(es)


def test_events_in_order_each_set_consumes_independently(h100: fakegpu.FakeMachine) -> None:
    a, b = _watch(0), _watch(0)
    for xid in (13, 31, 79):
        h100.inject_xid(0, xid)
    assert [pynvml.nvmlEventSetWait(a, 0).eventData for _ in range(3)] == [13, 31, 79]
    assert [pynvml.nvmlEventSetWait(b, 0).eventData for _ in range(3)] == [13, 31, 79]


def test_events_filtered_by_gpu_and_type(h100: fakegpu.FakeMachine) -> None:
    es = _watch(0, mask=pynvml.nvmlEventTypeXidCriticalError)
    h100.inject_xid(2, 48)  # GPU not registered
    h100.inject_ecc(0, "single")  # type not registered
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 0)


def test_events_before_registration_are_not_delivered(h100: fakegpu.FakeMachine) -> None:
    h100.inject_xid(0, 48)
    es = _watch(0)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 0)


def test_wait_wakes_up_when_event_arrives(h100: fakegpu.FakeMachine) -> None:
    es = _watch(0)
    timer = threading.Timer(0.1, h100.inject_xid, args=(0, 94))
    timer.start()
    started = time.monotonic()
    data = pynvml.nvmlEventSetWait(es, 60000)
    assert data.eventData == 94
    assert time.monotonic() - started < 30  # woken by the event, long before the wait's 60 s
    timer.join()


def test_xid_on_a_mig_instance(h100: fakegpu.FakeMachine) -> None:
    es = _watch(0)
    h100.inject_xid(0, 43, gpu_instance=7, compute_instance=0)
    data = pynvml.nvmlEventSetWait(es, 0)
    assert (data.eventData, data.gpuInstanceId, data.computeInstanceId) == (43, 7, 0)


def test_ecc_counters_and_events(h100: fakegpu.FakeMachine) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(3)
    es = _watch(3)
    assert pynvml.nvmlDeviceGetEccMode(h) == [1, 1]
    h100.inject_ecc(3, "single", count=2)
    h100.inject_ecc("3", "double")
    assert pynvml.nvmlEventSetWait(es, 0).eventType == pynvml.nvmlEventTypeSingleBitEccError
    assert pynvml.nvmlEventSetWait(es, 0).eventType == pynvml.nvmlEventTypeDoubleBitEccError
    c, u = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, c, pynvml.NVML_VOLATILE_ECC) == 2
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, u, pynvml.NVML_AGGREGATE_ECC) == 1
    dram = pynvml.NVML_MEMORY_LOCATION_DRAM
    assert pynvml.nvmlDeviceGetMemoryErrorCounter(h, u, pynvml.NVML_VOLATILE_ECC, dram) == 1
    h100.heal(3)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, c, pynvml.NVML_VOLATILE_ECC) == 0
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, c, pynvml.NVML_AGGREGATE_ECC) == 2
    with pytest.raises(fakegpu.FaultError, match=r"one of \['single', 'double'\], not 'triple'"):
        h100.inject_ecc(3, "triple")
    with pytest.raises(fakegpu.FaultError, match="count is an integer >= 1, not 0"):
        h100.inject_ecc(3, "single", count=0)
    with pytest.raises(fakegpu.FaultError, match="non-negative integer"):
        h100.inject_xid(3, -1)
    with pytest.raises(fakegpu.UnknownGpuError, match=r"no GPU 8 on this machine \(indexes 0..7"):
        h100.inject_xid(8, 48)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h, c, pynvml.NVML_AGGREGATE_ECC) == 2  # nothing counted


def test_lost_gpu_answers_gpu_is_lost_others_keep_working(h100: fakegpu.FakeMachine) -> None:
    es = _watch(5)
    h = pynvml.nvmlDeviceGetHandleByIndex(5)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    h100.mark_lost(h100.state.gpus[5].uuid)
    data = pynvml.nvmlEventSetWait(es, 0)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    calls: list[Callable[[], object]] = [
        lambda: pynvml.nvmlDeviceGetName(h),
        lambda: pynvml.nvmlDeviceGetUUID(h),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        lambda: pynvml.nvmlDeviceGetPciInfo(h),
        lambda: pynvml.nvmlDeviceGetTemperature(h, 0),
        lambda: pynvml.nvmlDeviceGetMigMode(h),
        lambda: pynvml.nvmlDeviceGetHandleByIndex(5),
        lambda: pynvml.nvmlDeviceGetHandleByUUID(uuid),
    ]
    for call in calls:
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert pynvml.nvmlDeviceGetCount() == 8
    for i in (0, 4, 6):
        assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) == "NVIDIA H100 80GB HBM3"
    h100.heal(5)
    assert pynvml.nvmlDeviceGetUUID(h) == uuid


def test_lost_gpu_mig_devices_are_lost_too(h100: fakegpu.FakeMachine) -> None:
    h100.set_mig_mode(0, True)
    h100.create_gpu_instance(0, "7g.80gb")
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
    h100.mark_lost(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetName(mig)


def test_health_values_are_plausible(install: Install) -> None:
    install("mixed")
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert 20 <= pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) <= 50
        limit = pynvml.nvmlDeviceGetPowerManagementLimit(h)
        assert 0 < pynvml.nvmlDeviceGetPowerUsage(h) < limit <= 700_000
        assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == limit
        if pynvml.nvmlDeviceGetName(h).startswith("NVIDIA H100") and i == 1:
            with pytest.raises(pynvml.NVMLError_NotSupported):  # MIG on: no per-GPU utilization
                pynvml.nvmlDeviceGetUtilizationRates(h)
            continue
        util = pynvml.nvmlDeviceGetUtilizationRates(h)
        assert 0 <= util.gpu <= 100 and 0 <= util.memory <= 100
        assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []


def test_event_set_errors(h100: fakegpu.FakeMachine) -> None:
    es = _watch(0)
    pynvml.nvmlEventSetFree(es)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetWait(es, 0)
    es = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0), 1 << 40, es)


def test_reset_clears_faults_and_mig_instances(h100: fakegpu.FakeMachine) -> None:
    h100.set_mig_mode(0, True)
    h100.create_gpu_instance(0, "3g.40gb")
    h100.mark_lost(0)
    h100.inject_ecc(1, "single")
    h100.reset()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0) == 1
    h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetTotalEccErrors(h1, 0, pynvml.NVML_VOLATILE_ECC) == 0
    assert pynvml.nvmlDeviceGetTotalEccErrors(h1, 0, pynvml.NVML_AGGREGATE_ECC) == 1
