"""The drop-in libnvidia-ml.so.1: a C client, pynvml through the library, bad input, the build."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

import fakegpu
from fakegpu import _cabi, _cstructs, _csyms, _libbuild
from tests.fakegpu import clibkit, nvmlwalk

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return clibkit.library()


@pytest.fixture(scope="module")
def c_check(lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clibkit.compile_c(clibkit.C_CHECK, tmp_path_factory.mktemp("c") / "nvml_check", lib_dir)


def _facts(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        key, _, rest = line.partition(" ")
        out.setdefault(key, []).append(rest)
    return out


def test_a_c_client_sees_the_machine_its_mig_devices_and_an_injected_xid(
    c_check: Path, lib_dir: Path, tmp_path: Path
) -> None:
    """A C program linked with -lnvidia-ml on dgx-h100: count, UUIDs, memory, a MIG GI/CI it makes
    (seen by pynvml in this process meanwhile), and an XID injected through the CLI."""
    state = tmp_path / "gpus"
    env = clibkit.client_env(lib_dir, state, "dgx-h100")
    env["NVML_CHECK_PAUSE"] = "1"
    proc = clibkit.spawn([str(c_check)], env)
    try:
        before = clibkit.read_until(proc, "paused")
        # the MIG device the C program made is in the shared machine: pynvml sees it
        with fakegpu.installed(fakegpu.FakeMachine.attach(state)):
            pynvml.nvmlInit()
            gpu0 = pynvml.nvmlDeviceGetHandleByIndex(0)
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)
            seen = (pynvml.nvmlDeviceGetUUID(mig), pynvml.nvmlDeviceGetGpuInstanceId(mig))
            pynvml.nvmlShutdown()
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        during = clibkit.read_until(proc, "waiting")
        clibkit.fakegpu_cli(state, "inject", "xid", "0", "48")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, (before, out, err)
    facts = _facts(before + during + out.splitlines())
    snap = fakegpu.FakeMachine.attach(state).snapshot()
    assert facts["count"] == ["8"]
    assert facts["uuid"] == [f"{g['index']} {g['uuid']}" for g in snap["gpus"]]
    assert facts["same"] == [f"{i} 1" for i in range(8)]
    assert facts["name"] == ["NVIDIA H100 80GB HBM3"]
    assert facts["small-buffer"] == [str(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)]
    total, free, used = map(int, facts["memory"][0].split())
    assert total == 85520809984 and free + used == total and free > 0
    v2 = list(map(int, facts["memory-v2"][0].split()))
    assert v2[0] == total and v2[1] + v2[2] + v2[3] == total
    assert facts["memory-v2-unversioned"] == [str(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)]
    assert facts["unmodelled"] == [str(pynvml.NVML_ERROR_NOT_SUPPORTED)]
    assert facts["mig-activation"] == ["0"]
    assert facts["gi-profile"] == ["9 MIG 3g.40gb 40448"]
    assert facts["mig-name"] == ["NVIDIA H100 80GB HBM3 MIG 3g.40gb"]
    assert seen == (facts["mig-uuid"][0], 2)  # a 3g at slice 4 is GPU instance 2
    assert facts["mig-after-destroy"] == [str(pynvml.NVML_ERROR_NOT_FOUND)]
    assert facts["timeout"] == [str(pynvml.NVML_ERROR_TIMEOUT)]
    assert facts["event"] == [f"{pynvml.nvmlEventTypeXidCriticalError} 48 1"]
    assert facts["after-shutdown"] == [str(pynvml.NVML_ERROR_UNINITIALIZED)]
    assert err == ""


_WALK = (
    "import json, pynvml; from tests.fakegpu import nvmlwalk; pynvml.nvmlInit(); "
    "print(json.dumps(nvmlwalk.walk()))"
)


@pytest.mark.parametrize("profile", fakegpu.available_profiles())
def test_pynvml_through_the_library_answers_as_through_install(
    profile: str, lib_dir: Path, tmp_path: Path
) -> None:
    """pynvml over the C library (LD_LIBRARY_PATH, no fakegpu.install) and over install() read the
    same machine the same, field for field: the C signatures and struct layouts hold."""
    state = tmp_path / "gpus"
    machine = fakegpu.FakeMachine(profile, state_dir=state, node_name="node-a")
    nvmlwalk.varied_layout(machine)
    env = clibkit.client_env(lib_dir, state)
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", _WALK], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    through_c = json.loads(done.stdout)
    with fakegpu.installed(machine):
        pynvml.nvmlInit()
        through_install = nvmlwalk.walk()
        pynvml.nvmlShutdown()
    compared, diffs = nvmlwalk.differences(through_c, through_install)
    assert compared > 30
    assert diffs == [], f"{len(diffs)} of {compared} fields differ: {diffs[:20]}"


def _init_failure(c_check: Path, env: dict[str, str]) -> tuple[list[str], list[str]]:
    done = subprocess.run([str(c_check)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    return done.stdout.splitlines(), done.stderr.splitlines()


def test_an_unknown_profile_answers_init_with_a_code_and_one_line(
    c_check: Path, lib_dir: Path, tmp_path: Path
) -> None:
    out, err = _init_failure(c_check, clibkit.client_env(lib_dir, None, "no-such-box"))
    assert out == [f"error init {pynvml.NVML_ERROR_DRIVER_NOT_LOADED} Driver Not Loaded"]
    assert len(err) == 1, err
    assert "unknown profile 'no-such-box'" in err[0] and "FAKEGPU_PROFILE" in err[0], err


def test_an_unreadable_state_dir_answers_init_with_a_code_and_one_line(
    c_check: Path, lib_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "gpus"
    state.mkdir()
    (state / "machine.json").write_text("{not json")
    out, err = _init_failure(c_check, clibkit.client_env(lib_dir, state))
    assert out == [f"error init {pynvml.NVML_ERROR_DRIVER_NOT_LOADED} Driver Not Loaded"]
    assert len(err) == 1 and "FAKEGPU_STATE_DIR" in err[0] and str(state) in err[0], err


def _build_with(tmp_path: Path, **facts: Any) -> Path:
    out = tmp_path / "lib"
    out.mkdir()
    _libbuild._build(replace(_libbuild.python_facts(), **facts), out)
    return out


def test_a_library_built_for_a_python_that_is_gone_answers_init_with_a_code(tmp_path: Path) -> None:
    lib = _build_with(tmp_path, libpython="/nonexistent/libpython3.11.so.1.0")
    c_check = clibkit.compile_c(clibkit.C_CHECK, tmp_path / "nvml_check", lib)
    out, err = _init_failure(c_check, clibkit.client_env(lib, None, "dgx-h100"))
    assert out == [f"error init {pynvml.NVML_ERROR_LIBRARY_NOT_FOUND} NVML Shared Library Not Found"]
    assert len(err) == 1 and "/nonexistent/libpython3.11.so.1.0" in err[0] and "fakegpu lib" in err[0], err


def test_a_library_built_for_another_python_refuses_this_one(tmp_path: Path) -> None:
    """Loaded into a Python of another minor version, it answers nvmlInit, never crashes."""
    lib = _build_with(tmp_path, version="3.99")
    env = clibkit.client_env(lib, None, "dgx-h100")
    code = "import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n    print(e.value)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == str(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), done
    err = done.stderr.splitlines()
    assert len(err) == 1 and "3.99" in err[0] and "python -m fakegpu lib" in err[0], err


def test_a_library_of_another_fakegpu_is_refused_by_name() -> None:
    assert _cabi.attach(_csyms.table_digest()) is None
    why = _cabi.attach("0123456789abcdef")
    assert why is not None and "fakegpu lib" in why and "0123456789abcdef" in why


def test_a_python_without_a_shared_libpython_cannot_build_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sysconfig.get_config_var

    def fake(name: str) -> Any:
        return {"LIBDIR": "/nonexistent", "INSTSONAME": "libpython3.11.a"}.get(name, real(name))

    monkeypatch.setattr(sysconfig, "get_config_var", fake)
    with pytest.raises(fakegpu.LibraryError, match="--enable-shared"):
        _libbuild.python_facts()


def test_the_build_is_cached_by_digest(tmp_path: Path) -> None:
    said: list[str] = []
    first = fakegpu.library_dir(tmp_path, progress=said.append)
    assert (first / "libnvidia-ml.so.1").is_file() and (first / "libnvidia-ml.so").resolve() == (
        first / "libnvidia-ml.so.1"
    )
    assert any("building" in s for s in said)
    said.clear()
    assert fakegpu.library_dir(tmp_path, progress=said.append) == first
    assert said == []  # the cache answered
    info = json.loads((first / "build.json").read_text())
    assert info["digest"] == first.name and info["exported"] == len(_csyms.exported())


def test_the_library_exports_every_listed_symbol_and_nothing_of_its_own(lib_dir: Path) -> None:
    done = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib_dir / "libnvidia-ml.so.1")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"nm is not usable here: {done.stderr.strip()}")
    names = {line.split()[-1] for line in done.stdout.splitlines() if " T " in line}
    assert names == set(_csyms.exported())
    assert len(names) >= 428 and set(_csyms.SIGNATURES) <= names


@pytest.mark.parametrize("name", sorted(_cstructs.STRUCTS))
def test_struct_layouts_match_pynvml(name: str) -> None:
    """Our nvml.h structs lie exactly as pynvml's (an independent reading of nvml.h) where it has one."""
    ours = _cstructs.STRUCTS[name]
    odd_names = {"Placement": "c_nvmlGpuInstancePlacement_t", "PciInfo": "nvmlPciInfo_t"}
    odd_names["DeviceAttributes"] = "c_nvmlDeviceAttributes"
    theirs = getattr(pynvml, odd_names.get(name, f"c_nvml{name}_t"), None)
    if theirs is None:
        pytest.skip(f"pynvml has no c_nvml{name}_t to compare with")
    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    mine = {f[0]: getattr(ours, f[0]).offset for f in ours._fields_}
    other = {f[0]: getattr(theirs, f[0]).offset for f in theirs._fields_}
    assert mine == other


