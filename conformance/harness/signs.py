"""Signs that a pod will not get where a wait wants it: what the node or the scheduler said.

A wait for a pod to run need not sit out its timeout when the node has already said why the pod
cannot start. :class:`Stuck` reads a pod and the events about it and answers with the node's or
the scheduler's own words once a sign is terminal:

- the pod's phase is ``Failed`` (final: at once);
- a container waits with a reason the runtime keeps retrying to no avail
  (:data:`CONTAINER_FAILURES`: ``CreateContainerError``, ``RunContainerError``, ...);
- the newest Warning event about the pod is a failed prepare (``FailedPrepareDynamicResources``)
  or a failed container start (``Failed``: the node's "CDI device injection failed", say);
- the scheduler failed on the pod (``PodScheduled=False``, reason ``SchedulerError``: a CEL error
  in a selector, say).

Transient signs are not terminal. Each sign above must persist for :data:`GRACE_SECONDS` (a
failed prepare :data:`PREPARE_GRACE_SECONDS`), so a
failure whose retry is already under way (the node agent retries a failed prepare after 1 s, then
2 s) can still clear; a pod that moved on, or a later event of another kind, starts the grace
period anew. A real kubelet retries a failed pod sync only after about 10 s: a driver that answers
a prepare with an error is at fault whenever it does so (the suite counts any
FailedPrepareDynamicResources of a clean run as a failure), so the grace is not stretched to that.

Prepare failures that say the driver is away (not registered, gRPC ``UNAVAILABLE``) or the claim
is not ready yet never count: tests restart drivers and kubelets on purpose, and those signs last
as long as that takes. ``PodScheduled=False`` with reason ``Unschedulable`` never counts either: in
a parallel run a pod waits for devices that other tests (or the test's own earlier claims) still
hold, and the scheduler tries again when they are freed; waits that expect it
(``wait_unschedulable``) therefore see it as success, never as failure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from conformance.harness.kube import meta

__all__ = [
    "CONTAINER_FAILURES",
    "FAILED_PREPARE",
    "GRACE_SECONDS",
    "PREPARE_GRACE_SECONDS",
    "TRANSIENT",
    "Stuck",
    "latest_warning",
    "scheduler_error",
]

Obj = Mapping[str, Any]

GRACE_SECONDS = 3.0
"""How long a node's or the scheduler's failure must persist before a wait gives up on the pod."""
PREPARE_GRACE_SECONDS = 10.0
"""How long a failed prepare (``FailedPrepareDynamicResources``) must persist: about the retry
period of a real kubelet. In a parallel run a prepare can fail for a moment for a good reason: a
device the scheduler gave a new claim is still held by a claim the node is unpreparing (a
force-deleted pod's), and the driver rightly refuses until that is done."""

FAILED_PREPARE = "FailedPrepareDynamicResources"
"""The kubelet's event reason when NodePrepareResources failed."""

FAILED_START = "Failed"
"""The kubelet's event reason when a container could not be created or started (CDI injection)."""

CONTAINER_FAILURES = frozenset(
    {
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
        "CrashLoopBackOff",
        "StartError",
    }
)
"""Container ``waiting``/``terminated`` reasons that say the container cannot be created or started."""

TRANSIENT = re.compile(
    r"is not registered|not found in the list of registered"  # the plugin is (re)registering
    r"|\b(UNAVAILABLE|DEADLINE_EXCEEDED|CANCELLED)\b|code = (Unavailable|DeadlineExceeded|Canceled)"
    r"|ResourceClaim \S+ not found|not allocated yet|not reserved for|is being deleted"  # claim not ready
    r"|[Pp]ull(ing)? image|ErrImagePull|ImagePullBackOff",  # images arrive in their own time
)
"""Failure messages that say the driver is away or the claim not ready yet: never terminal."""


def _stamp(event: Obj) -> tuple[str, int]:
    m = meta(event)
    when = str(event.get("lastTimestamp") or event.get("eventTime") or m.get("creationTimestamp") or "")
    version = str(m.get("resourceVersion") or "")
    return when, int(version) if version.isdigit() else 0


def latest_warning(events: Iterable[Obj], pod: Obj) -> Obj | None:
    """The newest Warning event about ``pod`` (matched by uid when the event names one)."""
    m = meta(pod)
    mine = [
        e
        for e in events
        if e.get("type") == "Warning"
        and (e.get("involvedObject") or {}).get("name") == m.get("name")
        and (e.get("involvedObject") or {}).get("uid") in (None, "", m.get("uid"))
    ]
    return max(mine, key=_stamp, default=None)


def scheduler_error(pod: Obj) -> str:
    """The scheduler's message when it failed on the pod (``PodScheduled`` reason ``SchedulerError``)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "SchedulerError"
        ):
            return f"the scheduler failed on it: {c.get('message') or 'no message'}"
    return ""


Sign = tuple[str, str]
"""What kind of sign (its grace period runs while the kind stays) and what it says."""


def _container_failure(pod: Obj) -> Sign | None:
    status = pod.get("status") or {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        for kind in ("waiting", "terminated"):
            found = state.get(kind) or {}
            reason = str(found.get("reason") or "")
            message = str(found.get("message") or "")
            if reason in CONTAINER_FAILURES and not TRANSIENT.search(message):
                text = f"container {cs.get('name')} {kind}: {reason}: {message or 'no message'}"
                return f"container {cs.get('name')} {reason}", text
    return None


def _event_failure(events: Iterable[Obj], pod: Obj) -> Sign | None:
    event = latest_warning(events, pod)
    if event is None or event.get("reason") not in (FAILED_PREPARE, FAILED_START):
        return None
    message = str(event.get("message") or "")
    if TRANSIENT.search(message):
        return None
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or "the node"
    return f"event {event.get('reason')}", f"{source} reports {event.get('reason')}: {message}"


class Stuck:
    """Judges, each time it is asked, whether a pod is stuck for good; see the module's docstring.

    One per wait: it remembers since when the current sign has been seen.
    """

    def __init__(self, grace: float = GRACE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        """Seconds a sign must persist."""
        self._clock = clock
        self._sign = ""
        self._since = 0.0

    def judge(self, pod: Obj | None, events: Callable[[], Iterable[Obj]]) -> str:
        """Why ``pod`` will not get further (empty while it may); ``events`` lists its namespace's
        events (called only when the pod shows no other sign, so a healthy wait costs nothing)."""
        if pod is None:
            self._sign = ""
            return ""
        if (pod.get("status") or {}).get("phase") == "Failed":
            status = pod.get("status") or {}
            container = _container_failure(pod)
            why = container[1] if container else f"{status.get('reason') or ''} {status.get('message') or ''}"
            return f"the pod failed: {why.strip() or 'no reason given'}"
        if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded"):
            self._sign = ""
            return ""
        scheduler = scheduler_error(pod)
        sign = (
            ("scheduler", scheduler)
            if scheduler
            else _container_failure(pod) or _event_failure(events(), pod)
        )
        kind, text = sign or ("", "")
        now = self._clock()
        # a new kind of sign (or none) starts the grace period; a message that changes between the
        # node's retries (a timestamp, a claim uid) does not
        if kind != self._sign:
            self._sign, self._since = kind, now
        grace = max(self.grace, PREPARE_GRACE_SECONDS) if kind == f"event {FAILED_PREPARE}" else self.grace
        if kind and now - self._since >= grace:
            return f"{text} (seen for {now - self._since:.0f} s)"
        return ""
