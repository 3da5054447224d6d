"""Whether a rule can be checked here: the profile's claims, the cluster's abilities, the version.

A rule whose need is missing is a skip that says which one ("profile reference-l4 does not claim
partitionable"), never a pass. :func:`missing` answers the reason, or None when everything the
rule needs is there. Before a cluster is reached (``dra-conformance rules --profile P``, a dry
run) the version and the served kinds may be unknown: :func:`missing` then judges on the rest,
and :func:`assumed` names what it took on trust.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from clusters.local.features import is_dra_gate
from conformance.catalogue import Rule
from conformance.profiles import PROFILE_CAPABILITIES, DriverProfile

__all__ = [
    "CLUSTER_CAPABILITIES",
    "CONFIG_ENV_RULES",
    "DRA_V1_MINOR",
    "Environment",
    "assumed",
    "bare_configs",
    "feature_gates",
    "gaps",
    "lacking",
    "missing",
    "parse_minor",
]

CLUSTER_CAPABILITIES = {
    "grpc": "reach the driver's sockets on a node",
    "view": "show what a container sees",
    "restart-driver": "restart the driver",
    "update-driver": "update the driver: start a second instance beside the first",
    "restart-kubelet": "restart the kubelet",
    "restart-apiserver": "restart the API server",
}
"""Capabilities a cluster backend provides, with what each lets the suite do."""


@dataclass(frozen=True)
class Environment:
    """What the run has: the profile, the cluster backend's abilities, the served API."""

    profile: DriverProfile
    """The driver profile."""
    backend: str
    """The cluster backend's name."""
    cluster_capabilities: frozenset[str]
    """What the backend can do (:data:`CLUSTER_CAPABILITIES` keys)."""
    k8s_minor: int
    """The API server's minor version (37 for v1.37.2); 0 when not known (a dry run)."""
    k8s_version: str
    """The API server's version as it reports it."""
    served_kinds: Collection[str] = ()
    """Kinds ``resource.k8s.io/v1`` serves (``DeviceTaintRule``, ...)."""
    served_known: bool = True
    """False before a cluster is reached (a dry run): :attr:`served_kinds` is then not known, and a
    need for a kind counts as met (:func:`assumed` names it)."""
    feature_gates: Mapping[str, bool] | None = None
    """The API server's DRA feature gates (:func:`feature_gates`); None when not known (a dry run,
    or ``/metrics`` not readable): a need for a gate then counts as met (:func:`assumed` names it)."""


def parse_minor(version: str) -> int:
    """The minor of ``v1.37.2`` or ``1.37`` (0 when it cannot be read)."""
    found = re.match(r"v?1\.(\d+)", version.strip())
    return int(found.group(1)) if found else 0


DRA_V1_MINOR = 34
"""The first Kubernetes minor that serves ``resource.k8s.io/v1``: every cluster the suite runs on
is at least this new (a run checks it first, preflight again), known version or not."""

_GATE_METRIC = re.compile(r"^kubernetes_feature_enabled\{([^}]*)\}\s+(\S+)", re.MULTILINE)


def feature_gates(metrics: str) -> dict[str, bool]:
    """The DRA feature gates (``DRA*``, ``DynamicResourceAllocation``, ``ResourceHealthStatus``) of a
    component's ``/metrics`` text, by name: its ``kubernetes_feature_enabled`` gauge (1: on)."""
    gates = {}
    for labels, value in _GATE_METRIC.findall(metrics):
        name = re.search(r'(?:^|,)name="([^"]+)"', labels)
        if name and is_dra_gate(name.group(1)):
            gates[name.group(1)] = value not in ("0", "0.0")
    return dict(sorted(gates.items()))


