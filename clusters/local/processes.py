"""Child processes of a local cluster: own process group, own log file, no leftovers.

Every process starts in a new session (so its process group is its own and a
terminal's Ctrl-C does not reach it directly) and, where ``setpriv`` exists, with a
parent-death signal so that it dies with us even when we are killed with SIGKILL.
Stopping sends SIGTERM to the whole group, then SIGKILL after a grace period.
Whatever is still running at interpreter exit is stopped by an ``atexit`` hook;
:func:`install_signal_handlers` turns SIGTERM/SIGHUP into a normal exit so the hook runs.

The parent-death signal fires when the *thread* that started the child ends: start
long-lived children from the main thread (or another thread that outlives them).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

__all__ = ["ManagedProcess", "install_signal_handlers", "stop_all"]

log = logging.getLogger(__name__)

_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()
_SETPRIV = shutil.which("setpriv")


class ManagedProcess:
    """One child process in its own process group, logging to its own file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.name = name
        """Short name used in messages (``etcd``, ``agent-n0``)."""
        self.argv = list(argv)
        """The command line."""
        self.log_path = log_path
        """Where stdout and stderr go (appended, so restarts keep history)."""
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.die_with_parent = die_with_parent and _SETPRIV is not None
        self._popen: subprocess.Popen[bytes] | None = None
        self._terminated = False
        self._log_start = 0
        """Where this start's output begins in the log (after its ``starting:`` line)."""

    @property
    def pid(self) -> int | None:
        """PID (also the process group id), or None before :meth:`start`."""
        return self._popen.pid if self._popen else None

    def start(self) -> ManagedProcess:
        """Start the process; returns self."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._terminated = False
        argv = self.argv
        if self.die_with_parent:
            assert _SETPRIV is not None
            argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]
        with open(self.log_path, "ab") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
            out.flush()
            self._log_start = out.tell()
            self._popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        with _LIVE_LOCK:
            _LIVE.add(self)
        log.debug("started %s pid=%s log=%s", self.name, self.pid, self.log_path)
        return self

    def alive(self) -> bool:
        """Whether the process is running."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """Exit status once it ended, else None."""
        return self._popen.poll() if self._popen else None

    def terminate(self) -> None:
        """Send SIGTERM to the process group without waiting (then :meth:`stop` waits)."""
        if self._popen is not None and self._popen.poll() is None and not self._terminated:
            _killpg(self._popen.pid, signal.SIGTERM)
            self._terminated = True

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, wait up to ``timeout`` s, then SIGKILL it. Idempotent."""
        popen = self._popen
        if popen is None:
            return
        pgid = popen.pid
        if popen.poll() is None:
            self.terminate()
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %s) ignored SIGTERM for %.0f s; killing it", self.name, pgid, timeout)
                _killpg(pgid, signal.SIGKILL)
                popen.wait()
        # whatever the leader left behind in its group goes too
        _killpg(pgid, signal.SIGKILL)
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def kill(self) -> None:
        """SIGKILL the process group at once (a crash, for resilience tests)."""
        if self._popen is not None:
            _killpg(self._popen.pid, signal.SIGKILL)
            self._popen.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log."""
        try:
            data = self.log_path.read_bytes()[-65536:]
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    def head(self, lines: int = 10) -> str:
        """The first ``lines`` lines this start of the process wrote to its log."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)
                data = f.read(65536)
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[:lines])

    def this_start(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log that this start wrote (each start appends below a
        ``--- `` line)."""
        return self.tail(lines).rsplit("\n--- ", 1)[-1].split("\n", 1)[-1]

    def lost_its_port(self) -> bool:
        """Whether it exited because a port it was given was taken before it bound it (a free port
        is released before the program binds it, so a process beside it can take it first)."""
        return not self.alive() and "address already in use" in self.this_start(25)

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, alive={self.alive()})"


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_all(timeout: float = 5.0) -> None:
    """Stop every process started here that is still running (newest first)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in reversed(procs):
        proc.stop(timeout)


atexit.register(stop_all)

_installed: list[bool] = []


def install_signal_handlers() -> None:
    """Make SIGTERM and SIGHUP exit normally (so atexit hooks stop children).

    Only replaces handlers that are still the default, and only from the main thread.
    """
    if _installed or threading.current_thread() is not threading.main_thread():
        return

    def _exit(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _exit)
    _installed.append(True)
