"""What a prepared claim is on the node: its MIG partitions, device-info files and CDI spec (and its
device metadata files, ``driver.devicemetadata``).

:class:`Materializer` makes them (:meth:`~Materializer.make`), checks that a completed claim
still has them (:meth:`~Materializer.intact`) and removes a claim's files
(:meth:`~Materializer.remove_files`); the checkpoint and the locks are ``driver.state``'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from driver import devnodes, partitions
from driver._files import atomic_write
from driver._names import within
from driver.cdi import CDIDevice, SpecStore
from driver.checkpoint import ClaimRecord, PreparedDevice
from driver.config import DeviceConfig
from driver.consumable import share_env
from driver.devicemetadata import MetadataWriter
from driver.errors import DriverError, PrepareError
from driver.inventory import DeviceInfo, Inventory
from driver.settings import Settings

__all__ = [
    "MaterializeBreakage",
    "Materializer",
    "NvmlPartitioner",
    "Partitioner",
    "os_problem",
    "remove_tree",
]

log = logging.getLogger(__name__)


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


class NvmlPartitioner:
    """The production :class:`Partitioner`: MIG instances through NVML (``driver.partitions``)."""

    def prepare(self, info: DeviceInfo) -> str:
        return partitions.prepare_partition(info)

    def unprepare(self, info: DeviceInfo) -> None:
        partitions.unprepare_partition(info)

    def exists(self, info: DeviceInfo) -> str | None:
        return partitions.partition_uuid(info)


def os_problem(what: str, error: OSError) -> str:
    """``what`` and the path and reason of ``error``, for a message."""
    return f"{what} {error.filename or ''}: {error.strerror or error}".replace("  ", " ")


def remove_tree(path: Path) -> None:
    """``rm -r``; a missing path is fine, any other failure raises ``OSError`` naming the path."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except NotADirectoryError:  # a file where the dir should be, or a file above it
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            path.unlink()


