"""Settings of the Docker engine helper: one frozen object, from defaults and env vars.

=============================  ===========================================================
env var                        what
=============================  ===========================================================
``DOCKER_HOST``                a running engine to use (else the client's default socket)
``DRAC_ENGINE``                ``auto`` (default): a running engine, else (as root) a private
                               one; ``user``: a running engine only; ``private``: always the
                               private one (a running engine is left alone)
``DRAC_ENGINE_DIR``            the private engine's state dir: socket, data root, log
                               (default ``$XDG_STATE_HOME/dra-conformance/engine``)
``DRAC_DOCKERD``               the ``dockerd`` to start (default: on ``PATH``)
``DRAC_RUNC``                  the ``runc`` its runtime wrapper runs (default: on ``PATH``)
=============================  ===========================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from clusters.local.settings import xdg_state_dir

__all__ = ["MODES", "EngineSettings"]

MODES = ("auto", "user", "private")
"""What :attr:`EngineSettings.mode` may be."""


@dataclass(frozen=True)
class EngineSettings:
    """Which Docker engine the kind and k3s backends use, and how a private one is started."""

    mode: str = "auto"
    """``auto``: a running engine, else a private one (root only); ``user``: a running engine only;
    ``private``: the private engine even where another runs."""
    docker_host: str = ""
    """``DOCKER_HOST`` of the user's engine (empty: the client's default socket)."""
    state_dir: Path = field(default_factory=lambda: xdg_state_dir("engine", {}))
    """The private engine's directory: socket, data root (images survive a stop), exec root, log."""
    dockerd: str = "dockerd"
    """The engine binary (a name looked up on ``PATH``, or a path)."""
    runc: str = "runc"
    """The runc the runtime wrapper execs (a name looked up on ``PATH``, or a path)."""
    start_timeout: float = 90.0
    """Seconds the private engine may take to answer."""
    stop_timeout: float = 60.0
    """Seconds it may take to stop its containers and exit on SIGTERM (then SIGKILL)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EngineSettings:
        """Defaults, then the env vars of the module docstring."""
        changes: dict[str, object] = {}
        mode = env.get("DRAC_ENGINE", "").strip().lower()
        if mode:
            if mode not in MODES:
                raise ValueError(f"DRAC_ENGINE={mode!r} is not one of {', '.join(MODES)}")
            changes["mode"] = mode
        if env.get("DOCKER_HOST"):
            changes["docker_host"] = env["DOCKER_HOST"]
        if env.get("DRAC_ENGINE_DIR"):
            changes["state_dir"] = Path(env["DRAC_ENGINE_DIR"]).expanduser()
        elif env.get("XDG_STATE_HOME"):
            changes["state_dir"] = xdg_state_dir("engine", env)
        if env.get("DRAC_DOCKERD"):
            changes["dockerd"] = env["DRAC_DOCKERD"]
        if env.get("DRAC_RUNC"):
            changes["runc"] = env["DRAC_RUNC"]
        return dataclasses.replace(cls(), **changes)  # type: ignore[arg-type]
