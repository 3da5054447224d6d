"""Claim preparation: a batch of claims planned, checked against the others, made, and recorded.

The checkpoint is written twice for the whole batch: ``PrepareStarted`` for the claims that pass
the conflict check (``driver.conflicts``), then ``PrepareCompleted`` once their partitions,
device-info files and CDI spec are made (``driver.materialize``). A claim already completed is
answered from the checkpoint (made whole again if something went); a claim whose making fails
is undone. ``PrepareError``s are the claims' own failures; anything else is a bug of the driver.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from collections.abc import Callable, Sequence

from driver.checkpoint import PREPARE_COMPLETED, ClaimRecord, PreparedDevice
from driver.claimbook import ClaimBook
from driver.claims import ClaimSource
from driver.conflicts import check_conflicts
from driver.consumers import FirstPodWatch, PodSource, referenced
from driver.errors import CheckpointError, DeviceConflict, DriverError, PrepareError
from driver.inventory import Inventory
from driver.materialize import Materializer, os_problem
from driver.planning import ClaimRef, plan
from driver.settings import Settings

__all__ = ["Outcome", "Preparation", "PreparingBreakage"]

log = logging.getLogger(__name__)

Outcome = list[PreparedDevice] | Exception
"""What a batch answers per claim: the prepared devices, or why not."""


@dataclasses.dataclass(frozen=True)
class PreparingBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change how claims are
    prepared; a real driver has none."""

    non_idempotent_prepare: bool = False
    claims_by_name: bool = False
    stale_claim_state: bool = False
    skip_unreferenced_claims: bool = False
    refuse_admin_access: bool = False

    @classmethod
    def of(cls, settings: Settings) -> PreparingBreakage:
        return cls(
            non_idempotent_prepare=settings.breaks("non-idempotent-prepare"),
            claims_by_name=settings.breaks("claims-by-name"),
            stale_claim_state=settings.breaks("stale-claim-state"),
            skip_unreferenced_claims=settings.breaks("skip-unreferenced-claims"),
            refuse_admin_access=settings.breaks("refuse-admin-access"),
        )


