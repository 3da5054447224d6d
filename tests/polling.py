"""The one polling helper of the tests: wait until something holds, or fail saying what."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["until"]

T = TypeVar("T")


def until(
    check: Callable[[], T | None], timeout: float = 10.0, what: str = "the condition", interval: float = 0.02
) -> T:
    """Call ``check`` until it returns something true and return that; AssertionError after ``timeout`` s.

    Timeouts are generous (CI machines are slow): they only matter when the test fails. An
    exception from ``check`` ends the wait at once (e.g. "the process under test exited").
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {value!r})")
        time.sleep(interval)
