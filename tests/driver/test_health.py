"""Health monitor: faults from XIDs, ECC and lost GPUs, benign XIDs, expiry, subscribers.

The first part feeds events in by hand (no NVML); the NVML event loop is tested on
fakegpu further down when fakegpu is installed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest

import fakegpu
from driver.devices import discover
from driver.faults import INFORMATIONAL, NO_EXECUTE, NO_SCHEDULE
from driver.health import HealthMonitor
from driver.healthstream import HEALTHY, UNHEALTHY
from driver.inventory import DeviceInfo, Inventory, Placement
from driver.partitions import prepare_partition
from driver.slicing import taints_from_faults
from tests.polling import until

GPU0 = "GPU-00000000-1111-2222-3333-444444444444"
GPU1 = "GPU-00000001-1111-2222-3333-444444444444"


def _gpu(index: int, uuid: str) -> DeviceInfo:
    return DeviceInfo(f"gpu-{index}", "gpu", uuid, None, index, index, {"type": "gpu"}, {})


def _mig(index: int, parent: str, gi: int) -> DeviceInfo:
    return DeviceInfo(
        f"gpu-{index}-mig-3g40gb-{gi}", "mig", f"MIG-{gi}", parent, index, index, {"type": "mig"}, {},
        placement=Placement(0, 4), gpu_instance_id=gi, compute_instance_id=0,
    )  # fmt: skip


def inventory() -> Inventory:
    devs = [_gpu(0, GPU0), _mig(1, GPU1, 1), _mig(1, GPU1, 2)]
    return Inventory(devices={d.name: d for d in devs})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_all_healthy_at_start(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), clock=clock)
    snap = mon.snapshot()
    assert set(snap) == {"gpu-0", "gpu-1-mig-3g40gb-1", "gpu-1-mig-3g40gb-2"}
    assert {s.status for s in snap.values()} == {HEALTHY}
    assert mon.faults() == {}


def test_benign_xids_are_ignored_and_configurable(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), clock=clock)
    for xid in (13, 31, 43, 45, 68, 109):
        mon.record_xid(GPU0, xid)
    assert mon.faults() == {}
    strict = HealthMonitor(inventory(), ignored_xids=(), clock=clock)
    strict.record_xid(GPU0, 31)
    assert strict.faults()["gpu-0"].reason == "xid-31"


def test_informational_taints_show_benign_xids_while_the_device_stays_healthy(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), informational_seconds=5, xid_hold_seconds=30, clock=clock)
    mon.record_xid(GPU0, 13)
    fault = mon.faults()["gpu-0"]
    assert (fault.reason, fault.severity) == ("xid-13", INFORMATIONAL)
    assert mon.snapshot()["gpu-0"].status == HEALTHY
    assert taints_from_faults(mon.faults(), "gpu.example.com")["gpu-0"][0].effect == "None"
    mon.record_xid(GPU0, 62)  # a real fault beside it wins
    assert mon.faults()["gpu-0"].severity == NO_SCHEDULE
    assert mon.snapshot()["gpu-0"].status == UNHEALTHY
    clock.now += 6
    mon.check()  # the benign XID shows no longer, the real one still does
    assert [f.reason for f in mon.faults().values()] == ["xid-62"]
    clock.now += 25
    mon.check()
    assert mon.faults() == {}


def test_critical_xid_marks_the_gpu_with_severity(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), clock=clock)
    mon.record_xid(GPU0, 62)
    fault = mon.faults()["gpu-0"]
    assert (fault.reason, fault.severity) == ("xid-62", NO_SCHEDULE)
    assert mon.snapshot()["gpu-0"].status == UNHEALTHY
    assert "XID 62" in mon.snapshot()["gpu-0"].message
    mon.record_xid(GPU0, 79)
    assert mon.faults()["gpu-0"].severity == NO_EXECUTE  # the worst fault wins
    assert set(mon.faults()) == {"gpu-0"}


def test_instance_scoped_xid_marks_only_that_mig_device(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), clock=clock)
    mon.record_xid(GPU1, 94, gpu_instance=2)
    assert set(mon.faults()) == {"gpu-1-mig-3g40gb-2"}
    mon.record_xid(GPU1, 94)  # no instance: the whole GPU
    assert set(mon.faults()) == {"gpu-1-mig-3g40gb-1", "gpu-1-mig-3g40gb-2"}


def test_ecc_and_lost_gpu_mark_every_device_and_evict(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), clock=clock)
    mon.record_ecc(GPU1)
    assert {n: f.severity for n, f in mon.faults().items()} == {
        "gpu-1-mig-3g40gb-1": NO_EXECUTE,
        "gpu-1-mig-3g40gb-2": NO_EXECUTE,
    }
    mon.record_lost(GPU0)
    assert mon.faults()["gpu-0"].reason == "gpu-lost"


def test_xid_fault_clears_after_the_hold_time(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), xid_hold_seconds=30, clock=clock)
    mon.record_xid(GPU0, 62)
    clock.now += 29
    mon.check()  # NVML is not initialised here: the re-check itself finds nothing
    assert "gpu-0" in mon.faults()
    clock.now += 2
    mon.check()
    assert mon.faults() == {}
    assert mon.snapshot()["gpu-0"] == replace(mon.snapshot()["gpu-0"], status=HEALTHY, updated=clock.now)


def test_lost_gpu_does_not_clear_by_time(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), xid_hold_seconds=1, clock=clock)
    mon.record_lost(GPU0)
    clock.now += 3600
    mon.check()
    assert mon.faults()["gpu-0"].reason == "gpu-lost"


def test_subscribers_hear_each_change_once(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), clock=clock)
    calls: list[int] = []
    unsubscribe = mon.subscribe(lambda: calls.append(1))
    mon.record_xid(GPU0, 62)
    mon.record_xid(GPU0, 62)  # same fault again: no change
    assert len(calls) == 1
    unsubscribe()
    mon.record_lost(GPU1)
    assert len(calls) == 1


def test_a_failing_subscriber_does_not_silence_the_others(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    mon = HealthMonitor(inventory(), clock=clock)
    calls: list[int] = []

    def broken() -> None:
        raise RuntimeError("subscriber bug")

    mon.subscribe(broken)
    mon.subscribe(lambda: calls.append(1))
    mon.record_lost(GPU0)
    assert calls == [1]
    assert "health subscriber failed" in caplog.text


def test_disabled_monitor_never_reports(clock: Clock) -> None:
    mon = HealthMonitor(inventory(), enabled=False, clock=clock)
    calls: list[int] = []
    mon.subscribe(lambda: calls.append(1))
    mon.start()
    mon.record_xid(GPU0, 79)
    assert mon.snapshot() == {}
    assert mon.faults() == {}
    assert calls == []
    mon.stop()


@pytest.mark.parametrize(
    ("enabled", "rules", "reports"),
    [(True, frozenset(), True), (False, frozenset(), False), (True, frozenset({"no-health"}), False)],
)
def test_settings_and_the_no_health_switch(enabled: bool, rules: frozenset[str], reports: bool) -> None:
    from pathlib import Path

    from driver.settings import BackendSettings, HealthSettings, KubeletSettings, Settings

    settings = Settings(
        node_name="node-a",
        kubelet=KubeletSettings(Path("/r"), Path("/p"), Path("/c")),
        backend=BackendSettings(kind="fake"),
        health=HealthSettings(enabled=enabled, ignored_xids=frozenset({62})),
        break_rules=rules,
    )
    mon = HealthMonitor.from_settings(inventory(), settings)
    mon.record_xid(GPU0, 62)
    assert mon.faults() == {}
    mon.record_xid(GPU0, 79)
    assert bool(mon.faults()) is reports


# --- the NVML event loop on fakegpu -------------------------------------------------------------


@contextmanager
def running(inv: Inventory, **kwargs: Any) -> Iterator[HealthMonitor]:
    mon = HealthMonitor(inv, wait_ms=50, recheck_seconds=0.1, **kwargs)
    mon.start()
    # a fault injected before the monitor registered for events would be missed (as on real NVML)
    assert mon.enabled is False or mon.wait_watching(10), "the health monitor never registered for events"
    try:
        yield mon
    finally:
        mon.stop()


def test_event_loop_sees_xids_ecc_and_lost_gpus_and_their_healing() -> None:
    with fakegpu.installed("dgx-h100") as machine:
        inv = discover(["gpu"])
        with running(inv) as mon:
            changes: list[float] = []
            mon.subscribe(lambda: changes.append(time.time()))
            machine.inject_xid(2, 31)  # benign
            machine.inject_xid(1, 62)
            until(lambda: "gpu-1" in mon.faults())
            assert mon.faults()["gpu-1"].severity == NO_SCHEDULE
            assert "gpu-2" not in mon.faults()
            machine.mark_lost(3)
            until(lambda: mon.faults().get("gpu-3") is not None)
            assert mon.faults()["gpu-3"].reason == "gpu-lost"
            assert mon.snapshot()["gpu-3"].status == UNHEALTHY
            machine.heal(3)
            until(lambda: "gpu-3" not in mon.faults())
            machine.inject_ecc(4, "double")
            until(lambda: "gpu-4" in mon.faults())
            assert mon.faults()["gpu-4"].severity == NO_EXECUTE
            machine.heal(4)
            until(lambda: "gpu-4" not in mon.faults())
            assert mon.snapshot()["gpu-4"].status == HEALTHY
            assert set(mon.faults()) == {"gpu-1"}
            # the faults above are read before the callbacks of the last change have all run
            until(lambda: len(changes) >= 5, 30, "five changes notified")


def test_a_lost_gpu_neither_spins_the_loop_nor_hides_other_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvml.h: once a registered GPU is lost, every nvmlEventSetWait answers GPU_IS_LOST at once."""
    import pynvml

    waits: list[float] = []
    real_wait = pynvml.nvmlEventSetWait

    def counting_wait(*args: Any) -> Any:
        waits.append(time.monotonic())
        return real_wait(*args)

    monkeypatch.setattr(pynvml, "nvmlEventSetWait", counting_wait)
    with fakegpu.installed("dgx-h100") as machine:
        inv = discover(["gpu"])
        with running(inv) as mon:
            machine.mark_lost(3)
            until(lambda: mon.faults().get("gpu-3") is not None)
            waits.clear()
            time.sleep(0.5)
            assert len(waits) < 50, f"{len(waits)} waits in 0.5 s: the event loop spins on GPU_IS_LOST"
            machine.inject_xid(1, 62)
            until(lambda: "gpu-1" in mon.faults())
            machine.heal(3)
            until(lambda: "gpu-3" not in mon.faults())
            machine.inject_xid(3, 62)
            until(lambda: "gpu-3" in mon.faults())  # registered again once it answers


def test_instance_scoped_xid_on_static_mig_and_on_a_partition() -> None:
    with fakegpu.installed("dgx-h100-mig") as machine:
        inv = discover(["mig"])
        with running(inv) as mon:
            machine.inject_xid(2, 94, gpu_instance=2)
            until(lambda: bool(mon.faults()))
            assert set(mon.faults()) == {"gpu-2-mig-3g40gb-2"}
    with fakegpu.installed("dgx-h100") as machine:
        machine.set_mig_mode(0, True)
        inv = discover(["partitionable-mig"])
        prepare_partition(inv["gpu-0-part-3g40gb-4"])
        with running(inv) as mon:
            machine.inject_xid(0, 94, gpu_instance=2)  # a 3g instance at slice 4 is GPU instance 2
            until(lambda: bool(mon.faults()))
            assert set(mon.faults()) == {"gpu-0-part-3g40gb-4"}
