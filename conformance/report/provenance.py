"""Where a report came from: the suite's version and the git commit of its source.

A customer reading a report asks which suite judged the driver. The version is the installed
distribution's; the commit is read only from a git checkout whose top is the directory holding
the ``conformance`` package (an editable install), so a suite installed into another project's
tree never reports that project's commit. Local changes to tracked files add ``-dirty``, as
``git describe --dirty`` does.
"""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["DISTRIBUTION", "suite_commit", "suite_version"]

DISTRIBUTION = "dra-conformance"
"""The distribution whose version a report names."""

_SOURCE = Path(__file__).resolve().parents[2]
"""The directory that holds the ``conformance`` package."""


@functools.cache
def suite_version() -> str:
    """The installed ``dra-conformance`` version (``0.1.0``), or ``unknown`` when it is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(_SOURCE), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def suite_commit() -> str:
    """The commit of the suite's git checkout (40 hex digits, ``-dirty`` with changes to tracked
    files); empty when the suite does not run from a checkout of its own or git is missing."""
    top = _git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != _SOURCE:
        return ""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return ""
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return commit + ("-dirty" if changes else "")
