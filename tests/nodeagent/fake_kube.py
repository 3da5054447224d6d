"""``FakeKube``: the node agent's ``Kube`` seam in memory, keeping the promises an API server keeps.

- Objects are stored and handed out as copies: a test changes one only through the methods
  here, as another client of the API server would, never by editing what the agent holds.
- Every write bumps one cluster-wide ``resourceVersion``. A write carrying a stale
  ``metadata.resourceVersion`` answers 409, a create of a name that exists 409, a write to an
  object that does not exist 404 (all as the ``KubeError`` of that status, ``kube_error``).
- ``watch_pods`` yields the ``ADDED`` / ``MODIFIED`` / ``DELETED`` events of the node's pods
  after the version it is given, as they happen, until its timeout or :meth:`FakeKube.close`;
  a version older than the kept history answers an ``ERROR`` event with code 410 (Gone), as
  an API server does after compaction (:meth:`FakeKube.compact`).
- :meth:`FakeKube.before_next` runs something just before the next call of a method: how a
  test makes another writer win a race (a conflict) at a chosen moment.

``make_claim`` and ``make_pod`` build the objects as the scheduler and the resourceclaim
controller leave them (allocated, reserved, bound).
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from nodeagent.errors import KubeError, kube_error

__all__ = ["FakeKube", "make_claim", "make_pod"]

Obj = dict[str, Any]
Key = tuple[str, str]

DELETION_STAMP = "2026-01-01T00:00:00Z"


def _key(obj: Obj) -> Key:
    md = obj["metadata"]
    return md.get("namespace", ""), md["name"]


def _not_found(message: str) -> KubeError:
    """What the API server answers a request for an object that does not exist (404 NotFound)."""
    return kube_error(message, 404, "NotFound", message)


def _exists(message: str) -> KubeError:
    """What the API server answers a create of a name that is taken (409 AlreadyExists)."""
    return kube_error(message, 409, "AlreadyExists", message)


class FakeKube:
    """The agent's :class:`~nodeagent.kube.Kube`, in memory (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._pods: dict[Key, Obj] = {}
        self._claims: dict[Key, Obj] = {}
        self._nodes: dict[str, Obj] = {}
        self._leases: dict[Key, Obj] = {}
        self._slices: list[Obj] = []
        self._events: list[Obj] = []
        self._history: list[tuple[int, str, Obj]] = []
        """Pod watch events (resourceVersion, type, object) since :attr:`_compacted`."""
        self._compacted = 0
        self._closed = False
        self._hooks: dict[str, list[Callable[[], None]]] = defaultdict(list)
        self.deleted_pods: list[tuple[str, str, str]] = []
        """``(namespace, name, uid)`` of every final pod deletion the agent made."""
        self.status_updates = 0
        """How many pod status writes succeeded."""
        self.calls: dict[str, int] = defaultdict(int)
        """How often each ``Kube`` method was called."""

    # -- plumbing

    def _stamp(self, obj: Obj) -> Obj:
        rv = next(self._rv)
        self._last_rv = rv
        obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
        return obj

    def _pod_event(self, kind: str, pod: Obj) -> None:
        self._history.append((int(pod["metadata"]["resourceVersion"]), kind, copy.deepcopy(pod)))
        self._cond.notify_all()

    def _call(self, method: str) -> None:
        """Count a call and run what :meth:`before_next` queued for it (outside the lock)."""
        with self._cond:
            self.calls[method] += 1
            hooks, self._hooks[method] = self._hooks[method], []
        for hook in hooks:
            hook()

    @staticmethod
    def _check_version(current: Obj, given: Obj) -> None:
        rv = given.get("metadata", {}).get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            message = (
                f"the object has been modified (resourceVersion {rv}, now "
                f"{current['metadata']['resourceVersion']})"
            )
            raise kube_error(message, 409, "Conflict", message)

    # -- what tests do (as other clients of the API server)

    def before_next(self, method: str, hook: Callable[[], None]) -> None:
        """Run ``hook`` just before the next call of ``method`` (e.g. another writer wins a race)."""
        with self._cond:
            self._hooks[method].append(hook)

    def add_pod(self, pod: Obj) -> Obj:
        """Create a pod (as bound by the scheduler); returns the stored copy."""
        with self._cond:
            if _key(pod) in self._pods:
                raise _exists(f"pod {_key(pod)} already exists")
            stored = self._stamp(copy.deepcopy(pod))
            self._pods[_key(pod)] = stored
            self._pod_event("ADDED", stored)
            return copy.deepcopy(stored)

    def touch_pod(self, namespace: str, name: str) -> None:
        """Another client writes the pod (a new resourceVersion, nothing else changes)."""
        with self._cond:
            self._pod_event("MODIFIED", self._stamp(self._pods[(namespace, name)]))

    def request_delete(self, namespace: str, name: str) -> None:
        """A graceful delete: the pod gets a ``deletionTimestamp``; the kubelet finishes it."""
        with self._cond:
            pod = self._pods[(namespace, name)]
            pod["metadata"]["deletionTimestamp"] = DELETION_STAMP
            self._pod_event("MODIFIED", self._stamp(pod))

    def remove_pod(self, namespace: str, name: str) -> None:
        """The pod disappears without the node (a force delete, e.g. while the agent is down)."""
        with self._cond:
            pod = self._pods.pop((namespace, name))
            self._pod_event("DELETED", self._stamp(pod))

    def pod_now(self, namespace: str, name: str) -> Obj | None:
        """The stored pod (a copy), or None."""
        with self._cond:
            pod = self._pods.get((namespace, name))
            return copy.deepcopy(pod) if pod is not None else None

    def phase(self, name: str, namespace: str = "default") -> str | None:
        """The stored pod's ``status.phase``; None when there is no such pod."""
        pod = self.pod_now(namespace, name)
        return None if pod is None else (pod.get("status") or {}).get("phase")

    def pod_by_uid(self, uid: str) -> Obj | None:
        """The stored pod with this UID (a copy), or None."""
        with self._cond:
            found = next((p for p in self._pods.values() if p["metadata"]["uid"] == uid), None)
            return copy.deepcopy(found) if found is not None else None

    def add_claim(self, claim: Obj) -> None:
        """Create a ResourceClaim (as allocated by the scheduler)."""
        with self._cond:
            self._claims[_key(claim)] = self._stamp(copy.deepcopy(claim))

    def remove_claim(self, namespace: str, name: str) -> None:
        """Delete a ResourceClaim."""
        with self._cond:
            del self._claims[(namespace, name)]

    def put_node(self, node: Obj) -> None:
        """Another client creates or replaces a Node."""
        with self._cond:
            stored = self._stamp(copy.deepcopy(node))
            stored["metadata"].setdefault("uid", f"node-uid-{stored['metadata']['name']}")
            self._nodes[stored["metadata"]["name"]] = stored

    def touch_lease(self, namespace: str, name: str) -> None:
        """Another client writes the Lease (a new resourceVersion)."""
        with self._cond:
            self._stamp(self._leases[(namespace, name)])

    def add_slices(self, *slices: Obj) -> None:
        """Create ResourceSlices."""
        with self._cond:
            self._slices += [self._stamp(copy.deepcopy(s)) for s in slices]

    def slice_names(self) -> list[str]:
        """Names of the stored ResourceSlices, in creation order."""
        with self._cond:
            return [s["metadata"]["name"] for s in self._slices]

    @property
    def events(self) -> list[Obj]:
        """The Events created so far (copies)."""
        with self._cond:
            return copy.deepcopy(self._events)

    def reasons(self) -> list[str]:
        """Reasons of the Events created so far."""
        return [e["reason"] for e in self.events]

    def compact(self) -> None:
        """Forget the watch history: a watch from an older resourceVersion answers 410 Gone."""
        with self._cond:
            self._history.clear()
            self._compacted = self._last_rv

    def close(self) -> None:
        """End every watch (at the end of a test)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- Kube: pods

    def list_pods(self, node: str) -> tuple[list[Obj], str]:
        """See :class:`~nodeagent.kube.Kube`."""
        self._call("list_pods")
        with self._cond:
            pods = [copy.deepcopy(p) for p in self._pods.values() if p["spec"].get("nodeName") == node]
            return pods, str(self._last_rv)

    def watch_pods(self, node: str, resource_version: str, timeout_seconds: int) -> Iterator[tuple[str, Obj]]:
        """See :class:`~nodeagent.kube.Kube`: events after ``resource_version``, as they happen."""
        self._call("watch_pods")
        since = int(resource_version or 0)
        deadline = time.monotonic() + timeout_seconds
        with self._cond:
            gone = since < self._compacted
        if gone:
            yield "ERROR", {"kind": "Status", "code": 410, "message": f"too old resource version: {since}"}
            return
        while True:
            with self._cond:
                while not self._closed and time.monotonic() < deadline:
                    fresh = [e for e in self._history if e[0] > since]
                    if fresh:
                        break
                    self._cond.wait(min(0.5, max(deadline - time.monotonic(), 0.0)))
                else:
                    return
            for rv, kind, pod in fresh:
                since = rv
                if pod["spec"].get("nodeName") == node:
                    yield kind, copy.deepcopy(pod)

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """See :class:`~nodeagent.kube.Kube`."""
        self._call("get_pod")
        return self.pod_now(namespace, name)

    def update_pod_status(self, pod: Obj) -> Obj:
        """See :class:`~nodeagent.kube.Kube`: 404 for another pod of that name, 409 when stale."""
        self._call("update_pod_status")
        with self._cond:
            md = pod["metadata"]
            current = self._pods.get((md["namespace"], md["name"]))
            if current is None or current["metadata"]["uid"] != md["uid"]:
                raise _not_found(f"pod {md['namespace']}/{md['name']} (uid {md['uid']}) not found")
            self._check_version(current, pod)
            current["status"] = copy.deepcopy(pod["status"])
            self._pod_event("MODIFIED", self._stamp(current))
            self.status_updates += 1
            return copy.deepcopy(current)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """See :class:`~nodeagent.kube.Kube`: grace 0, UID precondition, gone counts as done."""
        self._call("delete_pod")
        with self._cond:
            current = self._pods.get((namespace, name))
            if current is None or current["metadata"]["uid"] != uid:
                return
            del self._pods[(namespace, name)]
            self._pod_event("DELETED", self._stamp(current))
            self.deleted_pods.append((namespace, name, uid))

    # -- Kube: DRA, events

    def get_claim(self, namespace: str, name: str) -> Obj | None:
        """See :class:`~nodeagent.kube.Kube`."""
        self._call("get_claim")
        with self._cond:
            claim = self._claims.get((namespace, name))
            return copy.deepcopy(claim) if claim is not None else None

    def create_event(self, namespace: str, event: Obj) -> None:
        """See :class:`~nodeagent.kube.Kube`."""
        self._call("create_event")
        with self._cond:
            self._events.append(self._stamp(copy.deepcopy(event)))

    def delete_slices(self, node: str, driver: str | None = None) -> int:
        """See :class:`~nodeagent.kube.Kube`."""
        self._call("delete_slices")
        with self._cond:
            keep = [
                s
                for s in self._slices
                if s["spec"]["nodeName"] != node or (driver is not None and s["spec"]["driver"] != driver)
            ]
            deleted = len(self._slices) - len(keep)
            self._slices = keep
            return deleted

    # -- Kube: node and lease

    def get_node(self, name: str) -> Obj | None:
        """See :class:`~nodeagent.kube.Kube`."""
        self._call("get_node")
        with self._cond:
            node = self._nodes.get(name)
            return copy.deepcopy(node) if node is not None else None

    def create_node(self, node: Obj) -> Obj:
        """See :class:`~nodeagent.kube.Kube`: 409 when the Node exists."""
        self._call("create_node")
        with self._cond:
            name = node["metadata"]["name"]
            if name in self._nodes:
                raise _exists(f'nodes "{name}" already exists')
            stored = self._stamp(copy.deepcopy(node))
            stored["metadata"]["uid"] = f"node-uid-{name}"
            self._nodes[name] = stored
            return copy.deepcopy(stored)

    def patch_node_status(self, name: str, patch: Obj) -> Obj:
        """See :class:`~nodeagent.kube.Kube` (a merge of ``status``'s top-level fields): 404 when missing."""
        self._call("patch_node_status")
        with self._cond:
            node = self._nodes.get(name)
            if node is None:
                raise _not_found(f'nodes "{name}" not found')
            node.setdefault("status", {}).update(copy.deepcopy(patch["status"]))
            return copy.deepcopy(self._stamp(node))

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """See :class:`~nodeagent.kube.Kube`."""
        self._call("get_lease")
        with self._cond:
            lease = self._leases.get((namespace, name))
            return copy.deepcopy(lease) if lease is not None else None

    def create_lease(self, namespace: str, lease: Obj) -> Obj:
        """See :class:`~nodeagent.kube.Kube`: 409 when the Lease exists."""
        self._call("create_lease")
        with self._cond:
            key = (namespace, lease["metadata"]["name"])
            if key in self._leases:
                raise _exists(f'leases "{key[1]}" already exists')
            stored = self._stamp(copy.deepcopy(lease))
            self._leases[key] = stored
            return copy.deepcopy(stored)

    def update_lease(self, namespace: str, lease: Obj) -> Obj:
        """See :class:`~nodeagent.kube.Kube`: 404 when missing, 409 when stale."""
        self._call("update_lease")
        with self._cond:
            key = (namespace, lease["metadata"]["name"])
            current = self._leases.get(key)
            if current is None:
                raise _not_found(f'leases "{key[1]}" not found')
            self._check_version(current, lease)
            stored = self._stamp(copy.deepcopy(lease))
            self._leases[key] = stored
            return copy.deepcopy(stored)


def make_claim(
    name: str,
    uid: str,
    *,
    namespace: str = "default",
    drivers: tuple[str, ...] = ("gpu.example.com",),
    requests: tuple[str, ...] = ("gpu",),
    reserved_for: tuple[str, ...] = (),
    allocated: bool = True,
    owner: str | None = None,
) -> Obj:
    """A ResourceClaim as the scheduler leaves it; ``owner``: the UID of the pod that controls it,
    as the ResourceClaim controller sets it on a claim it makes from a pod's template."""
    md: Obj = {"name": name, "namespace": namespace, "uid": uid}
    if owner is not None:
        md["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "p",
                "uid": owner,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    claim: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": md,
        "spec": {"devices": {"requests": [{"name": r} for r in requests]}},
        "status": {},
    }
    if allocated:
        claim["status"]["allocation"] = {
            "devices": {
                "results": [
                    {"request": r, "driver": d, "pool": "pool-a", "device": f"gpu-{i}"}
                    for i, (r, d) in enumerate(itertools.product(requests, drivers))
                ]
            }
        }
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": u} for u in reserved_for]
    return claim


def make_pod(
    name: str,
    uid: str,
    *,
    node: str = "node-a",
    namespace: str = "default",
    claims: dict[str, str] | None = None,
    containers: dict[str, list[tuple[str, str | None]]] | None = None,
    init_containers: dict[str, list[tuple[str, str | None]]] | None = None,
    templates: dict[str, str] | None = None,
    claim_statuses: dict[str, str | None] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A bound pod. ``claims``: pod claim name -> ResourceClaim name; ``containers``: name -> refs."""

    def spec_containers(cs: dict[str, list[tuple[str, str | None]]]) -> list[Obj]:
        out = []
        for cname, refs in cs.items():
            c: Obj = {"name": cname, "image": "registry.example/app:1"}
            if refs:
                c["resources"] = {"claims": [{"name": n, **({"request": r} if r else {})} for n, r in refs]}
            out.append(c)
        return out

    spec: Obj = {"nodeName": node, "containers": spec_containers(containers or {"main": []})}
    if init_containers:
        spec["initContainers"] = spec_containers(init_containers)
    rcs = [{"name": n, "resourceClaimName": c} for n, c in (claims or {}).items()]
    rcs += [{"name": n, "resourceClaimTemplateName": t} for n, t in (templates or {}).items()]
    if rcs:
        spec["resourceClaims"] = rcs
    status: Obj = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    if claim_statuses is not None:
        status["resourceClaimStatuses"] = [
            {"name": n, **({"resourceClaimName": c} if c else {})} for n, c in claim_statuses.items()
        ]
    md: Obj = {"name": name, "namespace": namespace, "uid": uid}
    if annotations:
        md["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec, "status": status}
