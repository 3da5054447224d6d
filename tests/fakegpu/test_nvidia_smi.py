"""NVIDIA's own nvidia-smi 535.261.03 over the fake libnvidia-ml.so.1 (fakegpu/README.md,
"NVIDIA's nvidia-smi").

Always: the private ``nvmlInternalGetExportTable`` answered as the real library answers it,
``nvmlInitWithFlags`` with each documented flag, and the public calls whose answers nvidia-smi
shows (MIG device index and ECC, field values). With nvidia-smi at hand (``python -m fakegpu
nvidia-smi --fetch``, or that version on PATH): its default table, ``-q``, ``-L`` and an XID seen
by ``-l``; skipped, saying how to get it, otherwise.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

import fakegpu
from fakegpu import _nvsmi
from fakegpu._install import env_defaults
from tests.fakegpu import clibkit

PROFILE = """\
name: smi-535
description: two H100s on driver 535.261.03, the second with MIG
driver_version: "535.261.03"
cuda_driver_version: 12020
gpus:
  - model: h100-80gb
  - model: h100-80gb
    mig: true
    mig_instances:
      - {profile: 3g.40gb, placement: 0}
      - {profile: 1g.10gb}
"""

UNINITIALIZED = {
    "Addressing Mode",
    "GPU Part Number",
    "FRU Part Number",
    "Relaxed Ordering Mode",
    "Host Max",
    "Atomic Caps Inbound",
    "Atomic Caps Outbound",
    "Sparse Operation Mode",
    "GPU T.Limit Temp",
    "Memory",  # Deferred Clocks
    "Graphics",  # Voltage
}
"""The ``-q`` rows nvidia-smi reads only through entries of the private export table: ours has
none, so they print "Uninitialized" (README). A change here is a change of that stopping point."""

_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1] + "/libnvidia-ml.so.1")
get = lib.nvmlInternalGetExportTable
get.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
known = bytes.fromhex("c4fe3e6cc98f6c4ea327ee696e12f7c4")
out = {}
table = ctypes.c_void_p(1)
out["known"] = get(ctypes.byref(table), known)  # before any nvmlInit, as the real library allows
out["size"] = ctypes.c_uint64.from_address(table.value).value
table = ctypes.c_void_p(1)
out["other"] = get(ctypes.byref(table), bytes(range(16)))
out["other_table"] = table.value
out["null_table"] = get(None, known)
table = ctypes.c_void_p(1)
out["null_id"] = get(ctypes.byref(table), None)
out["null_id_table"] = table.value
out["flags"] = {f: lib.nvmlInitWithFlags(f) for f in range(4)}
count = ctypes.c_uint()
out["count"] = [lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), count.value]
out["shutdowns"] = [lib.nvmlShutdown() for _ in range(5)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return clibkit.library()


def test_the_private_export_table_is_answered_as_the_real_library_answers_it(
    lib_dir: Path, tmp_path: Path
) -> None:
    """libnvidia-ml 535.261.03, called before nvmlInit (no driver needed): the id nvidia-smi asks
    for succeeds (ours is a table of no entries: its size word, 8), another id answers
    INVALID_ARGUMENT and a NULL table, a NULL argument INVALID_ARGUMENT. nvmlInitWithFlags takes
    NO_GPUS and NO_ATTACH and counts like nvmlInit: four inits, four shutdowns, then UNINITIALIZED."""
    env = clibkit.client_env(lib_dir, None, "dgx-h100")
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(lib_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["known"], out["size"]) == (0, 8)
    assert (out["other"], out["other_table"]) == (2, None)
    assert out["null_table"] == 2
    assert (out["null_id"], out["null_id_table"]) == (2, 1)  # the real one leaves *table alone
    assert out["flags"] == {"0": 0, "1": 0, "2": 0, "3": 0}
    assert out["count"] == [0, 8]
    assert out["shutdowns"] == [0, 0, 0, 0, 1]


def test_a_mig_device_index_is_its_index_under_its_gpu(install: Callable[..., fakegpu.FakeMachine]) -> None:
    """nvml.h: nvmlDeviceGetIndex of a MIG device is the index nvmlDeviceGetMigDeviceHandleByIndex
    takes (nvidia-smi's "MIG Dev" column), not its GPU's."""
    install("dgx-h100-mig")
    gpu = pynvml.nvmlDeviceGetHandleByIndex(2)
    for i in range(2):
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i)
        assert pynvml.nvmlDeviceGetIndex(mig) == i
    assert pynvml.nvmlDeviceGetIndex(gpu) == 2


def test_a_mig_device_counts_only_non_dram_uncorrectable_volatile_ecc(
    install: Callable[..., fakegpu.FakeMachine],
) -> None:
    """nvml.h: per MIG device only non-DRAM uncorrectable volatile errors; nvidia-smi's MIG table
    asks for SRAM (7). Injected errors are DRAM, so the MIG device counts 0 while its GPU counts."""
    m = install("dgx-h100-mig")
    m.inject_ecc(0, "double")
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    sram, dram = 7, pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY
    unc, vol = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
    assert pynvml.nvmlDeviceGetMemoryErrorCounter(mig, unc, vol, sram) == 0
    assert pynvml.nvmlDeviceGetMemoryErrorCounter(gpu, unc, vol, dram) == 1
    for args in ((unc, vol, dram), (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, vol, sram), (unc, 1, sram)):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetMemoryErrorCounter(mig, *args)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMemoryErrorCounter(gpu, unc, vol, 8)


def test_field_values_answer_each_field_on_its_own(h100: fakegpu.FakeMachine) -> None:
    """The call succeeds; the GPU-scope power fields carry the model's watts, the module scope and
    every field the fake does not model answer NOT_SUPPORTED in their own status."""
    h = pynvml.nvmlDeviceGetHandleByIndex(1)
    fields = [
        pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT,
        pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT,
        pynvml.NVML_FI_DEV_POWER_INSTANT,
        (pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT, 1),
        pynvml.NVML_FI_DEV_POWER_MAX_LIMIT,
        pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
    ]
    values = pynvml.nvmlDeviceGetFieldValues(h, fields)
    assert [v.nvmlReturn for v in values] == [0, 0, 0, 3, 3, 3]
    assert [v.value.uiVal for v in values[:3]] == [700_000, 700_000, pynvml.nvmlDeviceGetPowerUsage(h)]
    assert all(v.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT for v in values[:3])


def test_the_cli_says_how_to_get_nvidia_smi(tmp_path: Path) -> None:
    """Not fetched and not on PATH: exit 1 naming --fetch; a fetch without dpkg-deb or apt-get
    fails naming the tool and the manual way, and leaves nothing behind."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PATH": str(tmp_path / "bin")}
    cmd = [sys.executable, "-m", "fakegpu", "nvidia-smi"]
    done = subprocess.run(
        [*cmd, "--", "-L"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "fakegpu nvidia-smi --fetch" in done.stderr and str(tmp_path) in done.stderr
    done = subprocess.run([*cmd, "--fetch"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "needs dpkg-deb" in done.stderr or "keyring" in done.stderr, done.stderr
    assert not _nvsmi.cached(tmp_path / "dra-conformance").exists()


# -- NVIDIA's nvidia-smi itself ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def nvidia_smi() -> Path:
    cache_root = env_defaults().cache_root
    found = _nvsmi.find(cache_root, os.environ.get("PATH"))
    if found is None:
        pytest.skip(
            f"NVIDIA's nvidia-smi {_nvsmi.VERSION} is neither in {_nvsmi.cached(cache_root)} nor on PATH: "
            "`python -m fakegpu nvidia-smi --fetch` downloads it (apt-get, Debian bookworm non-free)"
        )
    return found


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    """A state directory holding the two-GPU 535.261.03 machine (GPU 1 with two MIG devices)."""
    profile = tmp_path / "smi-535.yaml"
    profile.write_text(PROFILE)
    state = tmp_path / "gpus"
    fakegpu.FakeMachine(str(profile), state_dir=state, node_name="smi")
    return state


def _smi(binary: Path, lib_dir: Path, state: Path, *args: str) -> str:
    env = clibkit.client_env(lib_dir, state)
    done = subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_nvidia_smi_lists_the_gpus_their_memory_and_mig_devices(
    nvidia_smi: Path, lib_dir: Path, machine: Path
) -> None:
    out = _smi(nvidia_smi, lib_dir, machine)
    assert "NVIDIA-SMI 535.261.03             Driver Version: 535.261.03   CUDA Version: 12.2" in out
    assert out.count("NVIDIA H100 80GB HBM3") == 2
    assert "00000000:18:00.0" in out and "00000000:2A:00.0" in out
    assert out.count("0MiB / 81559MiB") == 2
    mig_rows = [line.split("|")[1].split() for line in out.splitlines() if line.startswith("|  1   ")]
    assert mig_rows == [["1", "1", "0", "0"], ["1", "13", "0", "1"]]  # GPU, GI, CI, MIG Dev
    assert "13MiB / 40448MiB" in out and "13MiB /  9984MiB" in out
    assert "No MIG devices found" not in out


def test_nvidia_smi_list_matches_fakegpu_show_list(nvidia_smi: Path, lib_dir: Path, machine: Path) -> None:
    assert (
        _smi(nvidia_smi, lib_dir, machine, "-L").strip()
        == clibkit.fakegpu_cli(machine, "show", "--list").strip()
    )


def test_nvidia_smi_q_shows_the_machine_and_injected_ecc(
    nvidia_smi: Path, lib_dir: Path, machine: Path
) -> None:
    clibkit.fakegpu_cli(machine, "inject", "ecc", "0", "double")
    out = _smi(nvidia_smi, lib_dir, machine, "-q")
    rows = [
        tuple(part.strip() for part in line.split(" : ", 1)) for line in out.splitlines() if " : " in line
    ]
    values: dict[str, list[str]] = {}
    for key, value in rows:
        values.setdefault(key, []).append(value)
    assert values["Attached GPUs"] == ["2"]
    assert values["Driver Version"] == ["535.261.03"]
    assert values["Product Name"] == ["NVIDIA H100 80GB HBM3"] * 2
    assert re.findall(r"MIG Mode\s+Current\s+: (\w+)", out) == ["Disabled", "Enabled"]
    assert values["GPU Instance ID"] == ["1", "13"]
    assert values["DRAM Uncorrectable"][:2] == ["1", "1"]  # GPU 0: volatile, aggregate
    assert values["SRAM Uncorrectable"] == ["0", "0"]  # the MIG devices
    assert values["Current Power Limit"][0] == "700.00 W"
    assert {k for k, v in rows if v == "Uninitialized"} == UNINITIALIZED


def test_nvidia_smi_loop_reports_an_injected_xid(nvidia_smi: Path, lib_dir: Path, machine: Path) -> None:
    """``nvidia-smi -l 1`` registers for critical XIDs; one injected after its first two tables
    (the registration is done by then) is printed as on a real node."""
    leader, follower = pty.openpty()  # a terminal: nvidia-smi flushes each line at once
    proc = subprocess.Popen(
        [str(nvidia_smi), "-l", "1"],
        env=clibkit.client_env(lib_dir, machine),
        stdout=follower,
        stderr=subprocess.STDOUT,
    )
    os.close(follower)
    seen = ""
    injected = False
    deadline = time.monotonic() + 30
    try:
        while "Detected Critical Xid Error" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(leader, 65536).decode(errors="replace")
                except OSError:  # the process ended
                    break
            if not injected and seen.count("NVIDIA-SMI 535.261.03") >= 2:
                clibkit.fakegpu_cli(machine, "inject", "xid", "1", "48")
                injected = True
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        os.close(leader)
    assert injected, seen[-2000:]
    assert "GPU 00000000:2A:00.0: Detected Critical Xid Error" in seen, seen[-2000:]
