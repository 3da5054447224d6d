"""The pod status the kubelet would report for a pod the agent "runs"."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from nodeagent.draclient import PreparedDevice
from nodeagent.timeutil import rfc3339

__all__ = ["HOST_IP", "PodRun", "pod_status"]

Obj = dict[str, Any]
HOST_IP = "127.0.0.1"


@dataclass
class PodRun:
    """What the agent remembers of a pod it started."""

    uid: str
    namespace: str
    name: str
    start_time: float
    """The pod's ``status.startTime``."""
    started_at: float
    """When its containers started."""
    ip: str
    run_seconds: float | None = None
    """From the ``dra-conformance.io/run-seconds`` annotation: containers exit after this long."""
    exit_code: int = 0
    """From the ``dra-conformance.io/exit-code`` annotation: what they exit with (not 0: Failed)."""
    finished_at: float | None = None
    claims: dict[str, str] = field(default_factory=dict)
    """Pod claim name -> ResourceClaim UID."""
    devices: dict[str, list[PreparedDevice]] = field(default_factory=dict)
    """Pod claim name -> the devices prepared for its claim (what prepare returned)."""
    last_status: Obj | None = None
    """The status last written, so an unchanged status is not written again."""


def pod_ip(uid: str) -> str:
    """A stable fake pod IP in 10.0.0.0/8 derived from the pod UID."""
    h = hashlib.sha256(uid.encode()).digest()
    return f"10.{h[0]}.{h[1]}.{max(h[2], 1)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _condition(old: list[Obj], kind: str, status: str, now: str, reason: str | None = None) -> Obj:
    prev = next((c for c in old if c.get("type") == kind), None)
    out: Obj = {"type": kind, "status": status}
    out["lastTransitionTime"] = prev["lastTransitionTime"] if prev and prev.get("status") == status else now
    if reason:
        out["reason"] = reason
    return out


def _container_status(
    pod_uid: str, c: Obj, run: PodRun, *, running: bool, init: bool, resources: list[Obj] | None
) -> Obj:
    image = c.get("image", "")
    out: Obj = {
        "name": c["name"],
        "image": image,
        "imageID": f"{image.split('@')[0]}@sha256:{_digest(image)}",
        "containerID": f"fake://{_digest(pod_uid + '/' + c['name'])}",
        "restartCount": 0,
        "lastState": {},
    }
    started = rfc3339(run.started_at)
    if running:
        out["state"] = {"running": {"startedAt": started}}
        out["ready"] = True
        out["started"] = True
    else:
        finished = rfc3339(run.finished_at if run.finished_at is not None and not init else run.started_at)
        code = 0 if init else run.exit_code
        out["state"] = {
            "terminated": {
                "exitCode": code,
                "reason": "Error" if code else "Completed",
                "startedAt": started,
                "finishedAt": finished,
                "containerID": out["containerID"],
            }
        }
        out["ready"] = init  # a successfully completed init container counts as ready
        out["started"] = False
    if resources:
        out["allocatedResourcesStatus"] = resources
    return out


def pod_status(pod: Obj, run: PodRun, resources: dict[str, list[Obj]]) -> Obj:
    """The full new ``status`` of ``pod``: Running, or Succeeded (Failed, exit code not 0) once ``run``
    finished.

    ``resources`` maps a container name to its ``allocatedResourcesStatus`` entries.
    Fields the agent does not own (``resourceClaimStatuses``, ``qosClass``, ...) are kept.
    """
    old: Obj = dict(pod.get("status") or {})
    spec = pod.get("spec") or {}
    now = rfc3339()
    done = run.finished_at is not None
    status = dict(old)
    status["phase"] = ("Failed" if run.exit_code else "Succeeded") if done else "Running"
    status["hostIP"] = HOST_IP
    status["hostIPs"] = [{"ip": HOST_IP}]
    status["podIP"] = run.ip
    status["podIPs"] = [{"ip": run.ip}]
    status["startTime"] = rfc3339(run.start_time)
    generation = (pod.get("metadata") or {}).get("generation")
    if generation is not None:
        status["observedGeneration"] = generation
    old_conditions = list(old.get("conditions") or [])
    ready = "False" if done else "True"
    reason = ("PodFailed" if run.exit_code else "PodCompleted") if done else None
    conditions = [
        _condition(old_conditions, "PodReadyToStartContainers", ready, now),
        _condition(old_conditions, "Initialized", "True", now, reason),
        _condition(old_conditions, "Ready", ready, now, reason),
        _condition(old_conditions, "ContainersReady", ready, now, reason),
    ]
    scheduled = next((c for c in old_conditions if c.get("type") == "PodScheduled"), None)
    conditions.append(scheduled or _condition(old_conditions, "PodScheduled", "True", now))
    known = {c["type"] for c in conditions}
    conditions.extend(c for c in old_conditions if c.get("type") not in known)
    status["conditions"] = conditions
    uid = pod["metadata"]["uid"]
    inits = spec.get("initContainers") or []
    if inits:
        status["initContainerStatuses"] = [
            _container_status(
                uid,
                c,
                run,
                running=c.get("restartPolicy") == "Always" and not done,
                init=c.get("restartPolicy") != "Always",
                resources=resources.get(c["name"]),
            )
            for c in inits
        ]
    status["containerStatuses"] = [
        _container_status(uid, c, run, running=not done, init=False, resources=resources.get(c["name"]))
        for c in spec.get("containers") or []
    ]
    status.pop("message", None)
    status.pop("reason", None)
    return status


def pending_status(pod: Obj, start_time: float) -> Obj:
    """The status of a pod the node accepted but cannot start yet (e.g. prepare keeps failing).

    Like the kubelet's: phase Pending, containers waiting in ``ContainerCreating`` (or
    ``PodInitializing`` behind init containers), not ready.
    """
    old: Obj = dict(pod.get("status") or {})
    spec = pod.get("spec") or {}
    now = rfc3339()
    status = dict(old)
    status["phase"] = "Pending"
    status["hostIP"] = HOST_IP
    status["hostIPs"] = [{"ip": HOST_IP}]
    status["startTime"] = old.get("startTime") or rfc3339(start_time)
    inits = spec.get("initContainers") or []
    old_conditions = list(old.get("conditions") or [])
    conditions = [
        _condition(old_conditions, "PodReadyToStartContainers", "False", now),
        _condition(
            old_conditions,
            "Initialized",
            "False" if inits else "True",
            now,
            "ContainersNotInitialized" if inits else None,
        ),
        _condition(old_conditions, "Ready", "False", now, "ContainersNotReady"),
        _condition(old_conditions, "ContainersReady", "False", now, "ContainersNotReady"),
    ]
    scheduled = next((c for c in old_conditions if c.get("type") == "PodScheduled"), None)
    conditions.append(scheduled or _condition(old_conditions, "PodScheduled", "True", now))
    known = {c["type"] for c in conditions}
    conditions.extend(c for c in old_conditions if c.get("type") not in known)
    status["conditions"] = conditions

    def waiting(c: Obj, reason: str) -> Obj:
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "restartCount": 0,
            "lastState": {},
            "ready": False,
            "started": False,
            "state": {"waiting": {"reason": reason}},
        }

    if inits:
        status["initContainerStatuses"] = [waiting(c, "PodInitializing") for c in inits]
    regular = "PodInitializing" if inits else "ContainerCreating"
    status["containerStatuses"] = [waiting(c, regular) for c in spec.get("containers") or []]
    return status
