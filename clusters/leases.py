"""Node leases shared by the processes of one test session: shared for ordinary tests, exclusive
for tests that use every device of a node, restart its components or inject faults.

A lease is an ``flock`` on ``<dir>/node-<name>.lease``: many shared holders or one exclusive
holder. Tests that pin their pods to a node hold it shared; a test that must be alone on a node
holds it exclusively, so no pod of another test lands there meanwhile. A waiting exclusive taker
leaves a ``.want`` mark that steers new shared takers to other nodes, so it is not starved. A
test that affects the whole cluster (an API server restart) holds every node alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["NodeLeases"]


class NodeLeases:
    """Leases on the nodes of a cluster, kept in ``directory`` (one session's shared dir)."""

    def __init__(self, directory: Path, poll: float = 0.05) -> None:
        self.directory = directory
        """Where the lease files live."""
        self._poll = poll

    def _path(self, node: str, suffix: str = ".lease") -> Path:
        return self.directory / f"node-{node}{suffix}"

    def _open(self, node: str) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        return os.open(self._path(node), os.O_RDWR | os.O_CREAT, 0o600)

    @staticmethod
    def _try(fd: int, mode: int) -> bool:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    @contextlib.contextmanager
    def reading_every(self) -> Iterator[None]:
        """Mark, while open, a taker that waits to hold every node shared: :meth:`exclusive` takes
        no node meanwhile, so that a stream of lone holders cannot keep it waiting for ever."""
        self.directory.mkdir(parents=True, exist_ok=True)
        mark = self.directory / f"every.want-{os.getpid()}"
        mark.touch()
        try:
            yield
        finally:
            mark.unlink(missing_ok=True)

    def _readers_waiting(self) -> bool:
        return any(self.directory.glob("every.want-*"))

    @contextlib.contextmanager
    def exclusive(self, nodes: Sequence[str], key: str = "", *, reader: bool = False) -> Iterator[str]:
        """Hold one of ``nodes`` alone: the first that is free, waiting until one is; none while a
        taker waits to read every node (:meth:`reading_every`), unless this one is such a taker
        itself (``reader``).

        While it waits, the node ``key`` hashes to is marked wanted, which steers new shared takers
        to other nodes so that this one empties; any other node that empties first is taken instead
        (waiting for the marked node alone once kept a test 28 s behind another while nodes no test held
        stood by).
        """
        if not nodes:
            raise ValueError("no nodes to lease")
        fds = {node: self._open(node) for node in nodes}
        mine = nodes[zlib.crc32(key.encode()) % len(nodes)]
        want: Path | None = None
        taken = ""
        try:
            while not taken:
                if reader or not self._readers_waiting():
                    taken = next((n for n in nodes if self._try(fds[n], fcntl.LOCK_EX)), "")
                if not taken:
                    if want is None:
                        want = self._path(mine, f".want-{os.getpid()}")
                        want.touch()
                    time.sleep(self._poll)
        finally:
            if want is not None:
                want.unlink(missing_ok=True)
            for node, fd in fds.items():
                if node != taken:
                    os.close(fd)
        yield from self._held(fds[taken], taken)

    @contextlib.contextmanager
    def every(self, nodes: Sequence[str], key: str = "") -> Iterator[str]:
        """Hold every one of ``nodes`` alone (for what affects the whole cluster, such as an API
        server restart); yields the node ``key`` hashes to, for the test's own pods.

        The leases are taken one by one in name order, so two such holders cannot deadlock, and
        other takers hold one lease at a time, never waiting with one held.
        """
        if not nodes:
            raise ValueError("no nodes to lease")
        ordered = sorted(nodes)
        wants = [self._path(n, f".want-{os.getpid()}") for n in ordered]
        fds: list[int] = []
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            for want in wants:
                want.touch()
            for node in ordered:
                fd = self._open(node)
                fds.append(fd)
                fcntl.flock(fd, fcntl.LOCK_EX)
            for want in wants:
                want.unlink(missing_ok=True)
            yield nodes[zlib.crc32(key.encode()) % len(nodes)]
        finally:
            for want in wants:
                want.unlink(missing_ok=True)
            for fd in fds:
                os.close(fd)  # closing the descriptor releases the flock

    @contextlib.contextmanager
    def shared(self, nodes: Sequence[str], key: str = "") -> Iterator[str]:
        """Hold one of ``nodes`` together with other shared holders; nodes nobody wants alone first."""
        if not nodes:
            raise ValueError("no nodes to lease")
        start = zlib.crc32(key.encode()) % len(nodes)
        ordered = list(nodes[start:]) + list(nodes[:start])
        wanted = {n for n in ordered if any(self.directory.glob(f"node-{n}.want-*"))}
        ordered = [n for n in ordered if n not in wanted] + [n for n in ordered if n in wanted]
        while True:
            for node in ordered:
                fd = self._open(node)
                if self._try(fd, fcntl.LOCK_SH):
                    yield from self._held(fd, node)
                    return
                os.close(fd)
            time.sleep(self._poll)

    @staticmethod
    def _held(fd: int, node: str) -> Iterator[str]:
        try:
            yield node
        finally:
            os.close(fd)  # closing the descriptor releases the flock
