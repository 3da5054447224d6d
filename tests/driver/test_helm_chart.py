"""The driver's Helm chart (driver/deploy/helm/dra-gpu-driver), rendered by Helm itself.

Helm's own engine renders the chart, as `helm template` would: the `helm-python-sdk` package of
the dev extra ships Helm's Go SDK as a shared library, so no `helm` binary is needed. Without it
this module skips. Each rendered object is then read into the kubernetes client's models and
written back: a field the API does not know is lost on the way and fails the comparison, and a
missing required field fails the reading. The example manifests of driver/deploy/examples (the
ones its README uses) get the same check.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from driver import access
from driver import settings as driver_settings
from tests import kube

helm = pytest.importorskip(
    "helm_python",
    reason="helm-python-sdk (in the dev extra: pip install -e '.[dev]') renders the chart with Helm's engine",
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "driver" / "deploy" / "helm" / "dra-gpu-driver"
INTERFACES = ROOT / "docs" / "interfaces.md"
EXAMPLES = ROOT / "driver" / "deploy" / "examples"
RELEASE = "dra-gpu-driver"
NAMESPACE = "dra-system"
DRIVER = "gpu.dra-conformance.io"

MODELS = {
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("resource.k8s.io/v1", "DeviceClass"): "V1DeviceClass",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "V1ValidatingAdmissionPolicy",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "V1ValidatingAdmissionPolicyBinding"
    ),
}

NVML_VALUES: dict[str, Any] = {
    "backend": "nvml",
    "health": False,
    "deviceKinds": ["gpu", "mig", "partitionable-mig"],
    "logFormat": "json",
    "runtimeClassName": "nvidia",
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "imagePullSecrets": [{"name": "registry"}],
}
VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "nvml": NVML_VALUES,
    "other-driver-name": {"driverName": "accel.example.com", "image": {"tag": "dev"}},
    "consumable": {"gpuSharing": "consumable", "consumableGpus": "0,4-7"},
    "informational-taints": {"informationalTaints": 10},
    "attach-on-demand": {"attachOnDemand": "2"},
    "device-metadata": {"deviceMetadata": True},
    "list-attributes": {"listAttributes": True},
    "license-seats": {"licenseSeats": True},
    "host-memory-overhead": {"hostMemoryOverhead": "partition=256Mi"},
    "compatibility-groups": {"deviceKinds": ["gpu", "partitionable-mig"], "compatibilityGroups": True},
    "nothing-optional": {"deviceClasses": {"enabled": False}, "admissionPolicy": {"enabled": False}},
}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Render the chart as `helm template dra-gpu-driver CHART -n dra-system` does."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[dict[str, Any]] = []
    for path in sorted(manifests):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(manifests[path]) if doc)
    return objects


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = of_kind(objects, kind)
    return found


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    driver: dict[str, Any]
    (driver,) = only(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return driver


def env_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects)["env"]}


def documented_flags() -> set[str]:
    """The driver's flags, from the flag table of docs/interfaces.md."""
    flags: set[str] = set()
    for line in INTERFACES.read_text().splitlines():
        if line.startswith("| `--"):
            flags.update(re.findall(r"`(--[a-z][a-z-]*)", line.split("|")[1]))
    return flags


