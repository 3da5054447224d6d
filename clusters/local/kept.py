"""A local cluster kept between runs (``dra-conformance run --keep-cluster``), found again and reused.

A kept cluster lives in one known state dir per user (:func:`kept_dir`). The next run with
``--keep-cluster`` reuses it when it can serve that run as a new one would: its daemon runs, its API
server answers, it was made with the same Kubernetes version, nodes, node kinds, driver name, fake
machine, device classes and companion driver (:data:`MUST_MATCH`), and what the run before left
(pods, allocated claims) is gone. Otherwise one line says why not, the old cluster is stopped, and a
new one starts in its place.

Its drivers serve the run as they are when they are as new ones would be: the same processes that
were running when a run's preflight found them registered with their slices (:func:`note_drivers`
wrote down what they were then), started by the same command, alive and registered, their files
(checkpoint, CDI specs, fake GPU machine) and their devices (slices, taints) as they were then.
Otherwise one line says why, and the drivers are replaced
(:meth:`~clusters.local.cluster.LocalCluster.reset_drivers`: sockets, checkpoints, CDI specs,
fake machines and slices go first), as the project's self-tests do between suite runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from clusters.errors import ClusterError, ClusterStateError
from clusters.local import daemon
from clusters.local.settings import LocalSettings
from clusters.local.state import DaemonState
from nodeagent.layout import NodeLayout

__all__ = ["DRIVERS_FILE", "MUST_MATCH", "QUIET_SECONDS", "differences", "kept_dir", "note_drivers", "reuse"]

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

DRIVERS_FILE = "drivers.json"
"""In the kept dir: the drivers as a run's preflight found them (:func:`note_drivers`)."""

_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


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


def _digest(directories: Sequence[Path]) -> str:
    """SHA-256 over the names and contents of the regular files under ``directories`` (sockets and
    lock files left out: they say nothing of what a driver holds)."""
    h = hashlib.sha256()
    for directory in directories:
        for path in sorted(directory.rglob("*")) if directory.is_dir() else []:
            if path.is_file() and not path.is_symlink() and path.suffix != ".lock":
                h.update(str(path.relative_to(directory.parent)).encode() + b"\0")
                with contextlib.suppress(OSError):
                    h.update(path.read_bytes())
                h.update(b"\0")
    return h.hexdigest()


def _command(settings: LocalSettings) -> list[str] | None:
    """The driver command of ``settings`` as the daemon takes and :data:`DRIVERS_FILE` records it."""
    return None if settings.driver_command is None else list(settings.driver_command)


def _drivers(directory: Path, state: DaemonState, settings: LocalSettings) -> dict[str, Any]:
    """What the kept cluster's drivers are now: their command, their devices (from its daemon), and
    per node the driver's PID, whether it has a registration socket, the digest of its files."""
    driver = settings.driver_name
    nodes: dict[str, Any] = {}
    for name, node in state.nodes.items():
        layout = NodeLayout(node.root)
        nodes[name] = {
            "driver_pid": node.driver_pid,
            "registered": any(layout.registry_dir.glob(f"{driver}*")),
            "files": _digest([layout.plugin_dir(driver), layout.cdi_dir, layout.root / "gpus"]),
        }
    devices = daemon.request(directory, "devices", timeout=60)["devices"]
    return {"command": _command(settings), "devices": devices, "nodes": nodes}


def note_drivers(settings: LocalSettings) -> None:
    """Write down the kept cluster's drivers as they are now, as new ones: called once a run's preflight
    found them registered with their slices, before any other rule ran. The next run keeps them when
    they are still so (:func:`reuse`)."""
    directory = kept_dir(settings)
    try:
        state = daemon.read_state(directory)
        if state is None:
            return
        now = _drivers(directory, state, settings)
    except (ClusterError, OSError) as e:  # the next run replaces the drivers then
        log.warning("could not note the kept cluster's drivers: %s", e, extra={"state_dir": str(directory)})
        (directory / DRIVERS_FILE).unlink(missing_ok=True)
        return
    (directory / DRIVERS_FILE).write_text(json.dumps(now, indent=2) + "\n")


