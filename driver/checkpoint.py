"""The driver's checkpoint: what it prepared, for which claim, surviving restarts and reboots.

This is the plugin's side of the DRA protocol: the node agent keeps a checkpoint of its own
(``nodeagent/checkpoint.py``), and its ``PreparedDevice`` is the same device as answered.

Unprepare gets only a claim's namespace, UID and name, so everything needed to undo a
prepare is recorded here. A claim goes ``PrepareStarted`` (written before any side effect)
-> ``PrepareCompleted`` (written after the CDI spec) -> ``UnprepareStarted`` (written before
anything is destroyed) -> gone; a restart finding a claim ``PrepareStarted`` or
``UnprepareStarted`` undoes what is left of it. A file that is not a valid checkpoint is set
aside (``checkpoint.json.corrupt-<time>``) by ``load_or_set_aside``, so the driver can start and
remove what no claim owns. The file carries the boot id: on a new boot the CDI directory (a
tmpfs) is empty and MIG partitions are gone, so completed claims are restored.

Writes are atomic (temp file, fsync, rename) and the content carries a checksum, so a
torn or edited file is detected instead of trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from driver._files import atomic_write
from driver.config import DeviceConfig
from driver.config import parse as parse_config
from driver.errors import CheckpointError, ConfigError

__all__ = [
    "PREPARE_COMPLETED",
    "PREPARE_STARTED",
    "UNPREPARE_STARTED",
    "BootId",
    "Checkpoint",
    "CheckpointStore",
    "ClaimRecord",
    "PreparedDevice",
    "read_boot_id",
]

PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"
UNPREPARE_STARTED = "UnprepareStarted"
VERSION = 1
BootId = str
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")

log = logging.getLogger(__name__)


def read_boot_id(path: Path = BOOT_ID_PATH) -> BootId:
    """This boot's id (changes on every reboot); empty where the kernel does not offer one."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


@dataclass
class PreparedDevice:
    """One device prepared for a claim, as answered to the kubelet and needed to undo it."""

    request_names: list[str]
    pool: str
    device: str
    cdi_ids: list[str]
    kind: str = "gpu"
    """``gpu``, ``mig`` or ``partition`` (a MIG device created at prepare time)."""
    uuid: str = ""
    share_id: str | None = None
    shareable: bool = False
    """Whether another shareable claim may have this device prepared at the same time."""
    admin_access: bool = False
    """Allocated with admin access: prepared even when other claims hold the device."""
    partition_uuid: str | None = None
    """UUID of the MIG device created for a ``partition`` device, to destroy on unprepare."""
    config: DeviceConfig | None = None
    """The applied opaque config (stored in its normalized API form)."""
    consumed: dict[str, int] | None = None
    """What this share takes of a device shared by capacity (``consumedCapacity``, defaults filled
    in); None on other devices."""

    def to_json(self) -> dict[str, Any]:
        """JSON form: the fields, with the config in API form."""
        out = asdict(self)
        out["config"] = None if self.config is None else self.config.to_dict()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreparedDevice:
        """Inverse of :meth:`to_json`; ConfigError when the stored config no longer parses."""
        config = data.get("config")
        return cls(**{**data, "config": None if config is None else parse_config(config)})


@dataclass
class ClaimRecord:
    """A claim the driver started or finished preparing."""

    uid: str
    namespace: str
    name: str
    state: str = PREPARE_STARTED
    devices: list[PreparedDevice] = field(default_factory=list)
    """Everything needed to rebuild the claim's CDI spec after a reboot, and to undo it."""
    pod_claim_name: str | None = None
    """The pod's name for a claim made from a template (where its device metadata is mounted)."""

    @property
    def ref(self) -> str:
        """``namespace/name (uid)`` for messages."""
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass
class Checkpoint:
    """The whole checkpoint: the boot it was written in and every known claim by UID."""

    boot_id: BootId = ""
    claims: dict[str, ClaimRecord] = field(default_factory=dict)


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class CheckpointStore:
    """Loads and saves the checkpoint file (``<plugin-dir>/checkpoint.json``)."""

    def __init__(self, path: Path, *, verify: bool = True) -> None:
        self.path = path
        self.verify = verify
        """Whether the checksum is checked (off only with the ``trust-corrupt-checkpoint`` switch)."""

    def load(self) -> Checkpoint:
        """The saved checkpoint, or an empty one when there is no file.

        Raises ``CheckpointError`` for a file that cannot be read or is not a valid checkpoint.
        """
        raw = self._read()
        return Checkpoint() if raw is None else self._decode(raw)

    def load_or_set_aside(self) -> Checkpoint:
        """Like :meth:`load`, but a file that is not a valid checkpoint is renamed
        ``<name>.corrupt-<UTC time>`` (kept for a person to look at) and an empty checkpoint
        returned. A file that cannot be read at all still raises ``CheckpointError``."""
        raw = self._read()
        if raw is None:
            return Checkpoint()
        try:
            return self._decode(raw)
        except CheckpointError as e:
            aside = self.path.with_name(
                f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            )
            try:
                os.replace(self.path, aside)
            except OSError as moved:
                raise CheckpointError(f"{e}; and it cannot be set aside as {aside}: {moved}") from moved
            log.error(
                "checkpoint is not valid: set aside, starting empty; what no claim owns is removed",
                extra={"error": str(e), "set_aside": str(aside)},
            )
            return Checkpoint()

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {e}") from e

    def _decode(self, raw: bytes) -> Checkpoint:
        try:
            data = json.loads(raw)
            body = data["data"]
            if self.verify and data.get("checksum") != _checksum(body):
                raise CheckpointError(f"checkpoint {self.path} fails its checksum")
            if body.get("version") != VERSION:
                raise CheckpointError(
                    f"checkpoint {self.path} has version {body.get('version')}, want {VERSION}"
                )
            claims = {}
            for uid, rec in body["claims"].items():
                devices = [PreparedDevice.from_json(d) for d in rec.pop("devices", [])]
                claims[uid] = ClaimRecord(devices=devices, **rec)
            return Checkpoint(boot_id=body.get("bootID", ""), claims=claims)
        except CheckpointError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, ConfigError) as e:
            raise CheckpointError(f"checkpoint {self.path} is corrupt ({e!r})") from e

    def save(self, checkpoint: Checkpoint) -> None:
        """Write the checkpoint atomically."""
        body = {
            "version": VERSION,
            "bootID": checkpoint.boot_id,
            "claims": {
                uid: {**asdict(rec), "devices": [d.to_json() for d in rec.devices]}
                for uid, rec in sorted(checkpoint.claims.items())
            },
        }
        data = {"data": body, "checksum": _checksum(body)}
        try:
            atomic_write(self.path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), mode=0o600)
        except OSError as e:
            raise CheckpointError(f"cannot write checkpoint {self.path}: {e}") from e
