"""The driver's DeviceClasses, named the way NVIDIA names its own.

For a driver name ``gpu.<domain>`` (default ``gpu.dra-conformance.io``) the classes are
``gpu.<domain>`` (whole GPUs), ``mig.<domain>`` (MIG devices, existing or
partitionable) and ``license.<domain>`` (license seats, ``driver.licenses``); a driver
name without a leading ``gpu.`` is the domain itself. Each
class selects the driver's devices by their ``type`` attribute. The GPU class also names
an extended resource, ``<driver name>/gpu`` (KEP-5004, ``DRAExtendedResource``): a pod that
asks ``resources.limits`` for it, the device-plugin way, gets whole GPUs through DRA. Only
that class has one: the name must be unique among classes, and a MIG device is no fixed
amount of anything. The Helm chart makes the same classes (``templates/deviceclasses.yaml``);
``python -m driver device-classes`` prints these.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["DEVICE_TYPES", "class_domain", "class_name", "device_classes", "extended_resource_name", "render"]

DEVICE_TYPES = ("gpu", "mig", "license")
"""The values of the ``type`` attribute, one DeviceClass each."""


def class_domain(driver_name: str) -> str:
    """The domain the class names share: ``gpu.example.com`` -> ``example.com``."""
    return driver_name.removeprefix("gpu.")


def class_name(driver_name: str, device_type: str) -> str:
    """The DeviceClass for one device type: ``mig`` of ``gpu.example.com`` -> ``mig.example.com``."""
    return f"{device_type}.{class_domain(driver_name)}"


def extended_resource_name(driver_name: str) -> str:
    """The extended resource of whole GPUs: ``gpu.example.com`` -> ``gpu.example.com/gpu``."""
    return f"{driver_name}/gpu"


def _device_class(driver_name: str, device_type: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selectors": [
            {
                "cel": {
                    "expression": (
                        f'device.driver == "{driver_name}" && '
                        f'device.attributes["{driver_name}"].type == "{device_type}"'
                    )
                }
            }
        ]
    }
    if device_type == "gpu":
        spec["extendedResourceName"] = extended_resource_name(driver_name)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": class_name(driver_name, device_type)},
        "spec": spec,
    }


def device_classes(driver_name: str) -> list[dict[str, Any]]:
    """The DeviceClass objects (``resource.k8s.io/v1``) as dicts, GPU class first."""
    return [_device_class(driver_name, device_type) for device_type in DEVICE_TYPES]


def render(driver_name: str, *, misnamed: bool = False) -> str:
    """The DeviceClasses as multi-document YAML, each document starting with ``---``.

    ``misnamed`` (switch ``misnamed-device-classes``): each class named with its type in the plural
    (``gpus.<domain>``), not as documented."""
    classes = device_classes(driver_name)
    if misnamed:
        for c in classes:
            kind, _, domain = c["metadata"]["name"].partition(".")
            c["metadata"]["name"] = f"{kind}s.{domain}"
    return yaml.safe_dump_all(classes, explicit_start=True, sort_keys=False, width=1000)
