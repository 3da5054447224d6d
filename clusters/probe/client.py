"""The harness's side of one node's probe: :class:`ProbeClient` makes the requests of
:mod:`~clusters.probe.protocol` over connections a dial function opens (TCP, or a port-forward)."""

from __future__ import annotations

import json
import socket
from typing import Any

from clusters.errors import ProbeError
from clusters.probe import protocol
from clusters.probe.relay import Dial

__all__ = ["ProbeClient"]


class ProbeClient:
    """Requests to the probe that ``dial`` reaches; ``where`` names it in errors (node and address)."""

    def __init__(self, dial: Dial, where: str, timeout: float = 30.0) -> None:
        self.where = where
        """The probe, in words (``node-0's probe at 10.0.0.7:7373``)."""
        self.timeout = timeout
        """Seconds a request may take (a relay, once open, has no limit)."""
        self._dial = dial

    def sockets(self) -> list[protocol.Entry]:
        """``LIST``: the unix sockets of the node's registration dir."""
        data = self._request(protocol.LIST)
        if not isinstance(data, list):
            raise ProbeError(f"{self.where} answered LIST with {str(data)[:200]}, not a list")
        try:
            return [protocol.Entry.from_json(e) for e in data]
        except ValueError as e:
            raise ProbeError(f"{self.where} answered LIST with a bad entry: {e}") from None

    def cdi_files(self) -> dict[str, str]:
        """``CDI``: the node's CDI spec files, file name -> text."""
        data = self._request(protocol.CDI)
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in data.items()
        ):
            raise ProbeError(f"{self.where} answered CDI with {str(data)[:200]}, not file names and texts")
        return data

    def stat(self, path: str) -> protocol.Entry | None:
        """``STAT``: the node's socket at ``path`` (absolute, on the node), None when nothing is there."""
        data = self._request(f"{protocol.STAT} {path}")
        if data is None:
            return None
        try:
            return protocol.Entry.from_json(data)
        except ValueError as e:
            raise ProbeError(f"{self.where} answered STAT {path} with {e}") from None

    def connect(self, path: str) -> socket.socket:
        """``CONNECT``: a connection that is now a byte relay to the node's unix socket ``path``."""
        conn = self._open(f"{protocol.CONNECT} {path}")
        try:
            line = protocol.read_line(conn)
        except (OSError, ValueError) as e:
            conn.close()
            raise ProbeError(f"{self.where} did not answer CONNECT {path}: {e}") from e
        if line != protocol.CONNECTED.decode().strip():
            conn.close()
            raise ProbeError(f"{self.where} refused CONNECT {path}: {_why(line)}")
        conn.settimeout(None)
        return conn

    def _open(self, line: str) -> socket.socket:
        try:
            conn = self._dial()
        except OSError as e:
            raise ProbeError(f"cannot reach {self.where}: {e}; is the probe running there?") from e
        conn.settimeout(self.timeout)
        try:
            conn.sendall(line.encode() + b"\n")
        except OSError as e:
            conn.close()
            raise ProbeError(f"{self.where} closed the connection before the request {line!r}: {e}") from e
        return conn

    def _request(self, line: str) -> Any:
        conn = self._open(line)
        data = bytearray()
        try:
            while chunk := conn.recv(65536):
                data += chunk
                if len(data) > protocol.MAX_ANSWER:
                    raise ProbeError(f"{self.where} answered {line!r} with over {protocol.MAX_ANSWER} bytes")
        except OSError as e:
            raise ProbeError(f"{self.where} did not answer {line!r}: {e}") from e
        finally:
            conn.close()
        text = data.decode(errors="replace").rstrip("\n")
        if text.startswith("OK "):
            try:
                return json.loads(text[3:])
            except json.JSONDecodeError as e:
                raise ProbeError(
                    f"{self.where} answered {line!r} with JSON that does not parse: {e}"
                ) from None
        raise ProbeError(f"{self.where} refused {line!r}: {_why(text)}")


def _why(answer: str) -> str:
    if answer.startswith("ERR "):
        return answer[4:]
    return f"unexpected answer {answer[:200]!r}" if answer else "no answer (connection closed)"
