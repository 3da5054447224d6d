"""The objects a profile's command prints: run it, read its YAML, name what went wrong.

Profiles give some objects as a command that prints them (``deviceClasses.command``,
``identity.install``): ``{python}`` is this interpreter and ``{driver}`` the profile's driver.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from typing import Any

import yaml

from conformance.errors import PreflightFailed
from conformance.profiles import DriverProfile

__all__ = ["command_documents"]

COMMAND_TIMEOUT = 120.0
"""Seconds a command may take."""


def command_documents(command: str, profile: DriverProfile, field: str) -> list[dict[str, Any]]:
    """The YAML documents ``command`` prints (the profile's ``field``, named in errors).

    Raises ``PreflightFailed`` when it cannot run, fails, or prints something that is not YAML.
    """
    words = [
        w.replace("{python}", sys.executable).replace("{driver}", profile.driver)
        for w in shlex.split(command)
    ]
    try:
        proc = subprocess.run(words, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PreflightFailed(f"{field} {shlex.join(words)!r} could not run: {e}") from e
    if proc.returncode != 0:
        raise PreflightFailed(
            f"{field} {shlex.join(words)!r} failed ({proc.returncode}): {proc.stderr.strip()[-1000:]}"
        )
    return parse_documents(proc.stdout, f"the output of {field}")


def parse_documents(text: str, what: str) -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``text``; ``PreflightFailed`` naming ``what`` if it is not
    YAML or a document is not a mapping."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise PreflightFailed(f"{what} is not valid YAML: {e}") from e
    bad = [d for d in docs if not isinstance(d, dict)]
    if bad:
        raise PreflightFailed(f"{what} holds a document that is not an object: {bad[:1]}")
    return docs
