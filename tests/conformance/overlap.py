"""A pytest plugin for a suite run (``-p tests.conformance.overlap``) that makes two of its tests
overlap for certain.

The test of one rule is held back before its setup (so before it leases any node) until some node
of the cluster has no slice of the driver: a test beside it stopped that node's driver to restart it.
Which nodes were bare then is written to a file, and the held test goes on. Without this the two
tests overlap by chance, or not at all. What :class:`Overlap` says comes through the environment
(:data:`ENV`), which the suite run's processes, xdist workers too, inherit.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from clusters.local.attached import AttachedLocalCluster
from conformance.catalogue import rule_of
from conformance.harness import Kube

__all__ = ["ENV", "Overlap", "pytest_runtest_setup"]

ENV = "DRAC_TEST_OVERLAP"
"""The environment variable holding the :class:`Overlap` of a run, as JSON."""

POLL_SECONDS = 0.05
"""How often the slices are listed: a restarting driver's are gone for a second or two."""
HOLD_SECONDS = 180.0
"""How long the test is held back at most."""


@dataclass(frozen=True)
class Overlap:
    """Which test to hold back, until what, and where to say what it found."""

    rule: str
    """The rule whose test is held back."""
    driver: str
    """The driver whose slices are watched."""
    record: Path
    """Where the nodes without slices go (JSON ``{"bare": [...]}``; empty: none was seen)."""

    def to_env(self) -> str:
        """The value of :data:`ENV`."""
        return json.dumps({"rule": self.rule, "driver": self.driver, "record": str(self.record)})

    @classmethod
    def from_env(cls, value: str) -> Overlap:
        """The overlap :meth:`to_env` wrote."""
        data = json.loads(value)
        return cls(rule=data["rule"], driver=data["driver"], record=Path(data["record"]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Hold the test of :attr:`Overlap.rule` back until a node of the cluster has no slice of the driver."""
    value = os.environ.get(ENV)
    overlap = Overlap.from_env(value) if value else None
    found = rule_of(item)
    if overlap is None or found is None or found.id != overlap.rule:
        return
    cluster = AttachedLocalCluster(Path(item.config.getoption("cluster_state_dir")))
    try:
        kube = Kube(cluster.api_client())
        nodes = set(cluster.nodes())
        bare: list[str] = []
        deadline = time.monotonic() + HOLD_SECONDS
        while not bare and time.monotonic() < deadline:
            slices = kube.objects("ResourceSlice", fields=f"spec.driver={overlap.driver}")
            bare = sorted(nodes - {(s.get("spec") or {}).get("nodeName") for s in slices})
            if not bare:
                time.sleep(POLL_SECONDS)
    finally:
        cluster.stop()  # only its API client: the cluster stays up
    overlap.record.write_text(json.dumps({"bare": bare}))
