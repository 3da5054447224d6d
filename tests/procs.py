"""Helpers for tests that start processes and signal them."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator

__all__ = ["interruptible", "signal_a_side_thread"]

SYS_TGKILL = 234
"""tgkill(2) on x86-64: a signal to one thread of a process."""


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Children started in the block get the default SIGINT disposition, as from a terminal: a shell
    starts background jobs (e.g. a CI script run with ``&``) with SIGINT ignored, children inherit an
    ignored signal across exec, and a test that sends SIGINT, as Ctrl-C would, must not depend on how
    the test run itself was started. Main thread only (where pytest runs tests)."""
    old = signal.getsignal(signal.SIGINT)
    if old is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a handler resets to default on exec
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def signal_a_side_thread(pid: int, signum: int) -> int:
    """Send ``signum`` to a thread of process ``pid`` other than its main one, as the kernel may
    when several threads could take a process's signal; the thread id. A program whose main thread
    waits with no timeout never runs its Python handler then. Linux x86-64 only."""
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert tids, f"process {pid} runs one thread only"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tids[0], signum) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill {pid} {tids[0]} {signum}")
    return tids[0]
