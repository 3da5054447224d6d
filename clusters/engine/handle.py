"""``Engine``: a Docker engine that answers, and how a tool reaches it and what runs in it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Engine"]


@dataclass(frozen=True)
class Engine:
    """A Docker engine that answered ``docker version``: the user's, or the private one."""

    docker: Path
    """The Docker client."""
    host: str
    """``DOCKER_HOST`` to reach it (empty: the client's default, the user's own setup)."""
    version: str
    """The engine's version (``Server.Version``)."""
    netns_pid: int | None = None
    """A process in the engine's own network namespace (the private engine's ``dockerd``): the
    published ports of its containers are reachable only from there (:meth:`in_netns`,
    :func:`clusters.engine.relay.forward`). None: the engine shares this machine's network."""
    config_dir: Path | None = None
    """``DOCKER_CONFIG`` for the client (the private engine's, so the user's ``~/.docker`` is not
    written); None: the client's default."""

    @property
    def private(self) -> bool:
        """Whether this is the private engine in its own network namespace."""
        return self.netns_pid is not None

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with what a tool (``docker``, ``kind``) needs to talk to this engine."""
        env = dict(base)
        if self.host:
            env["DOCKER_HOST"] = self.host
        if self.config_dir is not None:
            env["DOCKER_CONFIG"] = str(self.config_dir)
        return env

    def in_netns(self, argv: Sequence[str | Path]) -> list[str]:
        """``argv`` run inside the engine's network namespace (``nsenter --net``), where its
        containers' published ports answer; ``argv`` as is for an engine on this machine's network."""
        words = [str(a) for a in argv]
        if self.netns_pid is None:
            return words
        return ["nsenter", f"--net=/proc/{self.netns_pid}/ns/net", "--", *words]