def test_calls_from_many_threads_through_the_library(lib_dir: Path, tmp_path: Path) -> None:
    """The library is as thread-safe as NVML promises: 8 threads at once, every answer right."""
    code = """
import threading, pynvml
pynvml.nvmlInit()
want = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]
bad = []
def run(k):
    for n in range(150):
        i = (k + n) % 8
        if pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) != want[i]:
            bad.append((k, n))
threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(len(bad))
"""
    env = clibkit.client_env(lib_dir, tmp_path / "gpus", "dgx-h100")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "0", done


def test_fakegpu_lib_prints_the_directory(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "fakegpu", "lib"],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.is_absolute() and path.parent == tmp_path / "dra-conformance" / "fakegpu" / "nvml"
    assert (path / "libnvidia-ml.so.1").is_file() and (path / "libnvidia-ml.so").is_symlink()
    assert "building" in done.stderr


def test_fakegpu_root_lays_out_a_driver_root(lib_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "gpus"
    fakegpu.FakeMachine("dgx-h100-mig", state_dir=state)
    root = Path(clibkit.fakegpu_cli(state, "root", str(tmp_path / "driver")).strip())
    assert root == tmp_path / "driver"
    libs = next((root / "usr" / "lib").iterdir())
    assert (libs / "libnvidia-ml.so.1").resolve() == libs / "libnvidia-ml.so.580.95.05"
    assert (libs / _libbuild.BRIDGE).is_file() and (libs / "libcuda.so.1").exists()
    assert sorted(p.name for p in (root / "dev").glob("nvidia[0-9]*")) == [f"nvidia{i}" for i in range(8)]
    # device nodes as root (CI), plain files otherwise: tests/fakegpu/test_driverroot.py has both
    ctl = root / "dev" / "nvidiactl"
    assert ctl.is_char_device() if os.geteuid() == 0 else ctl.is_file()
    assert (root / "proc" / "driver" / "nvidia" / "capabilities" / "mig" / "config").is_file()
    smi = subprocess.run(
        [str(root / "usr" / "bin" / "nvidia-smi"), "-L"], capture_output=True, text=True, check=False
    )
    assert smi.returncode == 0, smi.stderr
    assert smi.stdout.splitlines()[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    assert "  MIG 7g.80gb" in smi.stdout
    # the root's own library answers for the machine too
    env = clibkit.client_env(libs, state)
    env["PYTHONPATH"] = str(ROOT)
    code = "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "8", done.stderr
