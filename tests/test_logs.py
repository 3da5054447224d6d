"""One log schema for every process of ours (draproto.logs; keys in docs/interfaces.md)."""

from __future__ import annotations

import json
import logging
import sys

from draproto.logs import JsonFormatter, TextFormatter

SCHEMA = {"time", "level", "logger", "msg"}


def _record(exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord(
        "nodeagent.pods", logging.WARNING, __file__, 1, "claim %s", ("prepared",), exc_info
    )
    record.node = "node-a"
    record.claim_uid = "u1"
    record.devices = {"gpu-0"}  # not JSON: becomes a string
    return record


def test_json_lines_carry_the_schema_and_the_structured_fields() -> None:
    line = json.loads(JsonFormatter().format(_record()))
    assert set(line) == SCHEMA | {"node", "claim_uid", "devices"}
    assert (
        line["msg"] == "claim prepared" and line["level"] == "warning" and line["logger"] == "nodeagent.pods"
    )
    assert line["time"].endswith("Z") and "T" in line["time"]
    assert line["node"] == "node-a" and line["devices"] == "{'gpu-0'}"


def test_the_traceback_goes_under_exception() -> None:
    line = json.loads(JsonFormatter().format(_record(exc=True)))
    assert "ValueError: boom" in line["exception"]


def test_text_lines_end_their_first_line_with_the_fields() -> None:
    text = TextFormatter().format(_record(exc=True))
    first, _, rest = text.partition("\n")
    assert first.endswith("WARNING nodeagent.pods: claim prepared node=node-a claim_uid=u1 devices={'gpu-0'}")
    assert "ValueError: boom" in rest
