"""Recovery at start: finish what a crash cut short, drop claims deleted meanwhile, rebuild what
completed claims lost, remove orphans.

``PrepareStarted`` and ``UnprepareStarted`` claims are undone; so are completed claims whose
ResourceClaim was deleted (or re-created, with another UID) while the driver was down, since
nothing will use them again and the kubelet may never ask (:func:`deleted_claims`); completed
claims that lost their CDI spec or partitions (a reboot, a tmpfs) get them back; what no claim
owns goes: CDI specs and info dirs of this driver, MIG partitions of its partitionable GPUs, temp
files of killed writes. Failures are logged and left for the kubelet's next call (or the next
start) to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from driver.checkpoint import PREPARE_COMPLETED, ClaimRecord
from driver.claims import ClaimSource
from driver.errors import ClaimError, DriverError, PrepareError
from driver.materialize import Materializer, os_problem, remove_tree

__all__ = ["deleted_claims", "recover", "remove_orphans"]

log = logging.getLogger(__name__)


def deleted_claims(records: Iterable[ClaimRecord], claims: ClaimSource) -> dict[str, str]:
    """The completed claims whose ResourceClaim is gone or was re-created (another UID), with why.

    A ResourceClaim in use by a pod cannot be deleted, so such a claim is nobody's any more. When
    the API server cannot be read, no claim is called gone (nor asked about after that): a claim
    is dropped only when it is known to be gone.
    """
    gone: dict[str, str] = {}
    for record in records:
        if record.state != PREPARE_COMPLETED:
            continue
        try:
            claim = claims.get_claim(record.namespace, record.name)
        except ClaimError as e:
            log.warning(
                "cannot tell whether prepared claims were deleted while the driver was down; all kept",
                extra={"claim": record.uid, "error": str(e)},
            )
            return {}
        if claim is None:
            gone[record.uid] = "its ResourceClaim was deleted"
            continue
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != record.uid:
            gone[record.uid] = f"its ResourceClaim was re-created (UID {uid})"
    return gone


def recover(
    records: Iterable[ClaimRecord],
    *,
    rebooted: bool,
    undo: Callable[[ClaimRecord], None],
    files: Materializer,
    gone: Mapping[str, str] | None = None,
) -> tuple[set[str], set[str]]:
    """Undo the claims a crash cut short and those ``gone`` (UID -> why, :func:`deleted_claims`), make
    completed ones whole; (undone, completed) UIDs.

    ``undo`` undoes one claim (``PrepareError`` when it cannot: that claim is kept for a retry).
    After a reboot every completed claim is rebuilt, its partitions made again on its next prepare.
    """
    gone = gone or {}
    undone: set[str] = set()
    completed: set[str] = set()
    for record in records:
        ctx = {"claim": record.uid, "namespace": record.namespace, "claim_name": record.name}
        if record.uid in gone:
            log.info(
                "unpreparing a claim deleted while the driver was down",
                extra={**ctx, "why": gone[record.uid]},
            )
        elif record.state != PREPARE_COMPLETED:
            log.warning(
                "finishing a prepare or unprepare a crash cut short", extra={**ctx, "state": record.state}
            )
        if record.uid in gone or record.state != PREPARE_COMPLETED:
            try:
                undo(record)
            except PrepareError as e:
                log.error("cannot finish it; will retry", extra={**ctx, "error": str(e)})
                continue
            undone.add(record.uid)
            continue
        completed.add(record.uid)
        try:
            if rebooted:  # MIG instances do not survive a reboot: a later prepare remakes them
                for device in record.devices:
                    device.partition_uuid = None
            if rebooted or not files.intact(record):
                log.info("restoring CDI spec of a prepared claim", extra={**ctx, "rebooted": rebooted})
                files.make(record, recreate_partitions=False)
        except (DriverError, OSError) as e:
            log.error("cannot restore a prepared claim", extra={**ctx, "error": str(e)})
    return undone, completed


def remove_orphans(files: Materializer, claims: Mapping[str, ClaimRecord]) -> None:
    """Remove what no claim owns: CDI specs and info dirs of this driver, MIG partitions of
    its partitionable GPUs, temp files of writes a crash cut short. Failures are logged."""
    settings = files.settings
    held = {d.device for r in claims.values() for d in r.devices}
    kubelet = settings.kubelet
    temps = [
        *kubelet.plugin_dir.glob(f".{settings.checkpoint_path.name}.*.tmp"),
        *kubelet.cdi_dir.glob(f".{settings.driver_name}-*.json.*.tmp"),
        *settings.claims_dir.glob("*/.*.tmp"),
    ]
    orphans: list[tuple[Path, Callable[[Path], None]]] = [(p, Path.unlink) for p in temps]
    try:
        spec_uids = files.specs.claim_uids()
        dir_uids = {p.name for p in settings.claims_dir.iterdir()}
    except OSError as e:
        log.error("cannot list the driver's files", extra={"error": os_problem("cannot list", e)})
        spec_uids, dir_uids = set(), set()
    prefix = f"{settings.driver_name}-"
    orphans += [(files.specs.cdi_dir / f"{prefix}{uid}.json", Path.unlink) for uid in spec_uids - set(claims)]
    orphans += [(settings.claims_dir / name, remove_tree) for name in dir_uids - set(claims)]
    if files.metadata is not None:
        try:
            metadata_uids = files.metadata.claim_uids()
        except OSError as e:
            log.error("cannot list the driver's files", extra={"error": os_problem("cannot list", e)})
            metadata_uids = set()
        for uid in metadata_uids - set(claims):
            orphans += [(p, Path.unlink) for p in files.metadata.spec_paths(uid)]
    for path, remove in sorted(orphans, key=lambda orphan: orphan[0]):
        log.info("removing what no claim owns", extra={"path": str(path)})
        try:
            remove(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.error("cannot remove it", extra={"path": str(path), "error": str(e)})
    for info in files.inventory:
        if info.kind != "partition" or info.name in held:
            continue
        try:
            if files.partitioner.exists(info) is not None:
                log.info("destroying a MIG partition no claim owns", extra={"device": info.name})
                files.partitioner.unprepare(info)
        except DriverError as e:
            log.error("cannot destroy it", extra={"device": info.name, "error": str(e)})
