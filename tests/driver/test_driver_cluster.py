"""The driver process on a real local API server: slices, claims, health taints, cleanup, chart RBAC.

Needs the local control-plane binaries (``cluster`` marker); no scheduler decisions are
needed: the test writes the claim's allocation itself, as the scheduler would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from clusters.local.controlplane import ControlPlane
from draproto import dra_v1_pb2, dra_v1_pb2_grpc
from tests import kube, manifests
from tests.driver.test_helm_chart import only, render
from tests.polling import until
from tests.procs import signal_a_side_thread

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DRIVER = "gpu.dra-conformance.io"
NODE = "drv-node"


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Iterator[Any]:

    api_client = kube.admin_client(control_plane.kubeconfig)
    kube.core(api_client).create_node({"metadata": {"name": NODE}})
    yield api_client
    api_client.close()


def _slices(api: Any) -> list[dict[str, Any]]:

    response = kube.resource(api).list_resource_slice(
        field_selector=f"spec.nodeName={NODE}", _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(response.data)["items"]
    return items


def _device(api: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        d for s in _slices(api) for d in s["spec"].get("devices", []) if d["name"] == name
    )
    return found


ENV = {k: v for k, v in os.environ.items() if not k.startswith(("DRA_GPU_", "FAKEGPU_"))}


def _start_driver(root: Path, kubeconfig: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "driver", "--node-name", NODE, "--backend", "fake", "--fake-profile", "l4x4",
        "--fake-state-dir", str(root / "fake"), "--kubeconfig", str(kubeconfig),
        "--registry-dir", str(root / "reg"), "--plugin-dir", str(root / "plugin"),
        "--cdi-dir", str(root / "cdi"), "--log-format", "json",
    ]  # fmt: skip
    return subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _allocated_claim(api: Any, name: str, device: str, config: list[dict[str, Any]]) -> dict[str, Any]:
    """A ResourceClaim with the allocation the scheduler would have written."""
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)  # raw JSON in and out
    claim: dict[str, Any] = custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims",
        manifests.resource_claim("default", name, DRIVER),
    )  # fmt: skip
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}],
                "config": config,
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
        }
    }
    custom.replace_namespaced_custom_object_status(
        "resource.k8s.io", "v1", "default", "resourceclaims", name, claim
    )
    return claim


def _status_devices(api: Any, name: str) -> list[dict[str, Any]]:
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)  # raw JSON
    claim = custom.get_namespaced_custom_object("resource.k8s.io", "v1", "default", "resourceclaims", name)
    return list((claim.get("status") or {}).get("devices") or [])


def test_driver_publishes_prepares_from_the_api_and_cleans_up(control_plane: ControlPlane, api: Any) -> None:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="drv"))
    env = ENV
    proc = _start_driver(root, control_plane.kubeconfig)
    try:
        slices = until(lambda: _slices(api), 30, "the node's ResourceSlices")
        devices = {d["name"] for s in slices for d in s["spec"].get("devices", [])}
        assert devices == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
        assert {s["spec"]["pool"]["name"] for s in slices} == {NODE}

        ts = {
            "apiVersion": "gpu.dra-conformance.io/v1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing"},
        }
        claim = _allocated_claim(
            api, "one", "gpu-1", [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": ts}}]
        )
        uid = claim["metadata"]["uid"]
        with grpc.insecure_channel(f"unix://{root / 'plugin' / 'dra.sock'}") as channel:
            stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
            ref = dra_v1_pb2.Claim(namespace="default", uid=uid, name="one")
            answer = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]), timeout=45
            )
            entry = answer.claims[uid]
            assert entry.error == ""
            assert [d.device_name for d in entry.devices] == ["gpu-1"]
            spec = json.loads((root / "cdi" / f"{DRIVER}-{uid}.json").read_text())
            assert "GPU_SHARING_STRATEGY=TimeSlicing" in spec["devices"][0]["containerEdits"]["env"]
            (status,) = _status_devices(api, "one")
            assert (status["driver"], status["pool"], status["device"]) == (DRIVER, NODE, "gpu-1")
            assert status["data"]["uuid"] == _device(api, "gpu-1")["attributes"]["uuid"]["string"]
            assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "True")]
            gone = dra_v1_pb2.Claim(namespace="default", uid="not-" + uid, name="nope")
            missing = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[gone]), timeout=45
            )
            assert "not found" in missing.claims["not-" + uid].error
            undo = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref]), timeout=45
            )
            assert undo.claims[uid].error == ""
            assert _status_devices(api, "one") == []

        # health drives the taints: a GPU that falls off the bus is tainted NoExecute, and healed, not
        fake = [sys.executable, "-m", "fakegpu", "--state-dir", str(root / "fake")]
        subprocess.run([*fake, "inject", "lost", "2"], env=env, check=True, capture_output=True, timeout=60)
        taints = until(lambda: _device(api, "gpu-2").get("taints"), 30, "a taint on gpu-2")
        assert [(t["key"], t["value"], t["effect"]) for t in taints] == [
            (f"{DRIVER}/unhealthy", "gpu-lost", "NoExecute")
        ]
        assert "taints" not in _device(api, "gpu-1")
        subprocess.run([*fake, "heal", "2"], env=env, check=True, capture_output=True, timeout=60)
        until(lambda: "taints" not in _device(api, "gpu-2"), 30, "gpu-2 without taints")

        # to a side thread (gRPC's, the publisher's): the kernel may pick any; the main one must wake
        signal_a_side_thread(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr.decode()[-3000:]
        assert _slices(api) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        shutil.rmtree(root, ignore_errors=True)


def _as_service_account(
    api: Any, admin: Path, namespace: str, account: str, bound: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A kubeconfig (as a dict) for the API server of ``admin`` with a token of a service account.

    ``bound``: the object the token is bound to, as JSON (a pod, whose node the token then names).
    Request bodies are JSON, not the client's models: a test that ran pytester before may have
    left two copies of a model class behind (its ``sys.modules`` restore), which the client's
    argument checks tell apart.
    """
    spec: dict[str, Any] = {"audiences": [], "boundObjectRef": bound}
    token = (
        kube.core(api)
        .create_namespaced_service_account_token(account, namespace, {"spec": spec})
        .status.token
    )
    config: dict[str, Any] = yaml.safe_load(admin.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = account
    return config


def test_driver_works_with_only_the_helm_charts_rbac(control_plane: ControlPlane, api: Any) -> None:
    """The chart's ClusterRole is all the driver needs: publish, watch, prepare, write the claim's
    status.devices (as a pod on the claim's node), clean up."""

    rules = only(render({"driverName": DRIVER}), "ClusterRole")["rules"]
    rbac = kube.rbac(api)
    rbac.create_cluster_role({"metadata": {"name": "drv-rbac-test"}, "rules": rules})
    kube.core(api).create_namespaced_service_account("default", {"metadata": {"name": "drv-rbac"}})
    # a token bound to a pod on the node: the API server lets it write status.devices of claims
    # allocated there (associated-node:patch)
    pod = kube.core(api).create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "drv-rbac"},
            "spec": {
                "nodeName": NODE,
                "serviceAccountName": "drv-rbac",
                "containers": [{"name": "d", "image": "x"}],
            },
        },
    )
    bound = {"kind": "Pod", "apiVersion": "v1", "name": "drv-rbac", "uid": pod.metadata.uid}
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "drv-rbac-test"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "drv-rbac-test",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "drv-rbac", "namespace": "default"}],
        }
    )
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="drv"))
    kubeconfig = root / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(_as_service_account(api, control_plane.kubeconfig, "default", "drv-rbac", bound))
    )
    proc = _start_driver(root, kubeconfig)
    try:
        until(lambda: _slices(api), 30, "the node's ResourceSlices")
        kube.resource(api).delete_resource_slice(_slices(api)[0]["metadata"]["name"])
        until(
            lambda: len(_slices(api)) == 1 and _slices(api)[0]["spec"]["pool"]["generation"] > 1,
            30,
            "the slice back (watch)",
        )
        # status.devices by apply, and by replace (a claim with an opaque config: driver/README.md)
        mps = {"apiVersion": "gpu.dra-conformance.io/v1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
        config = [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": mps}}]
        claims = {
            "rbac": _allocated_claim(api, "rbac", "gpu-0", []),
            "rbac-cfg": _allocated_claim(api, "rbac-cfg", "gpu-1", config),
        }
        refs = [
            dra_v1_pb2.Claim(namespace="default", uid=c["metadata"]["uid"], name=n) for n, c in claims.items()
        ]
        with grpc.insecure_channel(f"unix://{root / 'plugin' / 'dra.sock'}") as channel:
            stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
            answer = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=refs), timeout=45
            )
            assert [answer.claims[r.uid].error for r in refs] == ["", ""]
            assert [[d["device"] for d in _status_devices(api, n)] for n in claims] == [["gpu-0"], ["gpu-1"]]
            undo = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=refs), timeout=45
            )
            assert [undo.claims[r.uid].error for r in refs] == ["", ""]
            assert [_status_devices(api, n) for n in claims] == [[], []]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr.decode()[-3000:]
        assert _slices(api) == []
        assert b" 403 " not in stderr and b"Forbidden" not in stderr, stderr.decode()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        shutil.rmtree(root, ignore_errors=True)
        kube.core(api).delete_namespaced_pod("drv-rbac", "default", grace_period_seconds=0)


