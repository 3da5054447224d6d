"""Calls DRA drivers make that must not answer NOT_SUPPORTED, and nvml.h edge semantics (issue 12)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

import fakegpu

Install = Callable[..., fakegpu.FakeMachine]
XID = pynvml.nvmlEventTypeXidCriticalError


def _h(i: int = 0) -> object:
    return pynvml.nvmlDeviceGetHandleByIndex(i)


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-a100-40gb", "l4x4", "t4"])
def test_virtualization_mode_is_none_on_bare_metal(install: Install, profile: str) -> None:
    install(profile)
    assert pynvml.nvmlDeviceGetVirtualizationMode(_h()) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE


def test_virtualization_mode_of_a_mig_device(install: Install) -> None:
    install("dgx-h100-mig")
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(_h(), 0)
    assert pynvml.nvmlDeviceGetVirtualizationMode(mig) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE


# -- a lost GPU and event sets -----------------------------------------------------------------


def test_event_wait_answers_gpu_is_lost_after_xid_79(h100: fakegpu.FakeMachine) -> None:
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(_h(3), XID, es)
    h100.mark_lost(3)
    data = pynvml.nvmlEventSetWait(es, 0)
    assert (data.eventType, data.eventData) == (XID, 79)
    for _ in range(2):  # every later wait, not once
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlEventSetWait(es, 1000)
    h100.heal(3)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 0)


def test_events_queued_before_the_loss_come_first(h100: fakegpu.FakeMachine) -> None:
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(_h(3), XID, es)
    h100.inject_xid(3, 48)
    h100.mark_lost(3)
    assert [pynvml.nvmlEventSetWait(es, 0).eventData for _ in range(2)] == [48, 79]
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait(es, 0)


def test_a_set_not_watching_the_lost_gpu_only_times_out(h100: fakegpu.FakeMachine) -> None:
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(_h(1), XID, es)
    h100.mark_lost(3)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 0)


def test_register_events_on_a_mig_device_is_not_supported(install: Install) -> None:
    install("dgx-h100-mig")
    es = pynvml.nvmlEventSetCreate()
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(_h(), 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(mig, XID, es)


# -- row remapping -----------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-h200", "dgx-a100-80gb", "dgx-a100-40gb"])
def test_remapped_rows_start_clean(install: Install, profile: str) -> None:
    install(profile)
    assert pynvml.nvmlDeviceGetRemappedRows(_h()) == (0, 0, 0, 0)


@pytest.mark.parametrize("profile", ["l4x4", "t4"])
def test_remapped_rows_not_supported_without_hbm(install: Install, profile: str) -> None:
    install(profile)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRemappedRows(_h())


def test_pending_row_remap_until_reset(h100: fakegpu.FakeMachine) -> None:
    h100.inject_row_remap(2)
    assert pynvml.nvmlDeviceGetRemappedRows(_h(2)) == (0, 1, 1, 0)
    h100.inject_row_remap(2, uncorrectable=False)
    assert pynvml.nvmlDeviceGetRemappedRows(_h(2)) == (1, 1, 1, 0)
    assert pynvml.nvmlDeviceGetRemappedRows(_h(1)) == (0, 0, 0, 0)
    h100.reset(2)
    assert pynvml.nvmlDeviceGetRemappedRows(_h(2)) == (1, 1, 0, 0)  # counts persist, pending clears


def test_failed_row_remap(h100: fakegpu.FakeMachine) -> None:
    h100.inject_row_remap(0, failure=True)
    assert pynvml.nvmlDeviceGetRemappedRows(_h()) == (0, 1, 0, 1)
    h100.reset(0)
    assert pynvml.nvmlDeviceGetRemappedRows(_h())[3] == 1  # a failed remap stays until repaired
    h100.heal(0)
    assert pynvml.nvmlDeviceGetRemappedRows(_h()) == (0, 0, 0, 0)


def test_row_remap_on_a_gpu_without_it_is_refused(install: Install) -> None:
    machine = install("t4")
    with pytest.raises(fakegpu.FaultError, match="row remapping"):
        machine.inject_row_remap(0)


def test_row_remap_from_the_cli(tmp_path: Path) -> None:
    fakegpu.FakeMachine("dgx-h100", state_dir=tmp_path).close()
    out = subprocess.run(
        [sys.executable, "-m", "fakegpu", "--state-dir", str(tmp_path), "inject", "remap", "1", "--failure"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "row remap" in out
    g = fakegpu.FakeMachine.attach(tmp_path)
    assert g.snapshot()["gpus"][1]["row_remap"] == {
        "correctable": 0,
        "uncorrectable": 1,
        "pending": False,
        "failure": True,
    }
    g.close()


# -- GPU fabric (NVSwitch) ---------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["dgx-h100", "dgx-h200", "dgx-h100-mig-empty", "dgx-h100-mig"])
def test_fabric_info_completed_on_nvswitch_systems(install: Install, profile: str) -> None:
    install(profile)
    cliques = set()
    clusters = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        v1 = pynvml.c_nvmlGpuFabricInfo_t()
        pynvml.nvmlDeviceGetGpuFabricInfo(_h(i), v1)
        assert v1.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
        assert v1.status == pynvml.NVML_SUCCESS
        v2 = pynvml.c_nvmlGpuFabricInfoV_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(_h(i), v2)
        assert (v2.state, v2.status, v2.cliqueId) == (v1.state, v1.status, v1.cliqueId)
        assert bytes(v2.clusterUuid) == bytes(v1.clusterUuid) != bytes(16)
        assert v2.healthMask != 0
        v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(_h(i), v3)
        assert v3.healthSummary == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
        cliques.add(v1.cliqueId)
        clusters.add(bytes(v1.clusterUuid))
    assert len(cliques) == len(clusters) == 1  # one NVLink domain per node


def test_fabric_info_differs_per_node() -> None:
    a = fakegpu.FakeMachine("dgx-h100", node_name="a")
    b = fakegpu.FakeMachine("dgx-h100", node_name="b")
    assert a.state.fabric_cluster_uuid != b.state.fabric_cluster_uuid
    a.close()
    b.close()


@pytest.mark.parametrize("profile", ["dgx-a100-80gb", "l4x4", "t4", "mixed"])
def test_fabric_info_not_supported_without_nvswitch_hopper(install: Install, profile: str) -> None:
    install(profile)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuFabricInfoV(_h(), pynvml.c_nvmlGpuFabricInfoV_t())


def test_fabric_info_version_mismatch(h100: fakegpu.FakeMachine) -> None:
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    info.version = 0x09000024
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetGpuFabricInfoV(_h(), info)


# -- nvml.h semantics --------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["l4x4", "t4"])
def test_max_mig_device_count_is_zero_without_mig(install: Install, profile: str) -> None:
    install(profile)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(_h()) == 0


@pytest.mark.parametrize(
    "text", ["", "GPU-", "not-a-uuid", "GPU-1234", "GPU-zzzzzzzz-0000-0000-0000-000000000000", "MIG-xyz"]
)
def test_handle_by_malformed_uuid_is_invalid_argument(h100: fakegpu.FakeMachine, text: str) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByUUID(text)


@pytest.mark.parametrize(
    "text",
    [
        "GPU-00000000-0000-0000-0000-000000000000",
        "MIG-00000000-0000-0000-0000-000000000000",
        "MIG-GPU-00000000-0000-0000-0000-000000000000/1/0",
    ],
)
def test_handle_by_well_formed_unknown_uuid_is_not_found(h100: fakegpu.FakeMachine, text: str) -> None:
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID(text)


def test_handle_by_legacy_mig_uuid(install: Install) -> None:
    machine = install("dgx-h100-mig")
    gpu_uuid = machine.state.gpus[2].uuid
    mig = pynvml.nvmlDeviceGetHandleByUUID(f"MIG-{gpu_uuid}/2/0")
    assert pynvml.nvmlDeviceGetGpuInstanceId(mig) == 2
    assert pynvml.nvmlDeviceGetUUID(mig).startswith("MIG-")


def test_nvswitch_from_the_profile(install: Install) -> None:
    gpus = [{"model": "h100-80gb", "count": 8}]
    install(fakegpu.parse_profile({"name": "no-switch", "nvswitch": False, "gpus": gpus}))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuFabricInfoV(_h(), pynvml.c_nvmlGpuFabricInfoV_t())
    with pytest.raises(fakegpu.ProfileError, match="nvswitch: no GPU of this profile reports a fabric"):
        fakegpu.parse_profile({"name": "l4", "nvswitch": True, "gpus": [{"model": "l4"}]})
