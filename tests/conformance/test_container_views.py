"""Which devices a container got, judged by each way a profile gives (``container``): env vars,
device nodes, network interfaces, mounts, CDI ids; views and slice devices built by hand, no cluster.

Each way has a test whose profile gives only it and whose view carries only that kind of entry
(with entries the pattern must pass over); then ways together (they must agree), finds that name no
device or several, and a profile that gives no way (a skip that says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusters import ContainerView
from clusters.local.binaries import Binaries
from conformance.catalogue import RULES
from conformance.harness import Environment, Harness
from conformance.profiles import SHIPPED_DIR, DriverProfile, parse
from tests.conformance.suitekit import ClusterPool, quick_profile, run_suite

DRIVER = "gpu.example.com"
NODE = "node-0"


def _device(name: str, **attrs: Any) -> dict[str, Any]:
    typed = {
        k: {"bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string": v}
        for k, v in attrs.items()
    }
    return {"name": name, "attributes": typed}


DEVICES = [
    _device(f"gpu-{i}", uuid=f"GPU-{i}{i}{i}", minor=i, nic=f"ens{i + 4}", model="H100", spare=i == 2)
    for i in range(4)
]
"""The driver's devices on the node: gpu-N has minor N, interface ensN+4, uuid GPU-NNN, one model."""


def _profile(container: dict[str, Any] | None, unique: str = "uuid") -> DriverProfile:
    data: dict[str, Any] = yaml.safe_load((SHIPPED_DIR / "reference-gpu.yaml").read_text())
    data["driver"] = DRIVER
    data["devices"]["unique"] = unique
    data["devices"]["attributes"] = {
        "uuid": "string",
        "minor": "int",
        "nic": "string",
        "model": "string",
        "spare": "bool",
    }
    data.pop("container")
    if container is not None:
        data["container"] = container
    return parse(data, "mine.yaml")


class _Kube:
    """The one request :meth:`Harness.devices` makes: the driver's slices of the node."""

    def objects(self, kind: str, namespace: str | None = None, fields: str = "") -> list[dict[str, Any]]:
        assert kind == "ResourceSlice" and fields == f"spec.driver={DRIVER},spec.nodeName={NODE}"
        return [{"spec": {"driver": DRIVER, "nodeName": NODE, "devices": DEVICES}}]


class _Cluster:
    def __init__(self, view: ContainerView) -> None:
        self.shown = view

    def container_view(self, pod: str, container: str) -> ContainerView:
        assert pod == "ns/pod"
        return self.shown


def _seen(container: dict[str, Any] | None, view: ContainerView, unique: str = "uuid") -> set[str]:
    """What the harness makes of ``view`` under a profile whose ``container`` section is ``container``."""
    env = Environment(_profile(container, unique), "local", frozenset({"view"}), 34, "v1.34.0")
    dra = Harness(
        cluster=_Cluster(view),  # type: ignore[arg-type]
        kube=_Kube(),  # type: ignore[arg-type]
        env=env,
        rule=RULES[0],
        namespace="ns",
        node=NODE,
        marks=None,
    )
    return dra.seen_devices(dra.view("pod"), what="container ctr")


# --- each way alone --------------------------------------------------------------------------


def test_env_names_the_device_in_the_variable_name() -> None:
    view = ContainerView(env={"GPU_DEVICE_GPU_1": "anything", "GPU_DEVICE_GPU_3": "x", "PATH": "/bin"})
    assert _seen({"env": "^GPU_DEVICE_(?P<device>[A-Z0-9_]+)$"}, view) == {"gpu-1", "gpu-3"}


def test_env_value_is_the_unique_attribute() -> None:
    view = ContainerView(env={"GPU_DEVICE_0": "GPU-222", "GPU_DEVICE_1": "GPU-999", "HOME": "/"})
    assert _seen({"env": "^GPU_DEVICE_[0-9]+$"}, view) == {
        "gpu-2",
        "GPU_DEVICE_1=GPU-999 (no device of node-0 has uuid GPU-999)",
    }
    by_name = ContainerView(env={"GPU_DEVICE_0": "gpu-0"})
    assert _seen({"env": "^GPU_DEVICE_[0-9]+$"}, by_name, unique="name") == {"gpu-0"}


