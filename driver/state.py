"""Prepare and unprepare: the driver's state machine (the plugin's side of the DRA protocol).

``DeviceState.prepare_batch`` turns the allocated ResourceClaims of one kubelet call into CDI
devices:

1. an already completed claim is answered from the checkpoint (idempotent, no API call), its
   CDI spec and partitions made again if they have gone;
2. the claim is read and planned (``driver.planning``): pool, devices, opaque configs;
3. a device another claim holds (or hardware it uses: a whole GPU and its partitions) is
   refused unless both allow sharing (``driver.conflicts``);
4. checkpoint ``PrepareStarted`` (one write for the batch) -> MIG partitions created ->
   device-info files and CDI spec written (``driver.materialize``) -> checkpoint
   ``PrepareCompleted`` (one write);
5. the claims' ``status.devices`` entries written (``driver.devicestatus``; a failure is only
   logged).

Unprepare records ``UnprepareStarted`` before it destroys anything, then removes the CDI spec,
files and partitions, then drops the claims (one write each for the batch), then removes the
claims' ``status.devices`` entries. The checkpoint in
memory changes only once the file has: a failed write leaves both as they were, and what was
done for the claims is undone. Failures raise (or, for a batch, answer) ``PrepareError`` naming
claim, device and reason. ``restore`` runs at start (``driver.recovery``).

Thread safety: one lock per claim UID serialises calls for the same claim (a batch takes its
claims' locks in UID order); one state lock guards the checkpoint and the conflict check. API
reads and NVML work run outside the state lock, so calls for different claims run in parallel;
destroying a partition is the exception, since whether another claim still shares it must not
change meanwhile. Device status is written under the claim locks too, so a claim's entries are
removed after they were written, never before.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence

from driver import devnodes, recovery
from driver._files import private_dir
from driver.cdi import SpecStore
from driver.checkpoint import (
    UNPREPARE_STARTED,
    CheckpointStore,
    ClaimRecord,
    PreparedDevice,
    read_boot_id,
)
from driver.claimbook import ClaimBook
from driver.claims import ClaimSource
from driver.conflicts import partition_holders
from driver.consumers import FirstPodWatch, PodSource
from driver.devicestatus import DeviceStatusWriter
from driver.errors import CheckpointError, DriverError, PrepareError
from driver.inventory import Inventory
from driver.materialize import Materializer, NvmlPartitioner, Partitioner
from driver.planning import ClaimRef
from driver.preparing import Outcome, Preparation
from driver.settings import Settings

__all__ = ["ClaimRef", "DeviceState", "Outcome", "Partitioner", "StateBreakage"]

log = logging.getLogger(__name__)


def _kill_self_at(points: frozenset[str]) -> Callable[[str], None]:
    def reach(step: str) -> None:
        if step in points:
            log.warning("killing the driver on purpose (--testing-crash-at)", extra={"step": step})
            os.kill(os.getpid(), signal.SIGKILL)

    return reach


@dataclasses.dataclass(frozen=True)
class StateBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change what the
    checkpoint and unprepare keep; a real driver has none."""

    trust_corrupt_checkpoint: bool = False
    forget_checkpoint: bool = False
    unprepare_with_first_pod: bool = False
    fail_unknown_unprepare: bool = False
    keep_device_after_unprepare: bool = False
    keep_deleted_claims: bool = False
    leak_restored_claims: bool = False

    @classmethod
    def of(cls, settings: Settings) -> StateBreakage:
        return cls(
            trust_corrupt_checkpoint=settings.breaks("trust-corrupt-checkpoint"),
            forget_checkpoint=settings.breaks("forget-checkpoint"),
            unprepare_with_first_pod=settings.breaks("unprepare-with-first-pod"),
            fail_unknown_unprepare=settings.breaks("fail-unknown-unprepare"),
            keep_device_after_unprepare=settings.breaks("keep-device-after-unprepare"),
            keep_deleted_claims=settings.breaks("keep-deleted-claims"),
            leak_restored_claims=settings.breaks("leak-restored-claims"),
        )


