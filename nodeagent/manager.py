"""Which claims are prepared on the node, for which pods: the kubelet's DRA manager.

It batches the prepare and unprepare calls (one per driver, through
:class:`~nodeagent.draclient.DRAClient`) and owns the claim-info checkpoint. A claim
is written to the checkpoint before its prepare call (so an unprepare is owed
even if the answer is lost), counts as prepared in this process only after a
good answer, and is unprepared when the last pod using it lets go. Calls for
the same claim never overlap (one lock per claim, taken in UID order).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from nodeagent import claims, skipops
from nodeagent.checkpoint import Checkpoint, ClaimInfo
from nodeagent.draclient import ClaimRef, PreparedDevice
from nodeagent.errors import PluginError, PrepareError
from nodeagent.plugins import PluginManager

__all__ = ["ClaimManager"]

log = logging.getLogger(__name__)


class ClaimManager:
    """Prepared claims of the node and the calls that change them."""

    def __init__(
        self,
        node: str,
        plugins: PluginManager,
        checkpoint: Checkpoint,
        *,
        optional_node_operations: bool = True,
    ) -> None:
        self.node = node
        self.plugins = plugins
        self.checkpoint = checkpoint
        self.optional_node_operations = optional_node_operations
        """Gate DRAOptionalNodeOperations: off, a claim whose devices skip an operation is refused."""
        self._lock = threading.Lock()
        self._prepared: set[str] = set()
        self._claim_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)

    @contextlib.contextmanager
    def _locked(self, claim_uids: list[str]) -> Iterator[None]:
        with self._lock:
            locks = [self._claim_locks[u] for u in sorted(set(claim_uids))]
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            yield

    def prepare_pod(
        self, namespace: str, pod_uid: str, claim_objs: list[dict[str, Any]]
    ) -> dict[str, list[PreparedDevice]]:
        """Prepare the pod's claims that are not prepared yet: one call per driver, batched.

        Returns the devices of every claim of the pod by claim UID: the drivers' answers for
        the claims prepared now, the recorded ones for claims already prepared for another pod.
        PrepareError (or PluginError) names every claim and driver that failed; claims that were
        prepared stay prepared.
        """
        by_uid = {c["metadata"]["uid"]: c for c in claim_objs}
        # for every claim before any call, as the kubelet makes every claim's info first
        skipped = {u: skipops.driver_skips(c, self.optional_node_operations) for u, c in by_uid.items()}
        with self._locked(list(by_uid)):
            by_driver: dict[str, list[ClaimRef]] = defaultdict(list)
            devices: dict[str, list[PreparedDevice]] = {}
            todo: list[str] = []
            for cuid, claim in by_uid.items():
                drivers = claims.claim_drivers(claim)
                info = self.checkpoint.get(cuid)
                if cuid in self._prepared and info is not None:
                    self.checkpoint.add_pod(cuid, pod_uid)
                    devices[cuid] = list(info.devices)
                    continue
                if info is None:
                    name = claim["metadata"]["name"]
                    info = ClaimInfo(cuid, namespace, name, drivers, [], {pod_uid}, skipped[cuid])
                    self.checkpoint.put(info)
                else:
                    self.checkpoint.add_pod(cuid, pod_uid)
                devices[cuid] = []
                todo.append(cuid)
                ref = ClaimRef(namespace, cuid, claim["metadata"]["name"])
                for d in drivers:
                    if self._skipped(info, d, skipops.PREPARE):
                        continue  # not even the plugin is looked up (kubelet manager.go prepareResources)
                    by_driver[d].append(ref)
            failed: set[str] = set()
            errors: list[str] = []
            for driver, refs in sorted(by_driver.items()):
                try:
                    answer = self.plugins.client(driver).prepare(refs)
                except PluginError as e:
                    errors.append(str(e))
                    failed.update(r.uid for r in refs)
                    continue
                for cuid, devs in answer.items():
                    devices[cuid].extend(devs)
            for cuid in todo:
                if cuid in failed:
                    continue
                info = self.checkpoint.get(cuid)
                assert info is not None
                info.devices = devices[cuid]
                self.checkpoint.put(info)
                self._prepared.add(cuid)
                log.info(
                    "claim prepared", extra={"node": self.node, "claim_uid": cuid, "drivers": info.drivers}
                )
            if errors:
                raise PrepareError("; ".join(errors))
            return devices

    def release_pod(self, pod_uid: str, holds: Callable[[str], bool]) -> None:
        """Drop ``pod_uid`` from its claims; unprepare those no other pod (``holds(uid)``) still uses.

        PrepareError when an unprepare failed; those claims keep the pod and are tried again.
        """
        mine = [info.uid for info in self.checkpoint.claims() if pod_uid in info.pods]
        if not mine:
            return
        with self._locked(mine):
            by_driver: dict[str, list[ClaimRef]] = defaultdict(list)
            todo: list[str] = []
            for cuid in mine:
                info = self.checkpoint.get(cuid)
                if info is None:
                    continue
                if any(p != pod_uid and holds(p) for p in info.pods):
                    self.checkpoint.remove_pod(cuid, pod_uid)
                    continue
                todo.append(cuid)
                for d in info.drivers:
                    if not self._skipped(info, d, skipops.UNPREPARE):
                        by_driver[d].append(ClaimRef(info.namespace, cuid, info.name))
            failed, errors = self._unprepare(by_driver)
            for cuid in todo:
                if cuid not in failed:
                    self._forget(cuid)
                    log.info("claim unprepared", extra={"node": self.node, "claim_uid": cuid})
            if errors:
                raise PrepareError("; ".join(errors))

    def abandon_pod(self, pod_uid: str) -> None:
        """Drop ``pod_uid`` from every claim without unpreparing (the orphan sweep takes over)."""
        for info in self.checkpoint.claims():
            self.checkpoint.remove_pod(info.uid, pod_uid)

    def sweep(self, live: set[str]) -> None:
        """Unprepare claims none of whose pods is in ``live`` (gone while the agent was down)."""
        for info in self.checkpoint.claims():
            if info.pods & live:
                continue
            with self._locked([info.uid]):
                fresh = self.checkpoint.get(info.uid)
                if fresh is None or fresh.pods & live:
                    continue
                calls = [d for d in fresh.drivers if not self._skipped(fresh, d, skipops.UNPREPARE)]
                if not all(self.plugins.registered(d) for d in calls):
                    continue
                ref = ClaimRef(fresh.namespace, fresh.uid, fresh.name)
                failed, errors = self._unprepare({d: [ref] for d in calls})
                if failed:
                    log.warning(
                        "orphan unprepare failed", extra={"claim_uid": fresh.uid, "error": "; ".join(errors)}
                    )
                    continue
                self._forget(fresh.uid)
                log.info("orphaned claim unprepared", extra={"node": self.node, "claim_uid": fresh.uid})

    def _skipped(self, info: ClaimInfo, driver: str, op: str) -> bool:
        """Whether ``op`` is left out for ``driver`` of the claim, logged (the kubelet counts it in
        ``dra_node_prepare_skips_total`` / ``dra_node_unprepare_skips_total``)."""
        if not skipops.skips(info.skips.get(driver, ()), op):
            return False
        log.info(
            "node operation skipped",
            extra={"node": self.node, "claim_uid": info.uid, "driver": driver, "operation": op},
        )
        return True

    def _forget(self, cuid: str) -> None:
        self.checkpoint.delete(cuid)
        with self._lock:
            self._prepared.discard(cuid)
            # the claim's lock stays: a thread may be waiting on it, and a fresh lock for the
            # same UID would let a third caller in beside that one

    def _unprepare(self, by_driver: dict[str, list[ClaimRef]]) -> tuple[set[str], list[str]]:
        failed: set[str] = set()
        errors: list[str] = []
        for driver, refs in sorted(by_driver.items()):
            try:
                self.plugins.client(driver).unprepare(refs)
            except PluginError as e:
                errors.append(str(e))
                failed.update(r.uid for r in refs)
        return failed, errors
