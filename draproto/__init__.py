"""The published interfaces between a DRA driver and a node: the kubelet's plugin protocols, CDI.

This is the one place where the wire protocol lives, as generated Python stubs: the driver
serves it, the node agent (``nodeagent``) calls it. It holds no logic of either side; what both
sides check, the CDI spec rules, is :mod:`draproto.cdi`, the log line format every process
of ours writes (its keys are part of each process's contract) is :mod:`draproto.logs`, the
plain-JSON requests both sides send the API server are :mod:`draproto.rest`, over the connection
:mod:`draproto.apiconn` reads from a kubeconfig or a pod's service account.

The ``.proto`` files beside this module are written from the field lists of the kubelet's
plugin APIs (``k8s.io/kubelet/pkg/apis/dra/v1``, ``v1beta1``, ``dra-health``, ``pluginregistration``);
``python -m draproto.generate`` regenerates ``_gen`` and
``--check`` verifies the committed stubs are fresh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draproto._gen import (
        dra_v1_pb2,
        dra_v1_pb2_grpc,
        dra_v1beta1_pb2,
        dra_v1beta1_pb2_grpc,
        health_v1_pb2,
        health_v1_pb2_grpc,
        health_v1alpha1_pb2,
        health_v1alpha1_pb2_grpc,
        registration_pb2,
        registration_pb2_grpc,
    )


__all__ = [
    "DRA_PLUGIN_TYPE",
    "DRA_V1",
    "DRA_V1BETA1",
    "HEALTH_V1",
    "HEALTH_V1ALPHA1",
    "dra_v1_pb2",
    "dra_v1_pb2_grpc",
    "dra_v1beta1_pb2",
    "dra_v1beta1_pb2_grpc",
    "health_v1_pb2",
    "health_v1_pb2_grpc",
    "health_v1alpha1_pb2",
    "health_v1alpha1_pb2_grpc",
    "registration_pb2",
    "registration_pb2_grpc",
]

_STUBS = frozenset(name for name in __all__ if name.endswith(("_pb2", "_pb2_grpc")))
"""The generated modules, imported on first use: ``draproto.rest``, ``draproto.quantity`` and
``draproto.cdi`` cost no grpc or protobuf import."""


def __getattr__(name: str) -> object:
    if name in _STUBS:
        import importlib

        module = importlib.import_module(f"draproto._gen.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'draproto' has no attribute {name!r}")


DRA_PLUGIN_TYPE = "DRAPlugin"
"""``PluginInfo.type`` of a DRA driver."""

DRA_V1 = "v1.DRAPlugin"
"""``supported_versions`` entry for ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

DRA_V1BETA1 = "v1beta1.DRAPlugin"
"""``supported_versions`` entry for ``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``."""

HEALTH_V1 = "v1.DRAResourceHealth"
"""``supported_versions`` entry for the ``v1.DRAResourceHealth`` stream."""

HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
"""``supported_versions`` entry for the ``v1alpha1.DRAResourceHealth`` stream."""
