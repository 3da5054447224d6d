"""``python -m nodeagent``: run one node agent until SIGTERM."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from nodeagent.agent import Agent
from nodeagent.kube import RestKube
from nodeagent.settings import parse_args

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class _Formatter(logging.Formatter):
    """Text with ``key=value`` extras, or one JSON object per line."""

    def __init__(self, as_json: bool) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        """One line: the message plus the record's structured fields."""
        extras = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        if self.as_json:
            out: dict[str, object] = {
                "time": self.formatTime(record),
                "level": record.levelname,
                "logger": record.name,
            }
            out["msg"] = record.getMessage()
            out.update(
                {k: v if isinstance(v, (str, int, float, bool)) else str(v) for k, v in extras.items()}
            )
            if record.exc_info:
                out["exc"] = self.formatException(record.exc_info)
            return json.dumps(out)
        text = super().format(record)
        if extras:
            text += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return text


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    settings, ns = parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(ns.log_format == "json"))
    logging.basicConfig(level=ns.log_level.upper(), handlers=[handler])
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
