"""The node side of the probe: :class:`ProbeServer` answers :mod:`~clusters.probe.protocol` for one
node's plugin-registration, plugins and CDI dirs.

Least privilege: it reads only the sockets of the registration dir, the regular ``.json`` and
``.yaml`` files of the CDI dir, and relays only to unix sockets in the registration and plugins
dirs (after resolving symlinks); anything else is answered with ``ERR`` and logged. It writes
nothing, so the dirs can be mounted read-only (connecting to a socket needs no write access to
its file system).
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import stat
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from clusters.probe import protocol
from clusters.probe.relay import pipe

__all__ = ["MAX_SPEC", "REQUEST_TIMEOUT", "ProbeServer"]

log = logging.getLogger(__name__)

MAX_SPEC = 8 * 2**20
"""A CDI file larger than this many bytes is left out of ``CDI`` (and logged)."""

REQUEST_TIMEOUT = 10.0
"""Seconds a client has to send its request line."""


class _Refused(Exception):
    """A request the probe does not carry out; the message is the ``ERR`` line."""


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    handle_request_line: Callable[[socket.socket, str], None]


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        peer = "{}:{}".format(*self.client_address[:2])
        server.handle_request_line(self.request, peer)


class ProbeServer:
    """Serves the probe protocol on ``listen`` (``(host, port)``; port 0: a free one) for the dirs
    given. :meth:`serve_forever` answers until :meth:`shutdown`; a context manager (closes)."""

    def __init__(
        self, listen: tuple[str, int], *, registry_dir: Path, plugins_dir: Path, cdi_dir: Path
    ) -> None:
        self.registry_dir = registry_dir
        """The plugin-registration dir (``LIST``)."""
        self.plugins_dir = plugins_dir
        """The plugins dir: where drivers' service sockets live."""
        self.cdi_dir = cdi_dir
        """The CDI spec dir (``CDI``)."""
        for name, path in (("registry", registry_dir), ("plugins", plugins_dir), ("cdi", cdi_dir)):
            if not path.is_dir():
                log.warning("a dir to serve does not exist (yet)", extra={"dir": name, "path": str(path)})
        self._roots = [Path(os.path.realpath(d)) for d in (registry_dir, plugins_dir)]
        self._server = (_Server6 if ":" in listen[0] else _Server)(listen, _Handler)
        self._server.handle_request_line = self._handle

    @property
    def address(self) -> str:
        """Where it listens, as ``HOST:PORT`` (the port chosen when 0 was given)."""
        host, port = self._server.server_address[:2]
        host = str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def serve_forever(self) -> None:
        """Answer requests until :meth:`shutdown` (from another thread)."""
        log.info(
            "probe serving",
            extra={
                "address": self.address,
                "registry_dir": str(self.registry_dir),
                "plugins_dir": str(self.plugins_dir),
                "cdi_dir": str(self.cdi_dir),
            },
        )
        self._server.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        """Make :meth:`serve_forever` return (call it from another thread)."""
        self._server.shutdown()

    def close(self) -> None:
        """Stop listening (relays already open go on until their peers end them)."""
        self._server.server_close()

    def __enter__(self) -> ProbeServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- requests ------------------------------------------------------------------------------

    def _handle(self, conn: socket.socket, peer: str) -> None:
        conn.settimeout(REQUEST_TIMEOUT)
        line = ""
        try:
            line = protocol.read_line(conn)
            verb, _, arg = line.partition(" ")
            if verb == protocol.CONNECT:
                self._relay(conn, arg, peer)
                return
            answer = protocol.answer_ok(self._answer(verb, arg))
        except (_Refused, OSError, ValueError) as e:
            why = str(e) if isinstance(e, _Refused) else f"{line[:200] or 'bad request'}: {e}"
            log.warning("request refused", extra={"peer": peer, "request": line[:200], "error": why})
            _finish(conn, protocol.answer_error(why))
            return
        log.debug("answered", extra={"peer": peer, "request": line[:200]})
        _finish(conn, answer)

    def _relay(self, conn: socket.socket, arg: str, peer: str) -> None:
        target = self._connect(arg)
        try:
            conn.sendall(protocol.CONNECTED)
        except OSError:
            target.close()
            raise
        conn.settimeout(None)
        log.debug("relay", extra={"peer": peer, "path": arg})
        pipe(conn, target)

    def _answer(self, verb: str, arg: str) -> Any:
        if verb == protocol.LIST and not arg:
            return [e.to_json() for e in self._sockets()]
        if verb == protocol.CDI and not arg:
            return self._cdi_files()
        if verb == protocol.STAT and arg:
            path = self._allowed(arg)
            try:
                st = path.stat()
            except FileNotFoundError:
                return None
            return protocol.Entry(arg, st.st_mode, st.st_mtime_ns).to_json()
        known = f"{protocol.LIST}, {protocol.CDI}, {protocol.STAT} <path>, {protocol.CONNECT} <path>"
        raise _Refused(f"unknown request {(verb + ' ' + arg).strip()[:200]!r}; known: {known}")

    def _sockets(self) -> list[protocol.Entry]:
        found = []
        try:
            entries = sorted(os.scandir(self.registry_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone meanwhile
            if stat.S_ISSOCK(st.st_mode):
                found.append(protocol.Entry(os.path.abspath(entry.path), st.st_mode, st.st_mtime_ns))
        return found

    def _cdi_files(self) -> dict[str, str]:
        files: dict[str, str] = {}
        try:
            entries = sorted(os.scandir(self.cdi_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return files
        for entry in entries:
            if not entry.name.endswith(protocol.CDI_SUFFIXES) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_size > MAX_SPEC:
                    log.warning("CDI file too large, left out", extra={"path": entry.path, "limit": MAX_SPEC})
                    continue
                files[entry.name] = Path(entry.path).read_bytes().decode(errors="replace")
            except FileNotFoundError:
                continue  # removed meanwhile
        return files

    def _allowed(self, text: str) -> Path:
        """``text`` resolved, when it lies in the registration or plugins dir; else refused."""
        path = Path(text)
        if not path.is_absolute():
            raise _Refused(f"{text[:200]!r} is not an absolute path")
        real = Path(os.path.realpath(path))
        if any(real.is_relative_to(root) for root in self._roots):
            return real
        served = ", ".join(str(r) for r in self._roots)
        raise _Refused(
            f"{text[:200]} is outside the dirs this probe serves ({served}); start the probe with the "
            "dir that holds it (--registry-dir, --plugins-dir)"
        )

    def _connect(self, arg: str) -> socket.socket:
        path = self._allowed(arg)
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:
            raise _Refused(f"no socket at {arg}") from None
        if not stat.S_ISSOCK(mode):
            raise _Refused(f"{arg} is not a unix socket")
        target = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            target.connect(str(path))
        except OSError:
            target.close()
            raise
        return target


def _finish(conn: socket.socket, answer: bytes) -> None:
    """Send the answer, end writing, and read what the client still sends until it closes (briefly):
    closing with unread bytes would reset the connection, and the client might lose the answer."""
    try:
        conn.sendall(answer)
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        drained = 0
        while drained < protocol.MAX_ANSWER and (chunk := conn.recv(65536)):
            drained += len(chunk)
    except OSError as e:
        log.debug("client gone before the answer ended", extra={"error": str(e)})
    finally:
        conn.close()
