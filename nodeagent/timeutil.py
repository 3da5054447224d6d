"""Timestamps in the API server's formats."""

from __future__ import annotations

import datetime as dt

__all__ = ["micro_time", "rfc3339"]


def rfc3339(t: float | None = None) -> str:
    """``metav1.Time``: whole seconds, UTC, ``Z``."""
    when = dt.datetime.now(dt.UTC) if t is None else dt.datetime.fromtimestamp(t, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: float | None = None) -> str:
    """``metav1.MicroTime``: microseconds, UTC, ``Z``."""
    when = dt.datetime.now(dt.UTC) if t is None else dt.datetime.fromtimestamp(t, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(text: str | None) -> float | None:
    """Unix time of an RFC 3339 timestamp, None for None or garbage."""
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
