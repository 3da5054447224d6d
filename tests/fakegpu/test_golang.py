"""Go on the fake libnvidia-ml.so.1: go-nvml v0.13.4-1 and go-nvlib v0.13.0 walk every shipped
profile as NVIDIA's DRA driver does, and see what pynvml sees, field for field.

``nvmlwalk`` (``tests/fakegpu/nvmlwalk/``) is built from Go modules with cgo and cached by source
digest beside the project's other Go builds; without ``go`` these tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pynvml
import pytest

import fakegpu
from clusters.errors import BinariesError, GoBuildError
from clusters.local import gobins
from clusters.local.settings import LocalSettings
from fakegpu import _csyms
from fakegpu._models import MODELS
from tests.fakegpu import clibkit, nvmlwalk

GO_NVML = "github.com/NVIDIA/go-nvml"
ARCH = {6: "Turing", 7: "Ampere", 8: "Ada Lovelace", 9: "Hopper"}
"""go-nvlib's names of the NVML architecture enums the shipped models use."""


@pytest.fixture(scope="module")
def lib_dir() -> Path:
    return clibkit.library()


@pytest.fixture(scope="module")
def walker() -> Path:
    if shutil.which("go") is None:
        pytest.skip("'go' is not on PATH: the Go proof builds nvmlwalk from Go modules (install Go 1.26+)")
    try:
        return gobins.resolve_tool(
            "nvmlwalk",
            clibkit.NVMLWALK_SOURCE,
            LocalSettings.from_env(os.environ),
            print,
            instead="install Go 1.26+ and a C compiler (go-nvml needs cgo)",
            cgo=True,
        )
    except (BinariesError, GoBuildError) as e:
        pytest.skip(f"nvmlwalk cannot be built here: {e}")