def test_device_nodes_by_path_to_an_attribute() -> None:
    view = ContainerView(
        env={"NVIDIA_VISIBLE_DEVICES": "void"},
        device_nodes=[
            {"path": "/dev/nvidia2", "type": "c", "major": 195, "minor": 2},
            {"path": "/dev/nvidiactl", "type": "c"},
            {"path": "/dev/nvidia-uvm", "type": "c"},
        ],
    )
    way = {"deviceNodes": {"path": "^/dev/nvidia(?P<value>[0-9]+)$", "attribute": "minor"}}
    assert _seen(way, view) == {"gpu-2"}


def test_device_nodes_by_path_to_the_device_name() -> None:
    view = ContainerView(device_nodes=[{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia7"}])
    way = {"deviceNodes": {"path": "^/dev/nvidia(?P<value>[0-9]+)$", "device": "gpu-{value}"}}
    assert _seen(way, view) == {"gpu-0", "/dev/nvidia7 (no device gpu-7 on node-0)"}


def test_net_devices_by_the_name_in_the_container() -> None:
    view = ContainerView(
        net_devices=[
            {"hostInterfaceName": "ens5", "name": "net1"},
            {"hostInterfaceName": "x", "name": "eth0"},
        ]
    )
    way = {"netDevices": {"name": "^net(?P<value>[0-9]+)$", "device": "gpu-{value}"}}
    assert _seen(way, view) == {"gpu-1"}


def test_net_devices_by_the_host_interface_name() -> None:
    view = ContainerView(net_devices=[{"hostInterfaceName": "ens5", "name": "eth1"}])
    way = {"netDevices": {"hostInterfaceName": "^(?P<value>ens[0-9]+)$", "attribute": "nic"}}
    assert _seen(way, view) == {"gpu-1"}
    assert _seen(way, ContainerView(env={"NET": "ens5"})) == set()  # env is not this way's


def test_mounts_by_the_path_in_the_container() -> None:
    view = ContainerView(
        mounts=[
            {"hostPath": "/var/lib/plugin/claims/u/gpu-3.json", "containerPath": "/var/run/acme/gpu-3.json"},
            {"hostPath": "/etc/hosts", "containerPath": "/etc/hosts"},
        ]
    )
    way = {"mounts": {"containerPath": r"^/var/run/acme/(?P<value>[^/]+)\.json$", "device": "{value}"}}
    assert _seen(way, view) == {"gpu-3"}


def test_cdi_ids_to_the_device_name_or_an_attribute() -> None:
    view = ContainerView(
        cdi_devices=[
            "k8s.gpu.example.com/device=gpu-1",
            "k8s.gpu.example.com/net=common",
            "other.com/x=gpu-2",
        ]
    )
    way = {
        "cdiDevices": {"id": r"^k8s\.gpu\.example\.com/device=(?P<value>gpu-[0-9]+)$", "device": "{value}"}
    }
    assert _seen(way, view) == {"gpu-1"}
    by_uuid = ContainerView(cdi_devices=["k8s.gpu.example.com/gpu=claim-uid-GPU-000"])
    way = {"cdiDevices": {"id": "/gpu=claim-uid-(?P<value>GPU-[0-9]+)$", "attribute": "uuid"}}
    assert _seen(way, by_uuid) == {"gpu-0"}


# --- values, ways together, no way -----------------------------------------------------------


def test_int_and_bool_attributes_compare_as_their_values() -> None:
    padded = ContainerView(device_nodes=[{"path": "/dev/accel/03"}])
    way = {"deviceNodes": {"path": "^/dev/accel/(?P<value>[0-9]+)$", "attribute": "minor"}}
    assert _seen(way, padded) == {"gpu-3"}
    flagged = ContainerView(mounts=[{"containerPath": "/run/spare/true"}])
    way = {"mounts": {"containerPath": "^/run/spare/(?P<value>true|false)$", "attribute": "spare"}}
    assert _seen(way, flagged) == {"gpu-2"}


def test_an_attribute_that_several_devices_share_says_so() -> None:
    view = ContainerView(mounts=[{"containerPath": "/run/model/H100"}])
    way = {"mounts": {"containerPath": "^/run/model/(?P<value>.+)$", "attribute": "model"}}
    assert _seen(way, view) == {
        "/run/model/H100 (devices gpu-0, gpu-1, gpu-2, gpu-3 all have model H100: "
        "it does not tell them apart)"
    }


def test_ways_that_agree_give_their_devices() -> None:
    view = ContainerView(
        env={"GPU_DEVICE_GPU_1": "x"},
        device_nodes=[{"path": "/dev/nvidia1"}],
        cdi_devices=["k8s.gpu.example.com/device=gpu-1"],
    )
    ways = {
        "env": "^GPU_DEVICE_(?P<device>[A-Z0-9_]+)$",
        "deviceNodes": {"path": "^/dev/nvidia(?P<value>[0-9]+)$", "attribute": "minor"},
        "cdiDevices": {"id": "/device=(?P<value>.+)$", "device": "{value}"},
    }
    assert _seen(ways, view) == {"gpu-1"}


def test_ways_that_disagree_fail_naming_what_each_shows() -> None:
    view = ContainerView(env={"GPU_DEVICE_GPU_1": "x"}, device_nodes=[{"path": "/dev/nvidia2"}])
    ways = {
        "env": "^GPU_DEVICE_(?P<device>[A-Z0-9_]+)$",
        "deviceNodes": {"path": "^/dev/nvidia(?P<value>[0-9]+)$", "attribute": "minor"},
    }
    with pytest.raises(AssertionError) as failed:
        _seen(ways, view)
    assert str(failed.value) == (
        "container ctr shows other devices by each way the profile gives: "
        "by env ['gpu-1']; by deviceNodes ['gpu-2']"
    )


@pytest.mark.parametrize("container", [None, {}, {"env": ""}])
def test_no_way_skips_saying_why(container: dict[str, Any] | None) -> None:
    view = ContainerView(env={"GPU_DEVICE_GPU_1": "x"}, device_nodes=[{"path": "/dev/nvidia1"}])
    with pytest.raises(pytest.skip.Exception) as skipped:
        _seen(container, view)
    assert str(skipped.value) == (
        "profile reference-gpu gives no way to tell which devices a container got "
        "(container: env, deviceNodes, netDevices, mounts, cdiDevices)"
    )


# --- end to end: the reference driver judged by its mounts and CDI ids, no env ---------------

VIEW_RULES = (
    "SHARE-CONTAINERS",
    "SHARE-PODS",
    "SHARE-INIT",
    "SHARE-REQUEST-SCOPE",
    "SHARE-MIXED",
    "PREP-VIEW",
    "ALLOC-FIRST-AVAILABLE",
    "ALLOC-ADMIN",
)
"""The rules that judge which devices a container got."""

BY_MOUNTS_AND_CDI_IDS = {
    "mounts": {"containerPath": r"^/var/run/dra-gpu/(?P<value>[^/]+)\.json$", "device": "{value}"},
    "cdiDevices": {
        "id": r"^k8s\.gpu\.dra-conformance\.io/gpu=[0-9a-f-]{36}-(?P<value>.+)$",
        "device": "{value}",
    },
}
"""The reference driver's other signs of a device: its info file's mount, and its CDI id
(``<claim uid>-<device>``)."""


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reference_driver_judged_by_its_mounts_and_cdi_ids(
    pytester: pytest.Pytester, local_binaries: Binaries, cluster_pool: ClusterPool, tmp_path: Path
) -> None:
    """Without env, the view rules pass on what the mounts and CDI ids show."""
    profile = quick_profile("reference-gpu", tmp_path, container=BY_MOUNTS_AND_CDI_IDS)
    run = run_suite(pytester, local_binaries, profile, rules=VIEW_RULES, pool=cluster_pool)
    assert not run.failed and set(VIEW_RULES) <= run.having("passed"), run.explain()
    # a failure message keeps the logs of the pooled cluster, which the next run goes on with
    assert run.run_dir is not None
    logs = run.run_dir / "cluster-logs"
    assert f" in {logs}\n" in run.explain()
    assert (logs / "cp" / "logs" / "kube-controller-manager.log").is_file()
    assert (logs / "n0" / "logs" / "driver.log").is_file()


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_way_at_all_skips_saying_what_was_checked(
    pytester: pytest.Pytester, local_binaries: Binaries, cluster_pool: ClusterPool, tmp_path: Path
) -> None:
    """With no way, the view rules make their other checks, then skip saying why not the devices;
    ALLOC-FIRST-AVAILABLE checks the driver's request names over gRPC instead."""
    profile = quick_profile("reference-gpu", tmp_path, container={})
    run = run_suite(pytester, local_binaries, profile, rules=VIEW_RULES, pool=cluster_pool)
    assert not run.failed, run.explain()
    assert run.having("skipped") == set(VIEW_RULES) - {"ALLOC-FIRST-AVAILABLE"}, run.explain()
    assert "ALLOC-FIRST-AVAILABLE" in run.having("passed"), run.explain()
    for result in run.report.rules:
        if result.outcome == "skipped":
            assert "gives no way to tell which devices a container got" in result.reason, result.reason
