"""Kubelet nodes without a cluster: the config a node gets, the isolation wrapper, the refusal."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clusters.errors import ClusterError
from clusters.local import kubeletnode


def test_config_is_a_real_nodes_less_what_no_cgroups_allow(tmp_path: Path) -> None:
    config = kubeletnode.kubelet_config(
        runtime_socket=tmp_path / "cri.sock",
        ca_cert=tmp_path / "ca.crt",
        port=10250,
        healthz_port=10248,
        feature_gates={"DRAPartitionableDevices": True},
    )
    assert config["kind"] == "KubeletConfiguration"
    assert config["cgroupsPerQOS"] is False
    assert config["enforceNodeAllocatable"] == []
    assert config["failSwapOn"] is False
    assert config["failCgroupV1"] is False
    assert config["kubeAPIQPS"] > 5 and config["kubeAPIBurst"] > 10
    assert config["featureGates"] == {"DRAPartitionableDevices": True, "KubeletInUserNamespace": True}
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'cri.sock'}"
    assert (config["port"], config["healthzPort"]) == (10250, 10248)


def test_every_kubelet_runs_in_its_own_user_and_mount_namespace(tmp_path: Path) -> None:
    argv = kubeletnode.kubelet_argv(
        Path("/b/kubelet"), tmp_path, "node-1", tmp_path / "k.kubeconfig", tmp_path / "kubelet.yaml"
    )
    assert argv[1:6] == ["--user", "--map-root-user", "--mount", "--propagation", "private"]
    setup = argv[argv.index("-c") + 1]
    assert "mount -o remount,bind,ro /proc/sys" in setup
    assert 'mount --bind "$1" /var/lib/kubelet' in setup and 'mount --bind "$2" /var/log' in setup
    assert str(tmp_path / "kubelet") in argv and str(tmp_path / "log") in argv
    assert "--hostname-override=node-1" in argv


def test_no_user_namespaces_is_refused_with_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_a: Any, **_k: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 1, "", "unshare: unshare failed: Operation not permitted")

    kubeletnode.check_user_namespaces.cache_clear()
    monkeypatch.setattr(subprocess, "run", refused)
    try:
        with pytest.raises(ClusterError, match=r"user and mount namespaces(.|\n)*--node-kind agent"):
            kubeletnode.check_user_namespaces()
        monkeypatch.setattr(shutil, "which", lambda _n: None)
        kubeletnode.check_user_namespaces.cache_clear()
        with pytest.raises(ClusterError, match="need 'unshare'"):
            kubeletnode.check_user_namespaces()
    finally:
        kubeletnode.check_user_namespaces.cache_clear()
