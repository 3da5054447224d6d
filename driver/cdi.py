"""CDI (Container Device Interface) specs: one per prepared claim, validated by the CDI rules.

A spec names one CDI device per prepared device, ``<claim uid>-<device name>``, so two claims
never share a CDI name. The runtime injects the edits of the devices the kubelet lists for a
container. What a device gets:

- every backend: ``GPU_DEVICE_<NAME>=<uuid>`` (``NAME``: the device name upper-cased, ``-``
  and ``.`` as ``_``), the applied config's env (``GPU_SHARING_STRATEGY``, ...), and a read-only
  mount of a device-info JSON file the driver writes under ``<plugin-dir>/claims/<uid>/``
  at ``/var/run/dra-gpu/<device>.json``;
- ``nvml`` backend in addition: ``/dev/nvidia<minor>`` of the (parent) GPU, MIG capability
  nodes when they can be resolved, and ``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
  ``/dev/nvidia-uvm-tools`` as common edits. The ``fake`` backend names no device nodes, since
  a real runtime refuses a spec whose nodes do not exist.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draproto import cdi as cdi_rules
from driver._files import atomic_write
from driver._names import within
from driver.errors import CDIError

__all__ = [
    "CDI_VERSION",
    "CONTAINER_INFO_DIR",
    "CDIDevice",
    "SpecStore",
    "env_key",
    "validate",
]

CDI_VERSION = "0.6.0"
"""The version our specs declare: enough for everything they use (names may start with a digit)."""
CONTAINER_INFO_DIR = "/var/run/dra-gpu"
"""Where device-info files appear inside containers."""

_NVIDIA_COMMON = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def env_key(device_name: str) -> str:
    """``GPU_DEVICE_<NAME>`` for a device name (``gpu-0`` -> ``GPU_DEVICE_GPU_0``)."""
    return "GPU_DEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", device_name).upper()


def validate(spec: Mapping[str, Any]) -> None:
    """Check a spec against the CDI rules (:mod:`draproto.cdi`); CDIError lists every violation."""
    problems = cdi_rules.validate_spec(spec)
    if problems:
        raise CDIError("invalid CDI spec: " + "; ".join(problems))


@dataclass(frozen=True)
class CDIDevice:
    """What a CDI device for one prepared device carries."""

    device_name: str
    """The driver's device name (``gpu-0``)."""
    uuid: str
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra env vars (the applied config)."""
    info_file: Path | None = None
    """Host path of the device-info file to mount, if any."""
    device_nodes: Sequence[str] = ()
    """Host device nodes to inject (``nvml`` backend only)."""


class SpecStore:
    """Reads and writes one CDI spec file per claim in the CDI directory."""

    def __init__(self, cdi_dir: Path, driver_name: str, *, nvml: bool = False) -> None:
        self.cdi_dir = cdi_dir
        self.driver_name = driver_name
        self.kind = f"k8s.{driver_name}/gpu"
        self.nvml = nvml

    def path(self, claim_uid: str) -> Path:
        """The spec file of a claim; ``PrepareError`` for a UID that would lead out of the CDI dir."""
        return within(self.cdi_dir, self.cdi_dir / f"{self.driver_name}-{claim_uid}.json")

    def cdi_name(self, claim_uid: str, device_name: str) -> str:
        """The CDI device name: claim UID and device name, unique across claims."""
        return f"{claim_uid}-{device_name}"

    def cdi_id(self, claim_uid: str, device_name: str) -> str:
        """The fully qualified CDI device ID the kubelet hands to the runtime."""
        return f"{self.kind}={self.cdi_name(claim_uid, device_name)}"

    def build(self, claim_uid: str, devices: Sequence[CDIDevice]) -> dict[str, Any]:
        """The spec for a claim's devices, validated."""
        spec = self.compose(claim_uid, devices)
        validate(spec)
        return spec

    def compose(self, claim_uid: str, devices: Sequence[CDIDevice]) -> dict[str, Any]:
        """The spec for a claim's devices, not yet validated."""
        entries = []
        for device in devices:
            env = {env_key(device.device_name): device.uuid, **device.env}
            edits: dict[str, Any] = {"env": [f"{k}={v}" for k, v in env.items()]}
            if device.info_file is not None:
                edits["mounts"] = [
                    {
                        "hostPath": str(device.info_file),
                        "containerPath": f"{CONTAINER_INFO_DIR}/{device.device_name}.json",
                        "options": ["ro", "nosuid", "nodev", "bind"],
                    }
                ]
            if device.device_nodes:
                edits["deviceNodes"] = [{"path": p, "permissions": "rw"} for p in device.device_nodes]
            entries.append({"name": self.cdi_name(claim_uid, device.device_name), "containerEdits": edits})
        spec: dict[str, Any] = {"cdiVersion": CDI_VERSION, "kind": self.kind, "devices": entries}
        if self.nvml:
            common = [p for p in _NVIDIA_COMMON if Path(p).exists()]
            if common:
                spec["containerEdits"] = {"deviceNodes": [{"path": p, "permissions": "rw"} for p in common]}
        return spec

    def write(self, claim_uid: str, spec: Mapping[str, Any]) -> Path:
        """Write a claim's spec atomically; returns its path.

        Not fsynced: the CDI dir is usually a tmpfs, and after a reboot the driver rewrites
        every spec from its (fsynced) checkpoint.
        """
        path = self.path(claim_uid)
        data = (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode()
        atomic_write(path, data, durable=False, dir_mode=0o755)  # a CDI dir is read by the runtime
        return path

    def exists(self, claim_uid: str) -> bool:
        """Whether the claim's spec file is there (it is gone after a reboot when the dir is a tmpfs)."""
        return self.path(claim_uid).exists()

    def remove(self, claim_uid: str) -> None:
        """Delete a claim's spec; a missing one is fine (also when the CDI dir is not a directory)."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            self.path(claim_uid).unlink()

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a spec of this driver in the directory."""
        prefix = f"{self.driver_name}-"
        if not self.cdi_dir.is_dir():
            return set()
        return {
            p.name[len(prefix) : -len(".json")]
            for p in self.cdi_dir.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(".json")
        }
