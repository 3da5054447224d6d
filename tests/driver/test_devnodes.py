"""Host device nodes for the nvml backend: the GPU's node and MIG capability nodes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from driver.devnodes import device_nodes, read_mig_minors
from tests.driver.drvkit import gpu, partition


def test_mig_minors_file_is_read_leniently(tmp_path: Path) -> None:
    path = tmp_path / "mig-minors"
    path.write_text(
        "config 1\ngpu0/gi1/access 21\ngpu0/gi1/ci0/access 22\nbroken line here\ngpu1/gi2/access x\n"
    )
    assert read_mig_minors(path) == {"config": 1, "gpu0/gi1/access": 21, "gpu0/gi1/ci0/access": 22}
    assert read_mig_minors(tmp_path / "missing") == {}


def test_gpu_gets_its_node_and_a_mig_device_its_capabilities_too() -> None:
    minors = {"gpu4/gi2/access": 30, "gpu4/gi2/ci0/access": 31}
    assert device_nodes(gpu(3), None, lambda: minors) == ["/dev/nvidia3"]
    static_mig = replace(partition(4, 4), kind="mig", gpu_instance_id=2, compute_instance_id=0)
    assert device_nodes(static_mig, None, lambda: minors) == [
        "/dev/nvidia4",
        "/dev/nvidia-caps/nvidia-cap30",
        "/dev/nvidia-caps/nvidia-cap31",
    ]
    # a partition not prepared yet has no instances, hence no capability nodes
    assert device_nodes(partition(4, 4), None, lambda: minors) == ["/dev/nvidia4"]


def test_device_nodes_use_the_nvml_minor_not_the_index() -> None:
    """On a DGX the minor is not the index (GPU 0 has minor 2): /dev/nvidiaN must use the minor."""
    import pynvml

    import fakegpu
    from driver.devices import discover

    with fakegpu.installed("dgx-h100-mig"):
        pynvml.nvmlInit()
        try:
            inv = discover(["gpu", "mig"])
            assert inv.devices
            for dev in inv:
                h = pynvml.nvmlDeviceGetHandleByUUID(dev.gpu_uuid)
                minor = pynvml.nvmlDeviceGetMinorNumber(h)
                assert device_nodes(dev, None, dict)[0] == f"/dev/nvidia{minor}"
                if dev.index == 0:
                    assert minor == 2
        finally:
            pynvml.nvmlShutdown()
