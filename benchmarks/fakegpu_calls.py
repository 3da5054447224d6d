"""fakegpu: microseconds per pynvml call, and the time to enumerate a MIG machine with every attribute.

Figures for a machine private to the process (in memory) and one shared through a state
directory (every call checks whether another process changed the state file).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pynvml

import fakegpu


def _us_per_call(fn: Callable[[], object], n: int = 2000) -> float:
    fn()
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - started) / n * 1e6)
    return round(min(runs), 2)


def _calls() -> dict[str, float]:
    h = pynvml.nvmlDeviceGetHandleByIndex(2)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)

    def wait_timeout() -> None:
        with contextlib.suppress(pynvml.NVMLError_Timeout):
            pynvml.nvmlEventSetWait(es, 0)

    out = {
        "nvmlDeviceGetCount": _us_per_call(pynvml.nvmlDeviceGetCount),
        "nvmlDeviceGetHandleByIndex": _us_per_call(lambda: pynvml.nvmlDeviceGetHandleByIndex(2)),
        "nvmlDeviceGetName": _us_per_call(lambda: pynvml.nvmlDeviceGetName(h)),
        "nvmlDeviceGetUUID": _us_per_call(lambda: pynvml.nvmlDeviceGetUUID(h)),
        "nvmlDeviceGetMemoryInfo": _us_per_call(lambda: pynvml.nvmlDeviceGetMemoryInfo(h)),
        "nvmlDeviceGetPciInfo": _us_per_call(lambda: pynvml.nvmlDeviceGetPciInfo(h)),
        "nvmlDeviceGetMigMode": _us_per_call(lambda: pynvml.nvmlDeviceGetMigMode(h)),
        "nvmlDeviceGetGpuInstanceProfileInfo": _us_per_call(
            lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, 0)
        ),
        "nvmlDeviceGetMigDeviceHandleByIndex": _us_per_call(
            lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
        ),
        "nvmlDeviceGetName(MIG device)": _us_per_call(lambda: pynvml.nvmlDeviceGetName(mig)),
        "nvmlEventSetWait(0 ms, nothing pending)": _us_per_call(wait_timeout, n=500),
    }
    pynvml.nvmlEventSetFree(es)
    return out


def _enumerate() -> int:
    """Read every attribute of every GPU and MIG device; returns how many devices were read."""
    seen = 0
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        for q in (
            pynvml.nvmlDeviceGetName,
            pynvml.nvmlDeviceGetUUID,
            pynvml.nvmlDeviceGetMemoryInfo,
            pynvml.nvmlDeviceGetPciInfo,
            pynvml.nvmlDeviceGetCudaComputeCapability,
            pynvml.nvmlDeviceGetArchitecture,
            pynvml.nvmlDeviceGetBrand,
            pynvml.nvmlDeviceGetSerial,
            pynvml.nvmlDeviceGetMinorNumber,
            pynvml.nvmlDeviceGetIndex,
            pynvml.nvmlDeviceGetMigMode,
            pynvml.nvmlDeviceGetMaxMigDeviceCount,
            pynvml.nvmlDeviceGetAttributes,
        ):
            q(h)
        for index in (0, 7, 9, 1, 2, 3, 4):
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, info.id)
        seen += 1
        for k in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
            except pynvml.NVMLError_NotFound:
                continue
            for q in (
                pynvml.nvmlDeviceGetName,
                pynvml.nvmlDeviceGetUUID,
                pynvml.nvmlDeviceGetMemoryInfo,
                pynvml.nvmlDeviceGetAttributes,
                pynvml.nvmlDeviceGetGpuInstanceId,
                pynvml.nvmlDeviceGetComputeInstanceId,
                pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
            ):
                q(mig)
            seen += 1
    return seen


def _enumerate_ms() -> dict[str, Any]:
    devices = _enumerate()
    runs = []
    for _ in range(15):
        started = time.perf_counter()
        _enumerate()
        runs.append((time.perf_counter() - started) * 1e3)
    return {"devices": devices, "median_ms": round(statistics.median(runs), 2), "min_ms": round(min(runs), 2)}


def _measure(state_dir: str | None) -> dict[str, Any]:
    fakegpu.install("dgx-h100-mig", state_dir=state_dir)
    try:
        pynvml.nvmlInit()
        return {"us_per_call": _calls(), "enumerate_dgx_h100_mig": _enumerate_ms()}
    finally:
        pynvml.nvmlShutdown()
        fakegpu.uninstall()


def run() -> dict[str, Any]:
    """Per-call cost and full enumeration of dgx-h100-mig (8x H100 with 26 MIG devices: 34 devices)."""
    with tempfile.TemporaryDirectory(prefix="fakegpu-bench-") as d:
        return {"in_memory": _measure(None), "state_dir": _measure(d)}


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
