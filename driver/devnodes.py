"""The host device nodes a container gets for a device (``nvml`` backend only).

A whole GPU needs ``/dev/nvidia<minor>``. A MIG device needs its parent GPU's node and the
capability nodes of its GPU instance and compute instance, ``/dev/nvidia-caps/nvidia-cap<n>``,
whose minors the kernel lists in ``/proc/driver/nvidia-caps/mig-minors``. The ``fake`` backend
names no device nodes: a real runtime refuses a spec whose nodes do not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import pynvml

from driver._nvml import nvml
from driver.errors import DriverError
from driver.inventory import DeviceInfo

__all__ = ["MIG_MINORS", "device_nodes", "mig_instance_ids", "read_mig_minors"]

log = logging.getLogger(__name__)

MIG_MINORS = Path("/proc/driver/nvidia-caps/mig-minors")


def device_nodes(
    info: DeviceInfo,
    mig_uuid: str | None,
    mig_minors: Callable[[], Mapping[str, int]],
) -> list[str]:
    """The (parent) GPU's node and, for MIG, the capability nodes of its GPU and compute instance.

    ``mig_uuid`` is the MIG device a partition became at prepare time (its instance ids are
    known only from then on); ``mig_minors`` reads the capability minors (``read_mig_minors``).
    """
    nodes = [f"/dev/nvidia{info.minor}"]
    if info.kind == "gpu":
        return nodes
    ids = (info.gpu_instance_id, info.compute_instance_id or 0) if info.gpu_instance_id is not None else None
    if ids is None and mig_uuid:
        ids = mig_instance_ids(mig_uuid)
    if ids is not None:
        minors = mig_minors()
        gi = f"gpu{info.minor}/gi{ids[0]}"
        for key in (f"{gi}/access", f"{gi}/ci{ids[1]}/access"):
            if key in minors:
                nodes.append(f"/dev/nvidia-caps/nvidia-cap{minors[key]}")
    return nodes


def mig_instance_ids(mig_uuid: str) -> tuple[int, int] | None:
    """GPU-instance and compute-instance ids of a MIG device, or None when NVML cannot tell."""
    try:
        with nvml():
            handle = pynvml.nvmlDeviceGetHandleByUUID(mig_uuid)
            return int(pynvml.nvmlDeviceGetGpuInstanceId(handle)), int(
                pynvml.nvmlDeviceGetComputeInstanceId(handle)
            )
    except (pynvml.NVMLError, DriverError) as e:
        log.warning("cannot resolve MIG instance ids", extra={"mig_uuid": mig_uuid, "error": str(e)})
        return None


def read_mig_minors(path: Path = MIG_MINORS) -> dict[str, int]:
    """``mig-minors``: ``gpu0/gi1/access 21`` lines as a dict; empty where there is no such file."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out
