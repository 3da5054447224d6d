"""Fail fast with the cause: which signs of a pod end a wait early, and which never do.

:class:`~conformance.harness.signs.Stuck` on pod and event JSON as the kubelet, the node agent and
the scheduler write them (with a clock the test moves), and the waits of
:mod:`conformance.harness.waiting` with ``stuck`` on a fake API that serves one pod.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from conformance.harness.kube import Kube
from conformance.harness.signs import GRACE_SECONDS, PREPARE_GRACE_SECONDS, Stuck, latest_warning
from conformance.harness.status import pod_claim_names
from conformance.harness.waiting import WaitFailed, WaitTimeout, until, watch_until

Obj = dict[str, Any]

CDI_MESSAGE = (
    "Error: CDI device injection failed: container ctr: CDI device gpu.example.com/gpu=nope "
    "not found in the node's CDI specs"
)


def pod(
    phase: str = "Pending", *, containers: list[Obj] | None = None, conditions: list[Obj] | None = None
) -> Obj:
    status: Obj = {"phase": phase, "conditions": conditions or []}
    if containers is not None:
        status["containerStatuses"] = containers
    return {"metadata": {"name": "pod-0", "namespace": "ns", "uid": "u1"}, "status": status}


def event(reason: str, message: str, *, version: str = "1", uid: str = "u1", kind: str = "Warning") -> Obj:
    return {
        "metadata": {"name": f"pod-0.{version}", "namespace": "ns", "resourceVersion": version},
        "involvedObject": {"kind": "Pod", "name": "pod-0", "uid": uid},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": "kubelet"},
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def judged_over(stuck: Stuck, clock: Clock, the_pod: Obj, events: list[Obj], seconds: float) -> str:
    """What ``stuck`` says of the same pod and events after ``seconds`` (asked at the start and end)."""
    assert stuck.judge(the_pod, lambda: events) == ""
    clock.now += seconds
    return stuck.judge(the_pod, lambda: events)


def test_a_cdi_failure_that_persists_is_terminal_with_the_nodes_message() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    why = judged_over(stuck, clock, pod(), [event("Failed", CDI_MESSAGE)], GRACE_SECONDS)
    assert "kubelet reports Failed" in why
    assert "CDI device gpu.example.com/gpu=nope not found" in why


def test_a_failure_is_not_terminal_before_its_grace_period() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    events = [event("FailedPrepareDynamicResources", "Failed to prepare dynamic resources: driver said no")]
    # a failed prepare waits longer: the device may be held by a claim the node is unpreparing
    assert judged_over(stuck, clock, pod(), events, PREPARE_GRACE_SECONDS - 0.5) == ""
    clock.now += 0.5
    assert "driver said no" in stuck.judge(pod(), lambda: events)
    started = [event("Failed", "Error: CDI device injection failed: unresolvable CDI devices x")]
    other = Stuck(clock=clock)
    assert judged_over(other, clock, pod(), started, GRACE_SECONDS - 0.5) == ""
    clock.now += 0.5
    assert "CDI device injection failed" in other.judge(pod(), lambda: started)


def test_a_retry_that_succeeds_within_the_grace_period_ends_the_sign() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    events = [event("FailedPrepareDynamicResources", "Failed to prepare dynamic resources: driver said no")]
    assert judged_over(stuck, clock, pod(), events, 1) == ""
    assert stuck.judge(pod("Running"), lambda: events) == ""  # the kubelet's retry went through
    clock.now += GRACE_SECONDS
    assert stuck.judge(pod("Running"), lambda: events) == ""


@pytest.mark.parametrize(
    "message",
    [
        "Failed to prepare dynamic resources: DRA driver gpu.x is not registered on node n1",
        "failed to get gRPC client for driver gpu.x: plugin name gpu.x not found in the list of "
        "registered DRA plugins",
        "Failed to prepare dynamic resources: NodePrepareResources of driver gpu.x failed for claims "
        "ns/c: UNAVAILABLE: Socket closed",
        "rpc error: code = Unavailable desc = connection error",
        "Failed to prepare dynamic resources: ResourceClaim ns/c not found",
        "Failed to prepare dynamic resources: claim ns/c is not allocated yet",
    ],
)
def test_a_driver_that_is_away_or_a_claim_not_ready_is_never_terminal(message: str) -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    assert judged_over(stuck, clock, pod(), [event("FailedPrepareDynamicResources", message)], 600) == ""


def test_a_newer_transient_event_replaces_an_older_failure() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    events = [
        event(
            "FailedPrepareDynamicResources",
            "Failed to prepare dynamic resources: driver said no",
            version="5",
        ),
        event("FailedPrepareDynamicResources", "DRA driver gpu.x is not registered on node n1", version="7"),
    ]
    assert judged_over(stuck, clock, pod(), events, 60) == ""


def test_events_of_another_pod_of_the_same_name_do_not_count() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    events = [event("Failed", CDI_MESSAGE, uid="an-older-pod")]
    assert latest_warning(events, pod()) is None
    assert judged_over(stuck, clock, pod(), events, 60) == ""


def test_normal_events_do_not_count() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    events = [event("Scheduled", "assigned", kind="Normal")]
    assert judged_over(stuck, clock, pod(), events, 60) == ""


def test_a_container_that_cannot_be_created_is_terminal_with_its_message() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    waiting = {
        "name": "ctr",
        "state": {"waiting": {"reason": "CreateContainerError", "message": CDI_MESSAGE}},
    }
    why = judged_over(stuck, clock, pod(containers=[waiting]), [], GRACE_SECONDS)
    assert "container ctr waiting: CreateContainerError" in why and "gpu=nope" in why


def test_a_message_that_changes_between_retries_does_not_restart_the_grace_period() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    first = [event("Failed", CDI_MESSAGE + " (try 1)", version="1")]
    assert stuck.judge(pod(), lambda: first) == ""
    clock.now += GRACE_SECONDS
    second = [*first, event("Failed", CDI_MESSAGE + " (try 2)", version="2")]
    assert "(try 2)" in stuck.judge(pod(), lambda: second)


def test_container_creating_is_not_a_sign() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    waiting = {"name": "ctr", "state": {"waiting": {"reason": "ContainerCreating"}}}
    assert judged_over(stuck, clock, pod(containers=[waiting]), [], 600) == ""


def test_unschedulable_is_never_terminal() -> None:
    """In a parallel run a pod waits for devices other tests still hold: the scheduler tries again."""
    clock = Clock()
    stuck = Stuck(clock=clock)
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes"}
    assert judged_over(stuck, clock, pod(conditions=[cond]), [], 600) == ""


def test_a_scheduler_error_that_persists_is_terminal() -> None:
    clock = Clock()
    stuck = Stuck(clock=clock)
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulerError",
        "message": "CEL runtime error: no such key: model",
    }
    why = judged_over(stuck, clock, pod(conditions=[cond]), [], GRACE_SECONDS)
    assert "the scheduler failed on it: CEL runtime error: no such key: model" in why


def test_a_failed_pod_is_terminal_at_once() -> None:
    terminated = {"name": "ctr", "state": {"terminated": {"reason": "StartError", "message": "hook failed"}}}
    why = Stuck(clock=Clock()).judge(pod("Failed", containers=[terminated]), lambda: [])
    assert why.startswith("the pod failed: container ctr terminated: StartError: hook failed")


def test_pod_claim_names_from_the_spec_and_from_templates() -> None:
    the_pod = {
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "claim-0"}, {"name": "t"}]},
        "status": {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "pod-0-t-abcde"}]},
    }
    assert pod_claim_names(the_pod) == {"claim-0", "pod-0-t-abcde"}


# --- the waits ---------------------------------------------------------------------------------


class OnePodApi:
    """Serves one pod that never changes: lists it, and watches that end quietly after a while."""

    def __init__(self, the_pod: Obj) -> None:
        self.pod = the_pod
        self.watches: list[int] = []

    def objects_and_version(self, kind: str, namespace: str | None, *, fields: str | None = None) -> Any:
        return [self.pod], "1"

    def watch(self, kind: str, namespace: str | None, **kw: Any) -> Iterator[tuple[str, Obj]]:
        self.watches.append(kw["timeout_seconds"])
        time.sleep(min(kw["timeout_seconds"], 0.05))
        return iter(())


def test_watch_until_fails_at_once_with_what_stuck_says() -> None:
    api = OnePodApi(pod())
    started = time.monotonic()
    with pytest.raises(WaitFailed, match=r"waiting for pod ns/pod-0 Running: the node says no"):
        watch_until(
            cast(Kube, api),
            "Pod",
            "pod ns/pod-0 Running",
            lambda objs: None,
            60,
            stuck=lambda objs: "the node says no",
        )
    assert time.monotonic() - started < 5


def test_watch_until_with_stuck_wakes_every_recheck_seconds() -> None:
    api = OnePodApi(pod())
    asked = []

    def stuck(_: Any) -> str:
        asked.append(1)
        return "enough" if len(asked) >= 3 else ""

    with pytest.raises(WaitFailed):
        watch_until(cast(Kube, api), "Pod", "pod", lambda objs: None, 600, stuck=stuck)
    assert api.watches and max(api.watches) == 1, f"watch windows: {api.watches}"


def test_a_check_that_holds_wins_over_stuck() -> None:
    """A wait that expects the very sign (``wait_unschedulable``, a Failed phase) sees it as success."""
    api = OnePodApi(pod("Failed"))
    got = watch_until(
        cast(Kube, api), "Pod", "pod Failed", lambda objs: "yes", 60, stuck=lambda objs: "failed"
    )
    assert got == "yes"


def test_watch_until_without_stuck_still_times_out() -> None:
    api = OnePodApi(pod())
    with pytest.raises(WaitTimeout, match="timed out after 1 s waiting for pod"):
        watch_until(cast(Kube, api), "Pod", "pod", lambda objs: None, 1)


def test_until_fails_at_once_with_what_stuck_says() -> None:
    with pytest.raises(WaitFailed, match="waiting for the files: gone for good"):
        until("the files", lambda: None, 60, stuck=lambda: "gone for good")
