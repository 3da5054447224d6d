"""The kind cluster config for a Kubernetes version: DRA feature gates, CDI in containerd, nodes.

The gates are read as the local tier reads them: from the ``--help`` of that version's own
binaries (:func:`clusters.local.features.dra_gates`), when the binaries cache holds them; else
from :data:`KNOWN_GATES`, the same reading done once for the versions listed; else none (DRA
itself, ``resource.k8s.io/v1``, is on by default from 1.34: only its alpha and beta parts are
then off, and the rules that need them skip).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from clusters.local import binaries, features
from clusters.local.controlplane import features_binaries
from clusters.local.settings import LocalSettings

__all__ = [
    "CDI_PATCH",
    "CGROUP_V1_PATCH",
    "KNOWN_GATES",
    "NO_COREDNS_PATCH",
    "dra_gates",
    "dra_gates_for",
    "render",
]

KNOWN_GATES: Mapping[str, tuple[str, ...]] = {
    "1.37": (
        "DRAConsumableCapacity",
        "DRADerivedAttributes",
        "DRADeviceBindingConditions",
        "DRADeviceCompatibilityGroups",
        "DRAFractionalCapacityRange",
        "DRAListTypeAttributes",
        "DRANodeAllocatableResources",
        "DRAOptionalNodeOperations",
        "DRAPartitionableDevices",
        "DRAPartitionableDevicesType",
        "DRAResourceClaimGranularStatusAuthorization",
        "DRAResourcePoolStatus",
        "DRASchedulerFilterTimeout",
        "ResourceHealthStatus",
    ),
}
"""The DRA gates (alpha or beta) the local tier turns on, per minor, read from the binaries'
``--help`` less what its kubelets do not get (``features.KUBELET_LEFT_OFF``: kind passes one set of
gates to every component) (used when the binaries of the version are not in the cache)."""

CDI_PATCH = '[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n'
"""containerd config patch that turns CDI on (off by default in containerd 1.7; 2.x has it on and
reads this old key only through its config migration)."""


CGROUP_V1_PATCH = "kind: KubeletConfiguration\nfailCgroupV1: false\n"
"""kubeadm config patch that lets the kubelet run on a host with cgroups v1 (kubelets from 1.35 on
refuse it by default; the machines of this project mount v1 controllers). Harmless on v2."""


NO_COREDNS_PATCH = "kind: InitConfiguration\nskipPhases:\n- preflight\n- addon/coredns\n"
"""kubeadm config patch that leaves CoreDNS out (kind skips ``preflight`` itself): for the node image
built here, which has no CoreDNS image (its Go module is not to be had) and so would leave its pods
waiting for ever. Nothing in the suite resolves names."""


def dra_gates_for(k8s_version: str, cache_root: Path) -> tuple[dict[str, bool], str]:
    """The DRA gates to turn on for ``k8s_version`` and where they were read (for messages)."""
    entry = cache_root / k8s_version
    if binaries.read_stamp(entry) is not None:
        paths = [entry / name for name in features_binaries()]
        if all(p.is_file() for p in paths):
            tables = [features.parse_feature_gates(features.read_help(p)) for p in paths]
            # kind passes one set of gates to every component, the kubelets too
            gates = features.kubelet_gates(features.dra_gates(tables))
            return gates, f"the --help of the {k8s_version} binaries in {entry}"
    minor = ".".join(k8s_version.split(".")[:2])
    if minor in KNOWN_GATES:
        return {g: True for g in KNOWN_GATES[minor]}, f"the table of {minor} gates (KNOWN_GATES)"
    return {}, f"nothing: no binaries of {k8s_version} cached and no table entry, so only GA DRA is on"


def dra_gates(k8s_version: str, env: Mapping[str, str], progress: Callable[[str], None]) -> dict[str, bool]:
    """The gates of :func:`dra_gates_for`, read from the binaries cache the local tier would use
    under ``env``, with a line to ``progress`` saying which gates and from where (the first start
    step of the kind and k3s backends: a run's log then says why a gated rule skipped)."""
    gates, source = dra_gates_for(k8s_version, LocalSettings.from_env(env).binaries.cache_root)
    progress(f"DRA feature gates for {k8s_version} from {source}: {', '.join(gates) or 'none'}")
    return gates


def render(
    *,
    workers: int,
    gates: Mapping[str, bool],
    runtime_config: Sequence[str] = (),
    image: str = "",
    coredns: bool = True,
) -> str:
    """The kind ``Cluster`` config (YAML): one control plane and ``workers`` workers, the gates on
    every component, ``runtime_config`` API versions served (only for an older API a run wants),
    CDI on in containerd, kubelets that accept cgroups v1 (:data:`CGROUP_V1_PATCH`), and CoreDNS
    unless ``coredns`` is False (:data:`NO_COREDNS_PATCH`)."""
    node: dict[str, Any] = {"image": image} if image else {}
    config: dict[str, Any] = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "containerdConfigPatches": [CDI_PATCH],
        "kubeadmConfigPatches": [CGROUP_V1_PATCH] + ([] if coredns else [NO_COREDNS_PATCH]),
        "nodes": [{"role": "control-plane", **node}] + [{"role": "worker", **node} for _ in range(workers)],
    }
    if gates:
        config["featureGates"] = dict(sorted(gates.items()))
    if runtime_config:
        config["runtimeConfig"] = {gv: "true" for gv in runtime_config}
    return yaml.safe_dump(config, sort_keys=False)