def _changed(noted: Mapping[str, Any], now: Mapping[str, Any], healthy: Mapping[str, bool]) -> str:
    """Why the drivers are not as :func:`note_drivers` found them (empty: they are)."""
    if noted.get("command") != now["command"]:
        return "another driver command"
    if set(noted.get("nodes") or {}) != set(now["nodes"]):
        return "other nodes than when they were noted"
    for name, node in now["nodes"].items():
        before = noted["nodes"][name]
        if not healthy.get(f"driver-{name}"):
            return f"the driver on {name} is not running"
        if node["driver_pid"] != before.get("driver_pid"):
            return f"the driver on {name} is another process than the one noted (restarted by the run before)"
        if not node["registered"]:
            return f"the driver on {name} has no registration socket"
        if node["files"] != before.get("files"):
            return f"the driver on {name} left its checkpoint, CDI specs or fake GPUs other than at its start"
    if now["devices"] != noted.get("devices"):
        return "the published devices (or their taints) are other than at the drivers' start"
    return ""


def _noted(directory: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((directory / DRIVERS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def reuse(settings: LocalSettings, say: Callable[[str], None]) -> DaemonState | None:
    """The state of the kept cluster, ready for a run with ``settings.driver_command``: its drivers
    kept when they are as new ones, else replaced (one line says why); None when there is none or it
    cannot serve (then it is gone and ``say`` told why)."""
    directory = kept_dir(settings)
    saved = directory / daemon.SETTINGS_FILE
    if not saved.exists():
        return None
    try:
        state = daemon.read_state(directory)
    except ClusterStateError as e:  # its daemon runs, but this version cannot read its state
        say(f"not reusing the kept cluster in {directory}: {e}: starting a new one")
        _discard(directory, running=True)
        return None
    if state is None:
        say(f"the kept cluster in {directory} is not running (its daemon is gone): starting a new one")
        _discard(directory, running=False)
        return None
    try:
        kept = daemon.settings_from_json(saved.read_text())
    except (OSError, KeyError, ValueError, TypeError) as e:
        say(f"the kept cluster in {directory} has unreadable settings ({e}): starting a new one")
        _discard(directory, running=True)
        return None
    changed = differences(kept, settings)
    if changed:
        say(f"not reusing the kept cluster in {directory}: {'; '.join(changed)}: starting a new one")
        _discard(directory, running=True)
        return None
    try:
        healthy = daemon.request(directory, "status", timeout=30)["healthy"]
        dead = sorted(name for name, up in healthy.items() if not up and not name.startswith("driver-"))
        if dead:  # a driver that stopped is replaced anyway
            raise ClusterError(f"not running: {', '.join(dead)}")
        # in the daemon, whose API client is made: this process need not load one
        daemon.request(directory, "wait_quiet", timeout=QUIET_SECONDS + 30, seconds=QUIET_SECONDS)
        noted = _noted(directory)
        why = (
            _changed(noted, _drivers(directory, state, settings), healthy)
            if noted is not None
            else "nothing noted of them at their start"
        )
        if why:
            say(f"replacing the kept cluster's drivers: {why}")
            (directory / DRIVERS_FILE).unlink(missing_ok=True)
            daemon.request(directory, "reset_drivers", command=_command(settings))
            state = daemon.read_state(directory) or state
    except (ClusterError, OSError) as e:  # the daemon's answer names its API server's errors too
        say(f"not reusing the kept cluster in {directory}: {e}: starting a new one")
        with contextlib.suppress(ClusterError, OSError):
            _discard(directory, running=True)
        return None
    log.info("reused the kept cluster", extra={"state_dir": str(directory), "drivers_kept": not why})
    return state
