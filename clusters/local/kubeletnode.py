"""Nodes of kind ``kubelet``: the real, unmodified kubelet beside a fake container runtime.

Per node (under the node root ``DIR``, the same layout the node agent uses, so drivers, CDI specs
and ContainerView files are where :mod:`nodeagent.layout` says)::

    DIR/kubelet/         the kubelet's /var/lib/kubelet (plugins_registry, plugins, pki, pods, ...)
    DIR/log/             the kubelet's /var/log (pods/, containers/)
    DIR/kubelet.yaml     its KubeletConfiguration; DIR/kubelet.kubeconfig: system:node:<name>
    DIR/cri.sock         the fake runtime's CRI socket (``fakecri``, :mod:`clusters.local.gobins`)
    DIR/agent/containers/  ContainerView files, written by the fake runtime

Isolation: a kubelet touches the host (run as root it sets ``vm.overcommit_memory``,
``kernel.panic``, ``kernel.panic_on_oops``, creates ``/var/lib/kubelet`` and ``/var/log/containers``).
So each one runs in its own user and mount namespace (``unshare --user --map-root-user --mount``,
mounts private), where ``/proc/sys`` is remounted read-only, a tmpfs hides the host's ``/var/lib``,
and ``DIR/kubelet`` and ``DIR/log`` are bind-mounted on ``/var/lib/kubelet`` and ``/var/log``; the
feature gate ``KubeletInUserNamespace`` makes it tolerate what it cannot do there. Where user
namespaces are not allowed, nodes of kind kubelet are refused (:func:`check_user_namespaces`):
there is no fallback that touches the host.
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from clusters.errors import ClusterError
from clusters.local.settings import NODE_KINDS

__all__ = [
    "NODE_KINDS",
    "check_user_namespaces",
    "kubelet_argv",
    "kubelet_config",
    "runtime_argv",
]

_NAMESPACE_SETUP = (
    "set -e; "
    "mount --bind /proc/sys /proc/sys; mount -o remount,bind,ro /proc/sys; "
    "mount -t tmpfs -o mode=755 dra-conformance /var/lib; mkdir /var/lib/kubelet; "
    'mount --bind "$1" /var/lib/kubelet; mount --bind "$2" /var/log; shift 2; exec "$@"'
)
"""Run as ``sh -c SETUP sh KUBELET_DIR LOG_DIR ARGV...`` inside the new namespaces."""


@functools.cache
def check_user_namespaces() -> None:
    """Raise :class:`ClusterError` saying why a kubelet cannot be isolated here (no ``unshare``, or
    user or mount namespaces not allowed); return quietly when it can."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise ClusterError(
            "nodes of kind kubelet need 'unshare' (util-linux) to run each kubelet in its own user and "
            "mount namespace, and it is not on PATH; install util-linux, or use --node-kind agent"
        )
    probe = (
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && mount -t tmpfs t /var/lib"
    )
    try:
        done = subprocess.run(
            [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", probe],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ClusterError(f"could not try a user namespace ({e}); use --node-kind agent") from e
    if done.returncode != 0:
        raise ClusterError(
            "nodes of kind kubelet need unprivileged user and mount namespaces (a kubelet outside them "
            "changes host sysctls and paths, which this harness never does), and this machine refuses "
            f"them: 'unshare --user --map-root-user --mount' said {done.stderr.strip() or done.returncode!r} "
            "(see sysctls kernel.unprivileged_userns_clone / user.max_user_namespaces, or a container's "
            "seccomp profile); use --node-kind agent"
        )


def kubelet_config(
    *,
    runtime_socket: Path,
    ca_cert: Path,
    port: int,
    healthz_port: int,
    feature_gates: Mapping[str, bool],
) -> dict[str, Any]:
    """A node's KubeletConfiguration: a real node's, less what a process without cgroups of its own
    or swap control cannot do, with its own ports and the DRA gates of the control plane."""
    gates = {**feature_gates, "KubeletInUserNamespace": True}
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "imageServiceEndpoint": f"unix://{runtime_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,
        "localStorageCapacityIsolation": False,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "resolvConf": "",
        # as a real cluster has (no DNS server answers there: no container resolves names here)
        "clusterDNS": ["10.0.0.10"],
        "clusterDomain": "cluster.local",
        "serializeImagePulls": False,
        # client-go's default 5/s made a claimed pod take 6 s
        "kubeAPIQPS": 100,
        "kubeAPIBurst": 200,
        "nodeLeaseDurationSeconds": 10,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "evictionHard": {"memory.available": "1Ki", "nodefs.available": "0%", "imagefs.available": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "featureGates": dict(sorted(gates.items())),
    }


def write_kubelet_files(
    root: Path,
    *,
    runtime_socket: Path,
    ca_cert: Path,
    port: int,
    healthz_port: int,
    feature_gates: Mapping[str, bool],
) -> Path:
    """Write ``DIR/kubelet.yaml`` and make ``DIR/kubelet`` and ``DIR/log``; returns the config path."""
    (root / "kubelet").mkdir(parents=True, exist_ok=True)
    (root / "log").mkdir(parents=True, exist_ok=True)
    config = root / "kubelet.yaml"
    text = yaml.safe_dump(
        kubelet_config(
            runtime_socket=runtime_socket,
            ca_cert=ca_cert,
            port=port,
            healthz_port=healthz_port,
            feature_gates=feature_gates,
        ),
        sort_keys=False,
    )
    config.write_text(text)
    return config


def kubelet_argv(kubelet: Path, root: Path, node: str, kubeconfig: Path, config: Path) -> list[str]:
    """The command line of one isolated kubelet (see the module docstring)."""
    unshare = shutil.which("unshare") or "unshare"
    return [
        unshare,
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _NAMESPACE_SETUP,
        "sh",
        str(root / "kubelet"),
        str(root / "log"),
        str(kubelet),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node}",
        "--node-ip=127.0.0.1",
        "--v=2",
    ]


def runtime_argv(
    fakecri: Path, root: Path, *, server: str, ca_cert: Path, cert: Path, key: Path
) -> list[str]:
    """The command line of a node's fake container runtime (it reads pods with the node's
    credentials, to tell init containers from the others)."""
    return [
        str(fakecri),
        f"--listen={root / 'cri.sock'}",
        f"--cdi-dir={root / 'cdi'}",
        f"--containers-dir={root / 'agent' / 'containers'}",
        f"--server={server}",
        f"--ca={ca_cert}",
        f"--cert={cert}",
        f"--key={key}",
    ]


def describe_argv(argv: list[str]) -> str:
    """A shell line for messages."""
    return shlex.join(argv)
