"""Prepare and unprepare: the driver's state machine (the plugin's side of the DRA protocol).

``ClaimRef`` here is what the kubelet (or ``nodeagent``, whose ``ClaimRef`` is the same triple
seen from the caller's side) names a claim with.

``DeviceState.prepare`` turns an allocated ResourceClaim into CDI devices:

1. an already completed claim is answered from the checkpoint (idempotent, no API call);
2. the claim is read from the API server (``ClaimSource``) and each allocation result for
   this driver must name this node's pool and a device it has;
3. opaque configs are applied, class then claim, later over earlier;
4. a device prepared for another claim is refused unless both allow sharing (consumable
   capacity share ids, admin access, or a sharing config);
5. checkpoint ``PrepareStarted`` -> MIG partitions created -> device-info files and CDI
   spec written -> checkpoint ``PrepareCompleted``.

Failures undo what was done and raise ``PrepareError`` naming claim, device and reason.
``restore`` runs at start: it undoes ``PrepareStarted`` leftovers of a crash and, after a
reboot, rewrites CDI specs (and recreates partitions) of completed claims.

Thread safety: one lock per claim UID serialises calls for the same claim; one state lock
guards the checkpoint and the device-conflict check. API reads and NVML work run outside
the state lock, so different claims are prepared in parallel; destroying a partition is the
exception, since whether another claim still shares it must not change meanwhile.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from driver import devnodes, partitions
from driver._files import atomic_write, private_dir
from driver._names import check_uid, shown, within
from driver.cdi import CDIDevice, SpecStore
from driver.checkpoint import (
    PREPARE_COMPLETED,
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
    PreparedDevice,
    read_boot_id,
)
from driver.claims import ClaimSource
from driver.config import DeviceConfig, entries_from_allocation, select
from driver.errors import ClaimError, ConfigError, DeviceConflict, DriverError, PrepareError
from driver.inventory import DeviceInfo, Inventory
from driver.settings import Settings

__all__ = ["ClaimRef", "DeviceState", "Partitioner"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimRef:
    """What the kubelet tells about a claim: namespace, UID, name."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        text = f"{self.namespace}/{self.name} ({self.uid})"
        if len(text) <= 300 and text.isprintable():
            return text
        return f"{shown(self.namespace)}/{shown(self.name)} ({shown(self.uid)})"

    def check(self) -> None:
        """Raise ``PrepareError`` naming the claim unless its UID is safe to use in paths."""
        try:
            check_uid(self.uid)
        except PrepareError as e:
            raise PrepareError(f"claim {self}: {e}") from None


class Partitioner(Protocol):
    """Creates and destroys MIG partitions (``driver.partitions`` in production)."""

    def prepare(self, info: DeviceInfo) -> str:
        """Create the partition; return its MIG device UUID."""
        ...

    def unprepare(self, info: DeviceInfo) -> None:
        """Destroy the partition; nothing there is success."""
        ...


class _NvmlPartitioner:
    def prepare(self, info: DeviceInfo) -> str:
        return partitions.prepare_partition(info)

    def unprepare(self, info: DeviceInfo) -> None:
        partitions.unprepare_partition(info)


