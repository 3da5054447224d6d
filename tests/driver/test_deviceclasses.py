"""DeviceClasses: names derived from the driver name, selectors by the ``type`` attribute."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from driver.deviceclasses import class_name, device_classes, extended_resource_name, render
from tests import kube


def test_default_driver_gets_nvidia_style_class_names() -> None:
    docs = list(yaml.safe_load_all(render("gpu.dra-conformance.io")))
    assert [d["metadata"]["name"] for d in docs] == [
        "gpu.dra-conformance.io",
        "mig.dra-conformance.io",
        "license.dra-conformance.io",
    ]
    gpu, mig, seat = (d["spec"]["selectors"][0]["cel"]["expression"] for d in docs)
    assert gpu == (
        'device.driver == "gpu.dra-conformance.io" && '
        'device.attributes["gpu.dra-conformance.io"].type == "gpu"'
    )
    assert mig.endswith('.type == "mig"')
    assert seat.endswith('.type == "license"')


def test_only_the_gpu_class_names_an_extended_resource() -> None:
    # the name must be unique among classes; a MIG device is no fixed amount of anything
    gpu, mig, seat = device_classes("gpu.dra-conformance.io")
    assert gpu["spec"]["extendedResourceName"] == "gpu.dra-conformance.io/gpu"
    assert "extendedResourceName" not in mig["spec"] and "extendedResourceName" not in seat["spec"]
    assert extended_resource_name("accel.example.com") == "accel.example.com/gpu"


@pytest.mark.parametrize(
    ("driver", "gpu_class", "mig_class"),
    [
        ("gpu.example.com", "gpu.example.com", "mig.example.com"),
        ("accel.example.com", "gpu.accel.example.com", "mig.accel.example.com"),
    ],
)
def test_other_driver_names(driver: str, gpu_class: str, mig_class: str) -> None:
    assert class_name(driver, "gpu") == gpu_class
    assert class_name(driver, "mig") == mig_class
    for doc in device_classes(driver):
        assert f'device.driver == "{driver}"' in doc["spec"]["selectors"][0]["cel"]["expression"]


def test_rendered_yaml_reads_into_the_kubernetes_model() -> None:
    text = render("gpu.dra-conformance.io")
    assert text.startswith("---\n")
    for doc in yaml.safe_load_all(text):
        model = client.V1DeviceClass.from_dict(doc)
        assert kube.to_json(model) == doc