class DeviceState:
    """Prepared claims of one driver instance, their CDI specs and checkpoint."""

    def __init__(
        self,
        settings: Settings,
        inventory: Inventory,
        claims: ClaimSource,
        *,
        partitioner: Partitioner | None = None,
        boot_id: str | None = None,
        mig_minors: Callable[[], Mapping[str, int]] | None = None,
        on_step: Callable[[str], None] | None = None,
        pods: PodSource | None = None,
        specs: SpecStore | None = None,
    ) -> None:
        self.settings = settings
        self._broken = broken = StateBreakage.of(settings)
        self.inventory = inventory
        self.claims = claims
        self.partitioner: Partitioner = partitioner or NvmlPartitioner()
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.nvml = settings.backend.kind == "nvml"
        self._reach = on_step or _kill_self_at(settings.crash_points)
        """Called after each step of ``driver.breakage.CRASH_POINTS`` (crash tests kill the process there)."""
        self.specs = specs or SpecStore(settings.kubelet.cdi_dir, settings.driver_name, nvml=self.nvml)
        """The claims' CDI specs (``driver.breaking_cdi`` wraps it while a switch is on)."""
        self.files = Materializer(
            settings,
            inventory,
            self.specs,
            self.partitioner,
            mig_minors=mig_minors or devnodes.read_mig_minors,
            reach=self._reach,
        )
        private_dir(settings.kubelet.plugin_dir)
        private_dir(settings.claims_dir)
        self.store = CheckpointStore(settings.checkpoint_path, verify=not broken.trust_corrupt_checkpoint)
        self.book = ClaimBook(self.store, self.boot_id, forget=broken.forget_checkpoint)
        """The checkpointed claims and their locks."""
        self._first_pods: FirstPodWatch | None = None
        """With ``unprepare-with-first-pod`` only (``driver.consumers``)."""
        if pods is not None and broken.unprepare_with_first_pod:
            self._first_pods = FirstPodWatch(pods, self._drop_files)
        self._preparation = Preparation(
            self.book,
            self.files,
            settings,
            inventory,
            claims,
            undo=self._undo,
            reach=self._reach,
            pods=pods,
            first_pods=self._first_pods,
        )
        self.status = DeviceStatusWriter(claims, settings, inventory)
        """Writes and removes the claims' ``status.devices`` entries."""
        self._restored: set[str] = set()
        """Claims restore() found prepared (only kept with ``leak-restored-claims``)."""

    # --- public API ---------------------------------------------------------------------------

    def prepared(self) -> dict[str, ClaimRecord]:
        """A copy of the known claims by UID (for tests and introspection)."""
        return self.book.claims()

    def prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        """Prepare one claim; idempotent. Raises ``PrepareError`` naming claim, device and reason."""
        outcome = self.prepare_batch([ref])[ref.uid]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def unprepare(self, ref: ClaimRef) -> None:
        """Undo a prepare; an unknown claim succeeds. Raises ``PrepareError`` when undoing fails."""
        error = self.unprepare_batch([ref])[ref.uid]
        if error is not None:
            raise error

    def prepare_batch(self, refs: Sequence[ClaimRef]) -> dict[str, Outcome]:
        """Prepare the claims of one kubelet call; per claim, its devices or the exception why not.

        The checkpoint is written twice for the whole batch (started, completed), not per claim.
        ``PrepareError``s are the claims' own failures; anything else is a bug of the driver.
        """
        out: dict[str, Outcome] = {}
        refs = self._checked(refs, out)
        with self.book.holding(refs):
            prepared = self._preparation.batch(refs, out)
            self.status.prepared(prepared)
        return out

    def unprepare_batch(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareError | None]:
        """Unprepare the claims of one kubelet call; per claim, None or the ``PrepareError`` why not.

        ``UnprepareStarted`` is written for the batch before anything is destroyed, and the
        claims are dropped in one more write once their spec, files and partitions are gone.
        """
        out: dict[str, Outcome] = {}
        refs = self._checked(refs, out)
        done: dict[str, PrepareError | None] = {uid: self._as_prepare_error(e) for uid, e in out.items()}
        with self.book.holding(refs):
            known = {r.uid: self.book.get(r.uid) for r in refs}
            intents: dict[str, ClaimRecord] = {}
            for ref in refs:
                record = known[ref.uid]
                if record is None:
                    if self._broken.fail_unknown_unprepare:
                        done[ref.uid] = PrepareError(f"claim {ref}: not prepared by this driver")
                        continue
                    try:
                        self.files.remove_files(ref.uid)
                        done[ref.uid] = None
                    except PrepareError as e:
                        done[ref.uid] = PrepareError(f"claim {ref}: {e}")
                    continue
                intents[ref.uid] = dataclasses.replace(record, state=UNPREPARE_STARTED)
            try:
                self.book.commit(intents)
            except CheckpointError as e:
                done.update({uid: PrepareError(f"claim {intents[uid].ref}: {e}") for uid in intents})
                return done
            if intents:
                self._reach("unprepare-started")
            gone: list[ClaimRecord] = []
            for record in intents.values():
                try:
                    self._undo(record)
                    gone.append(record)
                except PrepareError as e:
                    done[record.uid] = e
            if gone:
                self._reach("unprepare-undone")
            try:
                self.book.commit({record.uid: None for record in gone})
            except CheckpointError as e:
                done.update({r.uid: PrepareError(f"claim {r.ref}: {e}") for r in gone})
                return done
            for record in gone:
                done[record.uid] = None
                if self._first_pods is not None:
                    self._first_pods.forget(record.uid)
                if self._broken.keep_device_after_unprepare or record.uid in self._restored:
                    with self.book.lock:
                        self.book.leaked.update(d.device for d in record.devices)
                log.info(
                    "claim unprepared",
                    extra={"claim": record.uid, "namespace": record.namespace, "claim_name": record.name},
                )
            # only claims this driver held have entries: an unknown claim costs no API call
            self.status.unprepared([ClaimRef.of(record) for record in gone])
        return done

    def restore(self) -> None:
        """Start-up recovery: finish interrupted work, unprepare claims deleted while the driver was
        down, rebuild what completed claims lost, remove orphans.

        Raises ``CheckpointError`` only when the checkpoint cannot be written; everything else
        is logged and left for the kubelet's next call (or the next start) to retry.
        """
        with self.book.lock:
            records = list(self.book.claims().values())
            rebooted = self.book.rebooted
        keep = self._broken.keep_deleted_claims
        gone = {} if keep else recovery.deleted_claims(records, self.claims)
        undone, completed = recovery.recover(
            records, rebooted=rebooted, undo=self._undo, files=self.files, gone=gone
        )
        if self._broken.leak_restored_claims:
            self._restored.update(completed)
        self.book.commit(dict.fromkeys(undone), always=True)
        with self.book.lock:
            self.book.rebooted = False
            claims = self.book.claims()
        recovery.remove_orphans(self.files, claims)

    def stop(self) -> None:
        """Stop background work (only a switch starts any)."""
        if self._first_pods is not None:
            self._first_pods.stop()

    # --- steps --------------------------------------------------------------------------------

    def _checked(self, refs: Sequence[ClaimRef], out: dict[str, Outcome]) -> list[ClaimRef]:
        """The refs with a valid UID, each once; the others get their error in ``out``."""
        valid: dict[str, ClaimRef] = {}
        for ref in refs:
            try:
                ref.check()
            except PrepareError as e:
                out[ref.uid] = e
                continue
            valid.setdefault(ref.uid, ref)
        return list(valid.values())

    @staticmethod
    def _as_prepare_error(error: Outcome) -> PrepareError | None:
        return error if isinstance(error, PrepareError) else None

    def _drop_files(self, uid: str) -> None:
        """``unprepare-with-first-pod``: remove a claim's CDI spec and files though it stays prepared."""
        try:
            self.files.remove_files(uid)
        except PrepareError as e:
            log.error("cannot remove the claim's files", extra={"claim": uid, "error": str(e)})

    def _undo(self, record: ClaimRecord) -> None:
        """Remove a claim's CDI spec, files and partitions; each step tolerates 'already gone'.

        Every step is tried; ``PrepareError`` names the claim and each path or device that failed.
        """
        problems = []
        try:
            self.files.remove_files(record.uid)
        except PrepareError as e:
            problems.append(str(e))
        for device in record.devices:
            info = self.inventory.get(device.device)
            if info is None or info.kind != "partition":
                continue
            # Under the state lock: a claim that shares the partition cannot be added between
            # the check and the destroy (it would reuse the instance about to go). Claims being
            # unprepared do not keep it.
            with self.book.lock:
                holders = partition_holders(record, device.device, self.book.claims().values())
                if holders:
                    log.info(
                        "partition kept: other claims use it",
                        extra={"claim": record.uid, "device": device.device, "holders": holders},
                    )
                else:
                    try:
                        self.partitioner.unprepare(info)
                    except DriverError as e:
                        problems.append(f"device {device.device}: {e}")
                        continue
            self._reach("unprepare-partition")
            device.partition_uuid = None
        if problems:
            raise PrepareError(f"claim {record.ref}: " + "; ".join(problems))