def _parent_request(request: str) -> str:
    """Containers reference the parent request: ``gpu/sub0`` -> ``gpu``."""
    return request.split("/", 1)[0]


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
    ) -> None:
        self.settings = settings
        self.inventory = inventory
        self.claims = claims
        self.partitioner: Partitioner = partitioner or _NvmlPartitioner()
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.nvml = settings.backend.kind == "nvml"
        self._mig_minors = mig_minors or devnodes.read_mig_minors
        self.specs = SpecStore(
            settings.kubelet.cdi_dir,
            settings.driver_name,
            nvml=self.nvml,
            broken=settings.breaks("invalid-cdi-spec"),
        )
        private_dir(settings.claims_dir)  # also the plugin dir, its parent
        private_dir(settings.kubelet.plugin_dir)
        self.store = CheckpointStore(settings.checkpoint_path)
        self._checkpoint = Checkpoint() if settings.breaks("forget-checkpoint") else self.store.load()
        self._rebooted = self._checkpoint.boot_id != self.boot_id
        self._checkpoint.boot_id = self.boot_id  # every save from now on is of this boot
        self._lock = threading.Lock()
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

    def restore(self) -> None:
        """Start-up recovery: undo partial prepares; after a reboot, rebuild completed claims."""
        with self._lock:
            records = list(self._checkpoint.claims.values())
            rebooted = self._rebooted
        for record in records:
            ctx = {"claim": record.uid, "namespace": record.namespace, "claim_name": record.name}
            if record.state != PREPARE_COMPLETED:
                log.warning("cleaning up a prepare that did not complete", extra=ctx)
                try:
                    self._undo(record)
                except DriverError as e:
                    log.error(
                        "cleanup of a partial prepare failed; will retry", extra={**ctx, "error": str(e)}
                    )
                    continue
                with self._lock:
                    self._checkpoint.claims.pop(record.uid, None)
                continue
            if self.settings.breaks("leak-restored-claims"):
                self._restored.add(record.uid)
            if rebooted or not self.specs.exists(record.uid):
                log.info("restoring CDI spec of a prepared claim", extra={**ctx, "rebooted": rebooted})
                if rebooted:
                    # MIG instances do not survive a reboot; without a UUID a later prepare
                    # makes the partition again should this attempt fail.
                    for device in record.devices:
                        device.partition_uuid = None
                try:
                    self._materialize(record, recreate_partitions=False)
                except (DriverError, OSError) as e:
                    log.error("cannot restore a prepared claim", extra={**ctx, "error": str(e)})
        known = set(self._checkpoint.claims)
        for uid in self.specs.claim_uids() - known:
            log.info("removing a CDI spec no claim owns", extra={"claim": uid})
            self.specs.remove(uid)
        with self._lock:
            self._rebooted = False
            self.store.save(self._checkpoint)

    def prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        """Prepare one claim; idempotent. Raises ``PrepareError`` naming claim, device and reason."""
        ref.check()
        with self._claim_lock(ref.uid):
            with self._lock:
                record = self._checkpoint.claims.get(ref.uid)
            if record is not None and record.state == PREPARE_COMPLETED:
                if self.settings.breaks("non-idempotent-prepare"):
                    raise PrepareError(f"claim {ref}: already prepared")
                if not self.specs.exists(ref.uid):
                    try:
                        self._materialize(record, recreate_partitions=False)
                    except (DriverError, OSError) as e:
                        raise PrepareError(f"claim {ref}: cannot rewrite its CDI spec: {e}") from e
                    with self._lock:
                        self.store.save(self._checkpoint)  # a partition made again has a new UUID
                return list(record.devices)
            if record is not None:  # a failed attempt of this process left it: start over
                self._undo(record)
                self._forget(ref.uid)
            planned = self._plan(ref)
            record = ClaimRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, devices=planned)
            with self._lock:
                self._check_conflicts(ref, planned)
                self._checkpoint.claims[ref.uid] = record
                self.store.save(self._checkpoint)
            try:
                self._materialize(record, recreate_partitions=True)
            except Exception as e:
                log.error("prepare failed; undoing", extra={"claim": ref.uid, "error": str(e)})
                try:
                    self._undo(record)
                    self._forget(ref.uid)
                except DriverError as cleanup:
                    log.error(
                        "undo after a failed prepare failed", extra={"claim": ref.uid, "error": str(cleanup)}
                    )
                if isinstance(e, PrepareError):
                    raise
                raise PrepareError(f"claim {ref}: {e}") from e
            with self._lock:
                record.state = PREPARE_COMPLETED
                self.store.save(self._checkpoint)
            log.info(
                "claim prepared",
                extra={
                    "claim": ref.uid,
                    "namespace": ref.namespace,
                    "claim_name": ref.name,
                    "devices": [d.device for d in record.devices],
                },
            )
            return list(record.devices)

    def unprepare(self, ref: ClaimRef) -> None:
        """Undo a prepare; an unknown claim succeeds. Raises ``PrepareError`` when undoing fails."""
        ref.check()
        with self._claim_lock(ref.uid):
            with self._lock:
                record = self._checkpoint.claims.get(ref.uid)
            if record is None:
                if not self.settings.breaks("leave-cdi-on-unprepare"):
                    self.specs.remove(ref.uid)
                shutil.rmtree(self._claim_dir(ref.uid), ignore_errors=True)
                return
            try:
                self._undo(record)
            except DriverError as e:
                raise PrepareError(f"claim {ref}: {e}") from e
            self._forget(ref.uid)
            if self.settings.breaks("keep-device-after-unprepare") or ref.uid in self._restored:
                with self._lock:
                    self._leaked.update(d.device for d in record.devices)
            log.info(
                "claim unprepared",
                extra={"claim": ref.uid, "namespace": ref.namespace, "claim_name": ref.name},
            )

    # --- steps --------------------------------------------------------------------------------

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

    def _forget(self, uid: str) -> None:
        with self._lock:
            if self._checkpoint.claims.pop(uid, None) is not None:
                self.store.save(self._checkpoint)

    def _plan(self, ref: ClaimRef) -> list[PreparedDevice]:
        """Read the claim and decide what to prepare; no side effects."""
        claim = self.claims.get_claim(ref.namespace, ref.name)
        if claim is None:
            raise ClaimError(f"claim {ref}: ResourceClaim not found")
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(
                f"claim {ref}: the ResourceClaim with this name has UID {uid}; it was re-created"
            )
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            raise ClaimError(f"claim {ref}: not allocated")
        results = [
            r
            for r in (allocation.get("devices") or {}).get("results") or []
            if r.get("driver") == self.settings.driver_name
        ]
        if not results:
            raise ClaimError(f"claim {ref}: no device of driver {self.settings.driver_name} is allocated")
        entries = []
        if not self.settings.breaks("ignore-config"):
            try:
                entries = entries_from_allocation(
                    (allocation.get("devices") or {}).get("config") or [], self.settings.driver_name
                )
            except ConfigError as e:
                raise PrepareError(f"claim {ref}: {e}") from e
        planned: dict[tuple[str, str | None], PreparedDevice] = {}
        for result in results:
            name = str(result.get("device", ""))
            pool = str(result.get("pool", ""))
            request = str(result.get("request", ""))
            if pool != self.settings.pool_name:
                raise ClaimError(
                    f"claim {ref}: device {name}: allocated from pool {pool!r}, "
                    f"but this node's pool is {self.settings.pool_name!r}"
                )
            info = self.inventory.get(name)
            if info is None:
                raise ClaimError(
                    f"claim {ref}: device {name}: no such device on node {self.settings.node_name}"
                )
            try:
                config = select(entries, request, info.kind)
            except ConfigError as e:
                raise PrepareError(f"claim {ref}: device {name}: invalid config: {e}") from e
            share_id = result.get("shareID") or None
            if share_id is not None:
                try:
                    check_uid(str(share_id), "shareID")
                except PrepareError as e:
                    raise ClaimError(f"claim {ref}: device {name}: {e}") from None
            key = (name, share_id)
            answered = request if self.settings.breaks("subrequest-name") else _parent_request(request)
            if self.settings.breaks("qualified-request-names"):
                answered = f"{ref.name}/{answered}"
            if key in planned:
                planned[key].request_names = sorted({*planned[key].request_names, answered})
                continue
            planned[key] = PreparedDevice(
                request_names=[answered],
                pool=pool,
                device=name,
                cdi_ids=[],
                kind=info.kind,
                uuid=info.uuid or "",
                share_id=share_id,
                shareable=bool(share_id) or bool(config and config.shareable),
                admin_access=bool(result.get("adminAccess")),
                config=config,
            )
        return list(planned.values())

    def _check_conflicts(self, ref: ClaimRef, planned: list[PreparedDevice]) -> None:
        """Refuse devices another claim holds, unless both sides allow sharing (state lock held).

        Admin access is the exception: it exists to reach devices that are in use.
        """
        for device in planned:
            if device.device in self._leaked:
                raise DeviceConflict(f"claim {ref}: device {device.device}: still marked in use")
        admin_exempt = not self.settings.breaks("refuse-admin-access")
        for other in self._checkpoint.claims.values():
            if other.uid == ref.uid:
                continue
            held = {d.device: d for d in other.devices}
            for device in planned:
                theirs = held.get(device.device)
                if theirs is None or (admin_exempt and (device.admin_access or theirs.admin_access)):
                    continue
                if not (device.shareable and theirs.shareable):
                    raise DeviceConflict(
                        f"claim {ref}: device {device.device}: already prepared for claim {other.ref} "
                        "and not shareable (neither claim has a sharing config or a share id)"
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

    def _undo(self, record: ClaimRecord) -> None:
        """Remove a claim's CDI spec, files and partitions; each step tolerates 'already gone'."""
        if not self.settings.breaks("leave-cdi-on-unprepare"):
            self.specs.remove(record.uid)
        shutil.rmtree(self._claim_dir(record.uid), ignore_errors=True)
        for device in record.devices:
            info = self.inventory.get(device.device)
            if info is None or info.kind != "partition":
                continue
            # Under the state lock: a claim that shares the partition cannot be added between
            # the check and the destroy (it would reuse the instance about to go).
            with self._lock:
                holders = [
                    other.ref
                    for other in self._checkpoint.claims.values()
                    if other.uid != record.uid and any(d.device == device.device for d in other.devices)
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
                        raise PrepareError(f"claim {record.ref}: device {device.device}: {e}") from e
            device.partition_uuid = None
