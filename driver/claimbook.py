"""The claims this driver holds: the checkpoint in memory, saved before it changes, and a lock per claim.

What memory says is always what a restart would read: :meth:`ClaimBook.commit` writes the file
first and changes memory only once the write has succeeded. :meth:`ClaimBook.holding` serialises
calls for the same claims (taken in UID order, so that batches never deadlock); :attr:`ClaimBook.lock`
guards the checkpoint and whatever must not change while a decision is made on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager

from driver.checkpoint import Checkpoint, CheckpointStore, ClaimRecord
from driver.planning import ClaimRef

__all__ = ["ClaimBook"]


class ClaimBook:
    """The checkpointed claims of one driver instance, with the locks that keep them consistent."""

    def __init__(self, store: CheckpointStore, boot_id: str, *, forget: bool = False) -> None:
        self.store = store
        """Where the checkpoint is saved."""
        self._checkpoint = Checkpoint() if forget else store.load_or_set_aside()
        self.rebooted = self._checkpoint.boot_id != boot_id
        """Whether the checkpoint was written before the node last booted (until restore clears it)."""
        self._checkpoint.boot_id = boot_id  # every save from now on is of this boot
        self.lock = threading.RLock()  # commit takes it, also inside the conflict check
        """Guards the checkpoint; held across a decision and the commit that follows it."""
        self._claim_locks: dict[str, tuple[threading.Lock, int]] = {}
        """Claim UID -> (lock, holders and waiters)."""
        self._claim_locks_guard = threading.Lock()
        self.leaked: set[str] = set()
        """Devices unprepare left marked in use (only with ``keep-device-after-unprepare``)."""

    def get(self, uid: str) -> ClaimRecord | None:
        """The record of claim ``uid``, or None."""
        with self.lock:
            return self._checkpoint.claims.get(uid)

    def claims(self) -> dict[str, ClaimRecord]:
        """A copy of the records by claim UID."""
        with self.lock:
            return dict(self._checkpoint.claims)

    def locked_claims(self) -> set[str]:
        """The UIDs of the claims whose lock someone holds or waits for."""
        with self._claim_locks_guard:
            return set(self._claim_locks)

    def commit(self, changes: Mapping[str, ClaimRecord | None], *, always: bool = False) -> None:
        """Write the checkpoint with ``changes`` (None drops a claim), then apply them in memory.

        A failed write (``CheckpointError``) leaves memory as it was: what memory says is
        always what a restart would read.
        """
        if not changes and not always:
            return
        with self.lock:
            claims = dict(self._checkpoint.claims)
            for uid, record in changes.items():
                if record is None:
                    claims.pop(uid, None)
                else:
                    claims[uid] = record
            self.store.save(Checkpoint(boot_id=self._checkpoint.boot_id, claims=claims))
            self._checkpoint.claims = claims

    @contextmanager
    def holding(self, refs: Iterable[ClaimRef]) -> Iterator[None]:
        """Hold the claim lock of each ref, taken in UID order so that batches never deadlock."""
        with ExitStack() as stack:
            for uid in sorted({ref.uid for ref in refs}):
                stack.enter_context(self._claim_lock(uid))
            yield

    @contextmanager
    def _claim_lock(self, uid: str) -> Iterator[None]:
        """Serialise calls for one claim; the lock is dropped when nobody holds or waits for it."""
        with self._claim_locks_guard:
            lock, users = self._claim_locks.get(uid, (threading.Lock(), 0))
            self._claim_locks[uid] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._claim_locks_guard:
                lock, users = self._claim_locks[uid]
                if users == 1:
                    del self._claim_locks[uid]
                else:
                    self._claim_locks[uid] = (lock, users - 1)
