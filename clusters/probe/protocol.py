"""The node probe's wire protocol: one request line, one answer line, and for ``CONNECT`` raw bytes.

A client opens a TCP connection and sends one line (UTF-8, at most :data:`MAX_LINE` bytes with
its ``\\n``). The probe answers one line, ``OK`` or ``OK <json>`` when it did what was asked,
``ERR <why>`` when it did not, and closes the connection, except after ``OK`` to ``CONNECT``::

    LIST              OK [{"path": "/var/lib/kubelet/plugins_registry/x-reg.sock", "mode": 49645,
                      "mtime_ns": 17...}, ...]: the unix sockets of the plugin-registration dir
    CDI               OK {"x.json": "<text>", ...}   the .json and .yaml files of the CDI dir
    STAT <path>       OK {"path": "<path>", "mode": ..., "mtime_ns": ...}, or OK null when nothing
                      is there; only for a path in the registration or plugins dir
    CONNECT <path>    OK, then the connection is a two-way byte relay to that unix socket (in
                      the registration or plugins dir)

docs/interfaces.md shows the same table. Both sides use this module; it imports only the
standard library, so the node side stays a small program.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CDI",
    "CDI_SUFFIXES",
    "CONNECT",
    "CONNECTED",
    "LIST",
    "MAX_ANSWER",
    "MAX_LINE",
    "STAT",
    "Entry",
    "answer_error",
    "answer_ok",
    "parse_address",
    "read_line",
]

LIST = "LIST"
"""Request: the registration dir's sockets."""
CDI = "CDI"
"""Request: the CDI dir's spec files."""
STAT = "STAT"
"""Request: one socket's mode and time (``STAT <absolute path>``)."""
CONNECT = "CONNECT"
"""Request: a byte relay to a unix socket (``CONNECT <absolute path>``)."""

MAX_LINE = 4096
"""Longest request line, and longest answer line of ``CONNECT``, in bytes."""

CDI_SUFFIXES = (".json", ".yaml")
"""The CDI spec files ``CDI`` returns (those runtimes read)."""

MAX_ANSWER = 64 * 2**20
"""Longest answer to ``LIST``, ``CDI`` or ``STAT`` a client reads, in bytes."""


@dataclass(frozen=True)
class Entry:
    """A unix socket on the node, as ``LIST`` and ``STAT`` describe it."""

    path: str
    """Its absolute path on the node."""
    mode: int
    """``st_mode``: type and permission bits."""
    mtime_ns: int
    """Last modification, ns since the epoch (the newest of a driver's sockets is the one in use)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the answer."""
        return {"path": self.path, "mode": self.mode, "mtime_ns": self.mtime_ns}

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """Read one from an answer; ``ValueError`` when it is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"not an object: {str(data)[:200]}")
        path, mode, mtime = data.get("path"), data.get("mode"), data.get("mtime_ns")
        if not isinstance(path, str) or not isinstance(mode, int) or not isinstance(mtime, int):
            raise ValueError(f"not an entry (path, mode, mtime_ns): {str(data)[:200]}")
        return cls(path, mode, mtime)


def read_line(sock: socket.socket, limit: int = MAX_LINE) -> str:
    """One ``\\n``-terminated line from ``sock``, without its end, read byte by byte so that nothing
    after it is consumed (the relay's bytes follow ``OK``). ``ValueError`` when it is longer than
    ``limit``, not UTF-8, or the peer closed first."""
    data = bytearray()
    while True:
        byte = sock.recv(1)
        if not byte:
            raise ValueError(f"connection closed after {len(data)} byte(s), before a whole line")
        if byte == b"\n":
            return data.decode()
        data += byte
        if len(data) >= limit:
            raise ValueError(f"line longer than {limit} bytes")


CONNECTED = b"OK\n"
"""The answer to ``CONNECT`` once the relay is there."""


def answer_ok(data: Any) -> bytes:
    """The ``OK`` line with ``data`` as JSON (``LIST``, ``CDI``, ``STAT``)."""
    return b"OK " + json.dumps(data, separators=(",", ":")).encode() + b"\n"


def answer_error(why: str) -> bytes:
    """The ``ERR`` line (line breaks in ``why`` become spaces)."""
    return b"ERR " + " ".join(why.split()).encode() + b"\n"


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) as ``(host, port)``; ``ValueError`` naming
    ``text`` otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text.strip()!r} is not HOST:PORT (e.g. 10.0.0.7:7373)")
    return host, int(port)
