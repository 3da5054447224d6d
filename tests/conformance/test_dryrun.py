"""The dry run (``runner.plan``): which rules a run of a profile on a cluster backend would check
or skip, judged by the suite's own needs logic (``harness.missing``), with what only a running
cluster can tell (served kinds, an unknown version) named as conditions."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from clusters.external import ExternalCluster
from clusters.k3s import K3S_CAPABILITIES
from clusters.kind import KIND_CAPABILITIES
from clusters.local.cluster import LOCAL_CAPABILITIES
from conformance import profiles
from conformance.catalogue import RULES, by_id
from conformance.errors import UsageError
from conformance.harness import Environment, assumed, missing
from conformance.runner import backend_version, plan

ABILITIES = {"local": LOCAL_CAPABILITIES, "kind": KIND_CAPABILITIES, "k3s": K3S_CAPABILITIES}


@pytest.mark.parametrize("cluster", ["local", "kind", "k3s"])
@pytest.mark.parametrize("name", ["reference-gpu", "reference-l4", "reference-mig"])
def test_the_plan_skips_what_the_dra_fixture_skips(cluster: str, name: str) -> None:
    profile = profiles.load(name)
    # what the fixture sees on a cluster that serves everything, of the backend's version
    version = backend_version(cluster)
    minor = int(version.split(".")[1])
    env = Environment(profile, cluster, ABILITIES[cluster], minor, version, served_kinds=("DeviceTaintRule",))
    planned = plan(profile, cluster, version)
    assert [p.rule.id for p in planned] == [r.id for r in RULES]
    assert {p.rule.id: p.skip for p in planned} == {r.id: missing(r, env) or "" for r in RULES}


def test_an_external_cluster_has_what_the_profile_commands_give() -> None:
    profile = profiles.load("nvidia-gpu")
    planned = {p.rule.id: p for p in plan(profile, "external")}
    given = profile.external.given()
    # the abilities the backend itself would have with those commands
    kubeconfig = profiles.SHIPPED_DIR / "nvidia-gpu.yaml"  # any file: the constructor only checks it exists
    abilities = ExternalCluster(kubeconfig, commands=given).capabilities
    env = Environment(profile, "external", abilities, 0, "", served_known=False)
    assert {i: p.skip for i, p in planned.items()} == {r.id: missing(r, env) or "" for r in RULES}
    assert "cannot reach the driver's sockets on a node (grpc)" in planned["REG-GETINFO"].skip


@pytest.mark.parametrize(
    "probe", [{"probeAddress": "where {node} {kubeconfig}"}, {"probeNamespace": "dra-probe"}]
)
def test_a_node_probe_gives_an_external_cluster_the_driver_sockets(probe: dict[str, str]) -> None:
    data = yaml.safe_load((profiles.SHIPPED_DIR / "nvidia-gpu.yaml").read_text())
    data["external"] = {**data["external"], **probe}
    profile = profiles.parse(data, "probe.yaml")
    planned = {p.rule.id: p for p in plan(profile, "external")}
    assert planned["REG-GETINFO"].skip == "" and planned["PREP-CDI-SPEC"].skip == ""
    kubeconfig = profiles.SHIPPED_DIR / "nvidia-gpu.yaml"  # any file: the constructor only checks it exists
    cluster = ExternalCluster(
        kubeconfig, commands=profile.external.given(), probe_namespace=profile.external.probe_namespace
    )
    assert "grpc" in cluster.capabilities


def test_what_only_the_cluster_can_tell_is_a_condition() -> None:
    profile = profiles.load("nvidia-gpu")  # does not claim taints: DeviceTaintRule must do
    env = Environment(profile, "external", frozenset(), 0, "", served_known=False)
    assert assumed(by_id("ALLOC-TAINT-NOSCHEDULE"), env) == [
        "the cluster runs Kubernetes 1.36+ (DRADeviceTaints, beta; GA 1.37)",
        "the cluster serves DeviceTaintRule",
    ]
    assert assumed(by_id("ALLOC-ONE"), env) == []  # 1.34: every cluster the suite runs on is that new
    known = Environment(profile, "external", frozenset(), 36, "v1.36.0", served_kinds=("DeviceTaintRule",))
    assert assumed(by_id("ALLOC-TAINT-NOSCHEDULE"), known) == []
    older = plan(profile, "external", "1.34.1", [by_id("ALLOC-TAINT-NOSCHEDULE")])[0]
    assert (
        older.skip
        == "needs Kubernetes 1.36+ (1.36 (DRADeviceTaints, beta; GA 1.37)); the cluster runs 1.34.1"
    )


def test_known_failures_run_with_their_reason_and_bad_input_is_refused() -> None:
    profile = profiles.load("reference-gpu")
    mine = replace(profile, known_failures={"REG-FUZZ": "issue 12"})
    (fuzz,) = plan(mine, "local", "1.37.2", [by_id("REG-FUZZ")])
    assert (fuzz.skip, fuzz.known_failure) == ("", "issue 12")
    with pytest.raises(UsageError, match="--cluster 'docker' is not one of local, kind, k3s, external"):
        plan(profile, "docker")
    with pytest.raises(UsageError, match="--k8s-version 'latest'"):
        backend_version("local", "latest")


def test_a_feature_gate_need_is_judged_by_the_api_server_gates() -> None:
    profile = profiles.load("reference-gpu")
    rule = by_id("ALLOC-COMPAT-GROUPS")
    gate = "DRADeviceCompatibilityGroups"

    def env(gates: dict[str, bool] | None) -> Environment:
        return Environment(profile, "local", frozenset(), 37, "v1.37.2", feature_gates=gates)

    assert missing(rule, env({gate: True})) is None
    assert missing(rule, env({gate: False})) == (
        f"feature gate {gate} is off in the cluster's API server (turn it on in the API server, scheduler "
        f"and controller manager: --feature-gates {gate}=true)"
    )
    assert "is not known" in (missing(rule, env({"DRAConsumableCapacity": True})) or "")
    assert missing(rule, env(None)) is None
    assert assumed(rule, env(None)) == [f"the cluster has feature gate {gate} on"]
    assert assumed(rule, env({gate: True})) == []
