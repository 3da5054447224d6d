"""Helpers for tests that start processes and signal them."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

__all__ = ["interruptible"]


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
