"""Device metadata (KEP-5304): what a container is told of the devices of each request it uses.

With ``--device-metadata`` every prepared claim gets, per request, a file that names the claim and
the request's devices with their attributes, mounted read-only into the containers that use that
request, where the kubeletplugin helper of ``k8s.io/dynamic-resource-allocation`` puts it::

    /var/run/kubernetes.io/dra-device-attributes/
        resourceclaims/<claim>/<request>/<driver>-metadata.json
        resourceclaimtemplates/<pod claim>/<request>/<driver>-metadata.json

(the second for a claim made from a template: its name is not known when the pod is written, the
pod's name for it is, from the claim's ``resource.kubernetes.io/pod-claim-name`` annotation).

The file is a JSON stream: one ``DeviceMetadata`` object per API version, newest first
(``metadata.resource.k8s.io/v1beta1``, then ``v1alpha1``), so that a reader takes the first it
knows. A request is named as containers reference it (``gpu``, where the helper writes the
subrequest a ``firstAvailable`` request got: ``gpu/sub0``). On the node it lives in the claim's own
directory (``<plugin-dir>/claims/<uid>/metadata/``, removed with it); the mount is a CDI device of
its own, kind ``<driver>/metadata``, named ``<claim uid>_<request>``, in
``<cdi-dir>/<driver>_metadata_<claim uid>_<request>.json``. Its ID is added to the CDI ids of the
request's first device, so only containers that reference that request (or the whole claim) get the
mount.

Rule-breaking switches: ``metadata-to-every-container`` (every device carries every request's
metadata device: a container sees the metadata of requests it does not use) and
``metadata-of-whole-claim`` (each request's file lists every device of the claim).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver._files import atomic_write
from driver._names import within
from driver.cdi import CDI_VERSION, validate
from driver.checkpoint import ClaimRecord, PreparedDevice
from driver.inventory import Inventory
from driver.settings import Settings
from driver.slicing import attribute_body

__all__ = [
    "API_VERSIONS",
    "CONTAINER_DIR",
    "POD_CLAIM_NAME_ANNOTATION",
    "MetadataBreakage",
    "MetadataWriter",
    "container_path",
    "pod_claim_name",
]

CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
"""Where the files are in a container."""

API_VERSIONS = ("metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1")
"""The versions each file holds, newest first."""

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""On a claim made from a template: the pod's name for it (``pod.spec.resourceClaims[].name``)."""

_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def container_path(driver_name: str, claim_name: str, request: str, pod_claim_name: str | None) -> str:
    """The file's path in a container."""
    if pod_claim_name:
        return (
            f"{CONTAINER_DIR}/resourceclaimtemplates/{pod_claim_name}/{request}/{driver_name}-metadata.json"
        )
    return f"{CONTAINER_DIR}/resourceclaims/{claim_name}/{request}/{driver_name}-metadata.json"


def _base(request: str) -> str:
    """``gpu`` of ``gpu/sub0``: files are per request, as containers reference them."""
    return request.split("/", 1)[0]


@dataclass(frozen=True)
class MetadataBreakage:
    """The seam: the suite's rule-breaking switches (driver/breakage.py) that change the metadata
    of prepared claims; a real driver has none."""

    whole_claim: bool = False
    every_container: bool = False

    @classmethod
    def of(cls, settings: Settings) -> MetadataBreakage:
        return cls(
            whole_claim=settings.breaks("metadata-of-whole-claim"),
            every_container=settings.breaks("metadata-to-every-container"),
        )


