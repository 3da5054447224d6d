"""Where a machine's state lives: in memory, or in a state directory shared between processes.

A state directory holds ``machine.json`` and ``machine.lock``. Writers take the file lock,
re-read the file, change the state and replace the file atomically (temp file, fsync, rename),
so a crash mid-write leaves the previous state intact. Readers take no lock: they re-read the
file whenever its identity (inode, mtime, size) changed since they last read it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import filelock

from ._errors import StateError
from ._state import MachineState

log = logging.getLogger(__name__)

STATE_FILE = "machine.json"
LOCK_FILE = "machine.lock"


class Store:
    """Holds one machine's state; thread-safe; shared through ``state_dir`` when given."""

    def __init__(self, state: MachineState, state_dir: Path | None) -> None:
        self.state_dir = state_dir
        self._state = state
        self._key: tuple[int, int, int] | None = None
        self._held: BinaryIO | None = None
        self._mutex = threading.RLock()
        self.changed = threading.Condition(self._mutex)
        """Notified after every change made in this process (event waiters sleep on it)."""
        self._file = state_dir / STATE_FILE if state_dir else None
        self._lock = filelock.FileLock(str(state_dir / LOCK_FILE)) if state_dir else None

    @classmethod
    def open(cls, state_dir: Path, fresh: MachineState) -> tuple[Store, bool]:
        """Attach to the machine in ``state_dir``, or create it from ``fresh``; returns (store, attached)."""
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StateError(f"cannot create state directory {state_dir}: {e}") from e
        store = cls(fresh, state_dir)
        assert store._lock is not None and store._file is not None
        with store._lock:
            if store._file.exists():
                store._load()
                return store, True
            store._write(fresh)
        return store, False

    @classmethod
    def load(cls, state_dir: Path) -> Store:
        """Attach to an existing machine in ``state_dir``; StateError when there is none."""
        if not (state_dir / STATE_FILE).is_file():
            raise StateError(
                f"no fake machine in {state_dir} (no {STATE_FILE}); create one with "
                f"`fakegpu --state-dir {state_dir} show --profile NAME`"
            )
        placeholder = MachineState("", "", 0, "", 0, [])
        store = cls(placeholder, state_dir)
        store._load()
        return store

    def _stat_key(self) -> tuple[int, int, int] | None:
        assert self._file is not None
        try:
            st = os.stat(self._file)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self) -> None:
        assert self._file is not None
        try:
            f = open(self._file, "rb")  # noqa: SIM115 - kept open on purpose, see below
        except OSError as e:
            raise StateError(f"cannot read fake machine state {self._file}: {e}") from e
        try:
            st = os.fstat(f.fileno())
            state = MachineState.from_json(json.loads(f.read()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            f.close()
            raise StateError(f"cannot read fake machine state {self._file}: {e}") from e
        # Holding the file open keeps its inode from being reused by a later write, so the
        # (inode, mtime, size) key can never match a newer version of the file by accident.
        if self._held is not None:
            self._held.close()
        self._held = f
        self._state = state
        self._key = (st.st_ino, st.st_mtime_ns, st.st_size)

    def _write(self, state: MachineState) -> None:
        assert self._file is not None and self.state_dir is not None
        payload = json.dumps(state.to_json(), separators=(",", ":"))
        fd, tmp = tempfile.mkstemp(prefix=".machine.", suffix=".tmp", dir=self.state_dir)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(payload)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self._file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        f = open(self._file, "rb")  # noqa: SIM115 - held open, see _load
        if self._held is not None:
            self._held.close()
        self._held = f
        st = os.fstat(f.fileno())
        self._state = state
        self._key = (st.st_ino, st.st_mtime_ns, st.st_size)

    def close(self) -> None:
        """Release the file this store holds open."""
        if self._held is not None:
            self._held.close()
            self._held = None

    def __del__(self) -> None:
        self.close()

    def read(self) -> MachineState:
        """The current state (re-read from the state directory when another process changed it).

        The returned object must not be modified; use :meth:`mutate`.
        """
        if self._file is None:
            return self._state
        key = self._stat_key()
        if key != self._key and key is not None:
            with self._mutex:
                if key != self._key:
                    self._load()
        return self._state

    @contextlib.contextmanager
    def mutate(self) -> Iterator[MachineState]:
        """Change the state: yields it under the locks, then saves it (only if no exception)."""
        with self._mutex:
            if self._lock is None:
                yield self._state
                self.changed.notify_all()
                return
            with self._lock:
                self._load()
                state = self._state
                try:
                    yield state
                    self._write(state)
                except BaseException:
                    self._load()  # drop the half-made or unsaved change
                    raise
            self.changed.notify_all()
