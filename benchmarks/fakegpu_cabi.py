"""fakegpu's C library against its pynvml path: the same calls, one run, p50/p99 in microseconds;
and go-nvlib's whole walk (as NVIDIA's DRA driver enumerates) of dgx-h100-mig and hgx-16xh100.

Both paths read one machine in one state directory: a C program (``benchmarks/clib/
nvml_calls.c``, built with cc) linked against ``fakegpu lib``, and pynvml over ``fakegpu.install``
in this process. The Go walk is ``tests/fakegpu/nvmlwalk`` (``bench N``), built from Go modules;
without cc or go those parts say why they are missing instead of a figure.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

import fakegpu

HERE = Path(__file__).resolve().parent
C_SOURCE = HERE / "clib" / "nvml_calls.c"
NVMLWALK = HERE.parent / "tests" / "fakegpu" / "nvmlwalk"
CALLS_PER_QUERY = 2000
WALKS = 10


def _us(samples_ns: list[float]) -> dict[str, float]:
    q = statistics.quantiles(sorted(samples_ns), n=100, method="inclusive")
    return {"p50_us": round(q[49] / 1000, 2), "p99_us": round(q[98] / 1000, 2)}


def _pynvml_calls(n: int) -> dict[str, dict[str, float]]:
    h = pynvml.nvmlDeviceGetHandleByIndex(2)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    queries: dict[str, Callable[[], object]] = {
        "nvmlDeviceGetCount": pynvml.nvmlDeviceGetCount,
        "nvmlDeviceGetHandleByIndex": lambda: pynvml.nvmlDeviceGetHandleByIndex(2),
        "nvmlDeviceGetName": lambda: pynvml.nvmlDeviceGetName(h),
        "nvmlDeviceGetUUID": lambda: pynvml.nvmlDeviceGetUUID(h),
        "nvmlDeviceGetMemoryInfo": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        "nvmlDeviceGetPciInfo": lambda: pynvml.nvmlDeviceGetPciInfo_v3(h),
        "nvmlDeviceGetMigMode": lambda: pynvml.nvmlDeviceGetMigMode(h),
        "nvmlDeviceGetGpuInstanceProfileInfo": lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, 0, 1),
        "nvmlDeviceGetMigDeviceHandleByIndex": lambda: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0),
        "nvmlDeviceGetName(MIG device)": lambda: pynvml.nvmlDeviceGetName(mig),
    }
    out = {}
    for name, fn in queries.items():
        samples = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fn()
            samples.append(float(time.perf_counter_ns() - t0))
        out[name] = _us(samples)
    return out


def _c_calls(state: Path, lib: Path, work: Path, n: int) -> dict[str, Any]:
    cc = shutil.which("cc")
    if cc is None:
        return {"skipped": "no C compiler (cc)"}
    binary = work / "nvml_calls"
    link = [f"-L{lib}", "-lnvidia-ml", f"-Wl,-rpath,{lib}"]
    subprocess.run([cc, "-O2", "-o", str(binary), str(C_SOURCE), *link], check=True, capture_output=True)
    env = {**os.environ, "FAKEGPU_STATE_DIR": str(state), "LD_LIBRARY_PATH": str(lib)}
    done = subprocess.run([str(binary), str(n)], env=env, capture_output=True, text=True, check=True)
    return {name: _us([float(x) for x in ns]) for name, ns in json.loads(done.stdout).items()}


def _walker() -> Path | str:
    if shutil.which("go") is None:
        return "'go' is not on PATH"
    from clusters.errors import ClusterError
    from clusters.local import gobins
    from clusters.local.settings import LocalSettings

    try:
        return gobins.resolve_tool("nvmlwalk", NVMLWALK, LocalSettings.from_env(os.environ), print, cgo=True)
    except ClusterError as e:
        return str(e)


def _go_walk(walker: Path, lib: Path, profile: str, work: Path) -> dict[str, Any]:
    state = work / f"walk-{profile}"
    fakegpu.FakeMachine(profile, state_dir=state).close()
    env = {**os.environ, "FAKEGPU_STATE_DIR": str(state), "LD_LIBRARY_PATH": str(lib)}
    started = time.perf_counter()
    done = subprocess.run(
        [str(walker), "bench", str(WALKS)], env=env, capture_output=True, text=True, check=True
    )
    process_s = time.perf_counter() - started
    got = json.loads(done.stdout)
    runs = got["walk_ms"]
    return {
        "devices": got["devices"],
        "walk_median_ms": round(statistics.median(runs), 1),
        "walk_min_ms": round(min(runs), 1),
        "process_s": round(process_s, 2),  # start (Python inside), init and the walks
    }


def run() -> dict[str, Any]:
    """The C ABI against pynvml on dgx-h100-mig, and the Go walks."""
    lib = fakegpu.library_dir()
    with tempfile.TemporaryDirectory(prefix="fakegpu-cabi-") as tmp:
        work = Path(tmp)
        state = work / "gpus"
        machine = fakegpu.install("dgx-h100-mig", state_dir=state)
        try:
            pynvml.nvmlInit()
            python = _pynvml_calls(CALLS_PER_QUERY)
        finally:
            pynvml.nvmlShutdown()
            fakegpu.uninstall()
            machine.close()
        c_side = _c_calls(state, lib, work, CALLS_PER_QUERY)
        ratio = {
            name: round(c_side[name]["p50_us"] / python[name]["p50_us"], 2)
            for name in python
            if name in c_side and python[name]["p50_us"]
        }
        walker = _walker()
        walks: dict[str, Any]
        if isinstance(walker, Path):
            walks = {p: _go_walk(walker, lib, p, work) for p in ("dgx-h100-mig", "hgx-16xh100")}
        else:
            walks = {"skipped": walker}
    return {
        "calls_per_query": CALLS_PER_QUERY,
        "c_abi": c_side,
        "pynvml_install": python,
        "c_over_pynvml_p50": ratio,
        "go_nvlib_walk": walks,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