def test_chart_lints_clean() -> None:
    report = helm.lint(CHART, strict=True, namespace=NAMESPACE, kube_version="v1.37.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_object_reads_into_the_api_models_unchanged(values: dict[str, Any] | None) -> None:
    api = client.ApiClient()
    objects = render(values)
    assert objects
    for obj in objects:
        model = MODELS.get((obj["apiVersion"], obj["kind"]))
        assert model, f"unexpected object {obj['apiVersion']}/{obj['kind']}"
        parsed = api.deserialize(json.dumps(obj), model, None)
        assert kube.to_json(parsed) == obj


def test_default_objects() -> None:
    names = {(obj["kind"], obj["metadata"]["name"]) for obj in render()}
    assert names == {
        ("ServiceAccount", RELEASE),
        ("DaemonSet", RELEASE),
        ("ClusterRole", RELEASE),
        ("ClusterRoleBinding", RELEASE),
        ("DeviceClass", "gpu.dra-conformance.io"),
        ("DeviceClass", "mig.dra-conformance.io"),
        ("DeviceClass", "license.dra-conformance.io"),
        ("ValidatingAdmissionPolicy", f"{RELEASE}-resourceslices"),
        ("ValidatingAdmissionPolicyBinding", f"{RELEASE}-resourceslices"),
    }
    for obj in of_kind(render(), "ServiceAccount") + of_kind(render(), "DaemonSet"):
        assert obj["metadata"]["namespace"] == NAMESPACE


def test_optional_objects_can_be_left_out() -> None:
    kinds = {obj["kind"] for obj in render(VALUE_SETS["nothing-optional"])}
    assert kinds == {"ServiceAccount", "DaemonSet", "ClusterRole", "ClusterRoleBinding"}


def test_daemonset_mounts_only_the_registry_its_own_plugin_dir_and_the_cdi_dir() -> None:
    objects = render()
    pod = only(objects, "DaemonSet")["spec"]["template"]["spec"]
    driver = container(objects)
    assert pod["serviceAccountName"] == only(objects, "ServiceAccount")["metadata"]["name"]

    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in driver["volumeMounts"]}
    # Each host path is mounted at the same path, where the driver's defaults look.
    assert {name: mounts[name] for name in host_paths} == host_paths
    assert set(host_paths.values()) == {
        "/var/lib/kubelet/plugins_registry",
        f"/var/lib/kubelet/plugins/{DRIVER}",  # its own dir only, not every plugin's
        "/var/run/cdi",
        "/var/lib/dra-gpu-driver/fakegpu",
    }
    # this pod's registration socket: the driver names it by the pod's UID (DRA_GPU_POD_UID)
    assert driver["readinessProbe"]["exec"]["command"] == [
        "sh",
        "-c",
        f'test -S "/var/lib/kubelet/plugins_registry/{DRIVER}-'
        '$(printf %s "$DRA_GPU_POD_UID" | tr -d - | cut -c1-12)-reg.sock"',
    ]


def test_fake_backend_runs_unprivileged_with_no_capabilities_and_a_read_only_root() -> None:
    driver = container(render())
    security = driver["securityContext"]
    assert security.get("privileged", False) is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    writable = {m["mountPath"] for m in driver["volumeMounts"] if not m.get("readOnly")}
    assert "/tmp" in writable  # the one scratch dir a read-only root leaves


def test_nvml_backend_alone_is_privileged() -> None:
    driver = container(render(NVML_VALUES))
    assert driver["securityContext"]["privileged"] is True  # MIG instances, /dev/nvidia*
    assert driver["securityContext"]["readOnlyRootFilesystem"] is True


