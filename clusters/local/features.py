"""What a Kubernetes binary supports, read from its own ``--help``.

Feature gates differ between versions and come and go, so the local control plane
never hard-codes them: it asks each binary, enables the DRA gates that are alpha or
beta there, and passes the gates every component knows to every component (the kubelets
get them less :data:`KUBELET_LEFT_OFF`).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "EXTRA_GATES",
    "KUBELET_LEFT_OFF",
    "RUNTIME_CONFIG_CANDIDATES",
    "UNSERVED_APIS",
    "WANTED_CONTROLLERS",
    "WORKLOAD_GATES",
    "FeatureGate",
    "choose_controllers",
    "dra_gates",
    "is_dra_gate",
    "kubelet_gates",
    "parse_controllers",
    "parse_feature_gates",
    "read_help",
]

EXTRA_GATES = frozenset({"ResourceHealthStatus", "DynamicResourceAllocation"})
"""Gates outside the ``DRA*`` family that DRA features depend on."""

WORKLOAD_GATES = frozenset({"GenericWorkload"})
"""Gates outside the DRA family that a DRA gate depends on (``DRAWorkloadResourceClaims`` on
``GenericWorkload``: the Workload and PodGroup APIs), turned on for the control plane only, and only
where the binaries list them as beta (1.37+; alpha before, with another API version)."""

KUBELET_LEFT_OFF = frozenset({"GenericWorkload", "DRAWorkloadResourceClaims"})
"""Gates the kubelets do not get: a kubelet 1.37.2 with ``GenericWorkload`` on panics at start
(docs/kind.md), and ``DRAWorkloadResourceClaims`` depends on it. Such a kubelet prepares no claim
reserved for a PodGroup (a skew a real cluster may have too); the node agent never reads the gate."""

RUNTIME_CONFIG_CANDIDATES = (
    "resource.k8s.io/v1beta1",
    "resource.k8s.io/v1beta2",
    "resource.k8s.io/v1alpha3",
    "scheduling.k8s.io/v1beta1",
)
"""Non-GA versions to serve when the API server knows them (v1alpha3 has DeviceTaintRule; the
``resource.k8s.io`` betas keep older clients working; ``scheduling.k8s.io/v1beta1`` has the PodGroups
of ``GenericWorkload``)."""

UNSERVED_APIS = (
    "apps/v1/deployments",
    "apps/v1/controllerrevisions",
    "autoscaling/v1",
    "autoscaling/v2",
    "batch/v1",
    "networking.k8s.io/v1/ingresses",
    "networking.k8s.io/v1/networkpolicies",
)
"""APIs (group versions or resources) the API server does not serve: nothing here would act on
them (kube-controller-manager runs only :data:`WANTED_CONTROLLERS`; no ingress controller, no network
plugin), so a client is told so instead of watching an object that never progresses. Each namespace
deletion also sweeps seven kinds fewer (two requests each): those sweeps were 47 % of the API
server's requests in a main-job run, and the run's CPU time went from 100 to 92 s (93 to 88 with
:data:`~clusters.local.controlplane.GOGC`). DaemonSets, ReplicaSets and StatefulSets stay: the
scheduler watches the last two, and the node probe's DaemonSet is checked by the API server (dry
run)."""

WANTED_CONTROLLERS = (
    "resourceclaim",
    "namespace",
    "garbage-collector",
    "serviceaccount",
    "serviceaccount-token",
    "root-ca-certificate-publisher",
    "device-taint-eviction",
)
"""kube-controller-manager controllers DRA tests need (without ``-controller``). node-lifecycle is
left out on purpose: it would taint fake nodes whose heartbeats pause during agent restarts."""

_GATE_RE = re.compile(
    r"(?:^|\s)(?:kube:)?([A-Z][A-Za-z0-9]+)=true\|false \((ALPHA|BETA|GA|DEPRECATED) - default=(true|false)\)"
)


@dataclass(frozen=True)
class FeatureGate:
    """One feature gate as a binary's ``--help`` lists it."""

    name: str
    """Gate name."""
    stage: str
    """``ALPHA``, ``BETA``, ``GA`` or ``DEPRECATED``."""
    default: bool
    """Whether it is on by default."""


def read_help(binary: Path) -> str:
    """The ``--help`` text of ``binary``."""
    proc = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False)
    return proc.stdout + proc.stderr


def parse_feature_gates(help_text: str) -> dict[str, FeatureGate]:
    """Feature gates listed under ``--feature-gates`` in a ``--help`` text, by name."""
    return {
        m.group(1): FeatureGate(m.group(1), m.group(2), m.group(3) == "true")
        for m in _GATE_RE.finditer(help_text)
    }


def is_dra_gate(name: str) -> bool:
    """Whether a gate belongs to DRA (``DRA*`` or one of :data:`EXTRA_GATES`)."""
    return name.startswith("DRA") or name in EXTRA_GATES


def kubelet_gates(gates: Mapping[str, bool]) -> dict[str, bool]:
    """The control plane's gates less those a kubelet does not get (:data:`KUBELET_LEFT_OFF`)."""
    return {name: on for name, on in gates.items() if name not in KUBELET_LEFT_OFF}


def dra_gates(per_binary: Iterable[dict[str, FeatureGate]]) -> dict[str, bool]:
    """The gates to turn on: DRA-related, alpha or beta, and known to every binary; and the
    :data:`WORKLOAD_GATES` where they are beta."""
    tables = list(per_binary)
    if not tables:
        return {}
    common = set(tables[0]).intersection(*tables[1:])
    chosen = {}
    for name in sorted(common):
        gate = tables[0][name]
        if (is_dra_gate(name) and gate.stage in {"ALPHA", "BETA"}) or (
            name in WORKLOAD_GATES and gate.stage == "BETA"
        ):
            chosen[name] = True
    return chosen


def parse_controllers(help_text: str) -> tuple[list[str], list[str]]:
    """``(all controllers, disabled by default)`` from kube-controller-manager's ``--help``."""
    flat = " ".join(help_text.split())
    names = r"([a-z0-9-]+(?:,\s*[a-z0-9-]+)*)"
    all_match = re.search(r"All controllers:\s*" + names, flat)
    off_match = re.search(r"Disabled-by-default controllers:\s*" + names, flat)

    def split(match: re.Match[str] | None) -> list[str]:
        return [n.strip() for n in match.group(1).split(",")] if match else []

    return split(all_match), split(off_match)


def choose_controllers(available: Iterable[str], wanted: Iterable[str] = WANTED_CONTROLLERS) -> list[str]:
    """The available controller names for ``wanted`` (either spelling: ``x`` or ``x-controller``)."""
    have = set(available)
    chosen = []
    for name in wanted:
        for spelling in (f"{name}-controller", name):
            if spelling in have:
                chosen.append(spelling)
                break
    return chosen
