"""The node agent's settings, built once from the command line and passed down.

The node's side of the DRA protocol (``driver/settings.py`` configures the plugin's side).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from draproto.logs import LOG_FORMATS
from nodeagent.layout import NodeLayout

__all__ = ["Settings", "parse_args"]

DEFAULT_K8S_VERSION = "1.37"


@dataclass(frozen=True)
class Settings:
    """Everything the agent is configured with (docs/interfaces.md lists the flags)."""

    node_name: str
    """The Node this agent plays the kubelet for."""
    root: Path
    """The node root; what lives under it is :class:`~nodeagent.layout.NodeLayout`."""
    kubeconfig: str | None = None
    """API access; None means in-cluster configuration (tests may pass a client instead)."""
    k8s_version: tuple[int, int] = (1, 37)
    """The Kubernetes minor version whose kubelet behaviour the agent follows."""
    slice_grace_seconds: float = 30.0
    """How long a driver's ResourceSlices outlive its last plugin."""
    grpc_timeout_seconds: float = 45.0
    """Per-call timeout of NodePrepareResources / NodeUnprepareResources."""
    registration_timeout_seconds: float = 5.0
    """Timeout of GetInfo and NotifyRegistrationStatus during the handshake."""
    poll_seconds: float = 0.5
    """How often the plugin registry dir is scanned."""
    resync_seconds: float = 5.0
    """How often every pod on the node is re-examined, besides watch events."""
    heartbeat_seconds: float = 10.0
    """Node Lease renewal (and Ready condition refresh) period."""
    retry_initial_seconds: float = 1.0
    """First backoff after a failed prepare or unprepare; doubles per failure."""
    retry_max_seconds: float = 16.0
    """Cap of that backoff."""
    unprepare_give_up_seconds: float = 120.0
    """After this long of failing unprepares a deleted pod is removed anyway (with an event)."""
    capacity: dict[str, str] = field(
        default_factory=lambda: {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    )
    """Node capacity and allocatable."""
    labels: dict[str, str] = field(default_factory=dict)
    """Extra Node labels (``kubernetes.io/hostname`` and os/arch are always set)."""
    optional_node_operations: bool = True
    """Feature gate DRAOptionalNodeOperations (1.37+; the local tier turns every alpha DRA gate on):
    the node declares it, and leaves out the prepare or unprepare calls the allocation skips
    (``nodeagent.skipops``); off, such a claim is refused, as a kubelet with the gate off does."""
    node_allocatable_resources: bool = True
    """Feature gate DRANodeAllocatableResources (1.37+): the node declares it, as a kubelet with the
    gate on does (component-helpers ``nodedeclaredfeatures`` ``dranodeallocatableresources``): the
    API server's NodeDeclaredFeatures admission refuses a slice whose devices carry
    ``nodeAllocatableResources`` for a node that does not."""

    @property
    def layout(self) -> NodeLayout:
        """The paths under :attr:`root` (registry, plugin and CDI dirs, checkpoint, views)."""
        return NodeLayout(self.root)

    def at_least(self, major: int, minor: int) -> bool:
        """Whether the Kubernetes version followed is ``major.minor`` or newer."""
        return self.k8s_version >= (major, minor)


def parse_version(text: str) -> tuple[int, int]:
    """``"1.37"``, ``"v1.37.2"`` -> ``(1, 37)``."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"Kubernetes version {text!r} is not like 1.37 or v1.37.2")
    return int(match.group(1)), int(match.group(2))


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"label {text!r} is not KEY=VALUE")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    """The agent's argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m nodeagent",
        description="Node agent: plays the kubelet's DRA part for one fake node.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster)")
    p.add_argument("--node-name", required=True, help="the Node this agent serves")
    p.add_argument("--root", required=True, type=Path, help="node root dir (keep short: socket paths)")
    p.add_argument(
        "--k8s-version",
        default=DEFAULT_K8S_VERSION,
        type=parse_version,
        help="Kubernetes version whose kubelet behaviour to follow (default %(default)s)",
    )
    p.add_argument("--slice-grace-seconds", type=float, default=30.0)
    p.add_argument("--grpc-timeout-seconds", type=float, default=45.0, help=argparse.SUPPRESS)
    p.add_argument("--resync-seconds", type=float, default=5.0, help=argparse.SUPPRESS)
    p.add_argument("--label", action="append", type=_label, default=[], help="extra Node label KEY=VALUE")
    p.add_argument(
        "--optional-node-operations",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="feature gate DRAOptionalNodeOperations (default: on from Kubernetes 1.37, which has it)",
    )
    p.add_argument(
        "--node-allocatable-resources",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="feature gate DRANodeAllocatableResources (default: on from Kubernetes 1.37, which has it)",
    )
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text")
    return p


def parse_args(argv: Sequence[str] | None = None) -> tuple[Settings, argparse.Namespace]:
    """Settings from a command line, plus the raw namespace (logging options)."""
    ns = build_parser().parse_args(argv)
    version = ns.k8s_version if isinstance(ns.k8s_version, tuple) else parse_version(ns.k8s_version)
    settings = Settings(
        node_name=ns.node_name,
        root=ns.root.resolve(),
        kubeconfig=ns.kubeconfig,
        k8s_version=version,
        slice_grace_seconds=ns.slice_grace_seconds,
        grpc_timeout_seconds=ns.grpc_timeout_seconds,
        resync_seconds=ns.resync_seconds,
        labels=dict(ns.label),
        optional_node_operations=(
            version >= (1, 37) if ns.optional_node_operations is None else ns.optional_node_operations
        ),
        node_allocatable_resources=(
            version >= (1, 37) if ns.node_allocatable_resources is None else ns.node_allocatable_resources
        ),
    )
    return settings, ns