def test_daemonset_passes_the_node_name_and_settings_the_driver_documents() -> None:
    objects = render(NVML_VALUES)
    env = env_of(objects)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}

    flags = documented_flags()
    assert "--driver-name" in flags  # the table was found
    for name in env:
        if name.startswith("DRA_GPU_"):
            flag = "--" + name.removeprefix("DRA_GPU_").lower().replace("_", "-")
            assert flag in flags, f"{name} is no DRA_GPU_* variable of docs/interfaces.md"
    for arg in container(objects)["args"]:
        assert arg.split("=")[0] in flags


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_driver_reads_the_daemonset_as_meant(values: dict[str, Any] | None) -> None:
    """The driver's own settings parser, given the container's args and env, agrees with the chart."""
    objects = render(values)
    driver = container(objects)
    env = {e["name"]: e["value"] for e in driver["env"] if "value" in e}
    env["NODE_NAME"] = "node-a"  # what the downward API gives
    settings = driver_settings.from_args(driver["args"], env)
    merged = {**(yaml.safe_load((CHART / "values.yaml").read_text())), **(values or {})}

    assert settings.node_name == "node-a"
    assert settings.kubeconfig is None  # in-cluster
    assert settings.driver_name == merged["driverName"]
    assert settings.backend.kind == merged["backend"]
    assert settings.backend.device_kinds == frozenset(merged["deviceKinds"])
    assert settings.backend.gpu_sharing == merged["gpuSharing"]
    gpus = {"": None, "0,4-7": frozenset({0, 4, 5, 6, 7})}[merged["consumableGpus"]]
    assert settings.backend.consumable_gpus == gpus
    assert settings.backend.attached_gpus == {"": frozenset(), "2": frozenset({2})}[merged["attachOnDemand"]]
    assert settings.device_metadata is merged["deviceMetadata"]
    assert settings.backend.compatibility_groups is merged["compatibilityGroups"]
    assert settings.backend.list_attributes is merged["listAttributes"]
    assert settings.backend.license_seats is merged["licenseSeats"]
    overhead = {"": {}, "partition=256Mi": {"partition": 256 * 2**20}}[merged["hostMemoryOverhead"]]
    assert settings.backend.host_memory_overhead == overhead
    assert settings.health.enabled is merged["health"]
    assert settings.health.informational_seconds == merged["informationalTaints"]
    assert settings.log_format == merged["logFormat"]
    assert not settings.keep_slices
    assert not settings.break_rules

    mounted = {Path(m["mountPath"]) for m in driver["volumeMounts"]}
    used = [settings.kubelet.registry_dir, settings.kubelet.plugin_dir, settings.kubelet.cdi_dir]
    if merged["backend"] == "fake":
        assert settings.backend.fake_profile == merged["fakeProfile"]
        assert settings.backend.fake_state_dir == Path(merged["fakeStateDir"])
        used.append(settings.backend.fake_state_dir)
    for path in used:
        assert any(path == m or m in path.parents for m in mounted), f"{path} is not on a host path"
    probe = driver["readinessProbe"]["exec"]["command"]
    uid = "e5c9b447-4440-4f2b-9c1e-0123456789ab"
    shown = subprocess.run(
        ["sh", "-c", probe[-1].replace("test -S", "echo", 1)],
        env={"DRA_GPU_POD_UID": uid, "PATH": os.defpath},
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert shown == str(dataclasses.replace(settings, pod_uid=uid).registration_socket)


def test_fake_backend_settings_reach_the_driver() -> None:
    objects = render({"fakeProfile": "dgx-a100", "deviceKinds": ["gpu", "mig"], "logFormat": "json"})
    env = env_of(objects)
    assert env["DRA_GPU_DRIVER_NAME"] == DRIVER
    assert env["DRA_GPU_BACKEND"] == "fake"
    assert env["DRA_GPU_FAKE_PROFILE"] == "dgx-a100"
    assert env["DRA_GPU_FAKE_STATE_DIR"] == "/var/lib/dra-gpu-driver/fakegpu"
    assert env["DRA_GPU_DEVICE_KINDS"] == "gpu,mig"
    assert env["DRA_GPU_LOG_FORMAT"] == "json"
    assert container(objects)["args"] == ["--health"]
    assert container(objects)["image"] == "dra-gpu-driver:0.1.0"


def test_nvml_backend_has_no_fake_machine() -> None:
    objects = render(NVML_VALUES)
    pod = only(objects, "DaemonSet")["spec"]["template"]["spec"]
    env = env_of(objects)
    assert env["DRA_GPU_BACKEND"] == "nvml"
    assert not [name for name in env if name.startswith("DRA_GPU_FAKE_")]
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert "/var/lib/dra-gpu-driver/fakegpu" not in host_paths
    assert env["DRA_GPU_DEVICE_KINDS"] == "gpu,mig,partitionable-mig"
    assert container(objects)["args"] == ["--no-health"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == NVML_VALUES["nodeSelector"]
    assert pod["tolerations"] == NVML_VALUES["tolerations"]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]


def _grants(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in only(objects, "ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_grants_only_what_the_driver_uses() -> None:
    objects = render()
    grants = _grants(objects)
    # KubeSliceStore: list (and list?watch), create, replace, delete; ApiClaimSource: get, and
    # status.devices by apply (patch) or replace (update); node_uid: get
    slice_verbs = ["list", "watch", "create", "update", "delete"]
    assert grants == {
        ("resource.k8s.io", "resourceclaims", "get"),
        *{("resource.k8s.io", "resourceclaims/status", verb) for verb in ("patch", "update")},
        *{
            ("resource.k8s.io", "resourceclaims/driver", f"associated-node:{verb}")
            for verb in ("patch", "update")
        },
        ("", "nodes", "get"),
        *{("resource.k8s.io", "resourceslices", verb) for verb in slice_verbs},
    }
    rules = only(objects, "ClusterRole")["rules"]
    assert [r.get("resourceNames") for r in rules if "resourceclaims/driver" in r["resources"]] == [[DRIVER]]
    assert all("resourceNames" not in r for r in rules if "resourceclaims/driver" not in r["resources"])
    other = only(render({"driverName": "accel.example.com"}), "ClusterRole")["rules"]
    assert [r.get("resourceNames") for r in other if "resourceclaims/driver" in r["resources"]] == [
        ["accel.example.com"]
    ]
    binding = only(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == only(objects, "ClusterRole")["metadata"]["name"]
    # the attacher of GPUs attached on demand watches every claim (driver.binding)
    watching = _grants(render({"attachOnDemand": "2"})) - grants
    assert watching == {("resource.k8s.io", "resourceclaims", verb) for verb in ("list", "watch")}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]


@pytest.mark.parametrize(
    ("driver_name", "domain"),
    [(DRIVER, "dra-conformance.io"), ("accel.example.com", "accel.example.com")],
)
def test_device_classes_select_the_driver_devices_by_type(driver_name: str, domain: str) -> None:
    specs = {
        obj["metadata"]["name"]: obj["spec"]
        for obj in of_kind(render({"driverName": driver_name}), "DeviceClass")
    }
    assert {name: spec.get("extendedResourceName") for name, spec in specs.items()} == {
        f"gpu.{domain}": f"{driver_name}/gpu",
        f"mig.{domain}": None,
        f"license.{domain}": None,
    }
    classes = {name: spec["selectors"] for name, spec in specs.items()}
    assert classes == {
        f"{kind}.{domain}": [
            {
                "cel": {
                    "expression": f'device.driver == "{driver_name}" && '
                    f'device.attributes["{driver_name}"].type == "{kind}"'
                }
            }
        ]
        for kind in ("gpu", "mig", "license")
    }


@pytest.mark.parametrize("driver_name", [DRIVER, "accel.example.com"])
def test_device_classes_equal_what_the_driver_program_prints(driver_name: str) -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "driver", "device-classes", "--driver-name", driver_name],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    from_chart = of_kind(render({"driverName": driver_name}), "DeviceClass")
    for obj in from_chart:
        del obj["metadata"]["labels"]  # the chart's release labels; the rest must be equal
    assert from_chart == list(yaml.safe_load_all(printed))


def test_admission_policy_keeps_the_driver_to_its_own_node() -> None:
    objects = render()
    policy = only(objects, "ValidatingAdmissionPolicy")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourceslices"],
        }
    ]
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{RELEASE}"'
    )
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "request.userInfo.extra[?'authentication.kubernetes.io/node-name']" in variables["userNodeName"]
    assert ".spec.?nodeName" in variables["objectNodeName"]
    assert "oldObject" in variables["objectNodeName"]  # a DELETE has no object, only oldObject
    validations = [v["expression"] for v in spec["validations"]]
    assert "variables.userNodeName != ''" in validations
    assert "variables.userNodeName == variables.objectNodeName" in validations

    binding = only(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


@pytest.mark.parametrize("attach", [False, True], ids=["plain", "attach-on-demand"])
def test_access_manifests_are_what_the_chart_installs(attach: bool) -> None:
    """``dra-gpu-driver access-manifests`` (the local tier's identity) and the chart agree."""
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
             "ValidatingAdmissionPolicyBinding")  # fmt: skip
    values = {"attachOnDemand": "2"} if attach else None
    chart = {(o["kind"], o["metadata"]["name"]): o for o in render(values) if o["kind"] in kinds}
    ours = access.manifests(DRIVER, NAMESPACE, RELEASE, attach_on_demand=attach)
    assert ours[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    for obj in [*chart.values(), *ours]:
        obj["metadata"].pop("labels", None)
    assert {(o["kind"], o["metadata"]["name"]): o for o in ours[1:]} == chart
    audit = access.manifests(DRIVER, NAMESPACE, RELEASE, enforce=False)[-1]
    assert audit["spec"]["validationActions"] == ["Audit"]


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"backend": "cuda"}, "/backend"),
        ({"deviceKinds": ["gpu", "vgpu"]}, "/deviceKinds/1"),
        ({"deviceKinds": []}, "/deviceKinds"),
        ({"health": "yes"}, "/health"),
        ({"logFormat": "xml"}, "/logFormat"),
        ({"informationalTaints": -1}, "/informationalTaints"),
        ({"driverName": "Not A Name"}, "/driverName"),
    ],
)
def test_values_schema_rejects_what_the_driver_would(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(complaint)):
        render(values)


