"""A companion DRA driver for simulated NICs, for rules that need a second driver beside the one
under test (a GPU and a NIC in one claim, placed together by ``resource.kubernetes.io/numaNode``).

The local tier runs it on every node when asked (``cluster up --nic-driver``, a profile's
``local.companions: [nic]``). It is small on purpose and known to be right: it publishes one
ResourceSlice of ``--nics`` NICs, each with the standard NUMA attribute, prepares a claim's NIC
results (only its own driver's, in claims that hold other drivers' devices too) as CDI devices
that set ``DRA_NIC_<device>=<device>`` in the container, and unprepares by removing the claim's
spec. It serves DRAPlugin v1 and v1beta1 and keeps no checkpoint: what it prepared is on disk.
"""

from __future__ import annotations

from nicdriver.plugin import (
    CDI_KIND,
    DEFAULT_DRIVER,
    NUMA_NODE,
    NicDriver,
    nic_names,
    numa_node_of,
    slice_manifest,
)

__all__ = [
    "CDI_KIND",
    "DEFAULT_DRIVER",
    "NUMA_NODE",
    "NicDriver",
    "nic_names",
    "numa_node_of",
    "slice_manifest",
]
