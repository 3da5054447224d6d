"""A TCP relay from this machine's loopback into the private engine's network namespace.

The private engine's containers publish their ports (kind's API server) on the loopback of the
engine's own network namespace, which this machine cannot reach. :func:`forward` opens a listening
socket on ``127.0.0.1`` here (an ephemeral port: nothing of the host's network changes), then runs
this file as a script under ``nsenter --net`` with that socket inherited: a socket keeps the
namespace it was made in, so the relay accepts here and connects there.

The script imports nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Forward", "forward", "main"]


@dataclass
class Forward:
    """A running relay: ``127.0.0.1:port`` here reaches ``target`` in the engine's namespace."""

    port: int
    """The port on this machine's loopback."""
    target: str
    """``HOST:PORT`` inside the namespace."""
    process: subprocess.Popen[bytes]
    """The relay process (stopped by :meth:`close`, by its PID)."""

    def close(self) -> None:
        """Stop the relay."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def forward(netns_pid: int, target_port: int, target_host: str = "127.0.0.1") -> Forward:
    """Start a relay from an ephemeral port on ``127.0.0.1`` here to ``target_host:target_port`` in
    the network namespace of process ``netns_pid``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        port = listener.getsockname()[1]
        fd = listener.fileno()
        argv = [
            "nsenter",
            f"--net=/proc/{netns_pid}/ns/net",
            "--",
            sys.executable,
            "-I",
            __file__,
            str(fd),
            f"{target_host}:{target_port}",
        ]
        process = subprocess.Popen(argv, pass_fds=(fd,), stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        listener.close()  # the relay holds its own copy
    return Forward(port, f"{target_host}:{target_port}", process)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _serve(conn: socket.socket, host: str, port: int) -> None:
    try:
        upstream = socket.create_connection((host, port), timeout=30)
    except OSError:
        conn.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
    back.start()
    _pipe(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def main(argv: Sequence[str]) -> int:
    """``FD HOST:PORT``: accept on the inherited listening socket ``FD``, relay to ``HOST:PORT``."""
    if len(argv) != 2:
        print("usage: relay.py FD HOST:PORT", file=sys.stderr)
        return 2
    host, _, port = argv[1].rpartition(":")
    listener = socket.socket(fileno=int(argv[0]))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, host, int(port)), daemon=True).start()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
