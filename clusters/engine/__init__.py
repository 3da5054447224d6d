"""A Docker engine for the kind and k3s backends: the user's when one answers, else a private one.

:func:`find_or_start` (or the context :func:`using_engine`) picks the engine: a running one
(``DOCKER_HOST``, else the client's default socket) always first; else, as root, Debian's
``dockerd`` in its own network and mount namespaces (:class:`PrivateEngine`), with runc wrapped
only where the machine withholds a capability (:mod:`clusters.engine.capabilities`,
:mod:`clusters.engine.runcwrap`). The private engine's published ports are reached through
:func:`forward` (a relay into its network namespace) or :meth:`Engine.in_netns`. Settings:
:class:`EngineSettings` (env vars in :mod:`clusters.engine.settings`).
"""

from __future__ import annotations

from clusters.engine.capabilities import missing_here
from clusters.engine.dockerd import PrivateEngine
from clusters.engine.finding import find_engine, find_or_start, no_engine_message, using_engine
from clusters.engine.handle import Engine
from clusters.engine.relay import Forward, forward
from clusters.engine.settings import EngineSettings

__all__ = [
    "Engine",
    "EngineSettings",
    "Forward",
    "PrivateEngine",
    "find_engine",
    "find_or_start",
    "forward",
    "missing_here",
    "no_engine_message",
    "using_engine",
]