class MetadataWriter:
    """Writes, checks and removes the metadata files and their CDI specs of prepared claims."""

    def __init__(self, settings: Settings, inventory: Inventory) -> None:
        self.settings = settings
        self._broken = MetadataBreakage.of(settings)
        self.inventory = inventory
        self.kind = f"{settings.driver_name}/metadata"
        self.cdi_dir = settings.kubelet.cdi_dir

    def _spec_path(self, uid: str, request: str) -> Path:
        name = f"{self.settings.driver_name}_metadata_{uid}_{request}.json"
        return within(self.cdi_dir, self.cdi_dir / name)

    def _requests(self, record: ClaimRecord) -> dict[str, list[PreparedDevice]]:
        """The claim's devices by (base) request name, in the claim's order."""
        out: dict[str, list[PreparedDevice]] = {}
        for device in record.devices:
            for request in device.request_names:
                out.setdefault(_base(request), []).append(device)
        return out

    def write(self, record: ClaimRecord, claim_dir: Path) -> None:
        """Write the files and specs of a claim and add their CDI ids to its devices."""
        requests = self._requests(record)
        for request, devices in requests.items():
            listed = record.devices if self._broken.whole_claim else devices
            host = within(claim_dir, claim_dir / "metadata" / request / "metadata.json")
            atomic_write(host, self._stream(record, request, listed), durable=False)
            spec = {
                "cdiVersion": CDI_VERSION,
                "kind": self.kind,
                "devices": [
                    {
                        "name": f"{record.uid}_{request}",
                        "containerEdits": {
                            "mounts": [
                                {
                                    "hostPath": str(host),
                                    "containerPath": container_path(
                                        self.settings.driver_name, record.name, request, record.pod_claim_name
                                    ),
                                    "options": ["ro", "nosuid", "nodev", "bind"],
                                }
                            ]
                        },
                    }
                ],
            }
            validate(spec)
            data = (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode()
            atomic_write(self._spec_path(record.uid, request), data, durable=False, dir_mode=0o755)
            cdi_id = f"{self.kind}={record.uid}_{request}"
            if self._broken.every_container:
                for device in record.devices:
                    device.cdi_ids.append(cdi_id)
            else:  # the request's first device: its containers, and only theirs, get it
                devices[0].cdi_ids.append(cdi_id)

    def _stream(self, record: ClaimRecord, request: str, devices: Sequence[PreparedDevice]) -> bytes:
        """The file: one ``DeviceMetadata`` per API version, newest first."""
        named = next((r for d in devices for r in d.request_names if _base(r) == request), request)
        body: dict[str, Any] = {
            "metadata": {
                "name": record.name,
                "namespace": record.namespace,
                "uid": record.uid,
                "generation": 1,
            },
            "requests": [{"name": named, "devices": [self._device(d) for d in devices]}],
        }
        if record.pod_claim_name:
            body["podClaimName"] = record.pod_claim_name
        objects = [{"kind": "DeviceMetadata", "apiVersion": version, **body} for version in API_VERSIONS]
        return "".join(json.dumps(o, indent=2) + "\n" for o in objects).encode()

    def _device(self, device: PreparedDevice) -> dict[str, Any]:
        out: dict[str, Any] = {
            "driver": self.settings.driver_name,
            "pool": device.pool,
            "name": device.device,
        }
        info = self.inventory.get(device.device)
        if info is not None and info.attributes:
            out["attributes"] = {k: attribute_body(v) for k, v in info.attributes.items()}
        if device.uuid:  # a partition's is that of the MIG device made for this claim
            out.setdefault("attributes", {})["uuid"] = {"string": device.uuid}
        return out

    def intact(self, record: ClaimRecord) -> bool:
        """Whether every request of the claim still has its spec (gone after a reboot on a tmpfs)."""
        return all(self._spec_path(record.uid, r).exists() for r in self._requests(record))

    def spec_paths(self, uid: str) -> list[Path]:
        """The metadata specs of a claim in the CDI dir."""
        return list(self.cdi_dir.glob(f"{self.settings.driver_name}_metadata_{uid}_*.json"))

    def remove(self, uid: str) -> None:
        """Remove a claim's metadata specs (its files go with the claim's directory)."""
        for path in self.spec_paths(uid):
            path.unlink(missing_ok=True)

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a metadata spec in the CDI dir (for orphan removal)."""
        prefix = f"{self.settings.driver_name}_metadata_"
        if not self.cdi_dir.is_dir():
            return set()
        found = {p.name[len(prefix) : len(prefix) + 36] for p in self.cdi_dir.glob(f"{prefix}*.json")}
        return {uid for uid in found if _UID.match(uid)}


def pod_claim_name(claim: Mapping[str, Any]) -> str | None:
    """The pod's name for a claim made from a template, or None."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    return str(name) if name else None
