"""Fixtures of the suite's own tests."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.local.binaries import Binaries
from tests.conformance.suitekit import ClusterPool


@pytest.fixture(scope="session")
def cluster_pool(local_binaries: Binaries) -> Iterator[ClusterPool]:
    """Local clusters kept across this process's suite runs (drivers replaced per run)."""
    with tempfile.TemporaryDirectory(prefix="drac-pool-") as work:
        pool = ClusterPool(local_binaries, Path(work))
        try:
            yield pool
        finally:
            pool.close()
