"""``python -m clusters.engine start|stop|status``: the private Docker engine from a shell.

``start`` finds or starts the engine (:func:`~clusters.engine.finding.find_or_start`, settings from
the env vars of :mod:`clusters.engine.settings`) and prints the ``export`` lines that point
``docker``, ``kind`` and the suite at it; the engine runs on until ``stop`` ends it by PID.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

from clusters import tools
from clusters.engine.dockerd import PrivateEngine
from clusters.engine.finding import find_or_start
from clusters.engine.settings import EngineSettings
from clusters.errors import ClusterError


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; 0 on success, 1 with the error's message on stderr."""
    parser = argparse.ArgumentParser(prog="python -m clusters.engine", description=__doc__)
    parser.add_argument("command", choices=("start", "stop", "status"))
    args = parser.parse_args(argv)
    try:
        settings = EngineSettings.from_env(os.environ)
        if args.command == "start":
            engine, _ = find_or_start(settings, os.environ, _err)
            for key, value in engine.env({}).items():
                print(f"export {key}={shlex.quote(value)}")
            return 0
        private = PrivateEngine(settings, tools.find("docker", os.environ), _err)
        if args.command == "stop":
            private.stop()
            return 0
        pid = private.running()
        print(f"private engine: {'PID ' + str(pid) if pid else 'not running'} ({settings.state_dir})")
        return 0 if pid else 3
    except (ClusterError, ValueError) as e:
        _err(f"error: {e}")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
