"""Reading feature gates and controllers from a binary's --help text."""

from __future__ import annotations

from clusters.local import features

HELP = """
      --feature-gates colonSeparatedMultimapStringString
                Comma-separated list of component:key=value pairs that describe feature gates. Options are:
                kube:APIResponseCompression=true|false (BETA - default=true)
                kube:AllAlpha=true|false (ALPHA - default=false)
                kube:DRAConsumableCapacity=true|false (BETA - default=true)
                kube:DRADeviceTaints=true|false (ALPHA - default=false)
                kube:DRAOldThing=true|false (DEPRECATED - default=false)
                kube:ResourceHealthStatus=true|false (ALPHA - default=false)
                kube:DRAAdminAccess=true|false (GA - default=true)
      --controllers strings     A list of controllers to enable. '*' enables all on-by-default controllers,
                'foo' enables the controller named 'foo', '-foo' disables the controller named 'foo'.
                All controllers: bootstrap-signer-controller, device-taint-eviction-controller,
                garbage-collector-controller, namespace-controller, node-lifecycle-controller,
                resourceclaim-controller, root-ca-certificate-publisher-controller,
                serviceaccount-controller, serviceaccount-token-controller
                Disabled-by-default controllers: bootstrap-signer-controller (default [*])
      --kubeconfig string
"""


def test_gates_parsed_with_stage_and_default() -> None:
    gates = features.parse_feature_gates(HELP)
    assert gates["DRAConsumableCapacity"] == features.FeatureGate("DRAConsumableCapacity", "BETA", True)
    assert gates["ResourceHealthStatus"].stage == "ALPHA"
    assert len(gates) == 7


def test_dra_gates_are_alpha_or_beta_and_common_to_all() -> None:
    one = features.parse_feature_gates(HELP)
    other = {k: v for k, v in one.items() if k != "DRADeviceTaints"}
    assert features.dra_gates([one]) == {
        "DRAConsumableCapacity": True,
        "DRADeviceTaints": True,
        "ResourceHealthStatus": True,
    }
    assert "DRADeviceTaints" not in features.dra_gates([one, other])


def test_generic_workload_for_the_control_plane_where_beta_and_never_for_kubelets() -> None:
    beta = {"GenericWorkload": features.FeatureGate("GenericWorkload", "BETA", False)}
    alpha = {"GenericWorkload": features.FeatureGate("GenericWorkload", "ALPHA", False)}
    one = features.parse_feature_gates(HELP)
    chosen = features.dra_gates([{**one, **beta}])
    assert chosen["GenericWorkload"] is True
    assert "GenericWorkload" not in features.dra_gates([{**one, **alpha}])  # 1.35-1.36: another API
    on = {**chosen, "DRAWorkloadResourceClaims": True}
    assert features.kubelet_gates(on) == {
        "DRAConsumableCapacity": True,
        "DRADeviceTaints": True,
        "ResourceHealthStatus": True,
    }
    assert "scheduling.k8s.io/v1beta1" in features.RUNTIME_CONFIG_CANDIDATES


def test_controllers_parsed_and_chosen() -> None:
    available, off = features.parse_controllers(HELP)
    assert "resourceclaim-controller" in available
    assert off == ["bootstrap-signer-controller"]
    chosen = features.choose_controllers(available)
    assert "node-lifecycle-controller" not in chosen
    assert chosen[:2] == ["resourceclaim-controller", "namespace-controller"]
    assert "device-taint-eviction-controller" in chosen
    assert features.choose_controllers(["resourceclaim", "namespace"]) == ["resourceclaim", "namespace"]