def lacking(need: str, env: Environment) -> str | None:
    """Why one need (a capability of the profile or the cluster backend, ``devices>=N``, ...) is not
    met in ``env``, or None."""
    profile = env.profile
    if need in PROFILE_CAPABILITIES:
        return None if profile.claims(need) else f"profile {profile.name} does not claim {need}"
    if need in CLUSTER_CAPABILITIES:
        if need in env.cluster_capabilities:
            return None
        return f"cluster backend {env.backend!r} cannot {CLUSTER_CAPABILITIES[need]} ({need})"
    found = re.fullmatch(r"devices>=(\d+)", need)
    if found:
        wanted = int(found.group(1))
        have = profile.devices.per_node
        return (
            None
            if have >= wanted
            else f"profile {profile.name} has {have} device(s) per node, the rule needs {wanted}"
        )
    if need == "faults":
        if profile.faults.inject and profile.faults.heal and profile.faults.healable:
            return None
        return (
            f"profile {profile.name} does not say how to make a device unhealthy and heal it "
            "(faults.inject, heal, healable)"
        )
    if need == "metrics":
        if profile.metrics.url:
            return None
        return f"profile {profile.name} names no metrics endpoint (metrics.url)"
    if need == "identity":
        if profile.identity.service_account:
            return None
        return f"profile {profile.name} names no service account of the driver (identity.serviceAccount)"
    if need == "attach-failure":
        if profile.faults.inject and profile.faults.heal and profile.faults.attach_failure:
            return None
        return (
            f"profile {profile.name} does not say how to make attaching a device fail and heal it "
            "(faults.inject, heal, attachFailure)"
        )
    if is_dra_gate(need):
        if env.feature_gates is None or env.feature_gates.get(need):
            return None
        state = "off" if need in env.feature_gates else "not known"
        return (
            f"feature gate {need} is {state} in the cluster's API server (turn it on in the API "
            "server, scheduler and controller manager: --feature-gates " + need + "=true)"
        )
    if need == "DeviceTaintRule":
        if not env.served_known or "DeviceTaintRule" in env.served_kinds:
            return None
        return "the cluster does not serve DeviceTaintRule"
    raise ValueError(f"rule need {need!r} is not known to the suite")


def _unknown(need: str, env: Environment) -> str | None:
    """What ``need`` depends on that ``env`` does not know yet, or None."""
    if need == "DeviceTaintRule" and not env.served_known:
        return "the cluster serves DeviceTaintRule"
    if is_dra_gate(need) and env.feature_gates is None:
        return f"the cluster has feature gate {need} on"
    return None


CONFIG_ENV_RULES = (
    "PREP-CONFIG-CLASS",
    "PREP-CONFIG-PRECEDENCE",
    "PREP-CONFIG-SCOPE",
    "PREP-CONFIG-SUBREQUEST",
    "SHARE-STRATEGY",
)
"""The rules that judge a config by what a container shows (``configs.valid.*.env``, or
``classEnv`` / ``claimEnv`` for the place the config is given in)."""


def bare_configs(profile: DriverProfile) -> list[str]:
    """The names of the profile's valid configs that say nothing a container shows (no ``env``,
    ``classEnv`` or ``claimEnv``)."""
    return [name for name, config in profile.configs.valid.items() if not config.shows_env]


def gaps(profile: DriverProfile) -> dict[str, str]:
    """The rules that run on ``profile`` but cannot check all they claim for want of a setting, by
    id, with what is missing. A valid config with an empty ``env`` gives the rules that judge a
    config by what a container shows (:data:`CONFIG_ENV_RULES`) nothing to look for: they skip
    with this reason (SHARE-STRATEGY after checking that the config is accepted), never pass."""
    bare = bare_configs(profile)
    if not bare:
        return {}
    names = ", ".join(f"configs.valid.{name}.env" for name in bare)
    why = f"profile {profile.name} gives no env a container shows for a config ({names} empty)"
    return dict.fromkeys(CONFIG_ENV_RULES, why)


def _alternatives(need: str) -> list[str]:
    return [n.strip() for n in need.split("|")]


def _since(rule: Rule) -> int:
    return parse_minor(rule.since) if rule.since != "-" else 0


def missing(rule: Rule, env: Environment) -> str | None:
    """Why ``rule`` cannot be checked in ``env`` (the first need that is not met), or None.

    What ``env`` does not know (version 0, kinds not :attr:`~Environment.served_known`) counts as met.
    """
    since = _since(rule)
    if since and env.k8s_minor and env.k8s_minor < since:
        return f"needs Kubernetes 1.{since}+ ({rule.since}); the cluster runs {env.k8s_version}"
    for need in rule.needs:
        reasons = [lacking(n, env) for n in _alternatives(need)]
        if all(reasons):
            return "; ".join(r for r in reasons if r)
    return None


def assumed(rule: Rule, env: Environment) -> list[str]:
    """What :func:`missing` took on trust for ``rule`` because ``env`` does not know it yet: each
    a condition on the cluster ("the cluster runs Kubernetes 1.36+ (DRADeviceTaints, beta; GA
    1.37)"); empty when none."""
    out = []
    since = _since(rule)
    if since > DRA_V1_MINOR and not env.k8s_minor:
        gate = re.sub(r"^v?1\.\d+\s*", "", rule.since)  # "(DRADeviceTaints)", or nothing
        out.append(f"the cluster runs Kubernetes 1.{since}+ {gate}".rstrip())
    for need in rule.needs:
        met = [n for n in _alternatives(need) if lacking(n, env) is None]
        unknown = [u for n in met if (u := _unknown(n, env))]
        if met and len(unknown) == len(met):
            out.append(" or ".join(unknown))
    return out
