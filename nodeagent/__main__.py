"""``python -m nodeagent``: run one node agent until SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from draproto.logs import configure_logging
from nodeagent.agent import Agent
from nodeagent.kube import RestKube
from nodeagent.settings import parse_args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    settings, ns = parse_args(argv)
    configure_logging(ns.log_format, ns.log_level)
    kube = RestKube(settings.kubeconfig)
    agent = Agent(settings, kube)

    def _term(signum: int, frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("signal received, stopping", extra={"signal": signum})
        agent.request_stop()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    agent.start()
    agent.wait()
    agent.stop()
    kube.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
