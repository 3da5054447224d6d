"""The fault policy, without NVML: which events make what unhealthy, how badly, how long."""

from __future__ import annotations

from driver.faults import (
    DEFAULT_IGNORED_XIDS,
    INFORMATIONAL,
    NO_EXECUTE,
    NO_SCHEDULE,
    benign_fault,
    current,
    ecc_fault,
    lost_fault,
    worst,
    xid_fault,
    xid_is_benign,
)


def test_application_xids_are_benign_by_default() -> None:
    assert all(xid_is_benign(x, DEFAULT_IGNORED_XIDS) for x in (13, 31, 43, 45, 68, 109))
    assert not xid_is_benign(48, DEFAULT_IGNORED_XIDS)
    assert xid_is_benign(48, {48})


def test_xid_severity_and_hold() -> None:
    evict = xid_fault(48, "gpu-0", now=100.0, hold_seconds=60.0)
    assert (evict.reason, evict.severity, evict.expires) == ("xid-48", NO_EXECUTE, 160.0)
    assert xid_fault(62, "gpu-0", 100.0, 60.0).severity == NO_SCHEDULE
    assert "gpu-0" in evict.message


def test_ecc_and_lost_evict_the_whole_gpu() -> None:
    assert ecc_fault("GPU-1", since=5.0, expires=None).severity == NO_EXECUTE
    lost = lost_fault("GPU-1", 7.0)
    assert (lost.reason, lost.severity, lost.expires) == ("gpu-lost", NO_EXECUTE, None)


def test_worst_prefers_no_execute_then_the_oldest() -> None:
    old_schedule = xid_fault(62, "d", 1.0, 60.0)
    new_execute = xid_fault(48, "d", 5.0, 60.0)
    old_execute = lost_fault("g", 3.0)
    assert worst([old_schedule, new_execute, old_execute]) == old_execute
    assert worst([old_schedule]) == old_schedule
    assert worst([]) is None
    old_benign = benign_fault(13, "d", 0.0, 60.0)
    assert old_benign.severity == INFORMATIONAL
    assert worst([old_benign, old_schedule]) == old_schedule  # informational loses to any real fault
    assert worst([old_benign]) == old_benign


def test_expired_faults_are_dropped() -> None:
    xid = xid_fault(62, "d", 0.0, 10.0)
    lost = lost_fault("g", 0.0)
    assert current({"xid-62": xid, "gpu-lost": lost}, now=5.0) == {"xid-62": xid, "gpu-lost": lost}
    assert current({"xid-62": xid, "gpu-lost": lost}, now=10.0) == {"gpu-lost": lost}
