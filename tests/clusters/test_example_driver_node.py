"""The local tier with a driver no one here wrote (dra-example-driver, Go): ``--device-classes``
creates its classes, and a rolling update (``--pod-uid``: sockets named per pod UID) keeps pods
running and their claims prepared while the old instance goes."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from clusters.local.binaries import Binaries
from clusters.local.cluster import LocalCluster
from clusters.local.driverproc import driver_sockets
from clusters.local.processes import ManagedProcess
from clusters.local.settings import LocalSettings
from conformance.profiles import SHIPPED_DIR, load
from tests import kube, manifests
from tests.polling import until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]

DRIVER = "gpu.example.com"
OLD_UID = "0c5e1f6a-1111-4a3b-9a55-000000000001"
NEW_UID = "0c5e1f6a-2222-4a3b-9a55-000000000002"


def _command(binary: Path, pod_uid: str) -> tuple[str, ...]:
    profile = load("example-gpu")
    assert profile.local is not None
    words = shlex.split(profile.local.command.replace("{bin:dra-example-kubeletplugin}", str(binary)))
    return (*words, "--pod-uid", pod_uid)


def _running(api: object, namespace: str, name: str) -> bool:
    return bool(kube.core(api).read_namespaced_pod(name, namespace).status.phase == "Running")


def test_device_classes_and_a_rolling_update(local_binaries: Binaries, example_driver: Path) -> None:
    settings = LocalSettings(
        nodes=1,
        driver_name=DRIVER,
        driver_command=_command(example_driver, OLD_UID),
        device_classes=SHIPPED_DIR / "example-gpu-classes.yaml",
    )
    settings = settings.with_bin_dir(local_binaries.directory).with_version(local_binaries.version)
    with LocalCluster(settings).start() as cluster:
        api = cluster.api_client()
        # --device-classes: the driver's class exists without the user making it
        assert kube.resource(api).read_device_class(DRIVER).metadata.name == DRIVER
        node = cluster.nodes()[0]
        registry = cluster.registry_dir(node)
        [old_socket] = driver_sockets(registry, DRIVER)  # found by GetInfo name, not file name
        assert old_socket.name == f"{DRIVER}-{OLD_UID}-reg.sock"
        ns = "roll"
        kube.core(api).create_namespace({"metadata": {"name": ns}})
        until(lambda: kube.core(api).list_namespaced_service_account(ns).items)
        kube.create_from_dict(api, manifests.resource_claim(ns, "c1", DRIVER), ns)
        kube.create_from_dict(api, manifests.pod(ns, "p1", {"gpu": {"resourceClaimName": "c1"}}), ns)
        until(lambda: _running(api, ns, "p1"), timeout=120)
        specs_before = sorted(p.name for p in cluster.cdi_dir(node).iterdir())
        # the new instance starts beside the old one (same driver, same plugin dir, its own sockets)
        root = Path(cluster.node_values(node)["root"])
        argv = [a.replace("{root}", str(root)) for a in _command(example_driver, NEW_UID)]
        argv = [a.replace("{node}", node).replace("{kubeconfig}", str(cluster.kubeconfig)) for a in argv]
        argv = [a.replace("{driver}", DRIVER) for a in argv]
        new = ManagedProcess("example-new", argv, root / "logs" / "driver-new.log").start()
        try:
            until(lambda: len(driver_sockets(registry, DRIVER)) == 2, timeout=60)
            cluster.stop_driver(node)  # the old instance goes (SIGTERM: it removes its sockets)
            new_socket = registry / f"{DRIVER}-{NEW_UID}-reg.sock"
            until(lambda: set(driver_sockets(registry, DRIVER)) == {new_socket}, timeout=30)
            time.sleep(2)  # an agent that unprepares on unregistration would do it now
            assert _running(api, ns, "p1"), "the pod stopped running during the rolling update"
            assert sorted(p.name for p in cluster.cdi_dir(node).iterdir()) == specs_before, (
                "the claim's CDI spec changed (unprepared?) during the rolling update"
            )
            # the new instance serves: a new pod's claim is prepared by it
            kube.create_from_dict(api, manifests.resource_claim(ns, "c2", DRIVER), ns)
            kube.create_from_dict(api, manifests.pod(ns, "p2", {"gpu": {"resourceClaimName": "c2"}}), ns)
            until(lambda: _running(api, ns, "p2"), timeout=120)
            assert "c2" in (root / "logs" / "driver-new.log").read_text()
        finally:
            new.stop()
