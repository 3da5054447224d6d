"""The agent's claim-info checkpoint: what was prepared for which claim and pods.

The node's side (the driver keeps a checkpoint of its own, ``driver/checkpoint.py``), like the
kubelet's ``dra_manager_state``: it survives agent restarts, so that claims of pods deleted
while the agent was down still get unprepared. It also records each claim's devices, which a
second pod using a claim already prepared in this process gets without a new call. What it
does not hold is whether a claim is prepared *in this process*: after a restart prepare is
called again for every running pod (drivers are idempotent). Writes are atomic: temp file,
fsync, rename, fsync of the dir.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent._files import atomic_write
from nodeagent.draclient import PreparedDevice

__all__ = ["Checkpoint", "ClaimInfo"]

log = logging.getLogger(__name__)

VERSION = 1


@dataclass
class ClaimInfo:
    """A ResourceClaim that was prepared on this node, and the pods that use it."""

    uid: str
    namespace: str
    name: str
    drivers: list[str]
    devices: list[PreparedDevice] = field(default_factory=list)
    pods: set[str] = field(default_factory=set)
    """UIDs of pods on this node that use the claim."""
    skips: dict[str, list[str]] = field(default_factory=dict)
    """Driver -> the node operations skipped for it (``nodeagent.skipops``; the kubelet's
    ``DriverState.SkipNodeOperations``), kept as the kubelet keeps them in its checkpoint."""

    def to_json(self) -> dict[str, Any]:
        """JSON form for the checkpoint."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "drivers": list(self.drivers),
            "devices": [d.to_json() for d in self.devices],
            "pods": sorted(self.pods),
            "skips": {d: list(ops) for d, ops in sorted(self.skips.items())},
        }

    @classmethod
    def from_json(cls, uid: str, data: dict[str, Any]) -> ClaimInfo:
        """Inverse of :meth:`to_json`."""
        return cls(
            uid=uid,
            namespace=data["namespace"],
            name=data["name"],
            drivers=list(data.get("drivers", ())),
            devices=[PreparedDevice.from_json(d) for d in data.get("devices", ())],
            pods=set(data.get("pods", ())),
            skips={str(d): [str(op) for op in ops] for d, ops in (data.get("skips") or {}).items()},
        )


class Checkpoint:
    """Claim infos by claim UID, kept in memory and mirrored to one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._claims: dict[str, ClaimInfo] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            # The kubelet refuses to start on a corrupt checkpoint; an agent that keeps serving
            # is more useful to a test run, and a driver must cope with re-prepare anyway.
            log.error("ignoring unreadable checkpoint", extra={"path": str(self.path), "error": str(e)})
            return
        if not isinstance(data, dict) or data.get("version") != VERSION:
            log.error("ignoring checkpoint of unknown version", extra={"path": str(self.path)})
            return
        for uid, info in (data.get("claims") or {}).items():
            try:
                self._claims[uid] = ClaimInfo.from_json(uid, info)
            except (KeyError, TypeError) as e:
                log.error("skipping bad checkpoint entry", extra={"claim_uid": uid, "error": str(e)})

    def _save(self) -> None:
        data = {"version": VERSION, "claims": {u: c.to_json() for u, c in sorted(self._claims.items())}}
        atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode(), durable=True)

    def get(self, uid: str) -> ClaimInfo | None:
        """The claim info of ``uid`` (a copy-free reference; mutate only through this class)."""
        with self._lock:
            return self._claims.get(uid)

    def claims(self) -> list[ClaimInfo]:
        """All claim infos."""
        with self._lock:
            return list(self._claims.values())

    def put(self, info: ClaimInfo) -> None:
        """Store (or replace) a claim info, keeping the pods already recorded."""
        with self._lock:
            old = self._claims.get(info.uid)
            if old is not None:
                info.pods |= old.pods
            self._claims[info.uid] = info
            self._save()

    def add_pod(self, uid: str, pod_uid: str) -> None:
        """Record that ``pod_uid`` uses claim ``uid``."""
        with self._lock:
            info = self._claims.get(uid)
            if info is not None and pod_uid not in info.pods:
                info.pods.add(pod_uid)
                self._save()

    def remove_pod(self, uid: str, pod_uid: str) -> None:
        """Record that ``pod_uid`` no longer uses claim ``uid``."""
        with self._lock:
            info = self._claims.get(uid)
            if info is not None and pod_uid in info.pods:
                info.pods.discard(pod_uid)
                self._save()

    def delete(self, uid: str) -> None:
        """Forget a claim (after it was unprepared)."""
        with self._lock:
            if self._claims.pop(uid, None) is not None:
                self._save()
