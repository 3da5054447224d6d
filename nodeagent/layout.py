"""Where things live under a node root: the one definition of the node's directory layout.

The node agent (``--root DIR``) and whoever prepares a node for it (``clusters.local``, which
also points the driver's ``--registry-dir``, ``--plugin-dir`` and ``--cdi-dir`` here) share these
paths; docs/interfaces.md shows them as a table. This module imports only the standard library,
so that ``clusters.local`` can use it without loading the agent.

::

    DIR/kubelet/plugins_registry/<driver>-reg.sock   registration sockets the agent watches
    DIR/kubelet/plugins/<driver>/dra.sock           the driver's service socket (and checkpoint)
    DIR/cdi/                                        CDI specs
    DIR/agent/checkpoint.json                       the agent's claim-info checkpoint
    DIR/agent/containers/<ns>_<pod>_<container>.json  ContainerView files

Keep ``DIR`` short: unix socket paths must stay under 108 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["NodeLayout", "view_prefix"]


@dataclass(frozen=True)
class NodeLayout:
    """The paths under one node root."""

    root: Path
    """The node root (the agent's ``--root``)."""

    @property
    def registry_dir(self) -> Path:
        """Where plugins put their registration sockets (the kubelet's ``plugins_registry``)."""
        return self.root / "kubelet" / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """Parent of each driver's own dir (the kubelet's ``plugins``)."""
        return self.root / "kubelet" / "plugins"

    def plugin_dir(self, driver: str) -> Path:
        """A driver's own dir: its ``dra.sock`` and its checkpoint."""
        return self.plugins_dir / driver

    def registration_socket(self, driver: str) -> Path:
        """Where a driver following the kubelet's convention puts its registration socket."""
        return self.registry_dir / f"{driver}-reg.sock"

    def dra_socket(self, driver: str) -> Path:
        """Where a driver following the kubelet's convention serves DRAPlugin."""
        return self.plugin_dir(driver) / "dra.sock"

    @property
    def cdi_dir(self) -> Path:
        """The node's CDI spec dir."""
        return self.root / "cdi"

    @property
    def agent_dir(self) -> Path:
        """The agent's own state."""
        return self.root / "agent"

    @property
    def checkpoint_path(self) -> Path:
        """The agent's claim-info checkpoint."""
        return self.agent_dir / "checkpoint.json"

    @property
    def containers_dir(self) -> Path:
        """Where ContainerView files go."""
        return self.agent_dir / "containers"

    def view_path(self, namespace: str, pod: str, container: str) -> Path:
        """The ContainerView file of one container."""
        return self.containers_dir / f"{view_prefix(namespace, pod)}{container}.json"

    def create(self, drivers: tuple[str, ...] = ()) -> None:
        """Make the dirs the agent and the drivers expect (existing ones are fine)."""
        dirs = [self.registry_dir, self.plugins_dir, self.cdi_dir, self.containers_dir]
        for d in dirs + [self.plugin_dir(driver) for driver in drivers]:
            d.mkdir(parents=True, exist_ok=True)


def view_prefix(namespace: str, pod: str) -> str:
    """The start of the file names of every ContainerView of one pod."""
    return f"{namespace}_{pod}_"
