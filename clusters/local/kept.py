"""A local cluster kept between runs (``dra-conformance run --keep-cluster``), found again and reused.

A kept cluster lives in one known state dir per user (:func:`kept_dir`). The next run with
``--keep-cluster`` reuses it when it can serve that run as a new one would: its daemon runs, its API
server answers, it was made with the same Kubernetes version, nodes, node kinds, driver name, fake
machine, device classes and companion driver (:data:`MUST_MATCH`), and what the run before left
(pods, allocated claims) is gone. Then only the drivers are replaced
(:meth:`~clusters.local.cluster.LocalClusterBase.reset_drivers`: sockets, checkpoints, CDI specs,
fake machines and slices go first), as the project's self-tests do between suite runs. Otherwise one
line says why not, the old cluster is stopped, and a new one starts in its place.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusters.errors import ClusterError
from clusters.local import daemon
from clusters.local.attached import AttachedLocalCluster
from clusters.local.settings import LocalSettings
from draproto.rest import RestError

__all__ = ["MUST_MATCH", "QUIET_SECONDS", "differences", "kept_dir", "reuse"]

log = logging.getLogger(__name__)

MUST_MATCH = (
    "k8s_version",
    "bin_dir",
    "nodes",
    "node_kinds",
    "driver_name",
    "agent",
    "device_classes",
    "fake_nvml",
    "nic_driver",
)
"""What a kept cluster must have been made with to serve a run (the driver command is replaced)."""

QUIET_SECONDS = 30.0
"""How long a reused cluster may take to let go of what the run before held."""


def kept_dir(settings: LocalSettings) -> Path:
    """The state dir of the kept cluster: ``kept`` beside the state dir of ``cluster up``
    (``$XDG_STATE_HOME/dra-conformance/kept``), one per user."""
    return settings.state_dir.parent / "kept"


def _value(settings: LocalSettings, name: str) -> Any:
    if name in ("k8s_version", "bin_dir"):
        return getattr(settings.binaries, name)
    return getattr(settings, name)


def differences(kept: LocalSettings, wanted: LocalSettings) -> list[str]:
    """What of :data:`MUST_MATCH` differs, as ``name: kept -> wanted`` (empty: it can be reused)."""
    return [
        f"{name} {_value(kept, name)!r} -> {_value(wanted, name)!r}"
        for name in MUST_MATCH
        if _value(kept, name) != _value(wanted, name)
    ]


def _discard(directory: Path, running: bool) -> None:
    if running:
        daemon.shutdown(directory)
    shutil.rmtree(directory, ignore_errors=True)


def reuse(settings: LocalSettings, say: Callable[[str], None]) -> dict[str, Any] | None:
    """The state of the kept cluster, its drivers replaced by ``settings.driver_command``, ready for
    a run; None when there is none or it cannot serve (then it is gone and ``say`` told why)."""
    directory = kept_dir(settings)
    saved = directory / daemon.SETTINGS_FILE
    if not saved.exists():
        return None
    state = daemon.read_state(directory)
    if state is None or not state.get("ready"):
        say(f"the kept cluster in {directory} is not running (its daemon is gone): starting a new one")
        _discard(directory, running=False)
        return None
    try:
        kept = daemon.settings_from_json(saved.read_text())
    except (OSError, ValueError, TypeError) as e:
        say(f"the kept cluster in {directory} has unreadable settings ({e}): starting a new one")
        _discard(directory, running=True)
        return None
    changed = differences(kept, settings)
    if changed:
        say(f"not reusing the kept cluster in {directory}: {'; '.join(changed)}: starting a new one")
        _discard(directory, running=True)
        return None
    cluster = AttachedLocalCluster(directory, state)
    try:
        dead = sorted(
            name
            for name, up in cluster.status()["healthy"].items()
            if not up and not name.startswith("driver-")
        )
        if dead:  # a driver that stopped is replaced anyway
            raise ClusterError(f"not running: {', '.join(dead)}")
        cluster.wait_quiet(QUIET_SECONDS)
        cluster.reset_drivers(settings.driver_command)
    except (ClusterError, RestError, TimeoutError, OSError) as e:  # RestError: its API server
        say(f"not reusing the kept cluster in {directory}: {e}: starting a new one")
        with contextlib.suppress(ClusterError, OSError):
            _discard(directory, running=True)
        return None
    finally:
        cluster.stop()
    log.info("reused the kept cluster", extra={"state_dir": str(directory)})
    return state
