"""Prepare and unprepare: the driver's state machine (the plugin's side of the DRA protocol).

``DeviceState.prepare_batch`` turns the allocated ResourceClaims of one kubelet call into CDI
devices:

1. an already completed claim is answered from the checkpoint (idempotent, no API call), its
   CDI spec and partitions made again if they have gone;
2. the claim is read and planned (``driver.planning``): pool, devices, opaque configs;
3. a device another claim holds (or hardware it uses: a whole GPU and its partitions) is
   refused unless both allow sharing;
4. checkpoint ``PrepareStarted`` (one write for the batch) -> MIG partitions created ->
   device-info files and CDI spec written -> checkpoint ``PrepareCompleted`` (one write).

Unprepare records ``UnprepareStarted`` before it destroys anything, then removes the CDI spec,
files and partitions, then drops the claims (one write each for the batch). The checkpoint in
memory changes only once the file has: a failed write leaves both as they were, and what was
done for the claims is undone. Failures raise (or, for a batch, answer) ``PrepareError`` naming
claim, device and reason.

``restore`` runs at start: it finishes what a crash interrupted (``PrepareStarted`` and
``UnprepareStarted`` claims are undone), rebuilds CDI specs (and partitions) of completed
claims that lost them (a reboot, a tmpfs), and removes what no claim owns: CDI specs and info
dirs of this driver, MIG partitions of its partitionable GPUs, temp files of killed writes.

Thread safety: one lock per claim UID serialises calls for the same claim (a batch takes its
claims' locks in UID order); one state lock guards the checkpoint and the conflict check. API
reads and NVML work run outside the state lock, so calls for different claims run in parallel;
destroying a partition is the exception, since whether another claim still shares it must not
change meanwhile.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Protocol

from driver import devnodes, partitions
from driver._files import atomic_write, private_dir
from driver._names import within
from driver.cdi import CDIDevice, SpecStore
from driver.checkpoint import (
    PREPARE_COMPLETED,
    UNPREPARE_STARTED,
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
    PreparedDevice,
    read_boot_id,
)
from driver.claims import ClaimSource
from driver.config import DeviceConfig
from driver.errors import CheckpointError, DeviceConflict, DriverError, PrepareError
from driver.inventory import DeviceInfo, Inventory
from driver.planning import ClaimRef, check_conflicts, plan
from driver.settings import Settings

__all__ = ["ClaimRef", "DeviceState", "Outcome", "Partitioner"]

log = logging.getLogger(__name__)

Outcome = list[PreparedDevice] | Exception
"""What a batch answers per claim: the prepared devices, or why not."""


class Partitioner(Protocol):
    """Creates and destroys MIG partitions (``driver.partitions`` in production)."""

    def prepare(self, info: DeviceInfo) -> str:
        """Create the partition; return its MIG device UUID."""
        ...

    def unprepare(self, info: DeviceInfo) -> None:
        """Destroy the partition; nothing there is success."""
        ...

    def exists(self, info: DeviceInfo) -> str | None:
        """The MIG device UUID of the partition if it exists, else None."""
        ...


class _NvmlPartitioner:
    def prepare(self, info: DeviceInfo) -> str:
        return partitions.prepare_partition(info)

    def unprepare(self, info: DeviceInfo) -> None:
        partitions.unprepare_partition(info)

    def exists(self, info: DeviceInfo) -> str | None:
        return partitions.partition_uuid(info)


def _kill_self_at(points: frozenset[str]) -> Callable[[str], None]:
    def reach(step: str) -> None:
        if step in points:
            log.warning("killing the driver on purpose (--testing-crash-at)", extra={"step": step})
            os.kill(os.getpid(), signal.SIGKILL)

    return reach


def _os_problem(what: str, error: OSError) -> str:
    return f"{what} {error.filename or ''}: {error.strerror or error}".replace("  ", " ")


def _remove_tree(path: Path) -> None:
    """``rm -r``; a missing path is fine, any other failure raises ``OSError`` naming the path."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except NotADirectoryError:  # a file where the dir should be, or a file above it
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            path.unlink()


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
    ) -> None:
        self.settings = settings
        self.inventory = inventory
        self.claims = claims
        self.partitioner: Partitioner = partitioner or _NvmlPartitioner()
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.nvml = settings.backend.kind == "nvml"
        self._mig_minors = mig_minors or devnodes.read_mig_minors
        self._reach = on_step or _kill_self_at(settings.crash_points)
        """Called after each step of ``driver.breakage.CRASH_POINTS`` (crash tests kill the process there)."""
        self.specs = SpecStore(
            settings.kubelet.cdi_dir,
            settings.driver_name,
            nvml=self.nvml,
            broken=settings.breaks("invalid-cdi-spec"),
        )
        private_dir(settings.kubelet.plugin_dir)
        private_dir(settings.claims_dir)
        self.store = CheckpointStore(settings.checkpoint_path)
        forget = settings.breaks("forget-checkpoint")
        self._checkpoint = Checkpoint() if forget else self.store.load_or_set_aside()
        self._rebooted = self._checkpoint.boot_id != self.boot_id
        self._checkpoint.boot_id = self.boot_id  # every save from now on is of this boot
        self._lock = threading.RLock()  # _commit takes it, also inside the conflict check
        self._claim_locks: dict[str, tuple[threading.Lock, int]] = {}
        """Claim UID -> (lock, holders and waiters)."""
        self._claim_locks_guard = threading.Lock()
        self._leaked: set[str] = set()
        """Devices unprepare left marked in use (only with ``keep-device-after-unprepare``)."""
        self._restored: set[str] = set()
        """Claims restore() found prepared (only kept with ``leak-restored-claims``)."""

    # --- public API ---------------------------------------------------------------------------

    def prepared(self) -> dict[str, ClaimRecord]:
        """A copy of the known claims by UID (for tests and introspection)."""
        with self._lock:
            return dict(self._checkpoint.claims)

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
        with self._claim_locks_of(refs):
            fresh: list[ClaimRecord] = []
            for ref in refs:
                try:
                    answer = self._answer_prepared(ref)
                    if answer is not None:
                        out[ref.uid] = answer
                        continue
                    devices = plan(ref, self.claims, self.settings, self.inventory)
                except Exception as e:
                    out[ref.uid] = e
                    continue
                fresh.append(
                    ClaimRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, devices=devices)
                )
            started = self._start(fresh, out)
            made: list[ClaimRecord] = []
            undone: list[ClaimRecord] = []
            for record in started:
                try:
                    self._materialize(record, recreate_partitions=True)
                    made.append(record)
                except Exception as e:
                    out[record.uid] = self._failed(record, e, undone)
            if started:
                self._reach("prepare-materialized")
            self._complete(made, undone, out)
        return out

    def unprepare_batch(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareError | None]:
        """Unprepare the claims of one kubelet call; per claim, None or the ``PrepareError`` why not.

        ``UnprepareStarted`` is written for the batch before anything is destroyed, and the
        claims are dropped in one more write once their spec, files and partitions are gone.
        """
        out: dict[str, Outcome] = {}
        refs = self._checked(refs, out)
        done: dict[str, PrepareError | None] = {uid: self._as_prepare_error(e) for uid, e in out.items()}
        with self._claim_locks_of(refs):
            with self._lock:
                known = {r.uid: self._checkpoint.claims.get(r.uid) for r in refs}
            intents: dict[str, ClaimRecord] = {}
            for ref in refs:
                record = known[ref.uid]
                if record is None:
                    try:
                        self._remove_files(ref.uid)
                        done[ref.uid] = None
                    except PrepareError as e:
                        done[ref.uid] = PrepareError(f"claim {ref}: {e}")
                    continue
                intents[ref.uid] = dataclasses.replace(record, state=UNPREPARE_STARTED)
            try:
                self._commit(intents)
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
                self._commit({record.uid: None for record in gone})
            except CheckpointError as e:
                done.update({r.uid: PrepareError(f"claim {r.ref}: {e}") for r in gone})
                return done
            for record in gone:
                done[record.uid] = None
                if self.settings.breaks("keep-device-after-unprepare") or record.uid in self._restored:
                    with self._lock:
                        self._leaked.update(d.device for d in record.devices)
                log.info(
                    "claim unprepared",
                    extra={"claim": record.uid, "namespace": record.namespace, "claim_name": record.name},
                )
        return done

    def restore(self) -> None:
        """Start-up recovery: finish interrupted work, rebuild what completed claims lost, remove orphans.

        Raises ``CheckpointError`` only when the checkpoint cannot be written; everything else
        is logged and left for the kubelet's next call (or the next start) to retry.
        """
        with self._lock:
            records = list(self._checkpoint.claims.values())
            rebooted = self._rebooted
        dropped: dict[str, ClaimRecord | None] = {}
        for record in records:
            ctx = {"claim": record.uid, "namespace": record.namespace, "claim_name": record.name}
            if record.state != PREPARE_COMPLETED:
                log.warning(
                    "finishing a prepare or unprepare a crash cut short", extra={**ctx, "state": record.state}
                )
                try:
                    self._undo(record)
                except PrepareError as e:
                    log.error("cannot finish it; will retry", extra={**ctx, "error": str(e)})
                    continue
                dropped[record.uid] = None
                continue
            if self.settings.breaks("leak-restored-claims"):
                self._restored.add(record.uid)
            try:
                if rebooted:  # MIG instances do not survive a reboot: a later prepare remakes them
                    for device in record.devices:
                        device.partition_uuid = None
                if rebooted or not self._intact(record):
                    log.info("restoring CDI spec of a prepared claim", extra={**ctx, "rebooted": rebooted})
                    self._materialize(record, recreate_partitions=False)
            except (DriverError, OSError) as e:
                log.error("cannot restore a prepared claim", extra={**ctx, "error": str(e)})
        self._commit(dropped, always=True)
        with self._lock:
            self._rebooted = False
        self._remove_orphans()

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

    def _commit(self, changes: Mapping[str, ClaimRecord | None], *, always: bool = False) -> None:
        """Write the checkpoint with ``changes`` (None drops a claim), then apply them in memory.

        A failed write (``CheckpointError``) leaves memory as it was: what memory says is
        always what a restart would read.
        """
        if not changes and not always:
            return
        with self._lock:
            claims = dict(self._checkpoint.claims)
            for uid, record in changes.items():
                if record is None:
                    claims.pop(uid, None)
                else:
                    claims[uid] = record
            self.store.save(Checkpoint(boot_id=self._checkpoint.boot_id, claims=claims))
            self._checkpoint.claims = claims

    @contextmanager
    def _claim_locks_of(self, refs: Iterable[ClaimRef]) -> Iterator[None]:
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

    def _answer_prepared(self, ref: ClaimRef) -> list[PreparedDevice] | None:
        """The devices of a claim already prepared (made whole again if needed), or None.

        A claim left half done (a failed attempt, an unprepare cut short) is undone first.
        """
        with self._lock:
            record = self._checkpoint.claims.get(ref.uid)
        if record is None:
            return None
        if record.state != PREPARE_COMPLETED:
            self._undo(record)
            self._commit({ref.uid: None})
            return None
        if self.settings.breaks("non-idempotent-prepare"):
            raise PrepareError(f"claim {ref}: already prepared")
        try:
            if not self._intact(record):
                fixed = copy.deepcopy(record)  # memory changes only once the file has
                self._materialize(fixed, recreate_partitions=False)
                self._commit({ref.uid: fixed})  # a partition made again has a new UUID
                record = fixed
        except (DriverError, OSError) as e:
            raise PrepareError(f"claim {ref}: cannot make its CDI spec and devices again: {e}") from e
        return list(record.devices)

    def _intact(self, record: ClaimRecord) -> bool:
        """Whether a completed claim still has its CDI spec and each partition its MIG device.

        A partition found gone gets its UUID cleared, so that ``_materialize`` makes it again.
        """
        intact = self.specs.exists(record.uid)
        for device in record.devices:
            info = self.inventory.get(device.device)
            if info is None or info.kind != "partition" or not device.partition_uuid:
                continue
            if self.partitioner.exists(info) != device.partition_uuid:
                log.warning(
                    "a prepared partition is gone; making it again",
                    extra={"claim": record.uid, "device": device.device, "mig_uuid": device.partition_uuid},
                )
                device.partition_uuid = None
                intact = False
        return intact

    def _start(self, records: list[ClaimRecord], out: dict[str, Outcome]) -> list[ClaimRecord]:
        """Check conflicts and record ``PrepareStarted`` for the claims that pass (one write)."""
        accepted: list[ClaimRecord] = []
        admin_exempt = not self.settings.breaks("refuse-admin-access")
        with self._lock:
            for record in records:
                ref = ClaimRef.of(record)
                try:
                    for device in record.devices:
                        if device.device in self._leaked:
                            raise DeviceConflict(f"claim {ref}: device {device.device}: still marked in use")
                    others = [*self._checkpoint.claims.values(), *accepted]
                    check_conflicts(ref, record.devices, others, self.inventory, admin_exempt=admin_exempt)
                except DeviceConflict as e:
                    out[record.uid] = e
                    continue
                accepted.append(record)
            try:
                self._commit({record.uid: record for record in accepted})
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
            return PrepareError(f"claim {record.ref}: {_os_problem('cannot write', error)}")
        return PrepareError(f"claim {record.ref}: {error}")

    def _complete(self, made: list[ClaimRecord], undone: list[ClaimRecord], out: dict[str, Outcome]) -> None:
        """Record ``PrepareCompleted`` for ``made`` and drop ``undone`` (one write)."""
        changes: dict[str, ClaimRecord | None] = {r.uid: None for r in undone}
        changes.update({r.uid: dataclasses.replace(r, state=PREPARE_COMPLETED) for r in made})
        try:
            self._commit(changes)
        except CheckpointError as e:
            # memory and file still say PrepareStarted: undo the work, as for any failure
            for record in made:
                out[record.uid] = self._failed(record, PrepareError(f"claim {record.ref}: {e}"), [])
            with contextlib.suppress(CheckpointError):  # else PrepareStarted: undone again later
                self._commit({r.uid: None for r in made})
            return
        self._reach("prepare-completed")
        for record in made:
            out[record.uid] = list(record.devices)
            log.info(
                "claim prepared",
                extra={
                    "claim": record.uid,
                    "namespace": record.namespace,
                    "claim_name": record.name,
                    "devices": [d.device for d in record.devices],
                },
            )

    def _claim_dir(self, uid: str) -> Path:
        return within(self.settings.claims_dir, self.settings.claims_dir / uid)

    def _materialize(self, record: ClaimRecord, *, recreate_partitions: bool) -> None:
        """Create partitions (if asked), device-info files and the CDI spec of a claim."""
        cdi_devices = []
        for device in record.devices:
            info = self.inventory.get(device.device)
            if info is None:
                raise PrepareError(f"claim {record.ref}: device {device.device}: no longer on this node")
            if info.kind == "partition" and (recreate_partitions or not device.partition_uuid):
                try:
                    device.partition_uuid = self.partitioner.prepare(info)
                except DriverError as e:
                    raise PrepareError(f"claim {record.ref}: device {device.device}: {e}") from e
                device.uuid = device.partition_uuid
                self._reach("prepare-partition")
            config = device.config
            info_file = self._write_info(record, device, info, config)
            if self.settings.breaks("ignore-sharing-strategy"):
                config = None  # validated and recorded, but never reaches the container
            device.cdi_ids = [self.specs.cdi_id(record.uid, self._cdi_device_name(device))]
            cdi_devices.append(
                CDIDevice(
                    device_name=self._cdi_device_name(device),
                    uuid=device.uuid,
                    env=config.env(device.uuid) if config is not None else {},
                    info_file=info_file,
                    device_nodes=(
                        devnodes.device_nodes(info, device.partition_uuid, self._mig_minors)
                        if self.nvml
                        else ()
                    ),
                )
            )
        spec = self.specs.build(record.uid, cdi_devices)
        self.specs.write(record.uid, spec)

    @staticmethod
    def _cdi_device_name(device: PreparedDevice) -> str:
        # one claim can hold the same device twice with distinct consumable-capacity shares
        return device.device if not device.share_id else f"{device.device}-{device.share_id}"

    def _write_info(
        self, record: ClaimRecord, device: PreparedDevice, info: DeviceInfo, config: DeviceConfig | None
    ) -> Path:
        doc = {
            "claim": {"namespace": record.namespace, "name": record.name, "uid": record.uid},
            "device": device.device,
            "pool": device.pool,
            "requests": device.request_names,
            "kind": device.kind,
            "uuid": device.uuid,
            "parentUUID": info.parent_uuid,
            "index": info.index,
            "minor": info.minor,
            "shareID": device.share_id,
            "config": None if config is None else config.to_dict(),
            "env": {} if config is None else config.env(device.uuid),
        }
        claim_dir = self._claim_dir(record.uid)
        path = within(claim_dir, claim_dir / f"{self._cdi_device_name(device)}.json")
        # rebuilt with the CDI spec after a reboot: atomic, but no need to fsync
        atomic_write(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), durable=False)
        return path

    def _remove_files(self, uid: str) -> None:
        """Remove a claim's CDI spec and info dir; ``PrepareError`` naming the path otherwise."""
        problems = []
        if not self.settings.breaks("leave-cdi-on-unprepare"):
            try:
                self.specs.remove(uid)
            except OSError as e:
                problems.append(_os_problem("cannot remove CDI spec", e))
        self._reach("unprepare-spec-removed")
        try:
            _remove_tree(self._claim_dir(uid))
        except OSError as e:
            problems.append(_os_problem("cannot remove device-info files", e))
        if problems:
            raise PrepareError("; ".join(problems))

    def _undo(self, record: ClaimRecord) -> None:
        """Remove a claim's CDI spec, files and partitions; each step tolerates 'already gone'.

        Every step is tried; ``PrepareError`` names the claim and each path or device that failed.
        """
        problems = []
        try:
            self._remove_files(record.uid)
        except PrepareError as e:
            problems.append(str(e))
        for device in record.devices:
            info = self.inventory.get(device.device)
            if info is None or info.kind != "partition":
                continue
            # Under the state lock: a claim that shares the partition cannot be added between
            # the check and the destroy (it would reuse the instance about to go). Claims being
            # unprepared do not keep it.
            with self._lock:
                holders = [
                    other.ref
                    for other in self._checkpoint.claims.values()
                    if other.uid != record.uid
                    and other.state != UNPREPARE_STARTED
                    and any(d.device == device.device for d in other.devices)
                ]
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

    def _remove_orphans(self) -> None:
        """Remove what no claim owns: CDI specs and info dirs of this driver, MIG partitions of
        its partitionable GPUs, temp files of writes a crash cut short. Failures are logged."""
        with self._lock:
            claims = dict(self._checkpoint.claims)
        held = {d.device for r in claims.values() for d in r.devices}
        kubelet = self.settings.kubelet
        temps = [
            *kubelet.plugin_dir.glob(f".{self.settings.checkpoint_path.name}.*.tmp"),
            *kubelet.cdi_dir.glob(f".{self.settings.driver_name}-*.json.*.tmp"),
            *self.settings.claims_dir.glob("*/.*.tmp"),
        ]
        orphans: list[tuple[Path, Callable[[Path], None]]] = [(p, Path.unlink) for p in temps]
        try:
            spec_uids = self.specs.claim_uids()
            dir_uids = {p.name for p in self.settings.claims_dir.iterdir()}
        except OSError as e:
            log.error("cannot list the driver's files", extra={"error": _os_problem("cannot list", e)})
            spec_uids, dir_uids = set(), set()
        prefix = f"{self.settings.driver_name}-"
        orphans += [
            (self.specs.cdi_dir / f"{prefix}{uid}.json", Path.unlink) for uid in spec_uids - set(claims)
        ]
        orphans += [(self.settings.claims_dir / name, _remove_tree) for name in dir_uids - set(claims)]
        for path, remove in sorted(orphans, key=lambda orphan: orphan[0]):
            log.info("removing what no claim owns", extra={"path": str(path)})
            try:
                remove(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.error("cannot remove it", extra={"path": str(path), "error": str(e)})
        for info in self.inventory:
            if info.kind != "partition" or info.name in held:
                continue
            try:
                if self.partitioner.exists(info) is not None:
                    log.info("destroying a MIG partition no claim owns", extra={"device": info.name})
                    self.partitioner.unprepare(info)
            except DriverError as e:
                log.error("cannot destroy it", extra={"device": info.name, "error": str(e)})
