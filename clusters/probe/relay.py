"""Relaying bytes: :func:`pipe` between two connected sockets, and :class:`UnixRelay`, a unix-socket
listener whose every connection is piped to a new connection that a dial function opens.

The probe pipes a ``CONNECT`` to the node's unix socket; the harness's mirror of a node listens
on a local unix socket per socket of the node and pipes what connects there through the probe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from clusters.errors import ClusterError

__all__ = ["Dial", "UnixRelay", "pipe"]

log = logging.getLogger(__name__)

Dial = Callable[[], socket.socket]
"""Opens a new connection to the other end of a relay (raises ``OSError`` or a ``ClusterError``)."""

_CHUNK = 65536


def _shutdown(sock: socket.socket, how: int) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(how)


def _copy(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s writing (a half close, as TCP
    knows it); a broken connection ends both, so the other direction stops too."""
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        _shutdown(src, socket.SHUT_RDWR)
        _shutdown(dst, socket.SHUT_RDWR)
    else:
        _shutdown(dst, socket.SHUT_WR)


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways between ``a`` and ``b`` until both directions ended, then close both.
    Blocks: the direction ``b -> a`` runs on a thread of its own."""
    back = threading.Thread(target=_copy, args=(b, a), name="relay", daemon=True)
    back.start()
    try:
        _copy(a, b)
        back.join()
    finally:
        a.close()
        b.close()


class UnixRelay:
    """A unix socket at :attr:`path` whose every connection is piped to a new one from ``dial``.

    ``mode`` sets the socket file's permission bits. A dial that fails closes the connection it
    was for (a gRPC client sees ``UNAVAILABLE``) and is logged. :meth:`close` stops listening,
    removes the file and cuts the connections still open.
    """

    def __init__(self, path: Path, dial: Dial, mode: int = 0o600) -> None:
        self.path = path
        """The listening socket file."""
        self._dial = dial
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(path))
            self._listener.listen(64)
            os.chmod(path, mode)
        except OSError:
            self._listener.close()
            raise
        self._thread = threading.Thread(target=self._accept, name=f"relay {path.name}", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="relay-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            other = self._dial()
        except (OSError, ValueError, ClusterError) as e:  # the client sees its socket close
            log.warning(
                "relay could not reach the far end", extra={"socket": str(self.path), "error": str(e)}
            )
            conn.close()
            return
        with self._lock:
            if self._closed:
                conn.close()
                other.close()
                return
            self._open.update((conn, other))
        try:
            pipe(conn, other)
        finally:
            with self._lock:
                self._open.difference_update((conn, other))

    def close(self) -> None:
        """Stop listening, remove the socket file, cut open connections. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            cut = list(self._open)
        _shutdown(self._listener, socket.SHUT_RDWR)  # wakes accept() on Linux
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        for sock in cut:
            _shutdown(sock, socket.SHUT_RDWR)
        self._thread.join(timeout=5)
