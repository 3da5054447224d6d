"""PRE: is the cluster and the driver fit to be tested? Runs first; a failure stops the run.

The checks themselves live in :mod:`conformance.plugin.preflight` and run once per session (every other
test waits for them); these tests report their verdicts as rules.
"""

from __future__ import annotations

from conformance.catalogue import rule


@rule("PRE-API")
def test_api_served(dra_pre: str) -> None:
    """the cluster serves `resource.k8s.io/v1` (DeviceClass, ResourceClaim, ResourceSlice)"""
    assert not dra_pre, dra_pre


@rule("PRE-CLASSES")
def test_device_classes_exist(dra_pre: str) -> None:
    """every DeviceClass the profile names exists, or the suite can create it"""
    assert not dra_pre, dra_pre


@rule("PRE-REGISTERED")
def test_driver_registered(dra_pre: str) -> None:
    """the driver registers on every node under test: a registration socket answers `GetInfo` with the
    profile's driver name within the profile's slices timeout"""
    assert not dra_pre, dra_pre


@rule("PRE-SLICES")
def test_slices_published(dra_pre: str) -> None:
    """the driver publishes slices for every node under test within the profile's timeout"""
    assert not dra_pre, dra_pre


@rule("PRE-NODES")
def test_nodes_ready(dra_pre: str) -> None:
    """the nodes under test are Ready and the profile's device count per node is met"""
    assert not dra_pre, dra_pre
