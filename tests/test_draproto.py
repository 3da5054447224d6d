"""The committed protocol stubs match the .proto files."""

from __future__ import annotations

import draproto
from draproto import generate


def test_generated_stubs_are_fresh() -> None:
    assert generate.main(["--check"]) == 0


def test_v1_device_has_share_id_and_v1beta1_does_not() -> None:
    assert "share_id" in draproto.dra_v1_pb2.Device.DESCRIPTOR.fields_by_name
    assert "share_id" not in draproto.dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name


def test_service_full_names_are_the_kubelets() -> None:
    assert (
        draproto.dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
        == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    )
    assert draproto.health_v1_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == (
        "v1.DRAResourceHealth"
    )
    assert draproto.registration_pb2.DESCRIPTOR.services_by_name["Registration"].full_name == (
        "pluginregistration.Registration"
    )
