"""The log line format of every process of ours: one schema, text or JSON.

The driver (``--log-format``), the node agent (``--log-format``) and the local cluster's
daemon write their logs to stderr through :func:`configure_logging`, called once from each
program's entry point (library code never configures handlers). A JSON line is one object::

    {"time": "2025-01-31T12:00:00.123Z", "level": "info", "logger": "driver.state",
     "msg": "claim prepared", "claim": "...", ..., "exception": "Traceback ..."}

- ``time``: UTC, RFC 3339 with milliseconds; ``level``: lower case; ``logger``: the logger's
  name; ``msg``: the message with its arguments filled in;
- every structured field the call passed in ``extra`` as a key of its own (values that are
  not JSON become strings);
- ``exception``: the formatted traceback, only when the record carries one.

A text line is ``time LEVEL logger: msg key=value ...`` with the same structured fields.
docs/interfaces.md lists the keys as part of each process's contract.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["LOG_FORMATS", "JsonFormatter", "TextFormatter", "configure_logging"]

LOG_FORMATS = ("text", "json")
"""The values of ``--log-format``."""

_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a call passed in ``extra``."""
    return {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line (the module docstring lists the keys)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line."""
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: msg key=value ...`` (and the traceback on the lines below)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as a line of text with its structured fields appended."""
        line = super().format(record)
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        if not extras:
            return line
        head, newline, traceback = line.partition("\n")
        return f"{head} {extras}{newline}{traceback}"


def configure_logging(log_format: str = "text", level: int | str = logging.INFO) -> None:
    """Send every log line of the process to stderr in ``log_format`` (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
