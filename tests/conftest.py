"""Fixtures more than one test folder uses (the cluster ones come from ``clusters.pytest_plugin``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.local.binaries import Binaries
from clusters.local.controlplane import ControlPlane


@pytest.fixture(scope="module")
def control_plane(local_binaries: Binaries) -> Iterator[ControlPlane]:
    """A control plane of the test module's own: etcd, API server, scheduler, controller manager."""
    with tempfile.TemporaryDirectory(prefix="drac-cp-") as root:
        cp = ControlPlane(local_binaries, Path(root))
        try:
            yield cp.start()
        finally:
            cp.stop()
