"""The binaries of a kind node, each from the cache or built once from Go modules.

=====================================  =========================================================
part                                   from
=====================================  =========================================================
etcd, kube-apiserver, -scheduler,      the local tier's cache of the version
kube-controller-manager                (:func:`clusters.local.binaries.resolve`)
kubelet                                the local tier's kubelet cache (:func:`~clusters.local.
                                       binaries.resolve_kubelet`)
kubeadm, kubectl, kube-proxy           ``k8s.io/kubernetes`` in the same wrapper module
                                       (``<cache>/k8s/node/<version>``)
containerd, containerd-shim-runc-v2,   ``github.com/containerd/containerd/v2`` :data:`CONTAINERD_VERSION`
ctr                                    (``<cache>/tools/containerd/<version>``)
crictl                                 ``sigs.k8s.io/cri-tools`` :data:`CRI_TOOLS_VERSION`
pause                                  :data:`PAUSE_SOURCE`, this project's Go module
kind's node files (entrypoint, units)  ``images/base/files`` of ``sigs.k8s.io/kind`` (module cache)
runc, CNI plugins                      Debian (:mod:`clusters.kind.rootfs`)
=====================================  =========================================================

A warm Go build cache makes each build seconds; cold, the Kubernetes tools are minutes on 2 cores.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clusters.errors import BinariesError, GoBuildError
from clusters.local import binaries, gobuild
from clusters.local.gobins import GoBinary, cached_build, resolve_tool
from clusters.local.settings import LocalSettings
from clusters.progress import Progress, to_log

__all__ = [
    "CONTAINERD_VERSION",
    "CRI_TOOLS_VERSION",
    "NODE_TOOLS",
    "PAUSE_SOURCE",
    "NodeParts",
    "kind_files",
    "resolve_parts",
]

log = logging.getLogger(__name__)

CONTAINERD_VERSION = "v2.4.2"
"""containerd built for the nodes (CDI is on by default from 2.0; Kubernetes 1.36+ wants 2.x)."""
CRI_TOOLS_VERSION = "v1.37.0"
"""crictl built for the nodes."""
NODE_TOOLS = ("kubeadm", "kubectl", "kube-proxy")
"""The Kubernetes commands a node has besides the kubelet and the control plane."""
CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")
"""The containerd commands a node runs."""
PAUSE_SOURCE = Path(__file__).with_name("pause")
"""The pod sandbox's program: a Go module of this project, cached by the digest of its source."""

_CONTAINERD = GoBinary(
    "containerd", "github.com/containerd/containerd/v2", "github.com/containerd/containerd/v2"
)
_CRICTL = GoBinary("crictl", "sigs.k8s.io/cri-tools", "sigs.k8s.io/cri-tools/cmd/crictl")
_KUBEADM = GoBinary("kubeadm", "k8s.io/kubernetes", "k8s.io/kubernetes/cmd/kubeadm")


_say = to_log(log)


@dataclass(frozen=True)
class NodeParts:
    """Where each part of a node is (see the module docstring)."""

    version: str
    """Kubernetes version ``X.Y.Z``."""
    control_plane: Path
    """Directory with etcd, kube-apiserver, kube-scheduler, kube-controller-manager."""
    kubelet: Path
    """The kubelet."""
    node_tools: Path
    """Directory with kubeadm, kubectl, kube-proxy."""
    containerd: Path
    """Directory with containerd, containerd-shim-runc-v2, ctr."""
    crictl: Path
    """crictl."""
    pause: Path
    """The pod sandbox's program."""
    kind_files: Path
    """kind's ``images/base/files`` (entrypoint, systemd units, containerd config)."""


def _tools_root(settings: LocalSettings) -> Path:
    return settings.drivers_cache_root.parent / "tools"


def kind_files(kind_version: str, progress: Progress = _say) -> Path:
    """``images/base/files`` of ``sigs.k8s.io/kind`` at ``kind_version``, from the Go module cache
    (``go mod download`` fetches it once)."""
    if shutil.which("go") is None:
        raise BinariesError(
            "'go' is not on PATH to fetch kind's node files (sigs.k8s.io/kind); install Go 1.24+"
        )
    with tempfile.TemporaryDirectory(prefix="kind-files-") as tmp:
        done = subprocess.run(
            ["go", "mod", "download", "-json", f"sigs.k8s.io/kind@{kind_version}"],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    if done.returncode != 0:
        raise GoBuildError(
            f"go mod download sigs.k8s.io/kind@{kind_version} failed: {done.stdout}{done.stderr}"
        )
    files = Path(json.loads(done.stdout)["Dir"]) / "images" / "base" / "files"
    if not (files / "usr" / "local" / "bin" / "entrypoint").is_file():
        raise BinariesError(
            f"sigs.k8s.io/kind@{kind_version} has no images/base/files/usr/local/bin/entrypoint"
        )
    progress(f"kind {kind_version} node files from {files}")
    return files


def resolve_parts(settings: LocalSettings, kind_version: str, progress: Progress = _say) -> NodeParts:
    """Every part of a node for ``settings.k8s_version``, built where the cache lacks it."""
    version = settings.k8s_version
    control = binaries.resolve(settings.binaries, progress)
    kubelet = binaries.resolve_kubelet(settings.binaries, progress)
    build = settings.binaries.build
    tools = cached_build(
        _KUBEADM,
        version,
        settings.binaries.cache_root / "node" / version,
        build=build,
        progress=progress,
        instead="set DRAC_KIND_NODE_IMAGE to a node image made elsewhere",
        builder=lambda dest: gobuild.build_kubernetes(version, dest, progress, commands=NODE_TOOLS),
    ).parent

    def build_containerd(dest: Path) -> None:
        for command in CONTAINERD_COMMANDS:
            gobuild.build_go_command(
                _CONTAINERD.module, CONTAINERD_VERSION, f"{_CONTAINERD.module}/cmd/{command}", dest, progress
            )

    containerd = cached_build(
        _CONTAINERD,
        CONTAINERD_VERSION,
        _tools_root(settings) / "containerd" / CONTAINERD_VERSION,
        build=build,
        progress=progress,
        builder=build_containerd,
    ).parent
    crictl = cached_build(
        _CRICTL,
        CRI_TOOLS_VERSION,
        _tools_root(settings) / "crictl" / CRI_TOOLS_VERSION,
        build=build,
        progress=progress,
    )
    pause = resolve_tool("pause", PAUSE_SOURCE, settings, progress)
    return NodeParts(
        version=version,
        control_plane=control.directory,
        kubelet=kubelet,
        node_tools=tools,
        containerd=containerd,
        crictl=crictl,
        pause=pause,
        kind_files=kind_files(kind_version, progress),
    )