def _run(walker: Path, lib_dir: Path, state: Path, *args: str) -> Any:
    done = subprocess.run(
        [str(walker), *args],
        env=clibkit.client_env(lib_dir, state),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("profile", fakegpu.available_profiles())
def test_go_nvml_sees_what_pynvml_sees(
    profile: str, walker: Path, lib_dir: Path, tmp_path: Path, record_property: Any
) -> None:
    """Every field go-nvml reads of a machine (with a mixed MIG layout where it has MIG) equals
    pynvml's reading of the same state directory."""
    state = tmp_path / "gpus"
    machine = fakegpu.FakeMachine(profile, state_dir=state, node_name="node-a")
    nvmlwalk.varied_layout(machine)
    go = _run(walker, lib_dir, state, "walk")
    with fakegpu.installed(machine):
        pynvml.nvmlInit()
        py = nvmlwalk.walk()
        pynvml.nvmlShutdown()
    compared, diffs = nvmlwalk.differences(nvmlwalk.without_nvlib(go), py)
    record_property("fields_compared", compared)
    print(f"{profile}: {compared} fields compared, {len(diffs)} differ")
    assert compared > 30
    assert diffs == [], f"{len(diffs)} of {compared} fields differ: {diffs[:20]}"


@pytest.mark.parametrize(
    "profile", ["dgx-h100-mig", "dgx-h200", "dgx-a100-40gb", "l4x4", "t4", "jetson-orin"]
)
def test_go_nvlib_reads_the_machine_as_nvidias_driver_does(
    profile: str, walker: Path, lib_dir: Path, tmp_path: Path
) -> None:
    """go-nvlib's derived views: architecture, compute capability, PCI bus id, MIG capability, the
    MIG profile strings it computes from memory (equal to the fake's profile names) and each MIG
    device's profile."""
    state = tmp_path / "gpus"
    machine = fakegpu.FakeMachine(profile, state_dir=state)
    go = _run(walker, lib_dir, state, "walk")
    snap = machine.snapshot()
    for dev, gpu in zip(go["devices"], snap["gpus"], strict=True):
        model = MODELS[gpu["model"]]
        nv = dev["nvlib"]
        if model.identity_only:  # Jetson: no PCI, no MIG
            assert nv["pci_bus_id"]["go_error"] and nv["mig_capable"] is False
            continue
        assert nv["arch"] == ARCH[model.architecture]
        assert nv["cc"] == f"{model.compute_capability[0]}.{model.compute_capability[1]}"
        assert nv["pci_bus_id"] == gpu["pci_bus_id"].lower()[4:]  # go-nvlib drops 4 of the 8 zeros
        assert nv["mig_capable"] is model.mig_capable
        names = {p.name for p in model.gi_profiles}
        assert (set(nv["mig_profiles"]) & names) == names if model.mig_capable else nv["mig_profiles"] == []
        want = [
            gi["profile"] for gi in gpu.get("mig", {}).get("gpu_instances", []) if gi["compute_instances"]
        ]
        assert sorted(m["profile"] for m in nv["mig_devices"]) == sorted(want)


def test_a_mig_instance_made_by_go_is_seen_by_pynvml(walker: Path, lib_dir: Path, tmp_path: Path) -> None:
    """go-nvlib parses "1c.3g.40gb", go-nvml makes the GPU and compute instance; pynvml sees both."""
    state = tmp_path / "gpus"
    fakegpu.FakeMachine("dgx-h100", state_dir=state)
    made = _run(walker, lib_dir, state, "mig", "1", "1c.3g.40gb")
    assert made == {
        "activation": 0,
        "profile": "1c.3g.40gb",
        "gi": 2,  # 3g without a placement goes to slice 4 first
        "gi_start": 4,
        "ci": 0,
        "ci_profile": 0,
    }
    with fakegpu.installed(fakegpu.FakeMachine.attach(state)):
        pynvml.nvmlInit()
        gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb"
        assert pynvml.nvmlDeviceGetGpuInstanceId(mig) == 2
        pynvml.nvmlShutdown()


def test_go_waits_see_an_xid_an_ecc_error_and_a_lost_gpu_from_the_cli(
    walker: Path, lib_dir: Path, tmp_path: Path
) -> None:
    """A Go event loop (another process) gets each fault injected through the CLI, then
    GPU_IS_LOST on its next wait, as real NVML answers once a GPU fell off the bus."""
    state = tmp_path / "gpus"
    fakegpu.FakeMachine("dgx-h100", state_dir=state)
    proc = clibkit.spawn([str(walker), "events", "4", "200"], clibkit.client_env(lib_dir, state))
    try:
        clibkit.read_until(proc, "ready")
        clibkit.fakegpu_cli(state, "inject", "xid", "2", "31")
        clibkit.fakegpu_cli(state, "inject", "ecc", "3", "double")
        clibkit.fakegpu_cli(state, "inject", "lost", "4")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events == [
        {"gpu": 2, "type": pynvml.nvmlEventTypeXidCriticalError, "data": 31},
        {"gpu": 3, "type": pynvml.nvmlEventTypeDoubleBitEccError, "data": 0},
        {"gpu": 4, "type": pynvml.nvmlEventTypeXidCriticalError, "data": 79},
        {"return": pynvml.NVML_ERROR_GPU_IS_LOST, "text": "GPU is lost"},
    ]


def test_goroutines_on_many_os_threads_get_right_answers(walker: Path, lib_dir: Path, tmp_path: Path) -> None:
    state = tmp_path / "gpus"
    fakegpu.FakeMachine("hgx-16xh100", state_dir=state)
    assert _run(walker, lib_dir, state, "threads", "16", "100") == {"calls": 1600, "bad": 0}


def test_every_nvml_call_of_go_nvml_is_exported(walker: Path) -> None:
    """The export list is go-nvml's own list of NVML calls, read from the module the walker used."""
    done = subprocess.run(
        ["go", "list", "-m", "-json", GO_NVML],
        cwd=clibkit.NVMLWALK_SOURCE,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    source = Path(json.loads(done.stdout)["Dir"]) / "pkg" / "nvml" / "nvml.go"
    called = set(re.findall(r"C\.(nvml\w+)\(", source.read_text()))
    assert len(called) >= 400
    missing = called - set(_csyms.exported())
    assert not missing, f"go-nvml calls symbols the library does not export: {sorted(missing)}"
