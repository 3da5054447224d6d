"""The probe as a DaemonSet: :func:`daemonset` builds the manifest ``dra-conformance probe manifest``
prints.

One pod per node (tolerating every taint, so GPU nodes get one too) runs ``python -m clusters.probe
serve`` on ``127.0.0.1:PORT`` inside the pod: nothing but a port-forward through the API server
reaches it (:class:`~clusters.probe.transports.PortForwards`; no readiness probe either: the kubelet
would dial the pod IP). The node's dirs are mounted read-only at the paths they have on the node, so
the socket paths a driver names in ``GetInfo`` mean the same in the pod. The container runs as uid 0
(the kubelet's dirs and sockets belong to root) with every capability dropped, no privilege
escalation, a read-only root file system and no service account token. hostPath volumes need a
namespace whose Pod Security level allows them (``privileged``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEFAULT_CDI_DIR",
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRY_DIR",
    "PROBE_LABELS",
    "PROBE_NAME",
    "PROBE_PORT",
    "daemonset",
]

PROBE_NAME = "dra-conformance-probe"
"""The DaemonSet's name and its pods' ``app.kubernetes.io/name`` label."""

PROBE_LABELS = {"app.kubernetes.io/name": PROBE_NAME, "app.kubernetes.io/part-of": "dra-conformance"}
"""The labels of the DaemonSet's pods (how the suite finds the pod of a node)."""

PROBE_PORT = 7373
"""The port the probe listens on in its pod."""

DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
"""The kubelet's plugin-registration dir."""
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
"""Where drivers put their service sockets."""
DEFAULT_CDI_DIR = "/var/run/cdi"
"""Where drivers write CDI specs (a tmpfs)."""


_HOST_PATH_TYPES = {"registry": "Directory", "plugins": "Directory", "cdi": "DirectoryOrCreate"}
"""The kubelet makes its two dirs when it starts; the CDI dir may be missing until a driver writes a
spec, and an empty one is what runtimes expect anyway."""


def daemonset(
    image: str,
    namespace: str,
    *,
    registry_dir: str = DEFAULT_REGISTRY_DIR,
    plugins_dir: str = DEFAULT_PLUGINS_DIR,
    cdi_dir: str = DEFAULT_CDI_DIR,
    port: int = PROBE_PORT,
) -> dict[str, Any]:
    """The DaemonSet of the probe in ``namespace``, its container from ``image`` (one with this
    project installed: the reference driver's image has it). The dirs are absolute paths on the
    nodes; ``ValueError`` names one that is not."""
    dirs = {"registry": registry_dir, "plugins": plugins_dir, "cdi": cdi_dir}
    for name, path in dirs.items():
        if not path.startswith("/"):
            raise ValueError(f"--{name}-dir {path!r} is not an absolute path on the node")
    command = [
        "python",
        "-m",
        "clusters.probe",
        "serve",
        f"--listen=127.0.0.1:{port}",
        f"--registry-dir={registry_dir}",
        f"--plugins-dir={plugins_dir}",
        f"--cdi-dir={cdi_dir}",
        "--log-format=json",
    ]
    container = {
        "name": "probe",
        "image": image,
        "command": command,
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "runAsUser": 0,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # HostToContainer: a tmpfs mounted on the CDI dir after the pod started shows in it too
        "volumeMounts": [
            {"name": name, "mountPath": path, "readOnly": True, "mountPropagation": "HostToContainer"}
            for name, path in dirs.items()
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": PROBE_NAME, "namespace": namespace, "labels": dict(PROBE_LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(PROBE_LABELS)},
            "template": {
                "metadata": {"labels": dict(PROBE_LABELS)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [container],
                    "volumes": [
                        {"name": name, "hostPath": {"path": path, "type": _HOST_PATH_TYPES[name]}}
                        for name, path in dirs.items()
                    ],
                },
            },
        },
    }