class Preparation:
    """Prepares batches of claims into the book, with the files, partitions and specs they need."""

    def __init__(
        self,
        book: ClaimBook,
        files: Materializer,
        settings: Settings,
        inventory: Inventory,
        claims: ClaimSource,
        *,
        undo: Callable[[ClaimRecord], None],
        reach: Callable[[str], None],
        pods: PodSource | None = None,
        first_pods: FirstPodWatch | None = None,
    ) -> None:
        self.book = book
        self.files = files
        self.settings = settings
        self._broken = PreparingBreakage.of(settings)
        self.inventory = inventory
        self.claims = claims
        self._undo = undo
        """Undoes one claim's files and partitions (``PrepareError`` when it cannot)."""
        self._reach = reach
        self._pods = pods
        """Read only by the switches of ``driver.consumers``."""
        self._first_pods = first_pods
        """Set only with ``unprepare-with-first-pod``."""
        self._prepared_before: set[str] = set()
        """UIDs of claims this process prepared (``stale-claim-state``)."""
        self._failed_stale: set[str] = set()
        """UIDs whose re-preparation already failed once (``stale-claim-state``)."""

    def batch(self, refs: Sequence[ClaimRef], out: dict[str, Outcome]) -> list[ClaimRecord]:
        """Prepare ``refs`` (valid, distinct, their claim locks held); each claim's answer goes to ``out``.

        Returns the claims this call prepared (not those answered from the checkpoint).
        """
        fresh: list[ClaimRecord] = []
        for ref in refs:
            try:
                answer = self._answer_prepared(ref)
                if answer is None:
                    answer = self._broken_answer(ref)
                if answer is not None:
                    out[ref.uid] = answer
                    continue
                devices, pod_claim = plan(ref, self.claims, self.settings, self.inventory)
            except Exception as e:
                out[ref.uid] = e
                continue
            fresh.append(
                ClaimRecord(
                    uid=ref.uid,
                    namespace=ref.namespace,
                    name=ref.name,
                    devices=devices,
                    pod_claim_name=pod_claim,
                )
            )
        started = self._start(fresh, out)
        made: list[ClaimRecord] = []
        undone: list[ClaimRecord] = []
        for record in started:
            try:
                self.files.make(record, recreate_partitions=True)
                made.append(record)
            except Exception as e:
                out[record.uid] = self._failed(record, e, undone)
        if started:
            self._reach("prepare-materialized")
        return self._complete(made, undone, out)

    def _answer_prepared(self, ref: ClaimRef) -> list[PreparedDevice] | None:
        """The devices of a claim already prepared (made whole again if needed), or None.

        A claim left half done (a failed attempt, an unprepare cut short) is undone first.
        """
        record = self.book.get(ref.uid) or self._same_name(ref)
        if record is None:
            return None
        if record.state != PREPARE_COMPLETED:
            self._undo(record)
            self.book.commit({record.uid: None})
            return None
        if self._broken.non_idempotent_prepare:
            raise PrepareError(f"claim {ref}: already prepared")
        try:
            if not self.files.intact(record):
                fixed = copy.deepcopy(record)  # memory changes only once the file has
                self.files.make(fixed, recreate_partitions=False)
                self.book.commit({record.uid: fixed})  # a partition made again has a new UUID
                record = fixed
        except (DriverError, OSError) as e:
            raise PrepareError(f"claim {ref}: cannot make its CDI spec and devices again: {e}") from e
        return list(record.devices)

    def _same_name(self, ref: ClaimRef) -> ClaimRecord | None:
        """``claims-by-name`` only: a completed claim of the same namespace and name, whatever its UID."""
        if not self._broken.claims_by_name:
            return None
        same = (r for r in self.book.claims().values() if (r.namespace, r.name) == (ref.namespace, ref.name))
        return next((r for r in same if r.state == PREPARE_COMPLETED), None)

    def _broken_answer(self, ref: ClaimRef) -> list[PreparedDevice] | None:
        """What the switches ``stale-claim-state`` and ``skip-unreferenced-claims`` answer instead of
        preparing (None: prepare as usual)."""
        again = ref.uid in self._prepared_before and ref.uid not in self._failed_stale
        if again and self._broken.stale_claim_state:
            self._failed_stale.add(ref.uid)
            raise PrepareError(f"claim {ref}: stale state of its last preparation (stale-claim-state)")
        if self._broken.skip_unreferenced_claims and self._pods is not None:
            claim = self.claims.get_claim(ref.namespace, ref.name)
            if claim is not None and not referenced(claim, self._pods):
                log.warning("no container references the claim: not prepared (skip-unreferenced-claims)",
                            extra={"claim": ref.uid})  # fmt: skip
                return []
        return None

    def _prepared(self, ref: ClaimRef) -> None:
        """Note a claim just prepared, for the switches that look back at it."""
        self._prepared_before.add(ref.uid)
        self._failed_stale.discard(ref.uid)
        if self._first_pods is not None:
            claim = self.claims.get_claim(ref.namespace, ref.name)
            if claim is not None:
                self._first_pods.watch(claim)

    def _start(self, records: list[ClaimRecord], out: dict[str, Outcome]) -> list[ClaimRecord]:
        """Check conflicts and record ``PrepareStarted`` for the claims that pass (one write)."""
        accepted: list[ClaimRecord] = []
        admin_exempt = not self._broken.refuse_admin_access
        with self.book.lock:
            for record in records:
                ref = ClaimRef.of(record)
                try:
                    others = [*self.book.claims().values(), *accepted]
                    check_conflicts(
                        ref,
                        record.devices,
                        others,
                        self.inventory,
                        admin_exempt=admin_exempt,
                        leaked=self.book.leaked,
                    )
                except DeviceConflict as e:
                    out[record.uid] = e
                    continue
                accepted.append(record)
            try:
                self.book.commit({record.uid: record for record in accepted})
            except CheckpointError as e:
                out.update({r.uid: PrepareError(f"claim {r.ref}: {e}") for r in accepted})
                return []
        if accepted:
            self._reach("prepare-started")
        return accepted

    def _failed(self, record: ClaimRecord, error: Exception, undone: list[ClaimRecord]) -> PrepareError:
        """Undo a claim whose materializing failed; the error to answer."""
        log.error("prepare failed; undoing", extra={"claim": record.uid, "error": str(error)})
        try:
            self._undo(record)
            undone.append(record)
        except PrepareError as cleanup:
            log.error("undoing a failed prepare failed", extra={"claim": record.uid, "error": str(cleanup)})
        if isinstance(error, PrepareError):
            return error
        if isinstance(error, OSError):
            return PrepareError(f"claim {record.ref}: {os_problem('cannot write', error)}")
        return PrepareError(f"claim {record.ref}: {error}")

    def _complete(
        self, made: list[ClaimRecord], undone: list[ClaimRecord], out: dict[str, Outcome]
    ) -> list[ClaimRecord]:
        """Record ``PrepareCompleted`` for ``made`` and drop ``undone`` (one write); the completed."""
        changes: dict[str, ClaimRecord | None] = {r.uid: None for r in undone}
        changes.update({r.uid: dataclasses.replace(r, state=PREPARE_COMPLETED) for r in made})
        try:
            self.book.commit(changes)
        except CheckpointError as e:
            # memory and file still say PrepareStarted: undo the work, as for any failure
            for record in made:
                out[record.uid] = self._failed(record, PrepareError(f"claim {record.ref}: {e}"), [])
            with contextlib.suppress(CheckpointError):  # else PrepareStarted: undone again later
                self.book.commit({r.uid: None for r in made})
            return []
        self._reach("prepare-completed")
        for record in made:
            out[record.uid] = list(record.devices)
            self._prepared(ClaimRef.of(record))
            log.info(
                "claim prepared",
                extra={
                    "claim": record.uid,
                    "namespace": record.namespace,
                    "claim_name": record.name,
                    "devices": [d.device for d in record.devices],
                },
            )
        return made
