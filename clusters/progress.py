"""How long cluster work says what it does: a :data:`Progress` callable hears one line per step.

The CLI passes one that prints; a library caller passes its own or gets :func:`to_log`'s, which
logs each line at INFO on the caller's logger.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["Progress", "to_log"]

Progress = Callable[[str], None]
"""Hears one line of progress (a step begun or done, a wait, a fallback)."""


def to_log(logger: logging.Logger) -> Progress:
    """A :data:`Progress` that logs each line at INFO on ``logger``."""

    def say(message: str) -> None:
        logger.info("%s", message)

    return say
