"""The companion NIC driver: its slice, and prepare over real gRPC on unix sockets (the API server's
answers are a dict here; the live path is ALLOC-TWO-DRIVERS in the self-tests)."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import draproto
from draproto import dra_v1_pb2, dra_v1_pb2_grpc, registration_pb2, registration_pb2_grpc
from nicdriver import CDI_KIND, NUMA_NODE, NicDriver, slice_manifest

NODE = "node-0"
DRIVER = "nic.dra-conformance.io"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"


class _Objects:
    """What the API server would answer, by path."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects

    def get(self, path: str, **_: Any) -> dict[str, Any] | None:
        return self.objects.get(path)


def _claim(name: str, uid: str, results: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }


@contextlib.contextmanager
def _serving(rest: _Objects) -> Iterator[tuple[NicDriver, Path]]:
    """A companion driver of two NICs asking ``rest``, serving its sockets under a short temp dir
    (socket paths: at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="nic-", dir="/tmp") as root:
        base = Path(root)
        driver = NicDriver(
            rest,  # type: ignore[arg-type]
            driver=DRIVER,
            node=NODE,
            registry_dir=base / "reg",
            plugin_dir=base / "plugin",
            cdi_dir=base / "cdi",
            nics=2,
            numa_nodes=2,
        )
        driver.start()
        try:
            yield driver, base
        finally:
            driver.stop()


@pytest.fixture
def nic() -> Iterator[tuple[NicDriver, _Objects, Path]]:
    objects = _Objects({})
    with _serving(objects) as (driver, base):
        yield driver, objects, base


def test_the_slice_spreads_the_nics_over_the_numa_nodes() -> None:
    body = slice_manifest(DRIVER, NODE, "uid-1", count=3, numa_nodes=2)
    devices = body["spec"]["devices"]
    assert [d["attributes"][NUMA_NODE]["int"] for d in devices] == [0, 1, 0]
    assert body["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_registration_names_the_driver_and_its_socket(nic: tuple[NicDriver, _Objects, Path]) -> None:
    driver, _, _ = nic
    with grpc.insecure_channel(f"unix://{driver.registration_socket}") as channel:
        info = registration_pb2_grpc.RegistrationStub(channel).GetInfo(
            registration_pb2.InfoRequest(), timeout=5
        )
    assert (info.type, info.name, info.endpoint) == (draproto.DRA_PLUGIN_TYPE, DRIVER, str(driver.dra_socket))
    assert list(info.supported_versions) == [draproto.DRA_V1, draproto.DRA_V1BETA1]


def test_prepare_takes_only_its_own_results_and_unprepare_removes_the_spec(
    nic: tuple[NicDriver, _Objects, Path],
) -> None:
    driver, objects, base = nic
    objects.objects[f"{CLAIMS}/both"] = _claim(
        "both",
        "u1",
        [
            {"driver": "gpu.example.com", "pool": NODE, "device": "gpu-3", "request": "gpu"},
            {"driver": DRIVER, "pool": NODE, "device": "nic-1", "request": "nic"},
        ],
    )
    ref = dra_v1_pb2.Claim(namespace="ns", name="both", uid="u1")
    with grpc.insecure_channel(f"unix://{driver.dra_socket}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        answer = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]), timeout=5)
        entry = answer.claims["u1"]
        assert not entry.error
        assert [(list(d.request_names), d.device_name, list(d.cdi_device_ids)) for d in entry.devices] == [
            (["nic"], "nic-1", [f"{CDI_KIND}=u1-nic-1"])
        ]
        (spec_path,) = (base / "cdi").iterdir()
        spec = json.loads(spec_path.read_text())
        assert spec["devices"] == [{"name": "u1-nic-1", "containerEdits": {"env": ["DRA_NIC_NIC_1=nic-1"]}}]
        stub.NodeUnprepareResources(dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref]), timeout=5)
    assert not list((base / "cdi").iterdir())


@pytest.mark.parametrize(
    ("results", "error"),
    [
        (
            [{"driver": "gpu.example.com", "pool": NODE, "device": "gpu-0", "request": "gpu"}],
            "no device of driver",
        ),
        ([{"driver": DRIVER, "pool": "node-1", "device": "nic-0", "request": "nic"}], "not a NIC of node-0"),
        (
            [{"driver": DRIVER, "pool": NODE, "device": "nic-9", "request": "nic"}],
            "node-0/nic-9 is not a NIC",
        ),
    ],
)
def test_prepare_refuses_what_is_not_its_own_naming_why(
    nic: tuple[NicDriver, _Objects, Path], results: list[dict[str, str]], error: str
) -> None:
    driver, objects, _ = nic
    objects.objects[f"{CLAIMS}/c"] = _claim("c", "u2", results)
    with pytest.raises(ValueError, match=error):
        driver.prepare("ns", "c", "u2")
    with pytest.raises(ValueError, match="not found"):
        driver.prepare("ns", "c", "another-uid")


class _Published(_Objects):
    """Records the slices the driver writes."""

    def __init__(self) -> None:
        super().__init__({f"/api/v1/nodes/{NODE}": {"metadata": {"uid": "uid-1"}}})
        self.sent: list[tuple[str, str]] = []

    def send(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.sent.append((method, path))
        return {}


@pytest.mark.parametrize("registered", [True, False])
def test_a_registration_publishes_the_slice_again(registered: bool) -> None:
    """A kubelet that restarts wipes its node's slices, then registers the plugins again: the
    driver publishes once more on each registration it is told of (and not on a refusal)."""
    rest = _Published()
    with _serving(rest) as (driver, _):
        target = f"unix://{driver.registration_socket}"
        with grpc.insecure_channel(target) as channel:
            registration_pb2_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=registered), timeout=5
            )
    assert rest.sent == ([("POST", "/apis/resource.k8s.io/v1/resourceslices")] if registered else [])
