"""clusters.apicheck: a run stops early, with what to fix, on a cluster unfit for the suite."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from clusters import apicheck
from clusters.errors import ClusterStateError, ClusterUnfit
from tests.clusters.apistub import api_stub, write_kubeconfig


def test_a_cluster_serving_dra_passes(tmp_path: Path) -> None:
    with api_stub(("v1", "v1beta2")) as url:
        assert apicheck.check(write_kubeconfig(tmp_path / "kc", url)) == "v1.37.0"


def test_a_cluster_without_resource_v1_is_unfit(tmp_path: Path) -> None:
    with api_stub(("v1beta1",), version="v1.32.4") as url, pytest.raises(ClusterUnfit) as e:
        apicheck.check(write_kubeconfig(tmp_path / "kc", url))
    message = str(e.value)
    assert "resource.k8s.io/v1" in message and "v1.32.4" in message and "resource.k8s.io/v1beta1" in message
    assert "1.34" in message


def test_a_cluster_without_any_resource_group_is_unfit(tmp_path: Path) -> None:
    with api_stub(()) as url, pytest.raises(ClusterUnfit, match="served: none"):
        apicheck.check(write_kubeconfig(tmp_path / "kc", url))


def test_an_unreachable_cluster_names_the_server(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    with pytest.raises(ClusterStateError) as e:
        apicheck.check(kubeconfig, timeout=3)
    assert f"127.0.0.1:{port}" in str(e.value) and "does not answer" in str(e.value)


def test_a_missing_or_broken_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(ClusterStateError, match="does not exist"):
        apicheck.check(tmp_path / "nope")
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(ClusterStateError, match="cannot be used"):
        apicheck.check(bad)
