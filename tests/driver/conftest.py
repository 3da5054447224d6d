"""Fixtures for the driver's own tests (helpers live in ``drvkit``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.claims import MemoryClaimSource
from tests.driver.drvkit import FakePartitioner, Node, inventory, node_settings


@pytest.fixture
def node() -> Iterator[Node]:
    """A node with short temp dirs (unix socket paths must stay under 108 bytes)."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="drv"))
    n = Node(root, node_settings(root), MemoryClaimSource(), FakePartitioner(), inventory())
    try:
        yield n
    finally:
        for server in n.servers:
            server.stop(0)
        shutil.rmtree(root, ignore_errors=True)
