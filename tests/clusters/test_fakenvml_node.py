"""A driver that calls NVML itself, on the local tier (``LocalSettings.fake_nvml``): the reference
driver's real-hardware backend (``--backend nvml``: plain pynvml, which loads libnvidia-ml.so.1),
unchanged, over fakegpu's drop-in library, as a vendor's Go driver would run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

import fakegpu
from clusters.errors import ClusterError
from clusters.local.binaries import Binaries
from clusters.local.cluster import LocalCluster
from clusters.local.driverproc import default_driver_command, device_class_manifests
from clusters.local.settings import LocalSettings
from tests import kube
from tests.clusters import e2e
from tests.polling import until

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]

DRIVER = "gpu.dra-conformance.io"


def _nvml_command() -> tuple[str, ...]:
    """The reference driver's default command on its NVML backend (no fake flags)."""
    words = default_driver_command(DRIVER)
    out: list[str] = []
    skip = 0
    for w in words:
        if skip:
            skip -= 1
            continue
        if w in ("--fake-profile", "--fake-state-dir"):
            skip = 1
            continue
        out.append("nvml" if out and out[-1] == "--backend" else w)
    return tuple(out)


def _settings(local_binaries: Binaries, classes: Path | None = None, **changes: object) -> LocalSettings:
    settings = LocalSettings(
        nodes=1,
        driver_name=DRIVER,
        driver_command=_nvml_command(),
        fake_nvml="dgx-h200",
        device_classes=classes,
    )
    settings = settings.with_bin_dir(local_binaries.directory).with_version(local_binaries.version)
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


def test_an_nvml_driver_sees_the_nodes_fake_machine_and_its_faults(
    local_binaries: Binaries, tmp_path: Path
) -> None:
    classes = tmp_path / "classes.yaml"
    classes.write_text(yaml.safe_dump_all(device_class_manifests(DRIVER)))
    local = LocalCluster(_settings(local_binaries, classes))
    with local.start() as cluster:
        node = cluster.nodes()[0]
        n = local.local_nodes[node]
        machine = fakegpu.FakeMachine.attach(n.root / "gpus")
        assert machine.profile_name == "dgx-h200" and machine.state.node_name == node
        # the driver process got the library and the machine through its environment
        assert n.driver is not None and n.driver.pid is not None
        env = _environ(n.driver.pid)
        assert env["LD_LIBRARY_PATH"].split(":")[0] == str(local.nvml_lib)
        assert env["FAKEGPU_STATE_DIR"] == str(n.root / "gpus") and env["FAKEGPU_NODE_NAME"] == node
        assert sorted(p.name for p in (n.root / "driver" / "dev").glob("nvidia[0-9]*")) == [
            f"nvidia{i}" for i in range(8)
        ]
        api = cluster.api_client()
        res = kube.resource(api)

        def devices() -> list[dict[str, object]]:
            found = []
            for s in res.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
                found += [api.sanitize_for_serialization(d) for d in s.spec.devices or []]
            return found

        published = until(lambda: devices() if len(devices()) == 8 else None, 60, "8 devices published")
        uuids = {d["attributes"]["uuid"]["string"] for d in published}  # type: ignore[index]
        assert uuids == {g.uuid for g in machine.state.gpus}
        assert {d["attributes"]["productName"]["string"] for d in published} == {"NVIDIA H200"}  # type: ignore[index]

        # a claimed pod runs; its CDI spec names the GPU's device node, as on real hardware
        ns = "nvml"
        kube.core(api).create_namespace({"metadata": {"name": ns}})
        e2e.run_pod(api, ns)
        specs = [json.loads(p.read_text()) for p in (n.root / "cdi").glob("*.json")]
        nodes = [
            dn["path"]
            for s in specs
            for d in s["devices"]
            for dn in d["containerEdits"].get("deviceNodes", [])
        ]
        assert any(p.startswith("/dev/nvidia") for p in nodes), specs

        # a GPU falls off the bus (injected from outside, into the node's machine): the driver's
        # NVML event wait, through the C library, sees it and the device is tainted
        lost = machine.state.gpus[5]
        machine.mark_lost(5)

        def tainted() -> bool:
            for d in devices():
                if d["attributes"]["uuid"]["string"] == lost.uuid:  # type: ignore[index]
                    return bool(d.get("taints"))
            return False

        until(tainted, 60, f"GPU 5 ({lost.uuid}) tainted after it was lost")


def test_a_driver_command_with_fake_nvml_placeholders_needs_fake_nvml(local_binaries: Binaries) -> None:
    settings = _settings(local_binaries, fake_nvml=None, driver_command=("{python}", "-c", "{nvml_lib}"))
    with pytest.raises(ClusterError, match=r"\{nvml_lib\}.*local.nvml: fake"):
        LocalCluster(settings).start()
