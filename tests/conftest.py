"""Fixtures more than one test folder uses (the cluster ones come from ``clusters.pytest_plugin``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.local.binaries import Binaries
from clusters.local.controlplane import ControlPlane
from tests import kube

# pytester (the self-tests) puts sys.modules back as it found them after each test: a module of the
# kubernetes client first imported inside such a test would be imported again after it, as a second
# copy whose classes the first copy's argument checks refuse (seen once the self-tests ran first:
# "Input should be a valid dictionary or instance of V1Node"). The typed APIs the tests use are
# imported before any test, once per process (about 1 CPU-s).
kube.preload()

LONG_FIRST = (
    "tests/conformance/test_nvidia_driver.py::test_nvidia_gpu_kubelet_plugin_fails_only_its_known_failures",
    "tests/conformance/test_example_driver.py::",
    "tests/conformance/test_selftest.py::test_clean_run_passes",
    "tests/conformance/test_selftest.py::",
    "tests/conformance/test_nvidia_driver.py::",
)
"""Where the longest tests are, longest first: each runs the conformance suite in a child pytest,
for one to seven minutes on CI's 2 cores. NVIDIA's whole run (7 minutes; it skips where its binary
is not beside the checkout) was not among them: it started wherever it was collected, and CI's
last 7 minutes ran it alone, the cores 90 % idle."""


CLUSTER_FIXTURES = frozenset(
    {"local_binaries", "control_plane", "cluster_pool", "example_driver", "dra_cluster", "namespace"}
)
"""Fixtures that need the control-plane binaries (a download or a Go build) or start processes of a
cluster: a test that uses one is marked ``cluster`` (``nox -s unit`` leaves those out)."""

GOBUILD_FIXTURES = frozenset({"walker"})
"""Fixtures that build Go code: a test that uses one is marked ``gobuild``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses one of :data:`CLUSTER_FIXTURES` ``cluster`` (of :data:`GOBUILD_FIXTURES`
    ``gobuild``), and run the tests of
    :data:`LONG_FIRST` first: xdist hands tests out in this order, so the long ones start at once and
    the short ones fill the end, rather than one worker running the last long test while the others
    idle (the last minute of CI was 60 % busy). The rest keep their order."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if CLUSTER_FIXTURES & used:
            item.add_marker(pytest.mark.cluster)
        if GOBUILD_FIXTURES & used:
            item.add_marker(pytest.mark.gobuild)

    def rank(item: pytest.Item) -> int:
        ranks = (i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix))
        return next(ranks, len(LONG_FIRST))

    items.sort(key=rank)


@pytest.fixture(scope="module")
def control_plane(local_binaries: Binaries) -> Iterator[ControlPlane]:
    """A control plane of the test module's own: etcd, API server, scheduler, controller manager."""
    with tempfile.TemporaryDirectory(prefix="drac-cp-") as root:
        cp = ControlPlane(local_binaries, Path(root))
        try:
            yield cp.start()
        finally:
            cp.stop()


@pytest.fixture(scope="session")
def example_driver(request: pytest.FixtureRequest) -> Path:
    """dra-example-kubeletplugin (sigs.k8s.io/dra-example-driver): prebuilt, cached, or built now
    (minutes, once; ``nox -s tests`` builds it up front). Skips, saying why, where it cannot be had."""
    import os

    from clusters.errors import BinariesError
    from clusters.local import gobins
    from clusters.local.settings import LocalSettings

    settings = LocalSettings.from_env(os.environ)
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def say(message: str) -> None:
        print(f"[dra-conformance] {message}", flush=True)

    try:
        if capture is None:
            return gobins.resolve_binary("dra-example-kubeletplugin", settings, say)
        with capture.global_and_fixture_disabled():
            return gobins.resolve_binary("dra-example-kubeletplugin", settings, say)
    except BinariesError as e:
        pytest.skip(f"dra-example-kubeletplugin is not available: {e}")
