"""Running the pods bound to the node, as the kubelet's pod workers and DRA manager do.

``sync(uid)`` brings one pod one step closer to what it should be and returns
when to look at it again (None: only on the next event or resync):

- new pod: resolve its claims (with the scheduler's claim for its extended
  resources), wait until each is allocated and reserved for it, prepare the
  unprepared ones (one call per driver, batched), resolve each container's CDI
  devices into a ContainerView file, set the status Running;
- running pod: finish it when its run time is up (Succeeded), refresh health;
- finished pod: release its claims;
- deleted pod (``deletionTimestamp``): stop, release its claims (unprepare the
  ones no other pod on the node uses), remove its views, delete it for good.

Failures keep the pod where it is, with a Warning event, and back off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any

from draproto.rest import Conflict, NotFound
from nodeagent import cdi, claims
from nodeagent.checkpoint import Checkpoint
from nodeagent.draclient import PreparedDevice, cdi_ids
from nodeagent.errors import CDIError, ClaimNotReady, KubeError, PluginError, kube_error
from nodeagent.events import EventRecorder
from nodeagent.health import HealthCache
from nodeagent.kube import Kube
from nodeagent.manager import ClaimManager
from nodeagent.plugins import PluginManager
from nodeagent.settings import Settings
from nodeagent.status import HOST_IP, PodRun, pending_status, pod_ip, pod_status
from nodeagent.timeutil import parse
from nodeagent.views import remove_views, write_view
from nodeagent.workqueue import WorkQueue

__all__ = ["EXIT_CODE_ANNOTATION", "FAILED_PREPARE", "RUN_SECONDS_ANNOTATION", "PodManager"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
RUN_SECONDS_ANNOTATION = "dra-conformance.io/run-seconds"
EXIT_CODE_ANNOTATION = "dra-conformance.io/exit-code"
"""With run-seconds: the code its containers exit with (default 0; another makes the pod Failed)."""
FAILED_PREPARE = "FailedPrepareDynamicResources"
FAILED_UNPREPARE = "FailedUnprepareDynamicResources"
FAILED_CDI = "Failed"
TERMINAL = ("Succeeded", "Failed")


def _version(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("resourceVersion", ""))


def _key(pod: Obj) -> tuple[str, str, str]:
    md = pod["metadata"]
    return md["namespace"], md["name"], md["uid"]


class PodManager:
    """The state of the node's pods and the logic that moves them along."""

    def __init__(
        self,
        settings: Settings,
        kube: Kube,
        plugins: PluginManager,
        checkpoint: Checkpoint,
        health: HealthCache,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.plugins = plugins
        self.checkpoint = checkpoint
        self.health = health
        self.queue: WorkQueue[str] = WorkQueue()
        self._lock = threading.RLock()
        self._cache: dict[str, Obj] = {}
        self._runs: dict[str, PodRun] = {}
        self.dra = ClaimManager(
            settings.node_name,
            plugins,
            checkpoint,
            optional_node_operations=settings.optional_node_operations and settings.at_least(1, 37),
        )
        self._failures: dict[str, int] = {}
        self._unprepare_since: dict[str, float] = {}
        self._pending: dict[str, tuple[float, Obj | None]] = {}
        """Pods that could not start yet: when first seen, and the status last written."""
        self.events = EventRecorder(kube, settings.node_name)
        self.synced = False
        """Set once the first pod list arrived; orphaned claims are only judged after that."""

    # -- feeding the cache

    def replace_all(self, pods: list[Obj]) -> None:
        """A full list of the node's pods: replace the cache and enqueue everything."""
        with self._lock:
            old = set(self._cache)
            self._cache = {p["metadata"]["uid"]: p for p in pods}
            keys = old | set(self._cache) | set(self._runs)
            self.synced = True
        for uid in keys:
            self.queue.add(uid)

    def upsert(self, pod: Obj) -> None:
        """A pod was added or changed."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            self._cache[uid] = pod
        self.queue.add(uid)

    def remove(self, pod: Obj) -> None:
        """A pod is gone from the API server."""
        uid = pod["metadata"]["uid"]
        with self._lock:
            self._cache.pop(uid, None)
        self.queue.add(uid)

    def enqueue_all(self) -> None:
        """Look at every known pod again (resync)."""
        with self._lock:
            keys = set(self._cache) | set(self._runs)
        for uid in keys:
            self.queue.add(uid)

    def on_health_change(self, driver: str) -> None:
        """A driver's device health changed: refresh the status of pods using its devices."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            if any(d.driver == driver for devices in run.devices.values() for d in devices):
                self.queue.add(run.uid)

    def pod(self, uid: str) -> Obj | None:
        """The cached pod."""
        with self._lock:
            return self._cache.get(uid)

    # -- the step

    def sync(self, uid: str) -> float | None:
        """One step for pod ``uid``; the delay until the next look, or None."""
        pod = self.pod(uid)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return self._teardown(uid, pod)
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL:
            return self._release_terminal(uid)
        run = self._runs.get(uid)
        if run is None:
            return self._start(pod)
        return self._refresh(pod, run)

    def _backoff(self, uid: str) -> float:
        n = self._failures.get(uid, 0)
        self._failures[uid] = n + 1
        return float(min(self.settings.retry_initial_seconds * 2**n, self.settings.retry_max_seconds))

    # -- starting

    def _start(self, pod: Obj) -> float | None:
        ns, name, uid = _key(pod)
        fields = {"node": self.settings.node_name, "pod": f"{ns}/{name}", "pod_uid": uid}
        try:
            pod_claims = claims.pod_claims(pod)
            by_pod_claim: dict[str, Obj] = {}
            for pc in pod_claims:
                claim = self.kube.get_claim(ns, pc.claim_name)
                if claim is None:
                    raise ClaimNotReady(f"ResourceClaim {ns}/{pc.claim_name} not found")
                claims.check_claim(claim, pod, must_check_owner=pc.must_check_owner)
                by_pod_claim[pc.pod_claim_name] = claim
            by_claim_uid = self.dra.prepare_pod(ns, uid, list(by_pod_claim.values()))
            prepared = {pc: by_claim_uid[c["metadata"]["uid"]] for pc, c in by_pod_claim.items()}
        except KubeError as e:  # the API server, not the pod, is the problem: no event
            delay = self._backoff(uid)
            log.warning(
                "pod not started, API request failed", extra={**fields, "error": str(e), "retry_in": delay}
            )
            return delay
        except (ClaimNotReady, PluginError) as e:
            delay = self._backoff(uid)
            log.warning("pod not started", extra={**fields, "error": str(e), "retry_in": delay})
            self.events.pod_event(pod, FAILED_PREPARE, f"Failed to prepare dynamic resources: {e}")
            self._write_pending(pod)
            return delay
        try:
            edits = self._container_edits(pod, prepared)
        except CDIError as e:
            delay = self._backoff(uid)
            log.warning("CDI resolution failed", extra={**fields, "error": str(e), "retry_in": delay})
            self.events.pod_event(pod, FAILED_CDI, f"Error: CDI device injection failed: {e}")
            self._write_pending(pod)
            return delay
        for container, view in edits.items():
            write_view(self.settings.layout.view_path(ns, name, container), view.to_json())
        old_status = pod.get("status") or {}
        start_time = parse(old_status.get("startTime")) or self._pending.get(uid, (time.time(), None))[0]
        started_at = start_time
        for cs in old_status.get("containerStatuses") or []:
            started_at = parse(((cs.get("state") or {}).get("running") or {}).get("startedAt")) or started_at
        run = PodRun(
            uid=uid,
            namespace=ns,
            name=name,
            start_time=start_time,
            started_at=started_at,
            ip=HOST_IP if (pod.get("spec") or {}).get("hostNetwork") else pod_ip(uid),
            run_seconds=self._run_seconds(pod),
            exit_code=self._exit_code(pod),
            claims={pc: c["metadata"]["uid"] for pc, c in by_pod_claim.items()},
            devices=prepared,
        )
        with self._lock:
            self._runs[uid] = run
            self._pending.pop(uid, None)
        self._failures.pop(uid, None)
        log.info("pod running", extra={**fields, "claims": sorted(run.claims.values())})
        return self._refresh(pod, run)

    def _write_pending(self, pod: Obj) -> None:
        """Show a pod that cannot start yet as the kubelet does (only while it is Pending)."""
        ns, name, uid = _key(pod)
        if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return  # e.g. Running before an agent restart: its containers would still run
        with self._lock:
            first, last = self._pending.get(uid, (time.time(), None))
        status = pending_status(pod, first)
        if status == last or status == pod.get("status"):
            return
        body = dict(pod)
        body["status"] = status
        written: Obj | None = status
        try:
            self.kube.update_pod_status(body)
        except KubeError as e:  # a conflict is fine: the next retry writes it again
            log.info("pending status not written", extra={"pod": f"{ns}/{name}", "error": str(e)})
            written = None
        with self._lock:
            self._pending[uid] = (first, written)

    def _run_seconds(self, pod: Obj) -> float | None:
        value = ((pod.get("metadata") or {}).get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
        if value is None:
            return None
        try:
            return max(float(value), 0.0)
        except ValueError:
            self.events.pod_event(
                pod, "InvalidAnnotation", f"{RUN_SECONDS_ANNOTATION}={value!r} is not a number of seconds"
            )
            return None

    def _exit_code(self, pod: Obj) -> int:
        value = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXIT_CODE_ANNOTATION)
        if value is None:
            return 0
        try:
            code = int(value)
        except ValueError:
            code = -1
        if not 0 <= code <= 255:
            self.events.pod_event(
                pod, "InvalidAnnotation", f"{EXIT_CODE_ANNOTATION}={value!r} is not an exit code (0-255)"
            )
            return 0
        return code

    def _container_edits(
        self, pod: Obj, prepared: dict[str, list[PreparedDevice]]
    ) -> dict[str, cdi.ContainerEdits]:
        """What each container sees: the CDI ids of the devices it references (its claims, and the
        requests of the extended-resource claim that serve the extended resources it asks for),
        resolved."""
        spec = pod.get("spec") or {}
        ids: dict[str, list[str]] = {
            c["name"]: [] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
        }
        for ref in claims.container_claim_refs(pod) + claims.extended_resource_refs(pod):
            for i in cdi_ids(prepared.get(ref.pod_claim, []), ref.request):
                if i not in ids[ref.container]:
                    ids[ref.container].append(i)
        out = {}
        for container, device_ids in ids.items():
            try:
                out[container] = cdi.resolve(device_ids, [self.settings.layout.cdi_dir])
            except CDIError as e:
                raise CDIError(f"container {container}: {e}") from e
        return out

    # -- running

    def _resources(self, pod: Obj, run: PodRun) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = defaultdict(list)
        now = time.time()
        for ref in claims.container_claim_refs(pod):
            name = f"claim:{ref.pod_claim}" + (f"/{ref.request}" if ref.request else "")
            resources: list[Obj] = []
            for d in run.devices.get(ref.pod_claim, []):
                # as the kubelet (1.37, buildResourceHealth): the device's first CDI id, else
                # <driver>/<pool>/<device>
                resource_id = d.cdi_device_ids[0] if d.cdi_device_ids else f"{d.driver}/{d.pool}/{d.device}"
                # a resourceID may come twice (results sharing a CDI id, or a device without CDI ids
                # serving several requests): listed once, as the kubelet does (the API refuses duplicates)
                if d.serves(ref.request) and all(r["resourceID"] != resource_id for r in resources):
                    health = self.health.get(d.driver, d.pool, d.device, now)
                    resources.append({"resourceID": resource_id, "health": health})
            if resources:
                out[ref.container].append({"name": name, "resources": resources})
        return out

    def _refresh(self, pod: Obj, run: PodRun) -> float | None:
        next_look: float | None = None
        if run.finished_at is None and run.run_seconds is not None:
            left = run.started_at + run.run_seconds - time.time()
            if left <= 0:
                run.finished_at = time.time()
                log.info(
                    "pod finished",
                    extra={"node": self.settings.node_name, "pod": f"{run.namespace}/{run.name}"},
                )
            else:
                next_look = left
        try:
            self._write_status(pod, run)
        except NotFound:
            return None
        except KubeError as e:
            log.warning(
                "pod status update failed", extra={"pod": f"{run.namespace}/{run.name}", "error": str(e)}
            )
            return self._backoff(run.uid)
        if run.finished_at is not None:
            return self._release_terminal(run.uid)
        return next_look

    def _write_status(self, pod: Obj, run: PodRun) -> None:
        for _ in range(5):
            status = pod_status(pod, run, self._resources(pod, run))
            if status == run.last_status or status == pod.get("status"):
                run.last_status = status
                return
            body = dict(pod)
            body["status"] = status
            try:
                updated = self.kube.update_pod_status(body)
            except Conflict as e:
                fresh = self.kube.get_pod(run.namespace, run.name)
                if fresh is None or fresh["metadata"]["uid"] != run.uid:
                    raise kube_error("pod is gone", 404, "NotFound") from e
                pod = fresh
                continue
            run.last_status = status
            with self._lock:
                cached = self._cache.get(run.uid)
                # the watch may have brought a newer pod meanwhile (a deletion, say): keep that one
                if cached is not None and _version(cached) == _version(pod):
                    self._cache[run.uid] = updated
            return
        raise kube_error(f"pod {run.namespace}/{run.name}: status kept conflicting", 409, "Conflict")

    # -- releasing

    def _pod_holds_claims(self, uid: str) -> bool:
        with self._lock:
            pod = self._cache.get(uid)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return False
        return (pod.get("status") or {}).get("phase") not in TERMINAL

    def _release_terminal(self, uid: str) -> float | None:
        try:
            self.dra.release_pod(uid, self._pod_holds_claims)
        except PluginError as e:
            log.warning(
                "unprepare failed", extra={"node": self.settings.node_name, "pod_uid": uid, "error": str(e)}
            )
            return self._backoff(uid)
        self._failures.pop(uid, None)
        return None

    def _teardown(self, uid: str, pod: Obj | None) -> float | None:
        with self._lock:
            run = self._runs.get(uid)
        fields = {"node": self.settings.node_name, "pod_uid": uid}
        try:
            self.dra.release_pod(uid, self._pod_holds_claims)
        except PluginError as e:
            since = self._unprepare_since.setdefault(uid, time.monotonic())
            if time.monotonic() - since < self.settings.unprepare_give_up_seconds:
                log.warning("unprepare failed; pod stays terminating", extra={**fields, "error": str(e)})
                return self._backoff(uid)
            log.error("unprepare keeps failing; removing the pod anyway", extra={**fields, "error": str(e)})
            if pod is not None:
                self.events.pod_event(
                    pod, FAILED_UNPREPARE, f"Failed to unprepare dynamic resources, giving up: {e}"
                )
            self.dra.abandon_pod(uid)  # the orphan sweep keeps trying
        if pod is not None:
            ns, name, _ = _key(pod)
        elif run is not None:
            ns, name = run.namespace, run.name
        else:
            ns = name = ""
        with self._lock:  # a pod of the same name may already run again (force-deleted and recreated)
            reused = any(r.uid != uid and (r.namespace, r.name) == (ns, name) for r in self._runs.values())
        if ns and not reused:
            remove_views(self.settings.layout, ns, name)
        if pod is not None:
            try:
                self.kube.delete_pod(ns, name, uid)
                log.info("pod deleted", extra={**fields, "pod": f"{ns}/{name}"})
            except KubeError as e:
                log.warning("final pod delete failed", extra={**fields, "error": str(e)})
                return self._backoff(uid)
        with self._lock:
            self._runs.pop(uid, None)
            self._failures.pop(uid, None)
            self._unprepare_since.pop(uid, None)
            self._pending.pop(uid, None)
        self.events.forget(uid)
        return None

    def sweep_orphans(self) -> None:
        """Unprepare checkpointed claims whose pods are all gone (e.g. deleted while the agent was down)."""
        if not self.synced:
            return
        with self._lock:
            live = {u for u in self._cache if self._pod_holds_claims(u)} | set(self._runs)
        self.dra.sweep(live)
