"""A local cluster daemon's state (:class:`~clusters.local.state.DaemonState`) made up, for tests that
need one without a daemon."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from clusters.local.settings import LocalSettings
from clusters.local.state import BinariesEntry, DaemonState, NodeEntry


def made_up_state(directory: Path, *, daemon_pid: int = 999_999_999, nodes: int = 1) -> DaemonState:
    """The state a daemon in ``directory`` (its state dir) would write, its cluster's root below it."""
    root = directory / "root"
    return DaemonState(
        daemon_pid=daemon_pid,
        state_dir=directory,
        control_socket=root / "ctl.sock",
        settings=dataclasses.replace(LocalSettings(), nodes=nodes, state_dir=directory),
        kubeconfig=root / "kubeconfig",
        server="https://127.0.0.1:6443",
        root=root,
        k8s_version="1.37.2",
        binaries=BinariesEntry(directory / "bin", "cache"),
        feature_gates={"DRADeviceTaints": True},
        runtime_config=("resource.k8s.io/v1",),
        controllers=("*",),
        control_plane={"etcd": 11, "kube-apiserver": 12},
        nodes={
            f"node-{i}": NodeEntry(
                root=root / f"n{i}",
                kind="agent",
                agent_pid=20 + i,
                runtime_pid=None,
                driver_pid=30 + i,
                driver_command=("python", "-m", "driver", "--node", f"node-{i}"),
            )
            for i in range(nodes)
        },
        timings={"control_plane": 3.25},
    )
