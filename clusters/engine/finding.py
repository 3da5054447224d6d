"""Which Docker engine a run uses: the user's when one answers, else (as root) the private one.

:func:`find_engine` never starts anything; :func:`find_or_start` starts the private engine
(:class:`~clusters.engine.dockerd.PrivateEngine`) where no engine answers and this process may, and
hands it back so that the caller stops it (``with private_engine(...) as engine:`` does both).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from clusters import tools
from clusters.engine.dockerd import PrivateEngine
from clusters.engine.handle import Engine
from clusters.engine.settings import EngineSettings
from clusters.errors import ToolError
from clusters.progress import Progress, to_log

__all__ = ["find_engine", "find_or_start", "no_engine_message", "probe_engine", "using_engine"]

log = logging.getLogger(__name__)


_say = to_log(log)


def probe_engine(docker: Path, settings: EngineSettings, env: Mapping[str, str]) -> tuple[Engine | None, str]:
    """The user's engine (``settings.docker_host``, else ``DOCKER_HOST`` of ``env``, else the
    client's default socket) when it answers ``docker version``, else None and what the client said."""
    run_env = dict(env)
    if settings.docker_host:
        run_env["DOCKER_HOST"] = settings.docker_host
    try:
        done = tools.run(
            [docker, "version", "--format", "{{.Server.Version}}"], timeout=20, check=False, env=run_env
        )
    except ToolError as e:
        return None, str(e)
    version = done.stdout.strip()
    if done.returncode != 0 or not version:
        said = " ".join((done.stderr.strip() or done.stdout.strip() or "no answer").split())
        return None, said[-500:]
    return Engine(docker, run_env.get("DOCKER_HOST", ""), version), ""


def find_engine(docker: Path, settings: EngineSettings, env: Mapping[str, str]) -> Engine | None:
    """The engine of :func:`probe_engine`, or None."""
    return probe_engine(docker, settings, env)[0]


def no_engine_message(settings: EngineSettings, *, root: bool, dockerd: bool, said: str = "") -> str:
    """What to do when no engine answers and none can be started here (named once, for the CLI and
    the tests); ``said``: what ``docker version`` answered."""
    where = f"DOCKER_HOST={settings.docker_host}" if settings.docker_host else "the default Docker socket"
    if said:
        where += f" (docker version: {said})"
    ways = (
        "start a Docker engine of your own (or set DOCKER_HOST to one that runs)",
        f"run as root so that the suite starts a private one under {settings.state_dir}",
    )
    if root and not dockerd:
        return (
            f"no Docker engine answers at {where}, and no {settings.dockerd} is on PATH to start a private "
            f"one: add Debian's docker.io package (apt-get), or {ways[0]}"
        )
    return (
        f"no Docker engine answers at {where}: either {ways[0]}, or {ways[1]} "
        "(with Debian's docker.io package)"
    )


def find_or_start(
    settings: EngineSettings, env: Mapping[str, str], progress: Progress = _say
) -> tuple[Engine, PrivateEngine | None]:
    """The engine to use, and the private engine when one was started or found (the caller stops it).

    ``settings.mode``: ``auto`` prefers the user's engine; ``user`` never starts one; ``private``
    always uses the private engine. Raises :class:`ToolError` with :func:`no_engine_message` when
    nothing answers and nothing can be started.
    """
    docker = tools.find("docker", env)
    search = env.get("PATH", os.defpath)
    said = ""
    if settings.mode != "private":
        engine, said = probe_engine(docker, settings, env)
        if engine is not None:
            progress(f"Docker engine {engine.version} answers at {engine.host or 'the default socket'}")
            private = PrivateEngine(settings, docker, progress, search_path=search)
            pid = private.running()
            if pid is not None and engine.host == private.handle(pid, "").host:
                # DOCKER_HOST names the private engine another process started: its network is apart
                return private.handle(pid, engine.version), None
            return engine, None
    root = os.geteuid() == 0
    has_dockerd = shutil.which(settings.dockerd, path=search) is not None
    private = PrivateEngine(settings, docker, progress, search_path=search)
    if settings.mode == "user" or not root or not has_dockerd:
        if private.running() is not None and settings.mode != "user":
            return private.start(), private  # one started before, by root, still runs
        raise ToolError(no_engine_message(settings, root=root, dockerd=has_dockerd, said=said))
    return private.start(), private


@contextmanager
def using_engine(
    settings: EngineSettings, env: Mapping[str, str], progress: Progress = _say, *, stop: bool = True
) -> Iterator[Engine]:
    """:func:`find_or_start` as a context: a private engine started here is stopped on the way out
    (unless ``stop`` is False: then it runs on, for the next run to find); one found running is left."""
    engine, private = find_or_start(settings, env, progress)
    try:
        yield engine
    finally:
        if private is not None and private.started_here and stop:
            private.stop()