def _slice_body(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def test_admission_policy_lets_a_nodes_driver_write_only_its_own_slices(
    control_plane: ControlPlane, api: Any
) -> None:
    """The chart's ValidatingAdmissionPolicy, on a real API server, with a pod-bound token."""
    from kubernetes.client.exceptions import ApiException

    chart = pytest.importorskip("tests.driver.test_helm_chart", reason="helm-python-sdk renders the chart")
    render = chart.render
    namespace, account, mine, theirs = "dra-system", "dra-gpu-driver", "vap-node-a", "vap-node-b"
    core = kube.core(api)
    core.create_namespace({"metadata": {"name": namespace}})
    for node in (mine, theirs):
        core.create_node({"metadata": {"name": node}})
    wanted = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
              "ValidatingAdmissionPolicyBinding"}  # fmt: skip
    objects = [obj for obj in render() if obj["kind"] in wanted]
    assert {obj["kind"] for obj in objects} == wanted
    for obj in objects:
        kube.create_from_dict(api, obj, namespace)
    pod = core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "driver"},
            "spec": {
                "nodeName": mine,
                "serviceAccountName": account,
                "containers": [{"name": "d", "image": "x"}],
            },
        },
    )
    bound = {"kind": "Pod", "apiVersion": "v1", "name": "driver", "uid": pod.metadata.uid}
    kubeconfig = _as_service_account(api, control_plane.kubeconfig, namespace, account, bound)
    as_driver = kube.resource(kube.client_from_dict(kubeconfig))

    def refusal(node: str, name: str) -> str:
        try:
            as_driver.create_resource_slice(_slice_body(name, node))
        except ApiException as e:
            assert e.status in (403, 422), e
            return str(e.body)
        return ""

    def probe() -> str:
        # the policy takes a moment to be compiled and served; what got through meanwhile goes
        message = refusal(theirs, "vap-probe")
        if not message:
            kube.resource(api).delete_resource_slice("vap-probe")
        return message

    message = until(probe, 30, "the policy refusing another node's slice")
    assert f"may not write ResourceSlices of node {theirs}" in message
    assert refusal(mine, "vap-mine") == ""
    mine_slice = kube.resource(api).read_resource_slice("vap-mine")  # the driver may not get one
    mine_slice.spec.node_name = theirs
    with pytest.raises(ApiException) as err:
        as_driver.replace_resource_slice("vap-mine", mine_slice)
    assert err.value.status in (403, 422) and theirs in str(err.value.body)
    kube.resource(api).create_resource_slice(_slice_body("vap-theirs", theirs))
    with pytest.raises(ApiException) as err:
        as_driver.delete_resource_slice("vap-theirs")
    assert err.value.status in (403, 422)
    as_driver.delete_resource_slice("vap-mine")
    kube.resource(api).delete_resource_slice("vap-theirs")
