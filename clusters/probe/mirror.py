"""A node's sockets and CDI specs, here: :class:`NodeMirror` keeps a local dir in step with what the
node's probe shows.

::

    ROOT/registry/<name>          one relay per registration socket of the node (``LIST``)
    ROOT/sockets/<hash>.sock      one relay per other socket of the node asked for (a driver's
                                  service socket, named in its ``GetInfo``)
    ROOT/cdi/<name>               the node's CDI spec files (``CDI``)

A relay is a local unix socket whose every connection the probe relays to the node's socket
(``CONNECT``); it has the node socket's permission bits (plus read and write for its owner, so
that this process can dial it) and time, so what a test reads of the file is the node's. ROOT is
a short temp dir: unix socket paths must stay under 108 bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from clusters.errors import ProbeError
from clusters.probe.client import ProbeClient
from clusters.probe.protocol import CDI_SUFFIXES, Entry
from clusters.probe.relay import UnixRelay

__all__ = ["SOCKET_PATH_MAX", "NodeMirror"]

log = logging.getLogger(__name__)

SOCKET_PATH_MAX = 107
"""Longest unix socket path Linux accepts (``sun_path`` is 108 bytes with the NUL)."""


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


class NodeMirror:
    """The sockets and CDI specs of ``node``, reachable here through ``client`` (its probe).

    :meth:`registry_dir` and :meth:`cdi_dir` bring the local dirs in step with the node on every
    call; :meth:`socket` gives a local relay of any socket the probe serves. :meth:`close` stops
    every relay and removes the dir. Safe from several threads.
    """

    def __init__(self, client: ProbeClient, node: str, parent: Path | None = None) -> None:
        self.node = node
        """The node."""
        self.client = client
        """Its probe."""
        self.root = Path(tempfile.mkdtemp(prefix="drp", dir=parent))
        """The local dir (see the module docstring)."""
        for sub in ("registry", "sockets", "cdi"):
            (self.root / sub).mkdir()
        self._registry: dict[str, tuple[str, UnixRelay]] = {}
        """Local file name -> (node path, relay)."""
        self._sockets: dict[str, UnixRelay] = {}
        """Node path -> relay."""
        self._lock = threading.Lock()
        self._closed = False

    def registry_dir(self) -> Path:
        """The local registration dir, now in step with the node's (``LIST``)."""
        entries = self.client.sockets()
        with self._lock:
            self._check_open()
            wanted: dict[str, Entry] = {}
            for entry in entries:
                name = os.path.basename(entry.path)
                if not entry.path.startswith("/") or not _plain_name(name):
                    raise ProbeError(
                        f"{self.client.where} listed {entry.path!r}, not an absolute socket path"
                    )
                wanted[self._fit(self.root / "registry", name)] = entry
            for local in sorted(set(self._registry) - set(wanted)):
                self._registry.pop(local)[1].close()
            for local, entry in wanted.items():
                known = self._registry.get(local)
                if known is not None and known[0] != entry.path:
                    known[1].close()
                    known = None
                relay = known[1] if known else self._relay(self.root / "registry" / local, entry.path)
                self._registry[local] = (entry.path, relay)
                self._copy_attributes(relay, entry)
        return self.root / "registry"

    def socket(self, path: str) -> Path:
        """A local relay of the node's unix socket ``path`` (absolute, on the node); a path that does
        not exist here when nothing, or no socket, is there on the node."""
        entry = self.client.stat(path)
        local = self.root / "sockets" / (hashlib.sha256(path.encode()).hexdigest()[:16] + ".sock")
        with self._lock:
            self._check_open()
            relay = self._sockets.get(path)
            if entry is None or not stat.S_ISSOCK(entry.mode):
                if relay is not None:
                    self._sockets.pop(path).close()
                return local
            if relay is None:
                relay = self._sockets[path] = self._relay(local, path)
            self._copy_attributes(relay, entry)
        return local

    def cdi_dir(self) -> Path:
        """The local CDI dir, now holding the node's spec files as they are (``CDI``): new and
        changed ones written (whole: a temp file renamed), vanished ones removed."""
        files = self.client.cdi_files()
        directory = self.root / "cdi"
        with self._lock:
            self._check_open()
            for name, text in files.items():
                if not _plain_name(name) or not name.endswith(CDI_SUFFIXES):
                    raise ProbeError(f"{self.client.where} sent CDI file {name!r}, not a .json or .yaml name")
                path = directory / name
                data = text.encode()
                with contextlib.suppress(FileNotFoundError):
                    if path.read_bytes() == data:
                        continue
                temp = directory / f".{name}.tmp"  # no spec suffix: a reader of the dir skips it
                temp.write_bytes(data)
                temp.replace(path)
            for path in directory.iterdir():
                if path.name not in files:
                    path.unlink(missing_ok=True)
        return directory

    def close(self) -> None:
        """Stop every relay and remove the local dir. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            relays = [r for _, r in self._registry.values()] + list(self._sockets.values())
            self._registry.clear()
            self._sockets.clear()
        for relay in relays:
            relay.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # --- helpers -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ProbeError(f"the mirror of node {self.node} is closed (the cluster was stopped)")

    def _relay(self, local: Path, node_path: str) -> UnixRelay:
        client = self.client
        log.debug("relay", extra={"node": self.node, "path": node_path, "local": str(local)})
        return UnixRelay(local, lambda: client.connect(node_path))

    @staticmethod
    def _copy_attributes(relay: UnixRelay, entry: Entry) -> None:
        os.chmod(relay.path, (entry.mode & 0o777) | 0o600)
        os.utime(relay.path, ns=(entry.mtime_ns, entry.mtime_ns))

    @staticmethod
    def _fit(directory: Path, name: str) -> str:
        """``name``, or when ``directory/name`` is too long for a unix socket, its start and a hash."""
        room = SOCKET_PATH_MAX - len(os.fsencode(directory)) - 1
        if len(os.fsencode(name)) <= room:
            return name
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        start = os.fsencode(name)[: max(room - 13, 0)].decode(errors="ignore")
        return f"{start}~{digest}"