def test_example_pod_reads_into_the_api_models_and_uses_a_chart_class() -> None:
    api = client.ApiClient()
    example = list(yaml.safe_load_all((EXAMPLES / "gpu-pod.yaml").read_text()))
    models = {"ResourceClaimTemplate": "V1ResourceClaimTemplate", "Pod": "V1Pod"}
    for obj in example:
        parsed = api.deserialize(json.dumps(obj), models[obj["kind"]], None)
        assert kube.to_json(parsed) == obj
    (template,) = of_kind(example, "ResourceClaimTemplate")
    classes = {obj["metadata"]["name"] for obj in of_kind(render(), "DeviceClass")}
    for request in template["spec"]["spec"]["devices"]["requests"]:
        assert request["exactly"]["deviceClassName"] in classes


def test_example_kind_cluster_has_workers_for_the_driver() -> None:
    cluster = yaml.safe_load((EXAMPLES / "kind.yaml").read_text())
    assert cluster["kind"] == "Cluster"
    assert [node["role"] for node in cluster["nodes"]].count("worker") >= 1


def test_the_values_kind_and_k3s_install_render_a_fake_driver_on_the_pods_state_dir() -> None:
    """clusters.release.DriverRelease: the values the kind and k3s backends hand to helm."""
    from clusters.release import FAKE_ROOT, DriverRelease

    values = DriverRelease(fake_profile="l4x4", device_kinds=("gpu", "mig")).values()
    objects = render(values)
    env = env_of(objects)
    assert env["DRA_GPU_BACKEND"] == "fake" and env["DRA_GPU_FAKE_PROFILE"] == "l4x4"
    assert env["DRA_GPU_FAKE_STATE_DIR"] == f"{FAKE_ROOT}/gpus" and env["DRA_GPU_DEVICE_KINDS"] == "gpu,mig"
    driver = container(objects)
    assert driver["name"] == "driver"  # the container the backends exec the fakegpu CLI in
    assert driver["image"] == "dra-gpu-driver:0.1.0" and driver["imagePullPolicy"] == "Never"
    mounts = {m["mountPath"] for m in driver["volumeMounts"]}
    assert f"{FAKE_ROOT}/gpus" in mounts
    labels = only(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "dra-gpu-driver"  # DriverRelease.selector