@dataclass(frozen=True)
class MaterializeBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change what a prepared
    claim is on the node; a real driver has none."""

    ignore_sharing_strategy: bool = False
    cdi_id_of_another_device: bool = False
    exceed_consumable_share: bool = False
    leave_cdi_on_unprepare: bool = False

    @classmethod
    def of(cls, settings: Settings) -> MaterializeBreakage:
        return cls(
            ignore_sharing_strategy=settings.breaks("ignore-sharing-strategy"),
            cdi_id_of_another_device=settings.breaks("cdi-id-of-another-device"),
            exceed_consumable_share=settings.breaks("exceed-consumable-share"),
            leave_cdi_on_unprepare=settings.breaks("leave-cdi-on-unprepare"),
        )


class Materializer:
    """Makes, checks and removes the partitions, device-info files and CDI spec of claims."""

    def __init__(
        self,
        settings: Settings,
        inventory: Inventory,
        specs: SpecStore,
        partitioner: Partitioner,
        *,
        mig_minors: Callable[[], Mapping[str, int]],
        reach: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self._broken = MaterializeBreakage.of(settings)
        self.inventory = inventory
        self.specs = specs
        """The CDI specs of this driver."""
        self.partitioner = partitioner
        self._mig_minors = mig_minors
        self._reach = reach
        """Called after each step of ``driver.breakage.CRASH_POINTS``."""
        self.metadata = MetadataWriter(settings, inventory) if settings.device_metadata else None
        """Device metadata files and their CDI specs (``--device-metadata``)."""

    def intact(self, record: ClaimRecord) -> bool:
        """Whether a completed claim still has its CDI spec and each partition its MIG device.

        A partition found gone gets its UUID cleared, so that :meth:`make` makes it again.
        """
        intact = self.specs.exists(record.uid) or not self._needs_spec(record)
        if self.metadata is not None and not self.metadata.intact(record):
            intact = False
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

    def claim_dir(self, uid: str) -> Path:
        return within(self.settings.claims_dir, self.settings.claims_dir / uid)

    def make(self, record: ClaimRecord, *, recreate_partitions: bool) -> None:
        """Create partitions (if asked), device-info files and the CDI spec of a claim."""
        cdi_devices = []
        counts = Counter(d.device for d in record.devices)
        twice = {name for name, n in counts.items() if n > 1}
        for device in record.devices:
            info = self.inventory.get(device.device)
            if info is None:
                raise PrepareError(f"claim {record.ref}: device {device.device}: no longer on this node")
            if info.kind == "license":
                device.cdi_ids = []  # a seat is no hardware: nothing reaches the container
                continue
            if info.kind == "partition" and (recreate_partitions or not device.partition_uuid):
                try:
                    device.partition_uuid = self.partitioner.prepare(info)
                except DriverError as e:
                    raise PrepareError(f"claim {record.ref}: device {device.device}: {e}") from e
                device.uuid = device.partition_uuid
                self._reach("prepare-partition")
            config = device.config
            name = self.cdi_device_name(device, twice)
            info_file = self._write_info(record, device, info, config, name)
            if self._broken.ignore_sharing_strategy:
                config = None  # validated and recorded, but never reaches the container
            answered = name
            if self._broken.cdi_id_of_another_device:  # the id of a device not allocated
                names = sorted(self.inventory.devices)
                answered = names[(names.index(device.device) + 1) % len(names)]
            device.cdi_ids = [self.specs.cdi_id(record.uid, answered)]
            env = config.env(device.uuid) if config is not None else {}
            cdi_devices.append(
                CDIDevice(
                    device_name=name,
                    uuid=device.uuid,
                    env={**env, **self._share_env(device, info)},
                    info_file=info_file,
                    device_nodes=(
                        devnodes.device_nodes(info, device.partition_uuid, self._mig_minors)
                        if self.specs.nvml
                        else ()
                    ),
                )
            )
        if self.metadata is not None:
            self.metadata.write(record, self.claim_dir(record.uid))
        if cdi_devices:
            spec = self.specs.build(record.uid, cdi_devices)
            self.specs.write(record.uid, spec)

    def _needs_spec(self, record: ClaimRecord) -> bool:
        """Whether the claim holds a device that reaches containers through a CDI spec (not only seats)."""
        return any(
            (info := self.inventory.get(d.device)) is None or info.kind != "license" for d in record.devices
        )

    def _share_env(self, device: PreparedDevice, info: DeviceInfo) -> dict[str, str]:
        """The env that tells the container its share of a device shared by capacity."""
        if device.consumed is None:
            return {}
        if self._broken.exceed_consumable_share:
            return share_env(info.capacity)  # the whole GPU, whatever the share
        return share_env(device.consumed)

    @staticmethod
    def cdi_device_name(device: PreparedDevice, twice: Collection[str] = ()) -> str:
        """The device's name in the claim's CDI spec, env key and info file: its own name, so that a
        share looks like the device to a container; ``-<share id>`` added where the claim holds
        several shares of the device (``twice``), whose names must differ."""
        if device.share_id and device.device in twice:
            return f"{device.device}-{device.share_id}"
        return device.device

    def _write_info(
        self,
        record: ClaimRecord,
        device: PreparedDevice,
        info: DeviceInfo,
        config: DeviceConfig | None,
        name: str,
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
            "consumedCapacity": device.consumed,
            "config": None if config is None else config.to_dict(),
            "env": {**({} if config is None else config.env(device.uuid)), **self._share_env(device, info)},
        }
        claim_dir = self.claim_dir(record.uid)
        path = within(claim_dir, claim_dir / f"{name}.json")
        # rebuilt with the CDI spec after a reboot: atomic, but no need to fsync
        atomic_write(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), durable=False)
        return path

    def remove_files(self, uid: str) -> None:
        """Remove a claim's CDI spec and info dir; ``PrepareError`` naming the path otherwise."""
        problems = []
        if not self._broken.leave_cdi_on_unprepare:
            try:
                self.specs.remove(uid)
                if self.metadata is not None:
                    self.metadata.remove(uid)
            except OSError as e:
                problems.append(os_problem("cannot remove CDI spec", e))
        self._reach("unprepare-spec-removed")
        try:
            remove_tree(self.claim_dir(uid))
        except OSError as e:
            problems.append(os_problem("cannot remove device-info files", e))
        if problems:
            raise PrepareError("; ".join(problems))
