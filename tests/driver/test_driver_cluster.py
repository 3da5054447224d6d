"""The driver process on a real local API server: slices, claims read, health taints, slices removed.

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
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from clusters.local.binaries import Binaries
from clusters.local.controlplane import ControlPlane
from draproto import dra_v1_pb2, dra_v1_pb2_grpc

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DRIVER = "gpu.dra-conformance.io"
NODE = "drv-node"


@pytest.fixture(scope="module")
def control_plane(local_binaries: Binaries) -> Iterator[ControlPlane]:
    with tempfile.TemporaryDirectory(prefix="drv-cp-") as root:
        cp = ControlPlane(local_binaries, Path(root))
        try:
            yield cp.start()
        finally:
            cp.stop()


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Iterator[Any]:
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    client.CoreV1Api(api_client).create_node(client.V1Node(metadata=client.V1ObjectMeta(name=NODE)))
    yield api_client
    api_client.close()


def _until(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _slices(api: Any) -> list[dict[str, Any]]:
    from kubernetes import client

    response = client.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={NODE}", _preload_content=False
    )
    items: list[dict[str, Any]] = json.loads(response.data)["items"]
    return items


def _device(api: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        d for s in _slices(api) for d in s["spec"].get("devices", []) if d["name"] == name
    )
    return found


def test_driver_publishes_prepares_from_the_api_and_cleans_up(control_plane: ControlPlane, api: Any) -> None:
    from kubernetes import client

    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="drv"))
    args = [
        sys.executable, "-m", "driver", "--node-name", NODE, "--backend", "fake", "--fake-profile", "l4x4",
        "--fake-state-dir", str(root / "fake"), "--kubeconfig", str(control_plane.kubeconfig),
        "--registry-dir", str(root / "reg"), "--plugin-dir", str(root / "plugin"),
        "--cdi-dir", str(root / "cdi"),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRA_GPU_", "FAKEGPU_"))}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        slices = _until("the node's ResourceSlices", lambda: _slices(api))
        devices = {d["name"] for s in slices for d in s["spec"].get("devices", [])}
        assert devices == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
        assert {s["spec"]["pool"]["name"] for s in slices} == {NODE}

        custom = client.CustomObjectsApi(api)
        claim = custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "one"},
                "spec": {"devices": {"requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.dra-conformance.io"}}]}},
            },
        )  # fmt: skip
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-1"}],
                    "config": [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {
                        "apiVersion": "gpu.dra-conformance.io/v1", "kind": "GpuConfig",
                        "sharing": {"strategy": "TimeSlicing"}}}}],
                }
            }
        }  # fmt: skip
        custom.replace_namespaced_custom_object_status(
            "resource.k8s.io", "v1", "default", "resourceclaims", "one", claim
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
            gone = dra_v1_pb2.Claim(namespace="default", uid="not-" + uid, name="nope")
            missing = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[gone]), timeout=45
            )
            assert "not found" in missing.claims["not-" + uid].error
            undo = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref]), timeout=45
            )
            assert undo.claims[uid].error == ""

        # health drives the taints: a GPU that falls off the bus is tainted NoExecute, and healed, not
        fake = [sys.executable, "-m", "fakegpu", "--state-dir", str(root / "fake")]
        subprocess.run([*fake, "inject", "lost", "2"], env=env, check=True, capture_output=True, timeout=60)
        taints = _until("a taint on gpu-2", lambda: _device(api, "gpu-2").get("taints"))
        assert [(t["key"], t["value"], t["effect"]) for t in taints] == [
            (f"{DRIVER}/unhealthy", "gpu-lost", "NoExecute")
        ]
        assert "taints" not in _device(api, "gpu-1")
        subprocess.run([*fake, "heal", "2"], env=env, check=True, capture_output=True, timeout=60)
        _until("gpu-2 without taints", lambda: "taints" not in _device(api, "gpu-2"))

        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr.decode()[-3000:]
        assert _slices(api) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        shutil.rmtree(root, ignore_errors=True)
